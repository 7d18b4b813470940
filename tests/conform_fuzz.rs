//! Conformance fuzzing (docs/conformance.md, "Conformance fuzzing"): the divergences that
//! `scripts/fuzz-conform.sh` found on real vLLM, kept as regression logs
//! (tests/conformance/fuzz/scenarios/NAME.toml, recorded on 0.32.0, 0.33.0 and 0.34.0 into
//! tests/conformance/fuzz/vllm-X.Y/), and the scenario generator's own tests. The findings on
//! real vLLM that fuzzing and the checker led to: conform_findings.rs.

use crate::common::*;
use kvmc::conform;
use std::collections::BTreeSet;

/// The invariants each regression log breaks on each release because vLLM itself does
/// (everything else must hold: these logs were false findings of the model before the fix).
fn expected_findings(release: &str, name: &str) -> BTreeSet<&'static str> {
    match (release, name) {
        // #60810: before 0.33 a resumed session's full table is appended to the mirror.
        ("vllm-0.32", "async-stream-stale") => ["mirror-table"].into(),
        // 0.24 too; and its SimpleCPU cursor's FIXME (below) leaves a chunk unstored.
        ("vllm-0.24", "async-stream-stale") => ["mirror-table", "store-coverage"].into(),
        // 0.24 keeps the block hash over the in-flight output the parked session took and
        // its next input cut off: the cached map names a block that holds the new input.
        ("vllm-0.24", "async-stream-parked") => ["g1-cache-sound"].into(),
        // 0.24 keeps a session's stale block hash (finding stream-stale-key): the cached map
        // holds A.1 over a block with other tokens.
        ("vllm-0.24", "stream-key-label") => ["g1-cache-sound"].into(),
        // 0.24's own FIXME: a cursor past a block the CPU pool evicted never goes back to it.
        ("vllm-0.24", "scpu-full-scan") => ["store-coverage"].into(),
        // arc-adaptive is a streaming session with offloading: #60810 (mirror-table) and
        // the stale source (host-integrity, source-freshness) before 0.33; 0.24's stale block
        // hash (g1-cache-sound).
        ("vllm-0.24", "arc-adaptive") => {
            ["mirror-table", "host-integrity", "source-freshness", "g1-cache-sound"].into()
        }
        ("vllm-0.32", "arc-adaptive") => ["mirror-table", "host-integrity", "source-freshness"].into(),
        // Every release: F errors while its decode is in flight (async scheduling); the finish
        // watermark leaves out the in-flight position, so the chunk that batch completes is
        // never offered (0.34 clamps to min(num_computed, max(prompt, num_tokens - 1)); kvmc
        // used num_computed and stored it until conformance fuzzing found the difference).
        (_, "async-error-watermark") => ["store-coverage"].into(),
        // The lost final store: with the CPU pool full, a finishing request's last blocks
        // are refused and nothing offers them again.
        (_, "scpu-full-scan") => ["final-store-kept"].into(),
        _ => BTreeSet::new(),
    }
}

/// The releases each regression conforms on: every one.
fn releases(_name: &str) -> &'static [&'static str] {
    &["vllm-0.24", "vllm-0.32", "vllm-0.33", "vllm-0.34"]
}

