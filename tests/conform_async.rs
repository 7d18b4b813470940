//! Async scheduling recorded on real vLLM (issue 22, item 3): the recorder mirrors
//! `EngineCore.step_with_batch_queue` with vLLM's `AsyncScheduler`; the `async-*` fixtures
//! conform, batches really overlap in them, and `--kv-events` knows that vLLM publishes a
//! step's KV cache events in the next `update_from_output`.

use crate::common::*;
use kvmc::conform;
use std::path::PathBuf;

fn async_fixtures(dir: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_str().unwrap();
            n.starts_with("async-") && n.ends_with(".jsonl")
        })
        .collect();
    v.sort();
    v
}

fn lines(p: &PathBuf) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Steps with a `schedule` line.
fn schedule_steps(log: &[serde_json::Value]) -> Vec<u64> {
    log.iter().filter(|v| v["ev"] == "schedule").map(|v| v["step"].as_u64().unwrap()).collect()
}

#[test]
fn async_fixtures_overlap_batches_and_conform_on_every_release() {
    let mut n = 0;
    for (dir, profile) in [
        ("tests/conformance/fixtures", "vllm-0.33"),
        ("tests/conformance/fixtures/vllm-0.34", "vllm-0.34"),
        ("tests/conformance/fixtures/vllm-0.32", "vllm-0.32"),
    ] {
        for f in async_fixtures(dir) {
            let log = lines(&f);
            assert_eq!(log[0]["async_scheduling"], true, "{}: header says async", f.display());
            // Batches overlap: a step schedules a batch and processes none (the queue was not
            // full), and the tokens of a batch are sampled in a later step.
            let sched = schedule_steps(&log);
            let sampled_at = |s: u64| log.iter().any(|v| v["ev"] == "sampled" && v["step"] == s);
            assert!(sched.iter().any(|&s| !sampled_at(s)), "{}: some step only schedules", f.display());
            assert!(
                sched.windows(2).all(|w| w[0] < w[1]),
                "{}: at most one schedule() per step (one step_with_batch_queue call)",
                f.display()
            );
            let r = conform::check(&f, profile, None, 8).unwrap();
            assert!(r.divergence.is_none(), "{} under {profile}: {:?}", f.display(), r.divergence);
            let ev = f.with_extension("kvevents");
            let o = kvmc(&["conform", "--profile", profile, f.to_str().unwrap(), "--kv-events", ev.to_str().unwrap()]);
            assert!(
                stdout(&o).contains("consistent and matches the model step by step"),
                "{}: {}",
                ev.display(),
                stdout(&o)
            );
            n += 1;
        }
    }
    assert!(n >= 6 + 4, "the async fixtures of 0.33 and of another release ({n})");
}

/// The same log read as synchronous is another run: the model schedules and processes a batch
/// in every step, and the log shows it did not.
#[test]
fn an_async_log_read_as_synchronous_diverges() {
    for f in async_fixtures("tests/conformance/fixtures") {
        let text = std::fs::read_to_string(&f).unwrap();
        let sync = text.replacen("\"async_scheduling\":true", "\"async_scheduling\":false", 1);
        assert_ne!(sync, text);
        let r = conform::check_text(&f, &sync, "vllm-0.33", None, 2).unwrap();
        assert!(r.divergence.is_some(), "{}: conforms read as synchronous", f.display());
    }
}

/// vLLM publishes KV cache events in `update_from_output` only: under async scheduling, the
/// blocks a step that only schedules caches are announced by the next step that processes a
/// batch. Read as a synchronous engine publishes them (in the step whose `g1` snapshot shows
/// them cached), the stream does not match the async log; a synchronous log's stream moved a
/// step later does not match its log either (tests/conform.rs moves every batch of every
/// fixture).
#[test]
fn kv_events_of_an_async_log_are_published_by_the_next_processing_step() {
    let d = tempdir("async-kvevents");
    let mut shifted = 0;
    for f in async_fixtures("tests/conformance/fixtures") {
        let log = lines(&f);
        let sched = schedule_steps(&log);
        let sampled_at = |s: u64| log.iter().any(|v| v["ev"] == "sampled" && v["step"] == s);
        // Block ids in G1's cached map at the end of each step.
        let cached = |s: u64| {
            log.iter()
                .filter(|v| v["ev"] == "g1" && v["step"] == s)
                .map(|v| v["cached"].as_object().unwrap().values().map(|b| b.as_array().unwrap().len()).sum::<usize>())
                .next()
        };
        let ev = f.with_extension("kvevents");
        let steps: Vec<u64> =
            serde_json::from_str(&std::fs::read_to_string(format!("{}.steps.json", ev.display())).unwrap()).unwrap();
        for (i, &s) in steps.iter().enumerate() {
            // The step before only scheduled (no token came back in it) and cached blocks.
            let before = s - 1;
            let grew = match (cached(before.saturating_sub(1)), cached(before)) {
                (Some(a), Some(b)) => b > a,
                (None, Some(b)) => b > 0,
                _ => false,
            };
            if before == 0 || !sched.contains(&before) || sampled_at(before) || steps.contains(&before) || !grew {
                continue;
            }
            let mut moved = steps.clone();
            moved[i] = before;
            let p = d.join("t.kvevents");
            std::fs::copy(&ev, &p).unwrap();
            std::fs::write(d.join("t.kvevents.steps.json"), serde_json::to_string(&moved).unwrap()).unwrap();
            let o = kvmc(&["conform", f.to_str().unwrap(), "--kv-events", p.to_str().unwrap()]);
            assert_eq!(
                o.status.code(),
                Some(10),
                "{}: batch {} published at step {before} went unnoticed",
                f.display(),
                i + 1
            );
            shifted += 1;
        }
    }
    assert!(shifted >= 3, "batches published a step after their blocks were cached ({shifted})");
}
