//! Conformance against other vLLM releases (issue 22, item 2): the fixtures recorded from
//! real vLLM 0.24.0, 0.32.0 and 0.34.0 (`scripts/record-fixtures.sh --vllm VERSION`, in
//! tests/conformance/fixtures/vllm-X.Y/) each conform to their own profile, with their KV
//! event streams; every scenario is recorded, listed in skipped.txt with the reason, or a known
//! divergence (tests/conformance/known-divergences/vllm-X.Y/diverges.txt, with its log); and
//! the recordings that show a rule on which releases differ diverge under the other rule.

use crate::common::*;
use kvmc::conform;
use std::path::{Path, PathBuf};

/// (directory, profile) of every per-release fixture directory (`vllm-X.Y`; the other
/// subdirectories, `reproduced/`, `seeds/` and `testgen/`, have tests of their own).
fn release_dirs() -> Vec<(PathBuf, String)> {
    let mut v: Vec<(PathBuf, String)> = std::fs::read_dir(root().join("tests/conformance/fixtures"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && p.file_name().unwrap().to_str().unwrap().starts_with("vllm-"))
        .map(|p| {
            let name = p.file_name().unwrap().to_str().unwrap().to_string();
            (p, name)
        })
        .collect();
    v.sort();
    v
}

fn logs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    v.sort();
    v
}

fn fixture(release: &str, name: &str) -> PathBuf {
    root().join(format!("tests/conformance/fixtures/{release}/{name}.jsonl"))
}

#[test]
fn every_release_fixture_conforms_to_its_profile_with_its_kv_events() {
    let dirs = release_dirs();
    let names: Vec<&str> = dirs.iter().map(|(_, n)| n.as_str()).collect();
    assert!(names.contains(&"vllm-0.34"), "per-release fixture directories: {names:?}");
    for (dir, profile) in &dirs {
        assert!(kvmc::system::rules::profile(profile).is_some(), "{}: no profile {profile}", dir.display());
        let fx = logs(dir);
        assert!(fx.len() >= 4, "{}: at least 4 recorded fixtures", dir.display());
        let version = format!("\"version\":\"{}.0\"", profile.trim_start_matches("vllm-"));
        for f in &fx {
            let head = std::fs::read_to_string(f).unwrap();
            assert!(head.lines().next().unwrap().contains(&version), "{}: recorded on {version}", f.display());
            let r = conform::check(f, profile, None, 8).expect("fixture parses");
            assert!(r.divergence.is_none(), "{} under {profile}: {:?}", f.display(), r.divergence);
            assert!(r.decisions > 10, "{}: compares decisions", f.display());
            let ev = f.with_extension("kvevents");
            let o = kvmc(&["conform", "--profile", profile, f.to_str().unwrap(), "--kv-events", ev.to_str().unwrap()]);
            let out = stdout(&o);
            assert!(out.contains("consistent and matches the model step by step"), "{}: {out}", ev.display());
            assert_eq!(o.status.code(), Some(0), "{}: {out}", ev.display());
        }
    }
}

