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
