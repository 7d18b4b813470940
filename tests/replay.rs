//! Trace replay: the hand-derived session counts (docs/replay.md), bad traces, violations
//! written as scenarios that the checker re-runs, several engines, and the incremental
//! invariant checks agreeing with the full ones.

use crate::common::*;
use kvmc::replay::trace::{Format, Trace};
use kvmc::replay::{run_trace, Options, Outcome};
use kvmc::scope::replay::ReplayModel;
use std::path::{Path, PathBuf};

/// `sessions` sessions of `turns` turns: a first turn of 200 new tokens (four 64-token trace
/// blocks), each later turn 64 new tokens (one block), 30 generated tokens per turn, no delay.
fn session_trace(sessions: usize, turns: usize) -> String {
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
fn session_model(prefix_caching: bool) -> String {
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

fn replay_text(trace: &str, model: &str, tag: &str, full_every: u64) -> Outcome {
    let d = tempdir(tag);
    let t = Trace::parse(&d.join("t.jsonl"), trace, 64, None).expect("trace parses");
    let m = ReplayModel::parse("m", &d.join("m.toml"), model).expect("model parses");
    let opts = Options { full_check_every: Some(full_every), out_dir: Some(d), ..Default::default() };
    run_trace(&t, &m, &opts).expect("replay runs")
}

/// docs/replay.md, "Sessions by hand": with prefix caching off, turn i restores the complete
/// chunks of turn i-1's prompt from the host tier and computes the rest.
#[test]
fn sessions_restore_the_previous_prompt_from_the_host_tier() {
    let o = replay_text(&session_trace(3, 3), &session_model(false), "sess-host", 1);
    assert!(o.finding.is_none(), "{:?}", o.finding);
    let mut want_prompt = 200u64;
    let mut prev = 0u64;
    for r in &o.requests {
        let p = u64::from(r.prompt_tokens);
        if r.turn == 0 {
            want_prompt = 200;
            prev = 0;
        }
        assert_eq!(p, want_prompt, "line {}: prompt = previous prompt + 30 answer + 64 new", r.line);
        let restored = 16 * (prev / 16);
        assert_eq!(r.g1_hit_tokens, 0, "line {}", r.line);
        assert_eq!(r.host_hit_tokens, restored, "line {}: restored = 16 * floor(P_prev / 16)", r.line);
        assert_eq!(r.prefill_tokens, p - restored, "line {}: computed = P - restored", r.line);
        prev = p;
        want_prompt = p + 30 + 64;
    }
    let per_session: Vec<(u64, u64)> = o.requests.iter().map(|r| (r.host_hit_tokens, r.prefill_tokens)).collect();
    assert_eq!(&per_session[..3], &[(0, 200), (192, 102), (288, 100)]);
    let m = &o.metrics;
    assert_eq!((m.prompt_tokens, m.host_hit_tokens, m.prefill_tokens, m.recomputed_tokens), (2646, 1440, 1206, 0));
    assert_eq!((m.stored_chunks, m.loaded_chunks), (72, 90));
}

/// docs/replay.md: with prefix caching on and room in G1, turn i finds turn i-1's prompt and
/// answer (all but the last token, whose KV is never computed) in G1, so the host tier,
/// which holds prompt chunks only, adds nothing.
#[test]
fn sessions_hit_g1_when_it_keeps_them() {
    let o = replay_text(&session_trace(3, 3), &session_model(true), "sess-g1", 1);
    assert!(o.finding.is_none(), "{:?}", o.finding);
    let got: Vec<(u64, u64, u64)> =
        o.requests.iter().map(|r| (r.g1_hit_tokens, r.host_hit_tokens, r.prefill_tokens)).collect();
    for s in 0..3 {
        assert_eq!(&got[3 * s..3 * s + 3], &[(0, 0, 200), (224, 0, 70), (320, 0, 68)]);
    }
    // Every position of every request is accounted for exactly once.
    for r in &o.requests {
        let reached = r.g1_hit_tokens + r.host_hit_tokens + r.prefill_tokens + r.decode_tokens;
        assert_eq!(reached, u64::from(r.prompt_tokens + r.output_tokens) - 1, "line {}", r.line);
    }
}

#[test]
fn delta_prompts_are_previous_prompt_answer_and_input() {
    let t = Trace::parse(Path::new("t.jsonl"), &session_trace(1, 3), 64, None).unwrap();
    assert_eq!(t.format, Format::MooncakeDelta);
    let p0 = t.prompt(0);
    let p1 = t.prompt(1);
    let answer: Vec<u32> = t.output(0).collect();
    assert_eq!(p0.len(), 200);
    assert_eq!(&p1[..200], &p0[..]);
    assert_eq!(&p1[200..230], &answer[..]);
    assert_eq!(p1.len(), 294);
    assert_eq!(t.rows[2].prompt_len, 388);
    // As whole-prompt rows, the same file means something else.
    let full = Trace::parse(Path::new("t.jsonl"), &session_trace(1, 3), 64, Some(Format::Mooncake)).unwrap();
    assert_eq!(full.rows[1].prompt_len, 64);
}

#[test]
fn several_engines_share_the_traffic() {
    let model =
        session_model(false).replace("concurrency = 1", "concurrency = 2") + "engines = 2\nrouter = \"least-loaded\"\n";
    let o = replay_text(&session_trace(3, 3), &model, "two-engines", 1);
    assert!(o.finding.is_none(), "{:?}", o.finding);
    assert_eq!(o.per_engine.len(), 2);
    assert!(o.per_engine.iter().all(|m| m.finished > 0), "both engines serve");
    let sum: u64 = o.per_engine.iter().map(|m| m.host_hit_tokens).sum();
    assert_eq!(sum, o.metrics.host_hit_tokens);
    // Sessions stick to one engine, so the host tier of that engine has their prefix.
    assert_eq!(o.metrics.host_hit_tokens, 1440);
    for s in o.requests.chunks(3) {
        assert!(s.iter().all(|r| r.engine == s[0].engine));
    }
}

/// The first rows of the real conversation trace at production size, with the incremental
/// checks compared with the full-state predicates after every action.
#[test]
fn incremental_checks_agree_with_the_full_predicates_on_the_real_trace() {
    let path = PathBuf::from("/work/shared/traces/conversation_trace.jsonl");
    let Ok(text) = std::fs::read_to_string(&path) else { return };
    let head: String = text.lines().take(12).map(|l| format!("{l}\n")).collect();
    let model = std::fs::read_to_string(root().join("models/replay-mooncake.toml")).unwrap();
    let o = {
        let d = tempdir("real-head");
        let t = Trace::parse(&path, &head, 512, None).unwrap();
        let m = ReplayModel::parse("replay-mooncake", &root().join("models/replay-mooncake.toml"), &model).unwrap();
        run_trace(&t, &m, &Options { full_check_every: Some(1), out_dir: Some(d), ..Default::default() }).unwrap()
    };
    assert!(o.finding.is_none());
    assert_eq!(o.checks.full, o.metrics.actions + 1);
    assert_eq!(o.metrics.finished, 12);
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// A bug variant caught by replay: the history is written as a model and a scenario that
/// `kvmc replay` and `kvmc explore` re-run, with the same verdict.
/// `kvmc replay TRACE --model MODEL --variant mut-no-touch-dequeue --out OUT [extra]`.
fn replay_mutant(trace: &Path, model: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "replay",
        trace.to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
        "--variant",
        "mut-no-touch-dequeue",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    kvmc(&args)
}

/// `kvmc explore MODEL --variant mut-no-touch-dequeue --path SCENARIO --dry-run`.
fn explore_mutant(model: &Path, scenario: &Path) -> std::process::Output {
    kvmc(&[
        "explore",
        model.to_str().unwrap(),
        "--variant",
        "mut-no-touch-dequeue",
        "--path",
        scenario.to_str().unwrap(),
        "--dry-run",
    ])
}

#[test]
fn a_violation_is_written_as_a_scenario_the_checker_reruns() {
    let d = tempdir("violation");
    let trace = write(&d, "sessions.jsonl", &session_trace(2, 2));
    let model = write(&d, "model.toml", &session_model(true));
    let out = d.join("out");
    let o = replay_mutant(&trace, &model, &out, &[]);
    assert_eq!(o.status.code(), Some(10), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("VIOLATED: g1-accounting"), "{}", stdout(&o));
    let scen = out.join("sessions.violation.scenario.toml");
    let m = out.join("sessions.violation.model.toml");
    assert!(scen.exists() && m.exists());
    assert!(!stdout(&o).contains("note:"), "the scenario reproduces: {}", stdout(&o));
    let again = kvmc(&["replay", scen.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(10), "{}{}", stdout(&again), stderr(&again));
    assert!(stdout(&again).contains("VIOLATED: g1-accounting"), "{}", stdout(&again));
    // store_steps = 0 (the default) writes steps the checker does not offer: the explorer
    // replays the scenario file (issue 24), by the command the report prints.
    let text = std::fs::read_to_string(&scen).unwrap();
    assert!(text.contains("step (stores finish within it)"), "{text}");
    let printed = stdout(&o);
    let command = printed.split("|   ").nth(1).and_then(|l| l.lines().next()).expect("an explore command");
    assert!(command.starts_with("kvmc explore ") && command.ends_with(scen.to_str().unwrap()), "{command}");
    let mut args: Vec<&str> = command.split_whitespace().skip(1).collect();
    args.push("--dry-run");
    let ex = kvmc(&args);
    assert_eq!(ex.status.code(), Some(0), "{}{}", stdout(&ex), stderr(&ex));
    assert!(stdout(&ex).contains("&scenario="), "{}", stdout(&ex));
    assert!(stdout(&ex).contains("violates: g1-accounting"), "{}", stdout(&ex));
    // And the URL's view, as the page fetches it: the violating state is the last.
    let url = stdout(&ex).lines().next().unwrap().split_once("/?").unwrap().1.to_string();
    let t = kvmc::explorer::Target::from_query(&url).unwrap();
    let model =
        kvmc::explorer::load_model(&root().join(&t.model), t.profile.as_deref(), t.variant.as_deref()).or_else(|_| {
            kvmc::explorer::load_model(std::path::Path::new(&t.model), t.profile.as_deref(), t.variant.as_deref())
        });
    let model = model.unwrap_or_else(|e| panic!("{url}: {e}"));
    let sp = root().join(t.scenario.as_deref().unwrap());
    let sp = if sp.exists() { sp } else { std::path::PathBuf::from(t.scenario.as_deref().unwrap()) };
    let acts = kvmc::scope::scenario::scenario_actions(&model.sys, &sp).unwrap();
    let view = kvmc::explorer::view_of(&model, &t, &acts, None).unwrap();
    assert!(view["violations"].as_array().unwrap().iter().any(|x| x["property"] == "g1-accounting"), "{url}");
    assert_eq!(view["at"].as_u64(), Some(acts.len() as u64), "{url}");
    assert!(view["next"].as_array().unwrap().is_empty(), "no index path: no other path from here");
    // With store_steps = 1 the scenario opens in the explorer.
    let model =
        write(&d, "model1.toml", &session_model(true).replace("concurrency = 1", "concurrency = 1\nstore_steps = 1"));
    let out = d.join("out1");
    let o = replay_mutant(&trace, &model, &out, &[]);
    assert_eq!(o.status.code(), Some(10), "{}{}", stdout(&o), stderr(&o));
    let scen = out.join("sessions.violation.scenario.toml");
    let m = out.join("sessions.violation.model.toml");
    assert!(!std::fs::read_to_string(&scen).unwrap().contains("stores finish within it"));
    let ex = explore_mutant(&m, &scen);
    assert_eq!(ex.status.code(), Some(0), "{}{}", stdout(&ex), stderr(&ex));
    assert!(stdout(&ex).contains("&path=0/"), "{}", stdout(&ex));
    assert!(
        stdout(&ex).contains("violates: g1-accounting"),
        "the last state violates what replay found: {}",
        stdout(&ex)
    );
    // The same variant with the full-state predicates after every action finds the same.
    let full = replay_mutant(&trace, &model, &d.join("out2"), &["--full-check-every", "1"]);
    assert_eq!(full.status.code(), Some(10), "{}", stderr(&full));
}

/// Replay runs with events off, so a ghost-flag property's verdict alone only names the
/// flag; the export's re-run of the last action tells what the transition saw, in the text
/// report and in JSON.
#[test]
fn a_ghost_flag_violation_says_what_the_transition_saw() {
    let d = tempdir("flag-detail");
    let trace = write(&d, "sessions.jsonl", &session_trace(3, 2));
    let model = write(&d, "model.toml", &session_model(true).replace("host_chunks = 4096", "host_chunks = 16"));
    let run = |out: &str, json: bool| {
        let out = d.join(out);
        let mut args =
            vec!["replay", trace.to_str().unwrap(), "--model", model.to_str().unwrap(), "--variant", "mut-evict-mru"];
        args.extend(["--out", out.to_str().unwrap()]);
        if json {
            args.extend(["--format", "json"]);
        }
        kvmc(&args)
    };
    let o = run("text", false);
    assert_eq!(o.status.code(), Some(10), "{}{}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("VIOLATED: eviction-order (engine 0, step 61, action 64): victim 1 of 8 is L1.0 where the 0.33 request-rank order names L1.11; the host tier evicts [L1.0,"), "{text}");
    assert!(!text.contains("raised inside a transition"), "{text}");
    let j = run("json", true);
    assert_eq!(j.status.code(), Some(10), "{}", stderr(&j));
    let v: serde_json::Value = serde_json::from_str(&stdout(&j)).unwrap();
    assert_eq!(v["violation"]["property"], "eviction-order");
    let detail = v["violation"]["detail"].as_str().unwrap();
    assert!(detail.starts_with("victim 1 of 8 is L1.0 where") && detail.ends_with("L1.5,L1.4]"), "{detail}");
}

/// Replay (with its change logs and incremental checks on) finds what the checker found:
/// source-freshness (a ghost flag raised in the worker) and mirror-table (compared
/// incrementally in replay).
#[test]
fn replay_reruns_a_checker_counterexample() {
    for (model, variant, property) in
        [("preempt-store", "pre-29870", "source-freshness"), ("stream-resume", "pre-60810", "mirror-table")]
    {
        let d = tempdir(&format!("cx-scenario-{model}"));
        let o = kvmc(&[
            "check",
            &format!("models/{model}.toml"),
            "--variant",
            variant,
            "--property",
            property,
            "--out",
            d.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(10), "{}", stderr(&o));
        let scen = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().ends_with(".scenario.toml"))
            .expect("a scenario is written");
        let r = kvmc(&["replay", scen.to_str().unwrap(), "--format", "json"]);
        assert_eq!(r.status.code(), Some(10), "{}{}", stdout(&r), stderr(&r));
        let v: serde_json::Value = serde_json::from_str(&stdout(&r)).unwrap();
        assert_eq!(v["ok"], false);
        assert_eq!(v["violation"]["property"], property);
    }
}

#[test]
fn json_report_has_the_metrics_and_the_rows() {
    let d = tempdir("json");
    let trace = write(&d, "s.jsonl", &session_trace(1, 2));
    let model = write(&d, "m.toml", &session_model(false));
    let o = kvmc(&[
        "replay",
        trace.to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
        "--format",
        "json",
        "--per-request",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["metrics"]["host_hit_tokens"], 192);
    assert_eq!(v["metrics"]["prompt_tokens"], 494);
    assert_eq!(v["requests"].as_array().unwrap().len(), 2);
    assert!(v["checks"]["evaluations"].as_u64().unwrap() > 0);
}

/// Bad traces: exit 2, the message names the file and the line, nothing is printed or
/// written.
#[test]
fn bad_traces_exit_2_naming_file_and_line() {
    let d = tempdir("bad-traces");
    let model = write(&d, "m.toml", &session_model(false));
    let ok = r#"{"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [1, 2]}"#;
    let cases: &[(&str, &str, &str)] = &[
        ("malformed", "{\"timestamp\": 0, \"input_length\": 10", "not a JSON object"),
        ("negative", r#"{"input_length": -5, "output_length": 5, "hash_ids": [1]}"#, "input_length must be positive"),
        ("absurd", r#"{"input_length": 100000000, "output_length": 5, "hash_ids": [1]}"#, "absurd"),
        (
            "zero-output",
            r#"{"input_length": 10, "output_length": 0, "hash_ids": [1]}"#,
            "output_length must be positive",
        ),
        (
            "hash-mismatch",
            r#"{"input_length": 100, "output_length": 5, "hash_ids": [1, 2, 3]}"#,
            "do not match input_length",
        ),
        (
            "first-turn-delay",
            r#"{"session_id": "a", "delay": 10, "input_length": 10, "output_length": 5, "hash_ids": [1]}"#,
            "first turn",
        ),
        (
            "delay-no-session",
            r#"{"delay": 10, "input_length": 10, "output_length": 5, "hash_ids": [1]}"#,
            "without a session_id",
        ),
        ("bad-hash", r#"{"input_length": 10, "output_length": 5, "hash_ids": [-1]}"#, "bad row"),
    ];
    for (name, bad, want) in cases {
        let out = d.join(format!("out-{name}"));
        let text = format!("{ok}\n{ok}\n{bad}\n{ok}\n");
        let trace = write(&d, &format!("{name}.jsonl"), &text);
        let o = kvmc(&[
            "replay",
            trace.to_str().unwrap(),
            "--model",
            model.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(&format!("{name}.jsonl:3:")), "{name}: names the file and line 3: {err}");
        assert!(err.contains(want), "{name}: says {want:?}: {err}");
        assert!(stdout(&o).is_empty(), "{name}: nothing printed: {}", stdout(&o));
        assert!(!out.exists(), "{name}: nothing written");
    }
    let empty = write(&d, "empty.jsonl", "\n\n");
    let o = kvmc(&["replay", empty.to_str().unwrap(), "--model", model.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("empty.jsonl:1:"), "{}", stderr(&o));
    let o = kvmc(&["replay", empty.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "a trace needs --model");
}

/// vLLM's input processor refuses a prompt of max_model_len tokens or more, and the engine
/// stops any other request at max_model_len: a trace with such rows still replays.
#[test]
fn prompts_that_do_not_fit_are_rejected_and_answers_capped_like_vllm() {
    // session_model: 256 GPU blocks of 16 tokens, so max_model_len = 255 * 16 = 4080.
    let ids = |from: u32, n: u32| (from..from + n).map(|x| x.to_string()).collect::<Vec<_>>().join(", ");
    let trace = [
        format!(r#"{{"input_length": 100, "output_length": 5, "hash_ids": [{}]}}"#, ids(0, 2)),
        format!(r#"{{"input_length": 4080, "output_length": 5, "hash_ids": [{}]}}"#, ids(10, 64)),
        format!(r#"{{"input_length": 4000, "output_length": 200, "hash_ids": [{}]}}"#, ids(100, 63)),
        format!(r#"{{"session_id": "s", "input_length": 5000, "output_length": 5, "hash_ids": [{}]}}"#, ids(200, 79)),
        format!(
            r#"{{"session_id": "s", "delay": 0, "input_length": 10, "output_length": 5, "hash_ids": [{}]}}"#,
            ids(300, 1)
        ),
    ]
    .join("\n");
    let o = replay_text(&trace, &session_model(false), "reject", 1);
    assert!(o.finding.is_none(), "{:?}", o.finding);
    let m = &o.metrics;
    assert_eq!((m.requests, m.finished, m.rejected), (5, 2, 3), "the long prompt and the whole session are refused");
    let rows: Vec<(u32, u32)> = o.requests.iter().map(|r| (r.prompt_tokens, r.output_tokens)).collect();
    assert_eq!(rows, vec![(100, 5), (4000, 80)], "the answer stops at max_model_len");
    assert_eq!(m.prompt_tokens, 4100);
    assert_eq!(m.output_tokens, 85);
    assert_eq!(m.decode_tokens + m.prefill_tokens + m.g1_hit_tokens + m.host_hit_tokens, 4100 + 85 - 2);
}

#[test]
fn bad_replay_models_exit_2() {
    let d = tempdir("bad-models");
    let trace = write(&d, "s.jsonl", &session_trace(1, 1));
    for (name, edit, key) in [
        ("load", ("load = \"closed-loop\"", "load = \"open\""), "load ="),
        ("conc", ("concurrency = 1", "concurrency = 0"), "concurrency ="),
        ("unknown", ("trace_block_size = 64", "trace_block_size = 64\nwarp = 9"), "warp ="),
    ] {
        let text = session_model(false).replace(edit.0, edit.1);
        let line = text.lines().position(|l| l.starts_with(key)).unwrap() + 1;
        let model = write(&d, &format!("{name}.toml"), &text);
        let o = kvmc(&["replay", trace.to_str().unwrap(), "--model", model.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stderr(&o));
        assert!(stderr(&o).contains(&format!("{name}.toml:{line}:")), "{name}: {}", stderr(&o));
    }
}

mod representations {
    //! The replay-only representations (hash maps, the rank queue, the indexed eviction-order
    //! reference, memoised prefix lookups) behave exactly like the checker's.
    use kvmc::system::collections::rank_queue::RankQueue;
    use kvmc::system::events::Events;
    use kvmc::system::ghost::Ghost;
    use kvmc::system::gpu_pool::GpuPool;
    use kvmc::system::host_tier::{HostTier, ReqAccess};
    use kvmc::system::rules::HostLru;
    use kvmc::system::types::BlockHash;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[derive(Clone, Debug)]
    enum QOp {
        Insert((u64, i64), u8),
        Remove(usize),
        Fresh(u8),
        /// A request rank drawn after the fresh ranks so far: (next + 1, -position).
        Late(i64, u8),
    }

    fn qop() -> impl Strategy<Value = QOp> {
        prop_oneof![
            ((0u64..12, -6i64..2), 0u8..6).prop_map(|(r, k)| QOp::Insert(r, k)),
            (0usize..64).prop_map(QOp::Remove),
            (0u8..6).prop_map(QOp::Fresh),
            (1i64..6, 0u8..6).prop_map(|(p, k)| QOp::Late(p, k)),
        ]
    }

    #[derive(Clone, Debug)]
    enum HOp {
        Store(u8, Vec<u8>),
        Complete,
        Load(u8, Vec<u8>),
        Unload,
        Finish(u8),
        Touch(Vec<u8>),
    }

    fn hop() -> impl Strategy<Value = HOp> {
        let keys = proptest::collection::vec(0u8..24, 1..5);
        prop_oneof![
            (0u8..4, keys.clone()).prop_map(|(r, k)| HOp::Store(r, k)),
            Just(HOp::Complete),
            (0u8..4, keys.clone()).prop_map(|(r, k)| HOp::Load(r, k)),
            Just(HOp::Unload),
            (0u8..4).prop_map(HOp::Finish),
            keys.prop_map(HOp::Touch),
        ]
    }

    fn key(i: u8) -> BlockHash {
        BlockHash(0x1000 + u64::from(i) * 0x9e37_79b9)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Replay hashes several requests' chains together; every chain is what
        /// `chain_hashes` gives it alone (lanes that finish early take the next sequence).
        #[test]
        fn chain_hashes_many_is_chain_hashes(
            seqs in proptest::collection::vec(proptest::collection::vec(0u32..50, 0..140), 0..9),
            block in 1u32..20,
        ) {
            let refs: Vec<&[u32]> = seqs.iter().map(|s| s.as_slice()).collect();
            let many = kvmc::system::workload::chain_hashes_many(&refs, block);
            prop_assert_eq!(many.len(), seqs.len());
            for (s, h) in seqs.iter().zip(&many) {
                prop_assert_eq!(h, &kvmc::system::workload::chain_hashes(s, block));
            }
        }

        /// The block hash is a chain of bijections: under one parent, two different token
        /// runs of one length never share a hash (a shared one would be a false prefix hit).
        /// Small token ids and few of them are where a weak mix would collide first.
        #[test]
        fn same_length_runs_never_collide(
            a in proptest::collection::vec(0u32..4, 1..20),
            flips in proptest::collection::vec((0usize..20, 0u32..4), 1..4),
            parent in proptest::prop_oneof![Just(kvmc::system::types::NONE_HASH.0), proptest::num::u64::ANY],
        ) {
            use kvmc::system::types::{fold_tokens, BlockHash};
            let mut b = a.clone();
            for (i, t) in flips {
                let n = b.len();
                b[i % n] = t;
            }
            prop_assume!(a != b);
            prop_assert_ne!(fold_tokens(BlockHash(parent), &a), fold_tokens(BlockHash(parent), &b));
        }

        #[test]
        fn rank_queue_orders_like_a_btreeset(ops in proptest::collection::vec(qop(), 0..120)) {
            let mut q: RankQueue<u8> = RankQueue::default();
            let mut s: BTreeSet<((u64, i64), u8)> = BTreeSet::new();
            let mut next = 20u64;
            for op in ops {
                match op {
                    QOp::Insert(r, k) => prop_assert_eq!(q.insert(r, k), s.insert((r, k))),
                    QOp::Fresh(k) => {
                        next += 1 + u64::from(k % 3);
                        prop_assert_eq!(q.insert((next, 0), k), s.insert(((next, 0), k)));
                    }
                    QOp::Late(p, k) => prop_assert_eq!(q.insert((next + 1, -p), k), s.insert(((next + 1, -p), k))),
                    QOp::Remove(i) => {
                        if let Some(&x) = s.iter().nth(i % (s.len().max(1))) {
                            prop_assert!(q.remove(x.0, x.1));
                            s.remove(&x);
                        }
                        prop_assert!(!q.remove((999, 0), 0));
                    }
                }
                prop_assert_eq!(q.len(), s.len());
                prop_assert_eq!(q.iter().collect::<Vec<_>>(), s.iter().copied().collect::<Vec<_>>());
                // Victim picks: the fresh-run fast path agrees with the ordered set.
                for n in [1, 3, 64] {
                    for keep in [|_: &((u64, i64), u8)| true, |e: &((u64, i64), u8)| !e.1.is_multiple_of(3)] {
                        let want: Vec<_> = s.iter().copied().filter(keep).take(n).collect();
                        prop_assert_eq!(q.first(n, keep), want);
                    }
                }
            }
        }

        /// A host tier with replay aids (hash map, rank queue, indexed reference order) does
        /// what the checker's does, step by step, under every LRU policy.
        #[test]
        fn host_tier_with_replay_aids_is_the_same(
            policy in prop_oneof![Just(HostLru::ReleaseOrder), Just(HostLru::InsertRank), Just(HostLru::RequestRank)],
            cap in 2u32..8,
            ops in proptest::collection::vec(hop(), 0..60),
        ) {
            let mut a = HostTier::with_policy(cap, policy, false);
            let mut b = HostTier::with_policy(cap, policy, false);
            b.enable_log();
            let (mut ga, mut gb) = (Ghost::default(), Ghost::default());
            let (mut ea, mut eb) = (Events::on(), Events::on());
            let mut ra: Vec<ReqAccess> = vec![ReqAccess::default(); 4];
            let mut rb = ra.clone();
            let mut pending: Vec<BlockHash> = Vec::new();
            let mut pinned: Vec<BlockHash> = Vec::new();
            for op in ops {
                match op {
                    HOp::Store(r, mut ks) => {
                        // One store names distinct keys (chained hashes of distinct chunks).
                        let mut seen = BTreeSet::new();
                        ks.retain(|k| seen.insert(*k));
                        let keys: Vec<(BlockHash, u32)> =
                            ks.iter().enumerate().map(|(i, k)| (key(*k), 16 * (i as u32 + 1))).collect();
                        let x = a.prepare_store(&keys, &mut ra[r as usize], &mut ga, &mut ea).map(|o| (o.keys_to_store, o.slots, o.evicted));
                        let y = b.prepare_store(&keys, &mut rb[r as usize], &mut gb, &mut eb).map(|o| (o.keys_to_store, o.slots, o.evicted));
                        prop_assert_eq!(&x, &y);
                        if let Some((k, _, _)) = x {
                            pending.extend(k);
                        }
                    }
                    HOp::Complete => {
                        a.complete_store(&pending, &mut ga, &mut ea);
                        b.complete_store(&pending, &mut gb, &mut eb);
                        pending.clear();
                    }
                    HOp::Load(r, ks) => {
                        let mut seen = BTreeSet::new();
                        let keys: Vec<(BlockHash, u32)> = ks
                            .iter()
                            .filter(|k| seen.insert(**k))
                            .map(|k| key(*k))
                            .filter(|k| a.get(k).is_some_and(|e| e.ref_cnt >= 0))
                            .enumerate()
                            .map(|(i, k)| (k, 16 * (i as u32 + 1)))
                            .collect();
                        let x = a.prepare_load(&keys, &mut ra[r as usize], &mut ga, &mut ea);
                        let y = b.prepare_load(&keys, &mut rb[r as usize], &mut gb, &mut eb);
                        prop_assert_eq!(x, y);
                        pinned.extend(keys.iter().map(|(k, _)| *k));
                    }
                    HOp::Unload => {
                        a.complete_load(&pinned, &mut ga, &mut ea);
                        b.complete_load(&pinned, &mut gb, &mut eb);
                        pinned.clear();
                    }
                    HOp::Finish(r) => {
                        a.on_request_finished(&mut ra[r as usize]);
                        b.on_request_finished(&mut rb[r as usize]);
                        ra[r as usize] = ReqAccess::default();
                        rb[r as usize] = ReqAccess::default();
                    }
                    HOp::Touch(ks) => {
                        let keys: Vec<BlockHash> = ks.iter().map(|k| key(*k)).collect();
                        a.touch(&keys);
                        b.touch(&keys);
                    }
                }
                prop_assert_eq!(a.eviction_order(), b.eviction_order());
                prop_assert_eq!(a.reference_order(), b.reference_order());
                prop_assert_eq!(ga.violations, gb.violations);
                prop_assert_eq!(&ea.list, &eb.list);
                prop_assert!(a == b, "equal as states");
            }
        }

        /// Memoised prefix lookups (replay) answer like fresh walks while blocks are cached,
        /// evicted and re-cached.
        #[test]
        fn memoised_prefix_lookups_are_fresh(ops in proptest::collection::vec((0u8..4, 0u8..12, 1usize..8), 0..80)) {
            let mut a = GpuPool::new(10);
            let mut b = GpuPool::new(10);
            b.enable_log();
            let (mut g, mut ev) = (Ghost::default(), Events::off());
            let chain: Vec<BlockHash> = (0..12u64).map(|i| BlockHash(0xabc0 + i)).collect();
            let mut held: Vec<Vec<u32>> = Vec::new();
            for (op, x, n) in ops {
                match op {
                    0 if a.num_free() as usize >= n => {
                        let from = (x as usize) % chain.len();
                        let to = (from + n).min(chain.len());
                        let ba = a.get_new_blocks((to - from) as u32, &mut g, &mut ev);
                        let bb = b.get_new_blocks((to - from) as u32, &mut g, &mut ev);
                        prop_assert_eq!(&ba, &bb);
                        let mut hashes = vec![BlockHash(0); from];
                        hashes.extend_from_slice(&chain[from..to]);
                        let mut table = vec![0; from];
                        table.extend_from_slice(&ba);
                        a.cache_full_blocks(&table, &hashes, from, to, &mut ev);
                        b.cache_full_blocks(&table, &hashes, from, to, &mut ev);
                        held.push(ba);
                    }
                    1 if !held.is_empty() => {
                        let t = held.remove(x as usize % held.len());
                        a.free_blocks(t.iter().rev().copied(), &mut g);
                        b.free_blocks(t.iter().rev().copied(), &mut g);
                    }
                    _ => {}
                }
                let q = &chain[(x as usize % 3)..];
                let max = (n as u32 + 8) * 16;
                prop_assert_eq!(a.find_longest_cache_hit(q, max, 16), b.find_longest_cache_hit(q, max, 16));
                prop_assert_eq!(a.find_longest_cache_hit(q, max, 16), b.find_longest_cache_hit(q, max, 16));
            }
        }
    }
}

/// Every always-property of the catalogue is evaluated by replay (as a state predicate from
/// change logs, or as a ghost flag): a new property must be taught to src/replay/invariants.rs.
#[test]
fn replay_evaluates_every_always_property() {
    for p in kvmc::props::REGISTRY.iter().filter(|p| p.kind == kvmc::props::Kind::Always) {
        assert!(kvmc::replay::invariants::handles(p.name), "replay does not evaluate {}", p.name);
    }
}

/// A huge step story (a large engine frees thousands of blocks in one step) is abridged
/// without `--verbose`, but keeps its first events and every violation note.
#[test]
fn long_step_stories_keep_the_violation() {
    use kvmc::replay::report::abridge;
    let short = "A computes [0,2); A samples token 2";
    assert_eq!(abridge(short), short);
    let mut items: Vec<String> = (0..500).map(|i| format!("G1 block {i} loses A.{i}")).collect();
    items.insert(300, "VIOLATION kv-read-integrity: B reads block 7".to_string());
    let long = items.join("; ");
    let a = abridge(&long);
    assert!(a.len() < 800, "{a}");
    assert!(a.starts_with("G1 block 0 loses A.0; G1 block 1 loses A.1"), "{a}");
    assert!(a.contains("VIOLATION kv-read-integrity: B reads block 7"), "{a}");
    assert!(a.ends_with("... 496 more events (--verbose shows all)"), "{a}");
}

/// Every connector replays, and a slot a finished request left is reused only once the
/// connector keeps nothing of it: more rows than the closed loop's concurrency, sessions whose
/// later turns hit what their earlier turns stored.
#[test]
fn simple_cpu_and_mooncake_replay_with_slot_reuse() {
    for (conn, table) in [("simple-cpu", "[simple_cpu]\ncpu_blocks = 64"), ("mooncake", "")] {
        let model = session_model(false)
            .replace("connector = \"offloading\"", &format!("connector = \"{conn}\""))
            .replace("[offload]\nhost_chunks = 4096", table)
            .replace("enable_prefix_caching = false", "enable_prefix_caching = true")
            .replace("concurrency = 1", "concurrency = 2");
        let o = replay_text(&session_trace(4, 3), &model, conn, 1);
        assert!(o.finding.is_none(), "{conn}: {:?}", o.finding);
        let m = &o.metrics;
        assert_eq!((m.requests, m.finished), (12, 12), "{conn}");
        assert!(m.store_jobs > 0 && m.stored_chunks > 0, "{conn}: stores are counted: {m:?}");
        assert!(o.checks.full >= m.actions, "{conn}: the full predicates ran after every action");
        for r in &o.requests {
            let reached = r.g1_hit_tokens + r.host_hit_tokens + r.prefill_tokens + r.decode_tokens;
            assert_eq!(reached, u64::from(r.prompt_tokens + r.output_tokens) - 1, "{conn}: line {}", r.line);
        }
    }
}

/// SimpleCPU's host properties are evaluated from its CPU pool's change log (not over the whole
/// state), find the mutations the checker finds them with, and agree with the full predicates
/// after every action (`full_check_every = 1` turns a disagreement into an error). The first
/// 300 rows of the real trace (tests/traces), with a CPU pool small enough to be under
/// pressure; then Mooncake's, whose mutation needs a worker delay replay does not produce.
#[test]
fn simple_cpu_host_properties_are_incremental_and_catch_their_mutations() {
    let model = simple_cpu_replay_model("vllm-0.33");
    let d = tempdir("scpu-inc");
    let t = real_trace_head(300);
    let m = ReplayModel::parse("m", &d.join("m.toml"), &model).expect("model parses");
    let run = |variant: Option<&str>, full_every: u64| {
        let opts = Options {
            variant: variant.map(String::from),
            full_check_every: Some(full_every),
            out_dir: Some(d.clone()),
            skip_properties: vec!["final-store-kept".into()],
            ..Default::default()
        };
        run_trace(&t, &m, &opts).expect("replay runs")
    };
    let clean = run(None, 0);
    assert!(clean.finding.is_none(), "{:?}", clean.finding);
    assert_eq!(clean.checks.full, 1, "only the final full-state check");
    assert!(clean.checks.examined > 0);
    for (variant, property) in [("mut-scpu-pin-leak", "host-accounting"), ("mut-scpu-no-gpu-pin", "host-integrity")] {
        for full_every in [0, 1] {
            let o = run(Some(variant), full_every);
            let found = o.finding.as_ref().map(|f| f.property.as_str());
            assert_eq!(found, Some(property), "{variant}, full_check_every {full_every}");
        }
    }
    // Mooncake: new pool keys and the save jobs' GPU pins are checked from logs, and agree with
    // the full predicates after every action of the first 100 rows.
    let mc_model = model
        .replace("connector = \"simple-cpu\"", "connector = \"mooncake\"")
        .replace("[simple_cpu]\ncpu_blocks = 512\n", "");
    let m = ReplayModel::parse("mc", &d.join("mc.toml"), &mc_model).expect("model parses");
    let t = real_trace_head(100);
    for full_every in [0, 1] {
        let opts = Options { full_check_every: Some(full_every), out_dir: Some(d.clone()), ..Default::default() };
        let o = run_trace(&t, &m, &opts).expect("replay runs");
        assert!(o.finding.is_none(), "{:?}", o.finding);
        let full = if full_every == 1 { o.metrics.actions + 1 } else { 1 };
        assert_eq!(o.checks.full, full, "mooncake, full_check_every {full_every}");
        assert!(o.metrics.stored_chunks > 0 && o.checks.examined > 0);
    }
}

/// A host tier too small for the traffic refuses finish-time stores (final-store-kept, a
/// quality finding every release has): the replay stops there, unless that property is
/// skipped, and then runs to the end with every other invariant checked.
#[test]
fn skipping_a_known_quality_finding_replays_to_the_end() {
    let model = session_model(false).replace("host_chunks = 4096", "host_chunks = 4");
    let d = tempdir("skip");
    let t = Trace::parse(&d.join("t.jsonl"), &session_trace(3, 3), 64, None).expect("trace parses");
    let m = ReplayModel::parse("m", &d.join("m.toml"), &model).expect("model parses");
    let run = |skip: Vec<String>| {
        let opts = Options { out_dir: Some(d.clone()), skip_properties: skip, ..Default::default() };
        run_trace(&t, &m, &opts).expect("replay runs")
    };
    let stopped = run(Vec::new());
    assert_eq!(stopped.finding.as_ref().map(|f| f.property.as_str()), Some("final-store-kept"));
    let full = run(vec!["final-store-kept".into()]);
    assert!(full.finding.is_none(), "{:?}", full.finding);
    assert_eq!(full.metrics.finished, 9);
    assert!(!full.checks.properties.contains(&"final-store-kept"));
    assert!(full.checks.properties.contains(&"host-integrity"));
}

/// A SimpleCPU replay's violation is written with its connector (`[simple_cpu]`), so the
/// checker's model re-runs it (before, the model file said `connector = "none"` and the
/// confirming run stopped at the first store completion, with a note and no story).
#[test]
fn a_simple_cpu_violation_is_written_with_its_connector() {
    let d = tempdir("violation-scpu");
    let trace = write(&d, "sessions.jsonl", &session_trace(2, 2));
    let model = session_model(true)
        .replace("connector = \"offloading\"", "connector = \"simple-cpu\"")
        .replace("[offload]\nhost_chunks = 4096", "[simple_cpu]\ncpu_blocks = 512");
    let model = write(&d, "model.toml", &model);
    let out = d.join("out");
    let o = replay_mutant(&trace, &model, &out, &[]);
    assert_eq!(o.status.code(), Some(10), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("VIOLATED: g1-accounting"), "{}", stdout(&o));
    let m = std::fs::read_to_string(out.join("sessions.violation.model.toml")).unwrap();
    assert!(m.contains("connector = \"simple-cpu\"") && m.contains("[simple_cpu]\ncpu_blocks = 512"), "{m}");
    assert!(!stdout(&o).contains("note:"), "the scenario reproduces: {}", stdout(&o));
}