#[test]
fn every_scenario_is_recorded_on_each_release_or_skipped_with_a_reason() {
    let mut scenarios: Vec<String> = std::fs::read_dir(root().join("tests/conformance/scenarios"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .map(|p| p.file_stem().unwrap().to_str().unwrap().to_string())
        .collect();
    scenarios.sort();
    for (dir, release) in release_dirs() {
        let skipped = std::fs::read_to_string(dir.join("skipped.txt")).unwrap_or_default();
        // Recordings the model does not reproduce yet, kept beside the list of their causes.
        let known = root().join("tests/conformance/known-divergences").join(&release);
        let diverges = std::fs::read_to_string(known.join("diverges.txt")).unwrap_or_default();
        for s in &scenarios {
            let recorded = dir.join(format!("{s}.jsonl")).exists();
            let skip = skipped.lines().find(|l| l.starts_with(&format!("{s}: ")));
            let div = diverges.lines().find(|l| l.starts_with(&format!("{s}: ")));
            let n = [recorded, skip.is_some(), div.is_some()].iter().filter(|x| **x).count();
            assert_eq!(n, 1, "{}: {s} must be recorded, skipped or a known divergence (one of them)", dir.display());
            for l in skip.into_iter().chain(div) {
                assert!(l.len() > s.len() + 10, "{}: {s} listed without a reason", dir.display());
            }
            if div.is_some() {
                // It really diverges (a stale entry would hide a fixture that now conforms).
                let f = known.join(format!("{s}.jsonl"));
                let r = conform::check(&f, &release, None, 8).expect("known divergence parses");
                assert!(r.divergence.is_some(), "{}: conforms now: move it to {}", f.display(), dir.display());
            }
        }
    }
}

/// The recordings that showed where 0.34 departs from 0.33: each diverges under the 0.33 rule
/// and conforms under vllm-0.34's.
#[test]
fn the_034_recordings_show_each_rule_034_changed() {
    for (name, step, what) in [
        // resumed_after_new = false: the preempted B is listed before the new C and D.
        ("resume-with-new", 15, "schedule"),
        // error_watermark_computed (#63937 fixed): the error finish makes no store job past
        // num_computed_tokens: 0.33 makes a store where the log goes on with the schedule line.
        ("error-mid-prefill", 2, "store"),
        // scpu_refresh_local_hit (#62444 fixed at admission): the CPU free queue order.
        ("scpu-main", 7, "cpu"),
        // cache_aware_admission (new in 0.34): C, with a cached prefix, admitted before B.
        ("cache-aware-admission", 2, "schedule"),
    ] {
        let f = fixture("vllm-0.34", name);
        let text = std::fs::read_to_string(&f).unwrap();
        let d = conform::check(&f, "vllm-0.33", None, 8)
            .unwrap()
            .divergence
            .unwrap_or_else(|| panic!("{name}: the 0.34 recording conforms to vllm-0.33 (no rule change shown)"));
        let line = text.lines().nth(d.line - 1).unwrap();
        assert_eq!(
            (d.step, d.what.as_str()),
            (step, what),
            "{name}: diverges under vllm-0.33 at line {}: {line}",
            d.line
        );
        assert!(conform::check(&f, "vllm-0.34", None, 8).unwrap().divergence.is_none(), "{name}");
    }
    // The eager-scan refresh proposed for #62444 (variant fix-62444) is not 0.34's.
    let f = fixture("vllm-0.34", "scpu-main");
    assert!(conform::check(&f, "vllm-0.33", Some("fix-62444"), 8).unwrap().divergence.is_some());
    // vllm-main is rebased on 0.34: every 0.34 recording conforms to it.
    for name in ["resume-with-new", "error-mid-prefill", "scpu-main", "cache-aware-admission"] {
        let f = fixture("vllm-0.34", name);
        assert!(conform::check(&f, "vllm-main", None, 8).unwrap().divergence.is_none(), "{name} under vllm-main");
    }
}

/// failed_load_request_level (0.34): the OffloadingConnector's worker reports a failed async
/// load per request (`failed_jobs`, `failed_recving`), written as a `transfer_failed` without
/// `invalid_blocks`. In load-fail-recompute R2's load (job 4) fails at step 12; 0.34 rewinds R2
/// to 0 tokens and marks it `load_failed`, so its lookup at step 13 finds nothing and it
/// recomputes. The same failure reported block-level (every block of job 4 invalid) under
/// 0.33's rule diverges at that lookup: the model's R2 finds the 12 host tokens again and loads
/// them (finding 20's retry; gate row offload-load-retry). A line of the other form is bad input.
#[test]
fn the_034_recordings_fail_a_load_per_request() {
    let f = fixture("vllm-0.34", "load-fail-recompute");
    let text = std::fs::read_to_string(&f).unwrap();
    let request_level = r#"{"ev":"transfer_failed","step":12,"job":4}"#;
    assert!(text.contains(request_level), "the 0.34 recording reports job 4 per request");
    assert!(text.contains(r#"{"ev":"lookup","step":13,"req":"R2","local":0,"external":0,"async":false}"#));
    for profile in ["vllm-0.34", "vllm-main"] {
        let r = conform::check(&f, profile, None, 8).unwrap();
        assert!(r.divergence.is_none(), "{profile}: {:?}", r.divergence);
    }
    let Err(e) = conform::check(&f, "vllm-0.33", None, 8) else { panic!("a request-level line under 0.33") };
    assert!(e.to_string().contains("without invalid_blocks"), "{e}");
    let o = kvmc(&["conform", "--profile", "vllm-0.33", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("load-fail-recompute.jsonl:61"), "{}", stderr(&o));

    let block_level =
        text.replace(request_level, r#"{"ev":"transfer_failed","step":12,"job":4,"invalid_blocks":[1,2,3]}"#);
    let d = conform::check_text(&f, &block_level, "vllm-0.33", None, 8).unwrap().divergence.expect("0.33 retries");
    assert_eq!((d.step, d.what.as_str()), (13, "lookup"), "{d:?}");
    let Err(e) = conform::check_text(&f, &block_level, "vllm-0.34", None, 8) else { panic!("block ids under 0.34") };
    assert!(e.to_string().contains("names invalid_blocks"), "{e}");
    // A failed sync load stops 0.34's engine (RuntimeError): a request-level report of one is
    // bad input (0.33's seed-fail-sync, its sync job 5 reported without block ids).
    let sync = root().join("tests/conformance/fixtures/seed-fail-sync.jsonl");
    let text = std::fs::read_to_string(&sync).unwrap();
    let text = text.replace(r#""job":5,"invalid_blocks":[3,4]}"#, r#""job":5}"#);
    let Err(e) = conform::check_text(&sync, &text, "vllm-0.34", None, 8) else { panic!("a sync job per request") };
    assert!(e.to_string().contains("sync load job 5"), "{e}");
    // Under fail, 0.34 finishes the waiting request with an error (the recording conforms).
    let r = conform::check(&fixture("vllm-0.34", "load-fail-fail"), "vllm-0.34", None, 8).unwrap();
    assert!(r.divergence.is_none(), "{:?}", r.divergence);
}

/// vLLM 0.24's recordings: a store or load job's keys become evictable in the order of a Python
/// set (`TransferJobStatus.keys`), a model choice point that conform searches; `main` needs an
/// order other than the model's canonical one (the only matching resolution of its step), so
/// without the search it diverges. And 0.24 admits a request while a streaming session is
/// parked (`parked_holds_slot = false`): under 0.32's rule its recording diverges at B's
/// admission (step 3); under 0.24's it conforms (with `session_max_tokens = false`, below).
#[test]
fn the_024_recordings_show_the_key_order_choice_and_the_parked_slot_rule() {
    let r = conform::check(&fixture("vllm-0.24", "main"), "vllm-0.24", None, 8).unwrap();
    assert!(r.divergence.is_none(), "{:?}", r.divergence);
    let keys: Vec<_> = r.choices.iter().filter(|c| c.point == "TransferJobStatus.keys").collect();
    assert!(
        keys.iter().any(|c| c.chosen != c.canonical && c.matching == 1 && c.tried > 1),
        "a step where only a non-canonical key order matches: {keys:?}"
    );
    // 0.33's ranks make the walk order irrelevant: no such choice point is offered there.
    let r33 = conform::check(&root().join("tests/conformance/fixtures/main.jsonl"), "vllm-0.33", None, 8).unwrap();
    assert!(r33.choices.iter().all(|c| c.point != "TransferJobStatus.keys"), "{:?}", r33.choices);

    let f = fixture("vllm-0.24", "stream-parked-slot");
    let d32 = conform::check(&f, "vllm-0.32", None, 8).unwrap().divergence.expect("0.32's rule");
    assert_eq!((d32.step, d32.what.as_str()), (3, "lookup"), "B is admitted while S is parked");
}

/// 0.24's `_update_request_as_session` keeps the session's first `max_tokens`
/// (`session_max_tokens = false`): S's second input stops after 2 tokens (stream-parked-slot's
/// turn_end at step 12; stream-resume runs its second input to 3 tokens). Before the rule both
/// diverged at that turn_end.
#[test]
fn the_024_session_keeps_its_first_max_tokens() {
    for name in ["stream-parked-slot", "stream-resume"] {
        let r = conform::check(&fixture("vllm-0.24", name), "vllm-0.24", None, 8).unwrap();
        assert!(r.divergence.is_none(), "{name}: {:?}", r.divergence);
    }
}

/// 0.24's `_update_request_as_session` does not truncate the session's block hashes
/// (`session_rehash = false`): in stream-queued the block of input 1's dropped sampled token
/// keeps its key S.3, and step 5's store job stores the block, recomputed over input 2's tokens,
/// under it (0.32+ rehash it as S@2.3). The host tier then holds KV under a key that names
/// other tokens: host-integrity is violated on vLLM 0.24 itself (docs/findings.md).
#[test]
fn the_024_session_keeps_the_dropped_tokens_block_hash() {
    let f = fixture("vllm-0.24", "stream-queued");
    let log = std::fs::read_to_string(&f).unwrap();
    assert!(
        log.lines().any(|l| l.contains(r#""ev":"store","step":5"#) && l.contains(r#""S.3""#)),
        "the recording stores under S.3 at step 5"
    );
    let r = conform::check(&f, "vllm-0.24", None, 8).unwrap();
    assert!(r.divergence.is_none(), "{:?}", r.divergence);
    assert!(r.findings.iter().any(|(p, _)| p == "host-integrity"), "{:?}", r.findings);
}

/// 0.24's `Scheduler.schedule` preempts without `_request_blocks_can_be_freed`
/// (`preempt_checks_deferred_free = false`): under async scheduling a victim whose blocks can
/// only be freed after the step in flight is preempted all the same. In async-preempt-restart
/// step 7 vLLM preempts R and then A itself (the connector flushes both store jobs); in
/// async-main step 13 it preempts R2 and flushes its store job 2. Under 0.32's rule (the
/// variant) the model stops at the first such victim, preempts nothing and flushes nothing.
#[test]
fn the_024_async_recordings_preempt_without_the_deferred_free_check() {
    for (name, step, preempted) in
        [("async-preempt-restart", 7, r#""preempted":["A","R"]"#), ("async-main", 13, r#""preempted":["R2"]"#)]
    {
        let f = fixture("vllm-0.24", name);
        let log = std::fs::read_to_string(&f).unwrap();
        let schedule = format!(r#""ev":"schedule","step":{step},"#);
        assert!(
            log.lines().any(|l| l.contains(&schedule) && l.contains(preempted)),
            "{name}: the recording preempts {preempted} at step {step}"
        );
        let r = conform::check(&f, "vllm-0.24", None, 8).unwrap();
        assert!(r.divergence.is_none(), "{name} under vllm-0.24: {:?}", r.divergence);
        let d = conform::check(&f, "vllm-0.24", Some("preempt-checks-deferred-free"), 8)
            .unwrap()
            .divergence
            .unwrap_or_else(|| panic!("{name}: conforms with 0.32's preemption check (no rule change shown)"));
        assert_eq!((d.step, d.what.as_str()), (step, "flush"), "{name}: {d:?}");
    }
}

/// vLLM 0.34's cache-aware admission (`_reorder_waiting_by_cached_prefix`): the recording
/// conforms with its header's window and threshold, and diverges in step 2 (B admitted, not C)
/// when the header turns the window off or raises the threshold above step 2's usage (0.5:
/// 3 of 6 usable blocks held; equal to the default threshold, which applies).
#[test]
fn the_cache_aware_window_reorders_admission_and_diverges_when_off() {
    let f = fixture("vllm-0.34", "cache-aware-admission");
    let text = std::fs::read_to_string(&f).unwrap();
    let head = text.lines().next().unwrap();
    assert!(
        head.contains("\"cache_aware_admission_window\":2") && head.contains("\"cache_aware_admission_threshold\":0.5")
    );
    assert!(conform::check(&f, "vllm-0.34", None, 8).unwrap().divergence.is_none());
    let dir = tempdir("cache-aware-admission");
    for (from, to) in [
        ("\"cache_aware_admission_window\":2", "\"cache_aware_admission_window\":0"),
        ("\"cache_aware_admission_threshold\":0.5", "\"cache_aware_admission_threshold\":0.501"),
    ] {
        let g = dir.join("log.jsonl");
        std::fs::write(&g, text.replacen(from, to, 1)).unwrap();
        let d =
            conform::check(&g, "vllm-0.34", None, 8).unwrap().divergence.unwrap_or_else(|| panic!("{to}: conforms"));
        assert_eq!((d.step, d.what.as_str()), (2, "schedule"), "{to}");
    }
}

/// vLLM 0.24's SimpleCPU (recorded since observe.py splits `_prepare_eager_store_specs`'s
/// store event per request). It has no finish-time store (`scpu_finish_flush = false`):
/// scpu-pressure (step 5) and seed-scpu-recving (step 1) conform to 0.32's rules without it
/// (variant `pre-finish-flush`) and diverge with it. Its CPU `BlockPool` publishes only its
/// evictions, as medium GPU (`scpu_cpu_kv_events = false`): their KV event streams match the
/// model step by step under vllm-0.24, and under 0.32's CPU-medium events a CPU eviction reads
/// as a GPU removal of a block the GPU does not hold.
#[test]
fn the_024_simple_cpu_recordings_show_no_finish_store_and_gpu_labelled_cpu_events() {
    for (name, step) in [("scpu-pressure", 5), ("seed-scpu-recving", 1)] {
        let f = fixture("vllm-0.24", name);
        let d = conform::check(&f, "vllm-0.32", None, 8)
            .unwrap()
            .divergence
            .unwrap_or_else(|| panic!("{name}: conforms with 0.32's finish-time store"));
        assert_eq!(d.step, step, "{name}: {d:?}");
        let r = conform::check(&f, "vllm-0.32", Some("pre-finish-flush"), 8).unwrap();
        assert!(r.divergence.is_none(), "{name}: {:?}", r.divergence);
        let ev = f.with_extension("kvevents");
        for (profile, variant, want) in [
            ("vllm-0.24", None, "consistent and matches the model step by step"),
            ("vllm-0.32", Some("pre-finish-flush"), "GPU BlockRemoved of"),
        ] {
            let mut args = vec!["conform", "--profile", profile, f.to_str().unwrap()];
            args.extend(variant.iter().flat_map(|v| ["--variant", *v]));
            args.extend(["--kv-events", ev.to_str().unwrap()]);
            let out = stdout(&kvmc(&args));
            assert!(out.contains(want), "{name} under {profile}: {out}");
        }
    }
}

/// Without `--profile` a log is checked under the release its header names: every per-release
/// fixture conforms with no flag, and the report says where its profile came from; a flag that
/// names another release wins, with a note (docs/conformance.md, "Which rules").
#[test]
fn a_log_is_checked_under_the_release_its_header_names() {
    for (dir, profile) in release_dirs() {
        let f = logs(&dir).into_iter().next().unwrap();
        let o = kvmc(&["conform", "--format", "json", f.to_str().unwrap()]);
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let log = &v["logs"][0];
        assert_eq!((log["profile"].as_str(), log["profile_from"].as_str()), (Some(profile.as_str()), Some("header")));
        assert_eq!((log["verdict"].as_str(), o.status.code()), (Some("conforms"), Some(0)), "{}", f.display());
        assert!(log["profile_note"].is_null());
    }
    // A 0.24 log that diverges under 0.33's rules (0.24 keeps the dropped token's block hash)
    // conforms under its own, and the flag that asks for 0.33 gets what it asks, with a note.
    let f = fixture("vllm-0.24", "stream-queued");
    let f = f.to_str().unwrap();
    let o = kvmc(&["conform", f]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).contains("checked under vllm-0.24 (the release the log's header names)"), "{}", stdout(&o));
    let o = kvmc(&["conform", "--profile", "vllm-0.33", f]);
    assert_eq!(o.status.code(), Some(10), "{}", stdout(&o));
    assert!(stdout(&o)
        .contains("note: recorded from vllm 0.24.0 (profile vllm-0.24); checked under --profile vllm-0.33 as asked"));
}
