//! Regression tests for what the adversarial suite found (and the size limits of issue 19),
//! one per defect, each run on the binary as a user would.

use crate::common::{kvmc, root, stderr, tempdir};
use std::path::PathBuf;

/// A copy of a conformance fixture with `from` replaced by `to` (once, in the header).
fn log_with(tag: &str, fixture: &str, from: &str, to: &str) -> PathBuf {
    let src = root().join("tests/conformance/fixtures").join(fixture);
    let text = std::fs::read_to_string(src).unwrap();
    assert!(text.contains(from), "{fixture} has no {from}");
    let d = tempdir(tag);
    let p = d.join(fixture);
    std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
    p
}

/// Issue 19: `num_gpu_blocks` 4e9 in a log header aborted (exit 134, memory allocation
/// failed). Every header size is bounded as a model file's is: exit 2 naming the key, the
/// line and the largest accepted value.
#[test]
fn conform_header_sizes_are_bounded() {
    for (key, from, to, max) in [
        ("num_gpu_blocks", "\"num_gpu_blocks\":9,", "\"num_gpu_blocks\":4000000000,", "1000000"),
        ("host_chunks", "\"host_chunks\":12,", "\"host_chunks\":4294967295,", "4194304"),
        ("max_num_seqs", "\"max_num_seqs\":4,", "\"max_num_seqs\":4294967295,", "65536"),
        ("block_size", "\"block_size\":4,", "\"block_size\":4294967295,", "64"),
        // Found by the adversarial suite: a chunk of 2^31 blocks of 4 tokens wrapped to 0
        // tokens and divided by zero in the connector's lookup (exit 101).
        ("blocks_per_chunk", "\"blocks_per_chunk\":1,", "\"blocks_per_chunk\":2147483648,", "8"),
    ] {
        let p = log_with("adv-conform-header", "abort-async-load.jsonl", from, to);
        let o = kvmc(&["conform", p.to_str().unwrap()]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{key}: {err}");
        assert!(err.contains(&format!("{}:1:", p.display())), "{key}: {err}");
        assert!(err.contains(key) && err.contains(max), "{key}: {err}");
    }
    let p = log_with("adv-conform-header", "scpu-main.jsonl", "\"cpu_blocks\":", "\"cpu_blocks\":4294967295,\"x\":");
    let o = kvmc(&["conform", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("cpu_blocks must be at most 4194304"), "{}", stderr(&o));
}

/// Issue 19: a `--variant` that changes nothing the model reads is refused by `check`; trace
/// replay, scenario replay and the explorer ran the profile unchanged and said nothing.
#[test]
fn replay_and_explore_refuse_a_variant_that_changes_nothing() {
    let scen = root().join("tests/adversarial/preempt-store__vllm-0.33__pre-29870__kv-read-integrity.scenario.toml");
    let runs: [&[&str]; 3] = [
        &[
            "replay",
            "tests/traces/conversation-head-300.jsonl",
            "--model",
            "models/replay-mooncake.toml",
            "--limit",
            "3",
            "--variant",
            "mut-scpu-pin-leak",
        ],
        &["replay", scen.to_str().unwrap(), "--variant", "mut-scpu-pin-leak"],
        &["explore", "models/host-lru.toml", "--variant", "mut-scpu-pin-leak", "--dry-run"],
    ];
    for args in runs {
        let o = kvmc(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("changes only scpu_drop_stale_pin"), "{args:?}: {}", stderr(&o));
    }
    // A variant the model reads still runs.
    let o = kvmc(&["explore", "models/host-lru.toml", "--variant", "pre-29870", "--dry-run"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// Issue 19: `bench --threads` took any number (100000 aborted spawning threads in check);
/// it now has check's 1..=1024 rule.
#[test]
fn bench_threads_is_bounded() {
    for t in ["0", "100000"] {
        let o = kvmc(&["bench", "--threads", t, "models/host-lru.toml"]);
        assert_eq!(o.status.code(), Some(2), "{t}: {}", stderr(&o));
        assert!(stderr(&o).contains("1..=1024"), "{t}: {}", stderr(&o));
    }
}
