//! Router replay over P/D (issue 23): a prefill and a decode instance behind prime-rl's router.
//! The counterexample shapes of the design notes' scenarios (C) and (D), the fixed profile
//! holding on every P/D model (state counts pinned), the decode floor's preemption question
//! settled, and vLLM's refusal of routed experts with NixlConnector.

use crate::common::*;
use kvmc::check::Verdict;

#[test]
fn router_v022_answers_http_500_when_decode_has_fewer_rows_than_prefill() {
    // Scenario (D): p = 6, s = 0, 3 output tokens: P returns 6 rows, D 3 (from p - 1 = 5).
    let (labels, story) = last_story("pd-rows-c", "router-v0.2.2", "pd-equals-colocated");
    assert_eq!(
        labels,
        [
            "arrive L",
            "step",
            "router sends L to D",
            "D: step",
            "D: NIXL read done",
            "D: step",
            "D: step",
            "D: step",
            "D: step"
        ]
    );
    assert!(
        story.contains("HTTP 500 \"Request processing failed: decode routed_experts has 3 rows, expected at least 6\""),
        "{story}"
    );
    assert!(
        story.contains("D: L's load landed: promoted with 5 computed") || story.contains("D: L computes [7,8)"),
        "{story}"
    );
}

#[test]
fn router_v022_shifts_rows_silently_when_decode_has_more_rows() {
    let (_, story) = last_story("pd-rows-long", "router-v0.2.2", "pd-equals-colocated");
    assert!(story.contains("start 0, 8 rows at positions [0,6) + [11,13)"), "{story}");
    assert!(story.contains("a colocated engine answers start 0, 13 rows at [0,13)"), "{story}");
}

#[test]
fn without_the_decode_floor_the_decode_instance_dies() {
    // First decode forward block-aligned (p = 5, block size 4): the store read of block 0.
    let (_, story) = last_story("pd-rows-aligned", "no-decode-floor", "rows-present");
    assert!(story.contains("D: L's load landed: promoted with 4 computed"), "{story}");
    assert!(
        story.contains("L's rows need block 0 (L.0) from the row store, which does not hold it: BlockObjectStoreError"),
        "{story}"
    );
    // Mid-block (p = 6): the floor without the partial-block skip trips the buffer assertion.
    let (_, story) = last_story("pd-rows-c", "floor-no-skip", "rows-present");
    assert!(story.contains("D: L computes [5,6)"), "{story}");
    assert!(
        story.contains("routed-experts buffer assertion (capture is not contiguous: expected position 4, got 5)"),
        "{story}"
    );
    // With p - 1 block-aligned the skip has nothing to skip: the floor alone suffices.
    assert_eq!(check("pd-rows-aligned", None, Some("floor-no-skip")).verdict("rows-present"), Verdict::Holds);
}

#[test]
fn start_from_sampling_params_is_not_anchored_on_decode() {
    let (_, story) = last_story("pd-rows-c", "start-from-params", "start-anchored");
    assert!(
        story.contains("/generate answers start = routed_experts_prompt_start = 0 but the first row is at 5"),
        "{story}"
    );
    // Router v0.2.3 then computes overlap P.len = 6 > D.len = 3: the v0.2.2 failure again.
    let (_, story) = last_story("pd-rows-c", "start-from-params", "pd-equals-colocated");
    assert!(story.contains("leaves overlap 6 with the prefill's 6 rows from 0 (allowed 0..=3)"), "{story}");
}

/// The fixed prime-rl profile holds every property on every P/D model, with its guards
/// reached; the state counts are pinned (determinism).
#[test]
fn prime_rl_holds_on_every_pd_model() {
    for (name, states) in [
        ("pd-rows-c", 27),
        ("pd-rows-aligned", 24),
        ("pd-rows-long", 42),
        ("pd-rows-preempt", 1254),
        ("pd-rows-load-fail", 41),
        ("pd-rows-bridge", 61),
    ] {
        let r = check(name, None, None);
        assert!(r.complete, "{name}");
        assert_eq!(r.unique_states, states, "{name}");
        for p in always_props(&scope(name)) {
            assert_eq!(r.verdict(p), Verdict::Holds, "{name} {p}");
        }
        assert_eq!(r.reached("reach-pd-decode-load"), Some(true), "{name}");
        assert_eq!(r.reached("reach-pd-merge"), Some(true), "{name}");
    }
    let r = check("pd-rows-preempt", None, None);
    assert_eq!(r.reached("reach-preemption"), Some(true));
    assert_eq!(r.reached("reach-g1-hit"), Some(true));
    let r = check("pd-rows-load-fail", None, None);
    assert_eq!(r.reached("reach-load-failure"), Some(true));
    // A bridged second turn hits its first turn's prompt blocks in P's G1.
    assert_eq!(check("pd-rows-bridge", None, None).reached("reach-g1-hit"), Some(true));
}

/// The design notes leave open whether the floor must survive preemption (prime-rl pops it
/// only at finish). Settled: a floor reset on preemption and set again at the resume breaks
/// nothing — the resumed request either has output (emit start num_tokens - 1, at or past its
/// resumed forward) or its new floor is its new first forward.
#[test]
fn resetting_the_floor_on_preemption_is_safe() {
    for name in ["pd-rows-preempt", "pd-rows-load-fail", "pd-rows-c"] {
        let r = check(name, None, Some("floor-reset-on-preempt"));
        for p in ["rows-present", "rows-exact", "start-anchored", "pd-equals-colocated"] {
            assert_eq!(r.verdict(p), Verdict::Holds, "{name} {p}");
        }
    }
    assert_eq!(check("pd-rows-preempt", None, Some("floor-reset-on-preempt")).reached("reach-preemption"), Some(true));
}

#[test]
fn payload_segment_merge_is_right_even_with_the_sampling_start() {
    // Variants compose through the profile's rules: segments + start = s still merge right.
    for name in ["pd-rows-c", "pd-rows-long"] {
        assert_eq!(check(name, None, Some("router-segments")).verdict("pd-equals-colocated"), Verdict::Holds);
    }
}

#[test]
fn vllm_refuses_routed_experts_with_nixl() {
    let dir = tempdir("pd-refusal");
    let text = std::fs::read_to_string(root().join("models/pd-rows-c.toml")).unwrap().replace("prime-rl", "vllm-0.33");
    let f = dir.join("pd.toml");
    std::fs::write(&f, text).unwrap();
    let o = kvmc(&["check", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("pd.toml:5: --enable-return-routed-experts is incompatible with NixlConnector"), "{err}");
    let o = kvmc(&["check", "models/pd-rows-c.toml", "--profile", "vllm-0.33"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("PD auxiliary output is not supported"));
}
