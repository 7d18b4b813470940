//! Trace replay: the hand-derived session counts (docs/replay.md), several engines, the JSON
//! report, prompts that do not fit, every connector, and the incremental invariant checks
//! agreeing with the full ones. Violations: replay_violations.rs; bad traces and models:
//! replay_bad_input.rs; the replay-only representations: replay_representations.rs.

use crate::common::*;
use kvmc::replay::trace::{Format, Trace};
use kvmc::replay::{run_trace, Options, Outcome};
use kvmc::scope::replay::ReplayModel;
use std::path::{Path, PathBuf};

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

/// Every always-property of the catalogue is evaluated by replay (as a state predicate from
/// change logs, or as a ghost flag): a new property must be taught to src/replay/invariants.rs.
#[test]
fn replay_evaluates_every_always_property() {
    for p in kvmc::props::REGISTRY.iter().filter(|p| p.kind == kvmc::props::Kind::Always) {
        assert!(kvmc::replay::invariants::handles(p.name), "replay does not evaluate {}", p.name);
    }
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