fn scenarios() -> BTreeSet<String> {
    std::fs::read_dir(root().join("tests/conformance/fuzz/scenarios"))
        .unwrap()
        .map(|e| e.unwrap().path().file_stem().unwrap().to_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_fuzzing_regressions_conform_on_every_release_with_only_vllms_own_findings() {
    let base = root().join("tests/conformance/fuzz");
    let names = scenarios();
    let want: BTreeSet<String> = [
        "arc-adaptive",
        "async-error-watermark",
        "async-stream-idle",
        "async-stream-parked",
        "async-stream-stale",
        "large-key-set",
        "lone-prefill-threshold",
        "report-order",
        "scpu-full-scan",
        "scpu-idle-stores",
        "stream-key-label",
        "stream-queued-requeue",
    ]
    .map(String::from)
    .into();
    assert_eq!(names, want);
    for name in &names {
        for &release in releases(name) {
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
fn the_worker_s_report_order_is_the_log_s() {
    // report-order on 0.24.0: in step 9 the worker reports F's failed load (job 3) before the
    // stores 4 and 5; 0.24's release-order LRU then ranks A.0 and A.1 (released by the failed
    // load) before B.2 and C.3. With the stores' lines moved before the failed load's, vLLM
    // would have processed them first: the log (the same order otherwise) diverges at that
    // step's host line, where the model follows the new order.
    let log = root().join("tests/conformance/fuzz/vllm-0.24/report-order.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    let failed = r#"{"ev":"transfer_failed","step":9,"job":3"#;
    let (i, _) = text.lines().enumerate().find(|(_, l)| l.starts_with(failed)).expect("F's failed load in step 9");
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    assert!(lines[i + 1].contains(r#""job":4"#) && lines[i + 2].contains(r#""job":5"#), "{:?}", &lines[i..i + 3]);
    let moved = lines.remove(i);
    lines.insert(i + 2, moved);
    let bad = tempdir("report-order").join("stores-first.jsonl");
    std::fs::write(&bad, lines.join("\n") + "\n").unwrap();
    let r = conform::check(&bad, "vllm-0.24", None, 8).expect("the log parses");
    let div = r.divergence.expect("the other report order diverges");
    assert!(div.what.starts_with("host"), "{}", div.what);
    assert!(conform::check(&log, "vllm-0.24", None, 8).unwrap().divergence.is_none());
}

#[test]
fn a_set_too_large_to_search_is_tried_in_the_log_s_order_and_is_no_verdict_otherwise() {
    // large-key-set on 0.24.0: A's store job of ten keys completes in step 2, and 0.24's
    // `TransferJobStatus.keys` set gives the release-order LRU its order. Ten items are more
    // than kvmc permutes (8): the model's order and the one the host line shows are tried.
    let log = root().join("tests/conformance/fuzz/vllm-0.24/large-key-set.jsonl");
    let r = conform::check(&log, "vllm-0.24", None, 8).expect("the log parses");
    assert!(r.divergence.is_none() && r.search_bound.is_none(), "{:?}", r.divergence);
    let big = r.choices.iter().find(|c| c.step == 2 && c.point == "TransferJobStatus.keys").expect("step 2's set");
    assert_eq!((big.chosen.len(), big.orders), (10, 2));
    assert_ne!(big.chosen, big.canonical, "the hash seed's order is not the model's");
    // A slot changed in that host line matches no order kvmc tried, but it did not try them
    // all: incomplete (exit 13), not a divergence.
    let text = std::fs::read_to_string(&log).unwrap();
    let step2 = r#"{"ev":"host","step":2,"#;
    let edit = |f: &dyn Fn(&str) -> String| -> String {
        text.lines().map(|l| if l.starts_with(step2) { f(l) } else { l.to_string() } + "\n").collect()
    };
    let moved = edit(&|l: &str| l.replacen(r#""slot":0,"#, r#""slot":31,"#, 1));
    assert_ne!(moved, text);
    let bad = tempdir("large-key-set").join("moved-slot.jsonl");
    std::fs::write(&bad, moved).unwrap();
    let r = conform::check(&bad, "vllm-0.24", None, 8).expect("the log parses");
    assert!(r.divergence.is_some_and(|d| d.step == 2 && d.what.starts_with("host")));
    assert!(
        r.search_bound.as_deref().is_some_and(|b| b.contains("TransferJobStatus.keys has 10 items")),
        "{:?}",
        r.search_bound
    );
    let o = kvmc(&["conform", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(13), "{}", stdout(&o));
}

#[test]
fn the_024_rules_fuzzing_found_are_what_tells_024_from_032() {
    // lone-prefill-threshold (`long_prefill_lone_exempt`), scpu-idle-stores
    // (`scpu_pending_keeps_alive`), scpu-full-scan (`scpu_scan_when_full`) and
    // stream-queued-requeue (`session_requeue_kv_holding`): each release's recording diverges
    // under the other's rules, where the rule decides.
    let base = root().join("tests/conformance/fuzz");
    for (name, kind) in [
        ("lone-prefill-threshold", "schedule"),
        ("scpu-idle-stores", "schedule"),
        ("scpu-full-scan", "store"),
        ("stream-queued-requeue", "schedule"),
    ] {
        for (recorded, other) in [("vllm-0.24", "vllm-0.32"), ("vllm-0.32", "vllm-0.24")] {
            let log = base.join(format!("{recorded}/{name}.jsonl"));
            let r = conform::check(&log, other, None, 8).expect("the log parses");
            let d = r.divergence.unwrap_or_else(|| panic!("{name} recorded on {recorded} conforms to {other}"));
            assert!(d.what.starts_with(kind), "{name} on {recorded} under {other}: {}", d.what);
        }
    }
}

#[test]
fn the_024_async_session_keeps_its_in_flight_output_and_032_drops_it() {
    // vLLM 0.24 (rule `session_stop_drops_in_flight` false): a session that stops on EOS with
    // its next decode in flight keeps every sampled token, and the in-flight output joins the
    // session when it arrives. async-stream-stale: the next input is there first, so that
    // output is its first output token (step 8's turn_start keeps 20 tokens). async-stream-parked:
    // the output reaches the parked session (step 4) and the input cuts it off (step 5 keeps 3).
    // Under 0.32's rule both logs diverge at that turn_start by exactly the dropped token.
    for (name, step, kept) in [("async-stream-stale", 8, 20), ("async-stream-parked", 5, 3)] {
        let log = root().join(format!("tests/conformance/fuzz/vllm-0.24/{name}.jsonl"));
        let text = std::fs::read_to_string(&log).unwrap();
        let start = format!(r#""ev":"turn_start","step":{step},"req":"A","turn":2,"num_computed":{kept},"#);
        assert!(text.contains(&start), "{name}: {start}");
        assert!(conform::check(&log, "vllm-0.24", None, 8).unwrap().divergence.is_none(), "{name}");
        let d = conform::check(&log, "vllm-0.32", None, 8).unwrap().divergence.expect("0.32 drops the output");
        assert_eq!((d.step, d.what.as_str()), (step, "turn_start"), "{name}: {d:?}");
        assert!(d.model.contains(&format!("num_computed={}", kept - 1)), "{name}: {d:?}");
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
fn the_arc_lists_are_compared_step_by_step_and_a_wrong_target_diverges() {
    // arc-adaptive on 0.24.0: ARC's T2, both ghost lists and a target of 2.333333333333334
    // (target_t1_size as Python computes it) appear in the host lines kvmc compares.
    let log = root().join("tests/conformance/fuzz/vllm-0.24/arc-adaptive.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("\"target\":2.333333333333334"), "a fractional target");
    assert!(text.contains("\"b2\":[\""), "a B2 ghost");
    assert!(text.contains("\"t2\":[\""), "a T2 key");
    // The same log with one target changed diverges on that host line; a target that differs
    // in its last bits only (the same deltas added in another order) does not.
    let (i, line) = text.lines().enumerate().find(|(_, l)| l.contains("\"target\":2.333333333333334")).unwrap();
    let with_target = |name: &str, target: &str| {
        let path = tempdir("arc-target").join(name);
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        lines[i] = line.replacen("\"target\":2.333333333333334", &format!("\"target\":{target}"), 1);
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        conform::check(&path, "vllm-0.24", None, 8).expect("the log parses")
    };
    let div = with_target("bad.jsonl", "2.5").divergence.expect("a wrong target diverges");
    assert_eq!(div.line, i + 1, "{}", div.what);
    assert!(div.what.starts_with("host"), "{}", div.what);
    let r = with_target("ulp.jsonl", "2.3333333333333335");
    assert!(r.divergence.is_none(), "{:?}", r.divergence);
}

#[test]
fn the_scenario_generator_is_reproducible_and_valid() {
    python_unittest("tests/conformance/vllm/test_gen_scenarios.py", 10);
}
