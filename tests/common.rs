//! Helpers shared by the test modules.

use kvmc::check::{run, RunOpts, RunResult};
use kvmc::model::KvModel;
use kvmc::props::{self, Kind};
use kvmc::scope::Scope;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn scope(name: &str) -> Arc<Scope> {
    Arc::new(Scope::load(&root().join("models").join(format!("{name}.toml"))).expect("model loads"))
}

/// Every applicable always-property and every applicable guard.
pub fn all_props(s: &Scope) -> Vec<&'static props::PropDef> {
    props::REGISTRY.iter().filter(|p| props::applies(p, &s.cfg)).collect()
}

pub fn model(name: &str, profile: Option<&str>, variant: Option<&str>) -> KvModel {
    let s = scope(name);
    let ps = all_props(&s);
    KvModel::new(s, profile, variant, ps).expect("rules resolve")
}

pub fn check(name: &str, profile: Option<&str>, variant: Option<&str>) -> RunResult {
    run(model(name, profile, variant), &RunOpts::default())
}

pub fn always_props(s: &Scope) -> Vec<&'static str> {
    all_props(s).into_iter().filter(|p| p.kind == Kind::Always).map(|p| p.name).collect()
}

pub fn kvmc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvmc")).args(args).current_dir(root()).output().expect("kvmc runs")
}

pub fn kvmc_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvmc")).args(args).current_dir(dir).output().expect("kvmc runs")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fresh temporary directory under target/.
pub fn tempdir(tag: &str) -> PathBuf {
    let d = root().join("target").join("test-tmp").join(format!("{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The story of the last step of `prop`'s counterexample on model `name` with `variant`, and
/// the path's action labels (the P/D rows tests read their counterexamples this way).
pub fn last_story(name: &str, variant: &str, prop: &str) -> (Vec<String>, String) {
    use kvmc::check::{replay, Verdict};
    use stateright::Model;
    let r = check(name, None, Some(variant));
    assert_eq!(r.verdict(prop), Verdict::Violated, "{name} {variant} {prop}");
    let path = r.outcome(prop).unwrap().path.clone().unwrap();
    let m = model(name, None, Some(variant));
    let labels = path.iter().map(|a| m.format_action(a)).collect();
    let states = replay(&m, &path).expect("counterexample replays");
    let story = m.format_step(&states[states.len() - 2], path[path.len() - 1]).unwrap();
    (labels, story)
}

/// The first `rows` rows of the real trace excerpt (tests/traces/README.md), parsed with
/// Mooncake's 512-token blocks.
pub fn real_trace_head(rows: usize) -> kvmc::replay::trace::Trace {
    let path = root().join("tests/traces/conversation-head-300.jsonl");
    let text = std::fs::read_to_string(&path).expect("the trace excerpt (tests/traces/README.md)");
    let head: String = text.lines().take(rows).map(|l| format!("{l}\n")).collect();
    kvmc::replay::trace::Trace::parse(&path, &head, 512, None).expect("trace parses")
}

/// A replay model for the real trace excerpt: SimpleCPU under `profile` with a CPU pool small
/// enough to be under pressure, 64 requests kept unfinished.
pub fn simple_cpu_replay_model(profile: &str) -> String {
    format!(
        r#"
[engine]
profile = "{profile}"
connector = "simple-cpu"
block_size = 16
gpu_blocks = 8192
max_num_batched_tokens = 8192
max_num_seqs = 64

[simple_cpu]
cpu_blocks = 512

[replay]
load = "closed-loop"
concurrency = 64
trace_block_size = 512
"#
    )
}

/// Runs one of the recorder's own Python test files (the standard library only, vLLM replaced
/// by stand-ins) and asserts that exactly `tests` tests ran and passed. Skipped, with a line on
/// stderr, where there is no python3.
pub fn python_unittest(script: &str, tests: usize) {
    let run = Command::new("python3")
        .arg(script)
        .current_dir(root())
        .env("PYTHONHASHSEED", "0")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output();
    let Ok(o) = run else {
        eprintln!("skipped: no python3 here (the recorder needs CPython 3.11)");
        return;
    };
    assert!(o.status.success(), "{script}: {}{}", stdout(&o), stderr(&o));
    let err = stderr(&o);
    assert!(err.contains(&format!("Ran {tests} tests")) && err.contains("OK"), "{script}: {err}");
}

/// `sessions` sessions of `turns` turns: a first turn of 200 new tokens (four 64-token trace
/// blocks), each later turn 64 new tokens (one block), 30 generated tokens per turn, no delay.
pub fn session_trace(sessions: usize, turns: usize) -> String {
    let mut out = String::new();
    let mut id = 0;
    for s in 0..sessions {
        let ids: Vec<String> = (id..id + 4).map(|x: u32| x.to_string()).collect();
        id += 4;
        out.push_str(&format!(
            "{{\"session_id\": \"s{s}\", \"input_length\": 200, \"output_length\": 30, \"hash_ids\": [{}]}}\n",
            ids.join(", ")
        ));
        for _ in 1..turns {
            out.push_str(&format!(
                "{{\"session_id\": \"s{s}\", \"delay\": 0, \"input_length\": 64, \"output_length\": 30, \"hash_ids\": [{id}]}}\n"
            ));
            id += 1;
        }
    }
    out
}

/// The session replay model: OffloadingConnector, a 4096-chunk host tier (nothing is ever
/// evicted), one request at a time.
pub fn session_model(prefix_caching: bool) -> String {
    format!(
        r#"description = "synthetic sessions"
[engine]
profile = "vllm-0.33"
connector = "offloading"
block_size = 16
gpu_blocks = 256
max_num_batched_tokens = 2048
enable_prefix_caching = {prefix_caching}
[offload]
host_chunks = 4096
[replay]
load = "closed-loop"
concurrency = 1
trace_block_size = 64
"#
    )
}

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}
