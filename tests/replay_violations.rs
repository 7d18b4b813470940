//! Replay violations: the history written as a model and a scenario that `kvmc replay` and
//! `kvmc explore` re-run, ghost-flag details, checker counterexamples replayed, abridged step
//! stories, and a known quality finding skipped.

use crate::common::*;
use kvmc::replay::trace::Trace;
use kvmc::replay::{run_trace, Options};
use kvmc::scope::replay::ReplayModel;
use std::path::Path;

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
