//! MooncakeStoreConnector: the lookup's arithmetic, prime-rl's wrapped lookup on domain
//! scenario A, vLLM 0.33's all-or-nothing gate against the connector's assertion, the save
//! path, and the failed-load retry finding.

use crate::common::*;
use crate::rows::{died, lookup, req, scripted};
use kvmc::check::Verdict;
use kvmc::model::KvModel;
use kvmc::scope::Scope;
use kvmc::system::Event;
use std::path::Path;
use std::sync::Arc;

fn inline(text: &str, profile: Option<&str>, variant: Option<&str>) -> KvModel {
    let s = Arc::new(Scope::parse("t", Path::new("t.toml"), text).expect("scope parses"));
    let ps = all_props(&s);
    KvModel::new(s, profile, variant, ps).expect("rules resolve")
}

fn asserted(ev: &[Event]) -> bool {
    ev.iter().any(|e| matches!(e, Event::Violation { property: "connector-assert", .. }))
}

/// The load jobs' (request, keys, blocks) in the order they were built.
fn loads(ev: &[Event]) -> Vec<(u16, usize, Vec<u32>)> {
    ev.iter()
        .filter_map(|e| match e {
            Event::LoadJob { req, keys, blocks, .. } => Some((*req, keys.len(), blocks.clone())),
            _ => None,
        })
        .collect()
}

const FULL_HIT: &str = r#"
[engine]
connector = "mooncake"
block_size = 2
gpu_blocks = 5
max_num_batched_tokens = 8
[mooncake]
preload = ["R"]
[[request]]
name = "R"
prompt = "ab|cd"
output = "x"
"#;

#[test]
fn a_pool_hit_covering_the_whole_request_is_rederived_one_token_short() {
    // R's whole prompt (4 tokens) is in the pool: the lookup re-derives on 3 tokens, aligned
    // to 2, so one block loads and R computes [2, 4) itself.
    let m = inline(FULL_HIT, None, None);
    let (ev, e) = scripted(&m);
    assert_eq!(lookup(&ev, 0), (0, Some(2)));
    assert_eq!(loads(&ev), vec![(0, 1, vec![1])]);
    assert!(e.reqs[0].status.is_finished());
    // With lookups off the pool is never asked.
    let off = FULL_HIT.replace("preload = [\"R\"]", "preload = [\"R\"]\nenable_lookup = false");
    let (ev, _) = scripted(&inline(&off, None, None));
    assert_eq!(lookup(&ev, 0), (0, Some(0)));
}

#[test]
fn saves_put_computed_prompt_blocks_and_skip_keys_the_pool_has() {
    // R recomputes [2, 5): the save job covers R.0 and R.1, both already in the pool (no put).
    // A request with a new prompt puts its full prompt blocks; its decode block only with
    // save_decode_cache; a kv_consumer saves nothing.
    let text = FULL_HIT.replace("preload = [\"R\"]", "preload = []").replace("output = \"x\"", "output = \"xyz\"");
    let stored = |t: &str| -> Vec<usize> {
        let (ev, _) = scripted(&inline(t, None, None));
        ev.iter()
            .filter_map(|e| match e {
                Event::HostStored { keys } => Some(keys.len()),
                _ => None,
            })
            .collect()
    };
    assert_eq!(stored(&text), vec![2], "the prompt's two blocks, once");
    let decode = text.replace("preload = []", "preload = []\nsave_decode_cache = true");
    assert_eq!(stored(&decode), vec![2, 1], "and the block the decode steps complete");
    let consumer = text.replace("preload = []", "preload = []\nkv_role = \"kv_consumer\"");
    assert!(stored(&consumer).is_empty());
}

