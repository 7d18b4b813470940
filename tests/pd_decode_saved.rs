//! Decode-saved KV over P/D (issue 23 item 6, design notes §7 and scenario (E)): P and D share
//! a Mooncake pool and D has `save_decode_cache`, so blocks only D forwarded reach the pool P
//! looks up. E1: a non-bridged retry finds them past its local hit (prime-rl's clamp needed);
//! E2: a bridged turn loaded them on P, a start-0 retry hits them in G1 (the cut needed).

use crate::common::*;
use kvmc::check::Verdict;

#[test]
fn e1_without_the_clamp_p_loads_a_decode_saved_block_and_dies() {
    let (labels, story) = last_story("pd-rows-e1", "no-load-clamp", "rows-present");
    // Turn 1 through P and D (D saves block 1 [2,4), which only it forwarded), then the retry
    // loads it from the pool on P and needs its rows.
    assert_eq!(labels.len(), 12, "{labels:?}");
    assert_eq!(labels[9], "arrive R");
    assert!(story.contains("R's load landed: promoted with 4 computed"), "{story}");
    assert!(
        story
            .contains("R's rows need block 1 (T1.1) from the row store, which does not hold it: BlockObjectStoreError"),
        "{story}"
    );
    // The cut has nothing to cut here: the clamp alone is what E1 needs.
    assert_eq!(check("pd-rows-e1", None, Some("clamp-only")).verdict("rows-present"), Verdict::Holds);
}

#[test]
fn e2_without_the_cut_a_retry_hits_the_bridged_turns_loaded_block_and_dies() {
    let (labels, story) = last_story("pd-rows-e", "clamp-only", "rows-present");
    assert_eq!(labels.len(), 19, "{labels:?}");
    assert_eq!(labels[9], "arrive T2");
    assert_eq!(labels[17], "arrive R");
    assert!(story.contains("R lookup: G1 hit 6"), "{story}");
    assert!(
        story
            .contains("R's rows need block 1 (T1.1) from the row store, which does not hold it: BlockObjectStoreError"),
        "{story}"
    );
}

/// The fixed profile holds every property on both models, with scenario E's states reached;
/// state counts pinned.
#[test]
fn prime_rl_holds_with_decode_saved_kv() {
    for (name, states) in [("pd-rows-e1", 636), ("pd-rows-e", 1410)] {
        let r = check(name, None, None);
        assert!(r.complete, "{name}");
        assert_eq!(r.unique_states, states, "{name}");
        for p in always_props(&scope(name)) {
            assert_eq!(r.verdict(p), Verdict::Holds, "{name} {p}");
        }
        assert_eq!(r.reached("reach-pd-non-bridged-retry"), Some(true), "{name}");
        assert_eq!(r.reached("reach-rows-cut"), Some(true), "{name}");
        assert_eq!(r.reached("reach-pd-merge"), Some(true), "{name}");
    }
    let r = check("pd-rows-e", None, None);
    assert_eq!(r.reached("reach-pd-decode-saved-load"), Some(true));
    assert_eq!(r.reached("reach-pd-bridged-turn"), Some(true));
    // E1 has no bridged turn: nothing decode-saved is ever loaded on P under the clamp.
    assert_eq!(check("pd-rows-e1", None, None).reached("reach-pd-decode-saved-load"), Some(false));
}

/// The hazard comes from D's saves: without save_decode_cache the pool holds only P's prompt
/// blocks, and the clamp alone (no cut) is safe on scenario E.
#[test]
fn without_save_decode_cache_there_is_nothing_decode_saved() {
    let dir = tempdir("pd-no-decode-save");
    let text = std::fs::read_to_string(root().join("models/pd-rows-e.toml"))
        .unwrap()
        .replace("save_decode_cache = true", "save_decode_cache = false");
    let f = dir.join("e.toml");
    std::fs::write(&f, text).unwrap();
    let o = kvmc(&["check", f.to_str().unwrap(), "--variant", "clamp-only", "-P", "rows-present"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).contains("holds"), "{}", stdout(&o));
}

#[test]
fn a_pd_pair_sets_the_mooncake_roles_itself() {
    let dir = tempdir("pd-role");
    let text = std::fs::read_to_string(root().join("models/pd-rows-e.toml"))
        .unwrap()
        .replace("save_decode_cache = true", "save_decode_cache = true\nkv_role = \"kv_both\"");
    let f = dir.join("e.toml");
    std::fs::write(&f, text).unwrap();
    let o = kvmc(&["check", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("e.toml:13: a P/D pair sets kv_role itself"), "{}", stderr(&o));
}
