//! Pinned state counts per model (a change is a change in the model: say why in the diff),
//! and every known-bug variant found with a shortest counterexample.

use crate::common::*;
use kvmc::check::{replay, Verdict};

/// (model, unique states) with the model's own profile and every applicable property.
/// Issue 21: the idle-step counter left the checker's states (requests-finish is a search for
/// fair cycles there), so states that differed only in "steps since the last progress" are
/// one state now: every count but g1-pressure's and rows-live-store's fell (e.g. flagship-like
/// restart-recompute 3120 -> 2632, sync-load-failure 11035 -> 8377); verdicts and
/// counterexamples are unchanged.
/// Conformance fuzzing on vLLM 0.24.0 (rule `long_prefill_lone_exempt`): 0.24 caps a lone
/// request's chunk at `long_prefill_token_threshold` too, so async-preempt-024 (threshold 2)
/// took 181 -> 469 states; its verdicts are unchanged.
/// A NIXL read fails as a whole, as vLLM's worker reports it (not from any block on):
/// pd-rows-load-fail 75 -> 41 states; its verdicts are unchanged.
const PINNED: &[(&str, usize)] = &[
    ("async-no-prefix-cache", 315),
    ("async-preempt", 105),
    ("async-preempt-024", 469),
    ("decode-store", 11),
    ("error-mid-prefill", 26),
    ("final-store", 122),
    ("g1-pressure", 120),
    ("host-arc", 770),
    ("host-arc-024", 144),
    ("host-lru", 143),
    ("load-reservation", 831),
    ("mooncake-a", 31),
    ("mooncake-cap", 42),
    ("mooncake-load-retry", 17),
    // Finding 20 with the OffloadingConnector (0.33: violated; 0.34's load_failed: holds).
    ("offload-load-retry", 58),
    ("mooncake-pool", 2079),
    ("mooncake-preempt", 2389),
    ("pd-chunked", 8),
    ("pd-shared", 1630),
    // Issue 23: P/D pairs with router replay (a prefill and a decode instance, the router).
    ("pd-rows-aligned", 24),
    ("pd-rows-bridge", 61),
    ("pd-rows-c", 27),
    ("pd-rows-load-fail", 41),
    ("pd-rows-long", 42),
    ("pd-rows-preempt", 1254),
    ("pd-rows-e1", 636),
    ("pd-rows-e", 1410),
    ("preempt-livelock", 57),
    ("cache-aware-admission", 331),
    ("preempt-store", 37),
    ("refused-then-dropped", 391),
    ("restart-recompute", 2632),
    ("scpu-async-abort", 79),
    ("scpu-preempt", 554),
    ("scpu-pressure", 91),
    // SimpleCPU lazy mode (finding 26: the walk keeps an engine with no request stepping).
    // 272 -> 227 when the synchronous step followed `has_requests` (no step, so no lazy walk,
    // while nothing is live and the next request has not arrived); verdicts unchanged.
    ("scpu-lazy", 227),
    ("scpu-shared-prefix", 1482),
    ("scpu-stream-resume", 706),
    ("rows-a", 32),
    ("rows-b", 46),
    ("rows-c", 38),
    ("rows-live-store", 6),
    ("rows-offload", 8781),
    ("rows-preempt", 146),
    ("rows-small-store", 48),
    ("rows-bridge", 204),
    ("shared-prefix", 59),
    ("stream-resume", 937),
    ("stream-preempt-lost", 117),
    ("stream-outgrow-len", 48),
    ("stream-resume-fence", 114),
    ("stream-resume-reader", 246),
    ("stream-stale-key", 186),
    ("stream-stale-crash", 36),
    ("stream-finished-crash", 332),
    ("stream-park-count", 232),
    ("stream-sessions-hold-pool", 47),
    ("stream-behind-head", 177),
    ("sync-load-failure-fail", 630),
    ("sync-load-failure", 8377),
];

#[test]
fn state_counts_are_pinned() {
    for (name, want) in PINNED {
        let r = check(name, None, None);
        assert!(r.complete, "{name}: exploration must be exhaustive");
        assert_eq!(r.unique_states, *want, "{name}: unique state count changed");
    }
}

