//! Conformance fuzzing (docs/conformance.md, "Conformance fuzzing"): the divergences that
//! `scripts/fuzz-conform.sh` found on real vLLM, kept as regression logs
//! (tests/conformance/fuzz/scenarios/NAME.toml, recorded on 0.32.0, 0.33.0 and 0.34.0 into
//! tests/conformance/fuzz/vllm-X.Y/), and the scenario generator's own tests.

use crate::common::*;
use kvmc::conform;
use std::collections::BTreeSet;

/// The invariants each regression log breaks on each release because vLLM itself does
/// (everything else must hold: these logs were false findings of the model before the fix).
fn expected_findings(release: &str, name: &str) -> BTreeSet<&'static str> {
    match (release, name) {
        // #60810: before 0.33 a resumed session's full table is appended to the mirror.
        ("vllm-0.32", "async-stream-stale") => ["mirror-table"].into(),
        _ => BTreeSet::new(),
    }
}

#[test]
fn the_fuzzing_regressions_conform_on_every_release_with_only_vllms_own_findings() {
    let base = root().join("tests/conformance/fuzz");
    let scenarios: BTreeSet<String> = std::fs::read_dir(base.join("scenarios"))
        .unwrap()
        .map(|e| e.unwrap().path().file_stem().unwrap().to_str().unwrap().to_string())
        .collect();
    assert_eq!(scenarios, ["async-stream-idle".to_string(), "async-stream-stale".to_string()].into());
    for release in ["vllm-0.32", "vllm-0.33", "vllm-0.34"] {
        for name in &scenarios {
            let log = base.join(format!("{release}/{name}.jsonl"));
            let head = std::fs::read_to_string(&log).unwrap();
            let version = format!("\"version\":\"{}.0\"", release.trim_start_matches("vllm-"));
            assert!(head.lines().next().unwrap().contains(&version), "{}: recorded on {version}", log.display());
            let r = conform::check(&log, release, None, 8).expect("the log parses");
            assert!(r.divergence.is_none(), "{} under {release}: {:?}", log.display(), r.divergence);
            let found: BTreeSet<&str> = r.findings.iter().map(|(p, _)| p.as_str()).collect();
            assert_eq!(found, expected_findings(release, name), "{}", log.display());
        }
    }
}

#[test]
fn a_parked_session_is_not_a_request_under_async_scheduling() {
    // async-stream-idle: B parks in step 28 and its next input comes in step 30. vLLM runs
    // step 29 without schedule(): the log has no schedule line there, and kvmc agrees.
    let log = root().join("tests/conformance/fuzz/vllm-0.33/async-stream-idle.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    let at = |step: u32| {
        text.lines()
            .filter(|l| l.contains(&format!("\"step\":{step},")))
            .map(|l| l.split('"').nth(3).unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert!(at(28).contains(&"turn_end".to_string()), "{:?}", at(28));
    assert_eq!(at(29), vec!["g1".to_string()], "an idle step");
    assert!(at(30).contains(&"schedule".to_string()));
    let o = kvmc(&["conform", "--strict", log.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
}

#[test]
fn the_scenario_generator_is_reproducible_and_valid() {
    python_unittest("tests/conformance/vllm/test_gen_scenarios.py", 5);
}
