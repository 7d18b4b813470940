//! The published JSON Schemas (docs/schema/, issue 25): the committed files are those the
//! Rust types generate, and the documents kvmc really prints validate against them; a
//! document with a renamed, retyped or added field does not.
//!
//! After changing a report's type: `KVMC_UPDATE_SCHEMA=1 cargo test --profile dev-fast schema`
//! rewrites docs/schema/ (then review the diff, and bump `SCHEMA_VERSION` if a field was
//! removed, renamed or changed meaning).

use crate::common::*;
use serde_json::Value;

fn committed(name: &str) -> Value {
    let p = root().join("docs/schema").join(name);
    let t = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&t).unwrap()
}

#[test]
fn the_committed_schemas_are_generated_from_the_types() {
    let update = std::env::var_os("KVMC_UPDATE_SCHEMA").is_some();
    let all = kvmc::schema::all();
    for (name, schema) in &all {
        let text = serde_json::to_string_pretty(schema).unwrap() + "\n";
        let p = root().join("docs/schema").join(name);
        if update {
            std::fs::write(&p, &text).unwrap();
        }
        let on_disk = std::fs::read_to_string(&p).unwrap_or_default();
        assert!(
            on_disk == text,
            "{} differs from the schema the types generate: KVMC_UPDATE_SCHEMA=1 cargo test schema rewrites it",
            p.display()
        );
    }
    // Every schema file is one the types generate (none left over).
    let mut files: Vec<String> = std::fs::read_dir(root().join("docs/schema"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    files.sort();
    let mut names: Vec<String> = all.iter().map(|(n, _)| n.to_string()).collect();
    names.sort();
    assert_eq!(files, names);
}

/// Validation errors of `doc` against docs/schema/`name` (empty: valid).
fn errors(name: &str, doc: &Value) -> Vec<String> {
    let schema = committed(name);
    let v = jsonschema::validator_for(&schema).expect("a valid schema");
    v.iter_errors(doc).map(|e| format!("{} at {}", e, e.instance_path())).collect()
}

/// Run kvmc, parse its stdout as JSON, and check it against `schema`.
fn valid(schema: &str, args: &[&str], code: i32) -> Value {
    let o = kvmc(args);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {}{}", stdout(&o), stderr(&o));
    let doc: Value = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", stdout(&o)));
    assert_eq!(doc["schema_version"], 1, "{args:?}");
    let errs = errors(schema, &doc);
    assert!(errs.is_empty(), "{args:?} against {schema}: {errs:#?}");
    doc
}

#[test]
fn real_reports_validate_and_changed_ones_do_not() {
    // check: a violation with its counterexample, and an explicit run.
    let cx = valid(
        "check.v1.json",
        &["check", "models/preempt-store.toml", "--variant", "pre-29870", "--format", "json"],
        10,
    );
    assert!(cx["results"].as_array().unwrap().iter().any(|r| !r["counterexample"].is_null()));
    // a `[workload]` family row (workload coverage) and a shard.
    let fam =
        valid("check.v1.json", &["check", "models/deep/offload-3req.toml", "--format", "json", "--shard", "1/64"], 10);
    assert!(fam["results"].as_array().unwrap().iter().any(|r| !r["workloads"].is_null()), "{fam:#}");
    // errors in JSON
    valid("error.v1.json", &["check", "no-such-model.toml", "--format", "json"], 2);
    valid("error.v1.json", &["check", "--no-such-flag", "--format", "json"], 2);
    // replay: a trace with per-request rows, and a scenario
    valid(
        "replay.v1.json",
        &[
            "replay",
            "tests/traces/conversation-head-300.jsonl",
            "--model",
            "models/replay-mooncake.toml",
            "--limit",
            "40",
            "--per-request",
            "--format",
            "json",
        ],
        0,
    );
    let d = tempdir("schema-cx");
    let o = kvmc(&["check", "models/preempt-store.toml", "--variant", "pre-29870", "--out", d.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(10));
    let sc = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".scenario.toml"))
        .expect("a scenario written");
    let s = valid("replay-scenario.v1.json", &["replay", sc.to_str().unwrap(), "--format", "json"], 10);
    assert!(!s["violation"].is_null());
    // conform: a conforming log with matched set orders, and a divergence.
    let seeds = root().join("tests/conformance/fixtures/seeds");
    let seed = std::fs::read_dir(&seeds)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .min()
        .expect("a seed fixture");
    let c = valid("conform.v1.json", &["conform", seed.to_str().unwrap(), "--format", "json"], 0);
    assert_eq!(c["logs"][0]["verdict"], "conforms");
    let main_log = root().join("tests/conformance/fixtures/main.jsonl");
    let d = valid(
        "conform.v1.json",
        &["conform", main_log.to_str().unwrap(), "--profile", "vllm-0.24", "--format", "json"],
        10,
    );
    assert!(!d["logs"][0]["divergence"].is_null(), "{d:#}");
    // bench
    let b = valid("bench.v1.json", &["bench", "models/shared-prefix.toml", "--format", "json"], 0);
    assert_eq!(b["models"][0]["model"], "shared-prefix");

    // A renamed field, a retyped one and an added one each fail.
    let mut renamed = cx.clone();
    let r0 = renamed["results"][0].as_object_mut().unwrap();
    let v = r0.remove("verdict").unwrap();
    r0.insert("outcome".into(), v);
    assert!(!errors("check.v1.json", &renamed).is_empty(), "a renamed field passed");
    let mut retyped = cx.clone();
    retyped["results"][0]["unique_states"] = Value::String("many".into());
    assert!(!errors("check.v1.json", &retyped).is_empty(), "a retyped field passed");
    let mut added = cx.clone();
    added["results"][0]["extra"] = Value::Bool(true);
    assert!(!errors("check.v1.json", &added).is_empty(), "an unknown field passed");
    let mut bad_verdict = cx.clone();
    bad_verdict["results"][0]["verdict"] = Value::String("maybe".into());
    assert!(!errors("check.v1.json", &bad_verdict).is_empty(), "an unknown verdict passed");
    let mut version = cx;
    version["schema_version"] = Value::from(2);
    assert!(!errors("check.v1.json", &version).is_empty(), "another schema version passed");
}

#[test]
fn a_merged_report_validates() {
    let d = tempdir("schema-merge");
    let mut paths = Vec::new();
    for i in 1..=2 {
        let shard = format!("{i}/2");
        let o = kvmc(&[
            "check",
            "models/shared-prefix.toml",
            "models/preempt-store.toml",
            "--format",
            "json",
            "--shard",
            &shard,
        ]);
        let p = d.join(format!("s{i}.json"));
        std::fs::write(&p, &o.stdout).unwrap();
        paths.push(p.display().to_string());
    }
    let mut args = vec!["merge", "--format", "json"];
    args.extend(paths.iter().map(String::as_str));
    let doc = valid("check.v1.json", &args, 10);
    assert_eq!(doc["merged"]["shards"], 2);
}