#[test]
fn every_model_file_is_pinned() {
    let mut names: Vec<String> = std::fs::read_dir(root().join("models"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .filter(|p| !kvmc::scope::is_replay_model(p))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut pinned: Vec<String> = PINNED.iter().map(|(n, _)| n.to_string()).collect();
    pinned.sort();
    assert_eq!(names, pinned, "pin the state count of every model");
}

#[test]
fn exploration_is_deterministic() {
    let a = check("restart-recompute", None, Some("pre-63010"));
    let b = check("restart-recompute", None, Some("pre-63010"));
    assert_eq!(a.unique_states, b.unique_states);
    assert_eq!(a.states, b.states);
    let pa = a.outcome("store-coverage").unwrap().path.clone();
    let pb = b.outcome("store-coverage").unwrap().path.clone();
    assert!(pa.is_some());
    assert_eq!(pa, pb, "same model and flags give the same counterexample");
}

/// (model, profile, variant, property, steps of the shortest counterexample).
type Found = (&'static str, Option<&'static str>, Option<&'static str>, &'static str, usize);

const FOUND: &[Found] = &[
    ("error-mid-prefill", None, None, "host-integrity", 5),
    ("error-mid-prefill", None, None, "source-freshness", 5),
    ("decode-store", None, Some("pre-54193"), "host-integrity", 5),
    ("preempt-store", None, Some("pre-29870"), "source-freshness", 4),
    ("preempt-store", None, Some("pre-29870"), "host-integrity", 4),
    ("preempt-store", None, Some("pre-29870"), "kv-read-integrity", 6),
    ("restart-recompute", None, Some("pre-63010"), "store-coverage", 10),
    ("restart-recompute", None, Some("pre-27697"), "store-coverage", 8),
    ("restart-recompute", None, Some("mut-no-touch-dequeue"), "g1-accounting", 4),
    ("restart-recompute", None, Some("mut-cache-unscheduled"), "kv-read-integrity", 3),
    ("restart-recompute", None, Some("mut-no-delay-cache-async-load"), "g1-cache-sound", 6),
    ("restart-recompute", None, Some("mut-double-complete"), "host-accounting", 6),
    ("g1-pressure", None, Some("mut-no-touch-dequeue"), "g1-accounting", 6),
    ("load-reservation", None, Some("mut-no-load-reservation"), "requests-finish", 11),
    ("sync-load-failure", None, None, "g1-cache-sound", 9),
    ("sync-load-failure", None, None, "kv-read-integrity", 10),
    ("sync-load-failure-fail", None, None, "host-integrity", 10),
    ("async-no-prefix-cache", None, Some("pre-46014"), "load-safety", 7),
    ("async-preempt", None, Some("pre-29870"), "source-freshness", 5),
    ("stream-resume", None, Some("pre-60810"), "mirror-table", 4),
    ("stream-resume", None, Some("pre-60810"), "host-integrity", 5),
    ("stream-resume-reader", None, Some("pre-60810"), "kv-read-integrity", 10),
    ("stream-resume", Some("vllm-0.32"), None, "mirror-table", 4),
    ("stream-resume", Some("vllm-0.24"), None, "host-integrity", 5),
    ("stream-stale-crash", None, None, "queue-sound", 7),
    ("stream-finished-crash", None, None, "queue-sound", 8),
    ("restart-recompute", Some("vllm-0.32"), None, "store-coverage", 10),
    ("host-lru", None, Some("mut-evict-mru"), "eviction-order", 5),
    ("host-arc", None, Some("mut-arc-no-ghost-trim"), "arc-bounds", 8),
    ("final-store", None, None, "final-store-kept", 6),
    ("final-store", Some("vllm-0.24"), None, "final-store-kept", 5),
    ("scpu-async-abort", None, None, "store-coverage", 3),
    ("scpu-async-abort", Some("vllm-main"), None, "store-coverage", 3),
    ("scpu-shared-prefix", None, Some("mut-scpu-load-no-pin"), "load-safety", 6),
    ("scpu-shared-prefix", None, Some("mut-scpu-load-no-pin"), "kv-read-integrity", 11),
    ("scpu-shared-prefix", None, Some("mut-scpu-release-tail-first"), "eviction-order", 5),
    ("scpu-shared-prefix", None, Some("mut-scpu-register-at-prep"), "host-integrity", 2),
    ("scpu-pressure", None, Some("mut-scpu-pin-leak"), "host-accounting", 8),
    ("scpu-preempt", None, Some("pre-preempt-reset"), "store-coverage", 10),
    ("scpu-preempt", None, Some("pre-finish-flush"), "store-coverage", 7),
    ("scpu-preempt", None, Some("mut-scpu-no-gpu-pin"), "source-freshness", 9),
    ("scpu-preempt", None, Some("mut-scpu-no-gpu-pin"), "host-integrity", 9),
    ("scpu-preempt", None, Some("mut-double-complete"), "host-accounting", 3),
    ("scpu-preempt", Some("vllm-0.24"), None, "store-coverage", 7),
    ("scpu-pressure", None, None, "final-store-kept", 7),
    ("scpu-shared-prefix", None, None, "final-store-kept", 5),
    ("scpu-stream-resume", None, Some("pre-60810"), "mirror-table", 4),
    ("scpu-stream-resume", None, Some("pre-60810"), "store-coverage", 7),
    ("rows-offload", None, Some("no-load-clamp"), "rows-present", 9),
    ("rows-offload", None, Some("clamp-only"), "rows-present", 11),
    ("rows-offload", None, Some("cut-only"), "rows-present", 9),
    ("rows-offload", None, Some("ceil-clamp"), "rows-present", 9),
    ("rows-offload", None, Some("cut-off-by-one"), "rows-present", 11),
    ("rows-b", None, Some("clamp-only"), "rows-present", 9),
    ("rows-live-store", None, Some("store-evicts-live-rows"), "rows-present", 4),
    ("rows-offload", None, Some("mut-emit-last-token"), "rows-exact", 2),
    ("rows-offload", None, Some("mut-emit-last-token"), "start-anchored", 2),
    ("rows-small-store", None, None, "rows-present", 6),
    ("mooncake-a", None, Some("no-load-clamp"), "rows-present", 3),
    ("mooncake-a", None, Some("cut-only"), "rows-present", 3),
    ("mooncake-a", None, Some("ceil-clamp"), "rows-present", 5),
    ("mooncake-a", None, Some("mut-clamp-after-lookup"), "connector-assert", 4),
    ("mooncake-a", Some("vllm-0.32"), None, "rows-present", 3),
    ("mooncake-pool", None, Some("no-load-clamp"), "rows-present", 3),
    ("mooncake-pool", None, Some("clamp-only"), "rows-present", 5),
    ("mooncake-pool", None, Some("cut-only"), "rows-present", 3),
    ("mooncake-pool", None, Some("ceil-clamp"), "rows-present", 3),
    ("mooncake-pool", None, Some("cut-off-by-one"), "rows-present", 5),
    ("mooncake-pool", None, Some("mut-clamp-after-lookup"), "connector-assert", 2),
    ("mooncake-cap", None, Some("mut-cap-trims"), "connector-assert", 6),
    ("mooncake-preempt", None, Some("mut-mc-no-save-pin"), "host-integrity", 7),
    ("mooncake-preempt", None, Some("mut-mc-no-save-pin"), "source-freshness", 7),
    ("mooncake-load-retry", None, None, "requests-finish", 5),
    ("offload-load-retry", None, None, "requests-finish", 9),
    ("pd-chunked", None, None, "handoff-integrity", 4),
    ("pd-chunked", Some("vllm-main"), None, "handoff-integrity", 4),
    ("pd-shared", None, None, "handoff-integrity", 4),
];

#[test]
fn every_variant_is_caught_with_a_replayable_counterexample() {
    let mut wrong_len = Vec::new();
    for (name, profile, variant, prop, steps) in FOUND {
        let r = check(name, *profile, *variant);
        assert_eq!(r.verdict(prop), Verdict::Violated, "{name} {variant:?}: {prop} must be violated");
        let path = r.outcome(prop).unwrap().path.clone().unwrap();
        if path.len() != *steps {
            wrong_len.push(format!("{name} {profile:?} {variant:?} {prop}: {} steps, pinned {steps}", path.len()));
        }
        // The path replays and ends in a state that violates the property, while every
        // earlier state satisfies it (the discovery is the first violation on its path).
        let m = model(name, *profile, *variant);
        let states = replay(&m, &path).expect("counterexample replays");
        let def = kvmc::props::find(prop).unwrap();
        assert!(!(def.check)(&m.sys, &states.last().unwrap().engine), "{name} {prop}: last state violates");
        for s in &states[..states.len() - 1] {
            assert!((def.check)(&m.sys, &s.engine), "{name} {prop}: earlier states satisfy it");
        }
    }
    assert!(wrong_len.is_empty(), "shortest counterexample lengths changed:\n{}", wrong_len.join("\n"));
}

#[test]
fn fixed_rules_hold_where_the_bug_is_fixed() {
    let main = check("error-mid-prefill", Some("vllm-main"), None);
    assert_eq!(main.verdict("host-integrity"), Verdict::Holds);
    let s10 = check("sync-load-failure", None, Some("fix-s10"));
    assert_eq!(s10.verdict("g1-cache-sound"), Verdict::Holds);
    assert_eq!(s10.verdict("kv-read-integrity"), Verdict::Holds);
    for name in [
        "shared-prefix",
        "preempt-store",
        "restart-recompute",
        "load-reservation",
        "g1-pressure",
        "scpu-shared-prefix",
        "scpu-pressure",
        "scpu-preempt",
    ] {
        let r = check(name, None, None);
        // final-store-kept is violated by every release (a documented quality finding).
        for p in always_props(&scope(name)).into_iter().filter(|p| *p != "final-store-kept") {
            assert_eq!(r.verdict(p), Verdict::Holds, "{name}: {p} holds on vllm-0.33");
        }
    }
}

/// Finding, pinned: under 0.33's lookup (a write-pending key defers it), removing only the
/// #46014 guard is harmless; the race needs the lookup to stop at a write-pending key.
#[test]
fn the_46014_guard_alone_is_redundant_with_hit_pending() {
    for name in ["async-no-prefix-cache", "async-preempt", "preempt-store", "restart-recompute"] {
        let r = check(name, None, Some("mut-no-inflight-guard"));
        assert_eq!(r.verdict("load-safety"), Verdict::Holds, "{name}");
        let s = scope(name);
        let m = model(name, None, Some("mut-no-inflight-guard"));
        drop((s, m));
    }
    let r = check("async-no-prefix-cache", None, Some("mut-no-inflight-guard"));
    assert_eq!(r.reached("reach-lookup-inflight"), Some(true), "the window is reached, the harm is not");
}

/// Findings, pinned (SimpleCPU): the lookup pin held across steps protects nothing in the
/// modelled paths (every verdict is the same without it); stamping the hash at store prep (0.24)
/// is indistinguishable from reading it at completion (0.32+) while sources are pinned; the
/// #62444 refresh changes the eviction order (it is reached) without breaking a property.
#[test]
fn simple_cpu_findings() {
    for name in ["scpu-shared-prefix", "scpu-pressure", "scpu-preempt"] {
        let base = check(name, None, None);
        let r = check(name, None, Some("mut-scpu-lookup-no-pin"));
        for p in always_props(&scope(name)).into_iter().filter(|p| *p != "final-store-kept") {
            assert_eq!(r.verdict(p), base.verdict(p), "{name} mut-scpu-lookup-no-pin: {p}");
        }
        let prep = check(name, None, Some("pre-hash-at-completion"));
        assert_eq!(prep.unique_states, base.unique_states, "{name}: hash at prep changes nothing");
        let main = check(name, Some("vllm-main"), None);
        for p in always_props(&scope(name)).into_iter().filter(|p| *p != "final-store-kept") {
            assert_eq!(main.verdict(p), Verdict::Holds, "{name} vllm-main: {p}");
        }
    }
    // #62444's eager-scan refresh (the fix proposed upstream; vllm-main, rebased on 0.34,
    // refreshes at admission instead).
    let refresh = check("scpu-shared-prefix", None, Some("fix-62444"));
    assert_eq!(refresh.reached("reach-host-refresh"), Some(true), "#62444's refresh is exercised");
    let pressure = check("scpu-pressure", None, Some("mut-scpu-lookup-no-pin"));
    assert_eq!(pressure.reached("reach-host-hit"), Some(false), "without the pin the hit is gone by the retry");
    // The pins cost capacity: with them a finishing request's last blocks find no free CPU block.
    assert_eq!(check("scpu-pressure", None, None).verdict("final-store-kept"), Verdict::Violated);
    assert_eq!(pressure.verdict("final-store-kept"), Verdict::Holds);
}

/// vLLM 0.24 keeps a session's first `max_tokens` for its later inputs (rule
/// `session_max_tokens` false): stream-stale-crash's second input says 1 token (`z`), but under
/// vllm-0.24 it runs to 3 (`z` and two placeholder tokens); 0.32+ stop it after `z`. The next
/// input's kept prefix follows the first input's real output either way.
#[test]
fn a_0_24_session_keeps_its_first_max_tokens_in_check_mode() {
    let s = scope("stream-stale-crash");
    let first = |p: &str| s.system(Some(p), None).unwrap().workload.requests[0].max_tokens;
    let second = |p: &str| s.system(Some(p), None).unwrap().workload.turns[0][0].max_tokens;
    assert_eq!((first("vllm-0.24"), second("vllm-0.24")), (3, 3));
    for p in ["vllm-0.32", "vllm-0.33", "vllm-0.34"] {
        assert_eq!((first(p), second(p)), (3, 1), "{p}");
    }
    let t = &s.system(Some("vllm-0.24"), None).unwrap().workload.turns[0][0];
    let (p, z) = (t.prompt_len as usize, 'z' as u32);
    assert_eq!(t.tokens[p], z, "the scripted output comes first");
}
