//! Bad input never crashes: sizes beyond what kvmc allocates are refused naming the key, the
//! line and the largest accepted value (issue 19 item 2); bytes that are not UTF-8 are
//! named by line and byte offset (item 13); replay's pools are reported in usable units and
//! `--limit` says what it does (item 18).

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `kvmc ARGS` in `dir` with 4 GiB of address space and two minutes: an unbounded allocation
/// aborts (134) instead of taking the machine's memory, a run that never ends is killed.
fn kvmc_bounded(dir: &Path, args: &[&str]) -> Output {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(env!("CARGO_BIN_EXE_kvmc"));
    c.args(args).current_dir(dir).stdout(Stdio::piped()).stderr(Stdio::piped());
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit { rlim_cur: 4 << 30, rlim_max: 4 << 30 };
            libc::setrlimit(libc::RLIMIT_AS, &lim);
            Ok(())
        });
    }
    let child = c.spawn().expect("kvmc runs");
    let pid = child.id() as i32;
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let watchdog = std::thread::spawn(move || {
        let end = Instant::now() + Duration::from_secs(120);
        while !d.load(Ordering::SeqCst) {
            if Instant::now() > end {
                unsafe { libc::kill(pid, libc::SIGKILL) };
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let o = child.wait_with_output().expect("kvmc output");
    done.store(true, Ordering::SeqCst);
    let _ = watchdog.join();
    o
}

/// Exit 2, no panic, and stderr names `at` (FILE:LINE) and `says`.
fn assert_refused(o: &Output, at: &str, says: &str) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{at}: {e}");
    assert!(!e.contains("panicked") && !e.contains("memory allocation"), "{e}");
    assert!(e.contains(at) && e.contains(says), "expected {at} ... {says}: {e}");
}

const ENGINE: &str = "[engine]\nblock_size = 2\ngpu_blocks = 4\nmax_num_batched_tokens = 4\n";
const REQUEST: &str = "[[request]]\nname = \"A\"\nprompt = \"ab\"\noutput = \"x\"\n";

#[test]
fn sizes_beyond_what_kvmc_allocates_exit_2_naming_key_line_and_limit() {
    let d = tempdir("sizes");
    let cases = [
        (
            format!("{ENGINE}connector = \"simple-cpu\"\n[simple_cpu]\ncpu_blocks = 2147483648\n{REQUEST}"),
            "m0.toml:7:",
            "cpu_blocks must be 2..=4194304",
        ),
        (
            format!("{ENGINE}connector = \"offloading\"\n[offload]\nhost_chunks = 2\nsync_load_budget_tokens = 4294967295\n[faults]\nload_failure = true\n{REQUEST}"),
            "m1.toml:8:",
            "sync_load_budget_tokens must be 0..=6",
        ),
        (format!("{ENGINE}max_num_seqs = 4294967295\n{REQUEST}"), "m2.toml:5:", "max_num_seqs must be at most 65536"),
        (
            format!("{ENGINE}connector = \"offloading\"\n[offload]\nhost_chunks = 2\nblocks_per_chunk = 4294967295\n{REQUEST}"),
            "m3.toml:8:",
            "blocks_per_chunk must be 1..=3",
        ),
        (
            format!("{ENGINE}connector = \"offloading\"\n[offload]\nhost_chunks = 4294967295\n{REQUEST}"),
            "m4.toml:7:",
            "host_chunks must be 1..=4194304",
        ),
        // A position past u32 was cut to its low bits (start = 2^32 read as 0).
        (
            format!("{ENGINE}[router_replay]\n{REQUEST}start = 4294967296\n"),
            "m5.toml:10:",
            "start 4294967296 is past the prompt",
        ),
    ];
    for (i, (model, at, says)) in cases.iter().enumerate() {
        let p = write(&d, &format!("m{i}.toml"), model);
        assert_refused(&kvmc_bounded(&d, &["check", p.to_str().unwrap()]), at, says);
    }
}

/// The replay model at production size, with `key = value` lines replaced.
fn replay_model(d: &Path, name: &str, edits: &[(&str, &str)]) -> PathBuf {
    let mut text = std::fs::read_to_string(root().join("models/replay-mooncake.toml")).unwrap();
    for (from, to) in edits {
        assert!(text.contains(from), "{from}");
        text = text.replace(from, to);
    }
    write(d, name, &text)
}

fn line_of(p: &Path, key: &str) -> usize {
    std::fs::read_to_string(p).unwrap().lines().position(|l| l.starts_with(key)).unwrap() + 1
}

#[test]
fn replay_sizes_beyond_what_kvmc_allocates_exit_2() {
    let d = tempdir("replay-sizes");
    let trace = root().join("tests/traces/conversation-head-300.jsonl");
    let cases = [
        (
            "r0.toml",
            vec![("host_chunks = 65536", "host_chunks = 4294967295")],
            "host_chunks",
            "host_chunks must be 1..=4194304",
        ),
        // Every engine allocates its pools: 1024 engines of 65,536 chunks abort.
        (
            "r1.toml",
            vec![("concurrency = 64", "concurrency = 64\nengines = 1024")],
            "engines",
            "at most 64 engines of this size",
        ),
        // A store that takes 2^32 steps never finishes: the replay would never end.
        (
            "r2.toml",
            vec![("store_steps = 0", "store_steps = 4294967295")],
            "store_steps",
            "store_steps must be 0..=9999",
        ),
    ];
    for (name, edits, key, says) in cases {
        let m = replay_model(&d, name, &edits);
        let at = format!("{name}:{}:", line_of(&m, key));
        let o = kvmc_bounded(&d, &["replay", trace.to_str().unwrap(), "--model", m.to_str().unwrap(), "--limit", "2"]);
        assert_refused(&o, &at, says);
    }
}

#[test]
fn replay_reports_usable_pool_sizes_and_warns_of_a_max_model_len_g1_cannot_hold() {
    let trace = root().join("tests/traces/conversation-head-300.jsonl");
    let o = kvmc(&["replay", trace.to_str().unwrap(), "--model", "models/replay-mooncake.toml", "--limit", "3"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let head: Vec<String> = stdout(&o).lines().take(2).map(str::to_string).collect();
    assert!(
        head[1].contains("8,191 usable GPU blocks of 16 tokens (gpu_blocks = 8192 counts the null block)")
            && head[1].contains("host tier 65,536 chunks"),
        "{head:?}"
    );
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
    let j = kvmc(&[
        "replay",
        trace.to_str().unwrap(),
        "--model",
        "models/replay-mooncake.toml",
        "--limit",
        "3",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&j.stdout).unwrap();
    assert_eq!(v["pools"]["usable_gpu_blocks"], 8191);
    // 8,191 blocks of 16 tokens hold 131,056 tokens.
    let d = tempdir("mml");
    let m = replay_model(&d, "m.toml", &[("max_num_seqs = 64", "max_num_seqs = 64\nmax_model_len = 131057")]);
    let o = kvmc(&["replay", trace.to_str().unwrap(), "--model", m.to_str().unwrap(), "--limit", "1"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let at = format!("m.toml:{}: warning: max_model_len = 131057 does not fit in G1", line_of(&m, "max_model_len"));
    assert!(stderr(&o).contains(&at), "{}", stderr(&o));
    let m = replay_model(&d, "ok.toml", &[("max_num_seqs = 64", "max_num_seqs = 64\nmax_model_len = 131056")]);
    let o = kvmc(&["replay", trace.to_str().unwrap(), "--model", m.to_str().unwrap(), "--limit", "1"]);
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
}

#[test]
fn a_limit_of_zero_is_refused_and_one_beyond_the_trace_says_so() {
    let trace = root().join("tests/traces/conversation-head-300.jsonl");
    let run =
        |n: &str| kvmc(&["replay", trace.to_str().unwrap(), "--model", "models/replay-mooncake.toml", "--limit", n]);
    let o = run("0");
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stderr(&o).contains("--limit 0 replays nothing"), "{}", stderr(&o));
    let o = run("301");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("--limit 301 is beyond the trace's 300 requests"), "{}", stderr(&o));
    assert!(stdout(&o).contains("300 finished of 300"), "{}", stdout(&o));
}

/// `text` with the byte 0xff put at byte `at`.
fn with_bad_byte(text: &str, at: usize) -> Vec<u8> {
    let mut b = text.as_bytes().to_vec();
    b.insert(at, 0xff);
    b
}

#[test]
fn bytes_that_are_not_utf8_are_named_by_line_and_offset() {
    let d = tempdir("utf8");
    let model = format!("{ENGINE}{REQUEST}");
    let off = model.find("prompt").unwrap();
    let line = model[..off].lines().count() + 1;
    std::fs::write(d.join("m.toml"), with_bad_byte(&model, off)).unwrap();
    let o = kvmc(&["check", d.join("m.toml").to_str().unwrap()]);
    assert_refused(&o, &format!("m.toml:{line}: not UTF-8: byte offset {off} (column 1) is 0xff"), "");
    // A spec (read with --specs), a scenario, a trace and a conformance log.
    std::fs::create_dir_all(d.join("specs")).unwrap();
    std::fs::write(d.join("specs/x.toml"), with_bad_byte("property = \"host-integrity\"\nsummary = \"s\"\n", 30))
        .unwrap();
    let o = kvmc(&["check", "--specs", d.join("specs").to_str().unwrap()]);
    assert_refused(&o, "x.toml:2: not UTF-8: byte offset 30 (column 3)", "");
    std::fs::write(d.join("s.toml"), with_bad_byte("actions = [\"arrive A\"]\n", 13)).unwrap();
    let o = kvmc(&["replay", d.join("s.toml").to_str().unwrap(), "--model", "models/shared-prefix.toml"]);
    assert_refused(&o, "s.toml:1: not UTF-8: byte offset 13", "");
    let trace = "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\n";
    std::fs::write(d.join("t.jsonl"), with_bad_byte(&format!("{trace}{trace}"), trace.len() + 3)).unwrap();
    let o = kvmc(&["replay", d.join("t.jsonl").to_str().unwrap(), "--model", "models/replay-mooncake.toml"]);
    assert_refused(&o, &format!("t.jsonl:2: not UTF-8: byte offset {}", trace.len() + 3), "");
    let log = std::fs::read_to_string(root().join("tests/conformance/fixtures/main.jsonl")).unwrap();
    let second = log.find('\n').unwrap() + 1;
    std::fs::write(d.join("l.jsonl"), with_bad_byte(&log, second + 1)).unwrap();
    let o = kvmc(&["conform", d.join("l.jsonl").to_str().unwrap()]);
    assert_refused(&o, &format!("l.jsonl:2: not UTF-8: byte offset {}", second + 1), "");
}

/// A KV-event batch whose event type is a msgpack string of bytes that are not UTF-8 says
/// so (it used to say the event had no type), with the batch's byte offset.
#[test]
fn a_kv_event_string_that_is_not_utf8_says_so() {
    use rmpv::Value;
    let ev = |ty: Value| {
        Value::Array(vec![
            Value::from(0.0),
            Value::Array(vec![Value::Map(vec![
                (Value::from("type"), ty),
                (Value::from("block_hashes"), Value::Array(vec![Value::from(1u64)])),
            ])]),
        ])
    };
    let mut bytes = Vec::new();
    rmpv::encode::write_value(&mut bytes, &ev(Value::from("AllBlocksCleared"))).unwrap();
    let second = bytes.len();
    rmpv::encode::write_value(&mut bytes, &ev(Value::from("BX"))).unwrap();
    // The type's two bytes (a fixstr: 0xa2 "BX") become 0x42 0xff.
    let at = bytes[second..].windows(3).position(|w| w == [0xa2, b'B', b'X']).unwrap() + second;
    bytes[at + 2] = 0xff;
    let err = kvmc::conform::kv_events::parse(Path::new("ev.msgpack"), &bytes).unwrap_err().to_string();
    assert!(err.contains(&format!("batch 2 at byte {second}: the event's \"type\" is not UTF-8")), "{err}");
}

#[test]
fn cache_aware_admission_needs_a_034_profile_and_a_threshold_in_thousandths() {
    let d = tempdir("bad-cache-aware");
    for (name, extra, at, says) in [
        ("w.toml", "cache_aware_admission_window = 2\n", "w.toml:5", "profile vllm-0.33 does not have it"),
        (
            "t.toml",
            "profile = \"vllm-0.34\"\ncache_aware_admission_window = 2\ncache_aware_admission_threshold = 1.5\n",
            "t.toml:7",
            "cache_aware_admission_threshold must be 0.0..=1.0",
        ),
    ] {
        let m = write(&d, name, &format!("{ENGINE}{extra}{REQUEST}"));
        assert_refused(&kvmc(&["check", m.to_str().unwrap()]), at, says);
    }
    // The same settings on vllm-0.34 are accepted.
    let ok = "profile = \"vllm-0.34\"\ncache_aware_admission_window = 2\ncache_aware_admission_threshold = 0.25\n";
    let m = write(&d, "ok.toml", &format!("{ENGINE}{ok}{REQUEST}"));
    assert_eq!(kvmc(&["check", m.to_str().unwrap(), "--property", "requests-finish"]).status.code(), Some(0));
}
