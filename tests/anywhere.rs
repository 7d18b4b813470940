//! Results that do not depend on where kvmc runs, and filters that match nothing (issue 19
//! items 9, 10, 11 and 14): the specs are built in, `--specs DIR` overrides them; a filter
//! or variant that selects nothing is an error; scenario files name their model relative to
//! themselves and refuse unknown keys; `--format json|junit` reports errors on stdout too.

use crate::common::*;
use std::path::Path;

fn abs(rel: &str) -> String {
    root().join(rel).display().to_string()
}

/// `kvmc check MODEL` gives the same verdict from any directory: its reachability guards
/// come from the built-in specs, not from `./specs` (shared-prefix never preempts, so
/// g1-accounting over it is vacuous everywhere).
#[test]
fn a_model_gets_the_same_verdict_from_any_directory() {
    let elsewhere = tempdir("elsewhere");
    let m = abs("models/shared-prefix.toml");
    let args = ["check", m.as_str(), "--property", "g1-accounting"];
    let here = kvmc(&args);
    let there = kvmc_in(&elsewhere, &args);
    assert_eq!(here.status.code(), Some(10), "{}", stdout(&here));
    assert_eq!(there.status.code(), Some(10), "{}{}", stdout(&there), stderr(&there));
    assert!(
        stdout(&there).contains("VACUOUS: never reached reach-g1-eviction, reach-preemption"),
        "{}",
        stdout(&there)
    );
    let (a, b) = (kvmc(&["explain", "host-integrity"]), kvmc_in(&elsewhere, &["explain", "host-integrity"]));
    assert_eq!(b.status.code(), Some(0), "{}", stderr(&b));
    assert_eq!(stdout(&a), stdout(&b));
    assert_eq!(stdout(&kvmc(&["list", "--rules"])), stdout(&kvmc_in(&elsewhere, &["list", "--rules"])));
    // The gate outside a checkout checks the models built into kvmc: the same verdicts as
    // the repository's (issue 25: an installed kvmc works anywhere).
    let verdicts = |o: &std::process::Output| -> Vec<String> {
        stdout(o).lines().filter(|l| l.starts_with("ok ")).map(|l| l.split("  [").next().unwrap().to_string()).collect()
    };
    let there = kvmc_in(&elsewhere, &["check", "--shard", "3/40"]);
    assert_eq!(there.status.code(), Some(0), "{}{}", stdout(&there), stderr(&there));
    assert!(stderr(&there).contains("models built into this kvmc"), "{}", stderr(&there));
    let here = kvmc(&["check", "--shard", "3/40"]);
    assert!(!verdicts(&here).is_empty());
    assert_eq!(verdicts(&here), verdicts(&there));
    let o = kvmc_in(&elsewhere, &["check", "--models", &abs("models"), "--shard", "1/40"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    // An explicit --models that does not exist is an error, not the built-in set.
    let o = kvmc_in(&elsewhere, &["check", "--models", "nowhere"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("pass --models DIR"), "{}", stderr(&o));
    // --specs names a directory that must exist.
    let o = kvmc(&["check", m.as_str(), "--specs", "no-such-dir"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no-such-dir"), "{}", stderr(&o));
}

/// The specs built into the binary are the repository's (build.rs embeds `specs/*.toml`);
/// a `./specs` that differs from them is pointed out, and read only with `--specs`.
#[test]
fn the_built_in_specs_are_the_repositorys_and_a_different_copy_is_pointed_out() {
    let mut files: Vec<(String, String)> = std::fs::read_dir(root().join("specs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()))
        .collect();
    files.sort();
    let built: Vec<(String, String)> =
        kvmc::check::specs::EMBEDDED.iter().map(|(n, t)| (n.to_string(), t.to_string())).collect();
    assert_eq!(files, built);
    assert!(!stderr(&kvmc(&["check", "models/shared-prefix.toml"])).contains("note: ./specs"));
    let d = tempdir("stale-specs");
    std::fs::create_dir_all(d.join("specs")).unwrap();
    std::fs::write(
        d.join("specs/h.toml"),
        "property = \"host-integrity\"\nsummary = \"s\"\n[[expect]]\nmodel = \"m\"\nverdict = \"holds\"\n",
    )
    .unwrap();
    let o = kvmc_in(&d, &["explain", "host-integrity"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("note: ./specs differs from the specs built into this kvmc"), "{}", stderr(&o));
    assert!(stdout(&o).contains("error-mid-prefill"), "the built-in spec: {}", stdout(&o));
    let o = kvmc_in(&d, &["explain", "host-integrity", "--specs", "specs"]);
    assert!(!stdout(&o).contains("error-mid-prefill") && stdout(&o).contains("  m "), "{}", stdout(&o));
}

#[test]
fn a_property_that_does_not_apply_is_refused_with_the_reason() {
    let o = kvmc(&["check", "models/shared-prefix.toml", "--property", "rows-present"]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(
        stderr(&o)
            .contains("--property rows-present does not apply: model 'shared-prefix' has no [router_replay] table"),
        "{}",
        stderr(&o)
    );
    // JUnit: an error case, not an empty report.
    let o = kvmc(&["check", "models/shared-prefix.toml", "--property", "rows-present", "--format", "junit"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stdout(&o).contains("<error type=\"usage\" message=\"--property rows-present does not apply"),
        "{}",
        stdout(&o)
    );
    // Over several models it is checked where it applies, and must apply somewhere.
    let o = kvmc(&["check", "models/shared-prefix.toml", "models/rows-a.toml", "--property", "rows-present"]);
    assert_ne!(o.status.code(), Some(2), "{}{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("shared-prefix.toml: --property rows-present does not apply"), "{}", stderr(&o));
    assert!(stdout(&o).contains("1 results"), "{}", stdout(&o));
    let o = kvmc(&["check", "models/shared-prefix.toml", "models/decode-store.toml", "--property", "rows-present"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("applies to none of the models given"), "{}", stderr(&o));
    // A shard past the plan selects nothing.
    let o = kvmc(&["check", "--shard", "300/300"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--shard 300/300 selects nothing"), "{}", stderr(&o));
}

#[test]
fn a_variant_that_changes_nothing_the_model_reads_is_refused() {
    let o = kvmc(&["check", "models/preempt-store.toml", "--variant", "mut-scpu-pin-leak"]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(
        stderr(&o).contains(
            "changes only scpu_drop_stale_pin, which model 'preempt-store' (connector = \"offloading\") never reads"
        ),
        "{}",
        stderr(&o)
    );
    let o = kvmc(&["check", "models/error-mid-prefill.toml", "--profile", "vllm-main", "--variant", "fix-63937"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("changes nothing under profile vllm-main"), "{}", stderr(&o));
    // In a spec: an input error at the expectation's line.
    let d = tempdir("variant-spec");
    std::fs::create_dir_all(d.join("specs")).unwrap();
    std::fs::write(
        d.join("specs/x.toml"),
        "property = \"host-integrity\"\nsummary = \"s\"\n[[expect]]\nmodel = \"preempt-store\"\nvariant = \"mut-scpu-pin-leak\"\nverdict = \"holds\"\n",
    )
    .unwrap();
    let o = kvmc_in(&d, &["check", "--specs", "specs", "--models", &abs("models")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("x.toml:4: variant 'mut-scpu-pin-leak' changes only"), "{}", stderr(&o));
    // Every switch of the rules table says which models read it.
    assert_eq!(kvmc::check::gate::unclassified_switches(), Vec::<&str>::new());
}

#[test]
fn spec_files_that_add_nothing_are_refused() {
    let d = tempdir("empty-spec");
    let specs = d.join("specs");
    std::fs::create_dir_all(&specs).unwrap();
    let run = || kvmc_in(&d, &["check", "--specs", "specs", "--models", &abs("models")]);
    let o = run();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no spec files"), "{}", stderr(&o));
    std::fs::write(
        specs.join("a.toml"),
        "property = \"host-integrity\"\nsummary = \"s\"\n[[expect]]\nmodel = \"decode-store\"\nverdict = \"holds\"\n",
    )
    .unwrap();
    std::fs::write(specs.join("b.toml"), "# nothing yet\n").unwrap();
    let o = run();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("b.toml:1: an empty spec"), "{}", stderr(&o));
    std::fs::write(specs.join("b.toml"), "property = \"store-coverage\"\nsummary = \"s\"\n").unwrap();
    let o = run();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("b.toml:1: property 'store-coverage' has no [[expect]]"), "{}", stderr(&o));
    std::fs::remove_file(specs.join("b.toml")).unwrap();
    let o = run();
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
}

/// A scenario that `kvmc check --out` wrote, and one written by hand beside its model.
fn scenario(d: &Path, body: &str) -> std::path::PathBuf {
    let p = d.join("s.toml");
    std::fs::write(&p, body).unwrap();
    p
}

#[test]
fn scenario_files_are_checked_and_name_their_model_relative_to_themselves() {
    let d = tempdir("scen");
    let out = d.join("cx");
    let o = kvmc(&[
        "check",
        "models/preempt-store.toml",
        "--variant",
        "pre-29870",
        "--property",
        "source-freshness",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(10));
    let written = out.join("preempt-store__vllm-0.33__pre-29870__source-freshness.scenario.toml");
    // Re-run from another directory: the model is found from the scenario's own directory.
    let o = kvmc_in(&d, &["replay", written.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(10), "{}{}", stdout(&o), stderr(&o));
    // A scenario beside its model, run from a directory holding another file of that name.
    let here = d.join("here");
    std::fs::create_dir_all(&here).unwrap();
    std::fs::copy(root().join("models/preempt-store.toml"), here.join("m.toml")).unwrap();
    std::fs::write(d.join("m.toml"), "not a model").unwrap();
    let text = std::fs::read_to_string(&written).unwrap();
    let body = text.lines().filter(|l| !l.starts_with("model =")).collect::<Vec<_>>().join("\n");
    let s = here.join("s.toml");
    std::fs::write(&s, format!("model = \"m.toml\"\n{body}\n")).unwrap();
    let o = kvmc_in(&d, &["replay", s.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(10), "{}{}", stdout(&o), stderr(&o));
    // Unknown keys, profiles, variants and model paths: FILE:LINE.
    for (text, says) in [
        ("model = \"m.toml\"\nvaraint = \"pre-29870\"\nactions = []\n", "s.toml:2: unknown field `varaint`"),
        ("model = \"m.toml\"\nprofile = \"vllm-9\"\nactions = []\n", "s.toml:2: unknown profile 'vllm-9'"),
        ("model = \"m.toml\"\n\nvariant = \"pre-1\"\nactions = []\n", "s.toml:3: unknown variant 'pre-1'"),
        ("actions = []\nmodel = \"nope.toml\"\n", "s.toml:2: model \"nope.toml\" names no file"),
    ] {
        let p = scenario(&here, text);
        let o = kvmc(&["replay", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{text}: {}", stdout(&o));
        assert!(stderr(&o).contains(says), "{text}: {}", stderr(&o));
    }
}

#[test]
fn errors_are_json_on_stdout_with_format_json() {
    let d = tempdir("json-errors");
    let m = d.join("m.toml");
    std::fs::write(
        &m,
        "[engine]\nblock_size = 2\ngpu_blocks = 4\nmax_num_batched_tokens = 4\nprofile = \"vllm-9.9\"\n[[request]]\nname = \"A\"\nprompt = \"ab\"\noutput = \"x\"\n",
    )
    .unwrap();
    let json = |o: &std::process::Output| -> serde_json::Value {
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
    };
    let o = kvmc(&["check", m.to_str().unwrap(), "--format", "json"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("m.toml:5: unknown profile"), "the text stays on stderr");
    let v = json(&o);
    assert_eq!(v["ok"], false);
    assert_eq!(v["exit_code"], 2);
    assert_eq!(v["error"]["kind"], "input");
    assert_eq!(v["error"]["file"], m.display().to_string());
    assert_eq!(v["error"]["line"], 5);
    assert!(v["error"]["message"].as_str().unwrap().starts_with("unknown profile 'vllm-9.9'"), "{v}");
    // A flag clap refuses, and replay's errors.
    let v = json(&kvmc(&["check", "--format=json", "--strategy", "sideways"]));
    assert_eq!((v["exit_code"].as_i64(), v["error"]["kind"].as_str()), (Some(2), Some("usage")));
    let v = json(&kvmc(&["replay", "no-such.jsonl", "--model", m.to_str().unwrap(), "--format", "json"]));
    assert_eq!(v["error"]["line"], 5, "{v}");
    // Text output stays as it was: nothing on stdout.
    assert!(kvmc(&["check", m.to_str().unwrap()]).stdout.is_empty());
}

/// The models built into kvmc are the repository's `models/**/*.toml`, byte for byte.
#[test]
fn the_built_in_models_are_the_repositorys() {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<(String, String)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            let r = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
            if e.path().is_dir() {
                walk(&e.path(), &r, out);
            } else if name.ends_with(".toml") {
                out.push((r, std::fs::read_to_string(e.path()).unwrap()));
            }
        }
    }
    let mut files = Vec::new();
    walk(&root().join("models"), "", &mut files);
    files.sort();
    let built: Vec<(String, String)> =
        kvmc::check::builtin_models::EMBEDDED.iter().map(|(n, t)| (n.to_string(), t.to_string())).collect();
    assert_eq!(files.len(), built.len());
    assert_eq!(files, built);
}