#[test]
fn scenario_a_prime_rl_drops_or_shortens_the_load_spec() {
    let m = model("mooncake-a", None, None);
    let (ev, e) = scripted(&m);
    let (x, z) = (req(&m, "X"), req(&m, "Z"));
    // X (start 0): limit 0, the LoadSpec is dropped and X recomputes everything.
    assert_eq!(lookup(&ev, x), (0, Some(0)));
    assert!(ev.iter().any(|e| matches!(e, Event::RowsCut { req, from: 4, to: 0 } if *req == x)));
    // Z (start 3): limit 2, the LoadSpec ends at block_floor(3): one block is loaded.
    assert_eq!(lookup(&ev, z), (0, Some(2)));
    assert_eq!(loads(&ev).iter().map(|l| (l.0, l.1)).collect::<Vec<_>>(), vec![(z, 1)]);
    assert!(!died(&ev) && !asserted(&ev));
    let a = e.aux.as_ref().unwrap();
    assert_eq!((a.record(x).first, a.record(x).end), (Some(0), 5));
    assert_eq!((a.record(z).first, a.record(z).end), (Some(3), 5));
    // Without the clamp X loads the whole pool hit and its rows are nowhere.
    let (ev, _) = scripted(&model("mooncake-a", None, Some("no-load-clamp")));
    assert_eq!(lookup(&ev, x), (0, Some(4)));
    assert!(died(&ev));
    // Trimming the connector's answer from outside leaves the LoadSpec at 4: the assertion.
    let (ev, _) = scripted(&model("mooncake-a", None, Some("mut-clamp-after-lookup")));
    assert!(asserted(&ev));
}

#[test]
fn vllm_033_refuses_hits_whole_so_the_assertion_never_fires() {
    let m = model("mooncake-cap", None, None);
    let (ev, _) = scripted(&m);
    let d = req(&m, "D");
    // D's pool hit (6) runs past the rows retained here (4): refused, not trimmed.
    assert_eq!(lookup(&ev, d), (0, Some(0)));
    assert!(ev.iter().any(|e| matches!(e, Event::RowsCut { req, from: 6, to: 0 } if *req == d)));
    assert!(!asserted(&ev) && !died(&ev));
    let (ev, _) = scripted(&model("mooncake-cap", None, Some("mut-cap-trims")));
    assert_eq!(lookup(&ev, d), (0, Some(4)));
    assert!(asserted(&ev));
    // Every profile and the prime-rl ablations hold the assertion on the exhaustive models.
    for (name, profile) in [("mooncake-pool", None), ("mooncake-pool", Some("vllm-0.33")), ("mooncake-cap", None)] {
        assert_eq!(check(name, profile, None).verdict("connector-assert"), Verdict::Holds, "{name} {profile:?}");
    }
    for v in ["no-load-clamp", "clamp-only", "cut-only", "ceil-clamp", "cut-off-by-one"] {
        assert_eq!(check("mooncake-pool", None, Some(v)).verdict("connector-assert"), Verdict::Holds, "{v}");
    }
}

#[test]
fn a_retry_after_a_failed_first_block_reserves_its_own_blocks() {
    let r = check("mooncake-load-retry", None, None);
    assert_eq!(r.verdict("requests-finish"), Verdict::Violated);
    let fixed = check("mooncake-load-retry", None, Some("fix-self-reservation"));
    assert_eq!(fixed.verdict("requests-finish"), Verdict::Holds);
    assert_eq!(fixed.reached("reach-load-failure"), Some(true));
    assert_eq!(fixed.reached("reach-all-finished"), Some(true));
}

#[test]
fn the_mooncake_table_is_validated() {
    let err = |text: String| Scope::parse("t", Path::new("t.toml"), &text).unwrap_err().to_string();
    let role = FULL_HIT.replace("preload = [\"R\"]", "kv_role = \"kv_decoder\"");
    assert!(err(role).contains("kv_role must be"));
    // Async scheduling: the store's rules are the same (AsyncScheduler's, around it).
    let asynchronous = FULL_HIT.replace("block_size = 2", "block_size = 2\nasync_scheduling = true");
    assert!(Scope::parse("t", Path::new("t.toml"), &asynchronous).unwrap().cfg.async_scheduling);
    let short = FULL_HIT.replace("preload = [\"R\"]", "preload = [\"a\"]");
    assert!(err(short).contains("has no full block"));
    let other = FULL_HIT.replace("connector = \"mooncake\"", "connector = \"none\"");
    assert!(err(other).contains("needs connector = \"mooncake\""));
    // A token string no request produces is labelled by its preload entry.
    let s = Scope::parse("t", Path::new("t.toml"), &FULL_HIT.replace("[\"R\"]", "[\"pq|rs\"]")).unwrap();
    let pool = &s.cfg.mooncake().unwrap().preload;
    assert_eq!(pool.iter().map(|h| s.workload.label(*h)).collect::<Vec<_>>(), vec!["pool1.0", "pool1.1"]);
}
