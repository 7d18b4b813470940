//! Pinned state counts per model (a change is a change in the model: say why in the diff),
//! and every known-bug variant found with a shortest counterexample.

use crate::common::*;
use kvmc::check::{replay, Verdict};

/// (model, unique states) with the model's own profile and every applicable property.
const PINNED: &[(&str, usize)] = &[
    ("decode-store", 9),
    ("error-mid-prefill", 26),
    ("g1-pressure", 120),
    ("load-reservation", 813),
    ("preempt-store", 32),
    ("restart-recompute", 2374),
    ("shared-prefix", 48),
    ("sync-load-failure-fail", 693),
    ("sync-load-failure", 9047),
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
type Found = (
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
    &'static str,
    usize,
);

const FOUND: &[Found] = &[
    ("error-mid-prefill", None, None, "host-integrity", 8),
    ("error-mid-prefill", None, None, "source-freshness", 5),
    ("decode-store", None, Some("pre-54193"), "host-integrity", 8),
    (
        "preempt-store",
        None,
        Some("pre-29870"),
        "source-freshness",
        4,
    ),
    (
        "preempt-store",
        None,
        Some("pre-29870"),
        "host-integrity",
        7,
    ),
    (
        "preempt-store",
        None,
        Some("pre-29870"),
        "kv-read-integrity",
        11,
    ),
    (
        "restart-recompute",
        None,
        Some("pre-63010"),
        "store-coverage",
        10,
    ),
    (
        "restart-recompute",
        None,
        Some("pre-27697"),
        "store-coverage",
        7,
    ),
    (
        "restart-recompute",
        None,
        Some("mut-no-touch-dequeue"),
        "g1-accounting",
        4,
    ),
    (
        "restart-recompute",
        None,
        Some("mut-cache-unscheduled"),
        "kv-read-integrity",
        3,
    ),
    (
        "restart-recompute",
        None,
        Some("mut-no-delay-cache-async-load"),
        "g1-cache-sound",
        7,
    ),
    (
        "restart-recompute",
        None,
        Some("mut-double-complete"),
        "host-accounting",
        9,
    ),
    (
        "g1-pressure",
        None,
        Some("mut-no-touch-dequeue"),
        "g1-accounting",
        6,
    ),
    (
        "load-reservation",
        None,
        Some("mut-no-load-reservation"),
        "requests-finish",
        13,
    ),
    ("sync-load-failure", None, None, "g1-cache-sound", 9),
    ("sync-load-failure", None, None, "kv-read-integrity", 10),
    ("sync-load-failure-fail", None, None, "host-integrity", 12),
];

#[test]
fn every_variant_is_caught_with_a_replayable_counterexample() {
    let mut wrong_len = Vec::new();
    for (name, profile, variant, prop, steps) in FOUND {
        let r = check(name, *profile, *variant);
        assert_eq!(
            r.verdict(prop),
            Verdict::Violated,
            "{name} {variant:?}: {prop} must be violated"
        );
        let path = r.outcome(prop).unwrap().path.clone().unwrap();
        if path.len() != *steps {
            wrong_len.push(format!(
                "{name} {variant:?} {prop}: {} steps, pinned {steps}",
                path.len()
            ));
        }
        // The path replays and ends in a state that violates the property, while every
        // earlier state satisfies it (the discovery is the first violation on its path).
        let m = model(name, *profile, *variant);
        let states = replay(&m, &path).expect("counterexample replays");
        let def = kvmc::props::find(prop).unwrap();
        assert!(
            !(def.check)(&m, states.last().unwrap()),
            "{name} {prop}: last state violates"
        );
        for s in &states[..states.len() - 1] {
            assert!(
                (def.check)(&m, s),
                "{name} {prop}: earlier states satisfy it"
            );
        }
    }
    assert!(
        wrong_len.is_empty(),
        "shortest counterexample lengths changed:\n{}",
        wrong_len.join("\n")
    );
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
    ] {
        let r = check(name, None, None);
        for p in always_props(&scope(name)) {
            assert_eq!(
                r.verdict(p),
                Verdict::Holds,
                "{name}: {p} holds on vllm-0.33"
            );
        }
    }
}

/// Known gap, pinned: pre-46014 needs async scheduling (the flushed stores of a preempted
/// request are reported in the same step under synchronous scheduling), which the
/// foundation does not model yet. When it does, this test must fail and be replaced.
#[test]
fn fixme_pre_46014_is_not_reachable_in_sync_scheduling() {
    for name in ["preempt-store", "restart-recompute", "load-reservation"] {
        let r = check(name, None, Some("pre-46014"));
        assert_eq!(r.verdict("load-safety"), Verdict::Holds, "{name}");
    }
}
