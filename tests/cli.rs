//! The command-line contract: exit codes, bad input, formats, incomplete runs.

use crate::common::*;

#[test]
fn gate_exits_0_and_every_expectation_holds() {
    let o = kvmc(&["check"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("0 not as expected, 0 incomplete"));
}

#[test]
fn gate_json_report_has_the_contract_fields() {
    let o = kvmc(&["check", "--format", "json"]);
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON on stdout");
    assert_eq!(v["ok"], true);
    assert!(v["kvmc_version"].is_string());
    let results = v["results"].as_array().unwrap();
    assert!(results.len() >= 40);
    for r in results {
        for f in [
            "model",
            "variant",
            "property",
            "expected",
            "verdict",
            "unique_states",
            "states",
            "max_depth",
            "seconds",
            "counterexample",
        ] {
            assert!(r.get(f).is_some(), "field {f} missing in {r}");
        }
        if r["verdict"] == "violated" {
            let steps = r["counterexample"]["steps"].as_array().unwrap();
            assert!(!steps.is_empty());
            assert!(steps[0]["action"].is_string() && steps[0]["summary"].is_string());
        } else {
            assert!(r["counterexample"].is_null());
        }
    }
}

#[test]
fn explicit_variant_run_exits_10_with_a_story() {
    let o = kvmc(&["check", "models/preempt-store.toml", "--variant", "pre-29870"]);
    assert_eq!(o.status.code(), Some(10));
    let out = stdout(&o);
    assert!(out.contains("counterexample: source-freshness on preempt-store"), "{out}");
    assert!(out.contains("preempt R"), "the story names the preemption: {out}");
    assert!(out.contains("VIOLATION source-freshness"), "{out}");
}

/// A ghost-flag property's counterexample says in its last step why the flag was raised
/// (load-safety's breaches carry an event too, as the other flags' do).
#[test]
fn a_load_safety_counterexample_names_the_read() {
    let o = kvmc(&[
        "check",
        "models/restart-recompute.toml",
        "--variant",
        "mut-no-touch-dequeue",
        "--property",
        "load-safety",
    ]);
    assert_eq!(o.status.code(), Some(10), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("VIOLATION load-safety: C reads block 2 while a load is still writing it"), "{out}");
}

#[test]
fn explicit_run_of_a_holding_model_exits_0() {
    let o = kvmc(&["check", "models/restart-recompute.toml"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    // shared-prefix holds too, but never preempts: g1-accounting over it is vacuous.
    let o = kvmc(&["check", "models/shared-prefix.toml", "--property", "g1-accounting"]);
    assert_eq!(o.status.code(), Some(10));
    assert!(stdout(&o).contains("VACUOUS: never reached reach-g1-eviction, reach-preemption"), "{}", stdout(&o));
}

#[test]
fn bounded_runs_are_incomplete_never_holds() {
    for flags in [&["--max-states", "10"][..], &["--max-depth", "3"][..]] {
        let mut args = vec!["check", "models/restart-recompute.toml", "--format", "json"];
        args.extend_from_slice(flags);
        let o = kvmc(&args);
        assert_eq!(o.status.code(), Some(13), "{flags:?}: {}", stdout(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        for r in v["results"].as_array().unwrap() {
            assert_ne!(r["verdict"], "holds", "{flags:?}: a bounded run never says holds");
        }
    }
}

#[test]
fn a_violation_found_before_the_bound_still_counts() {
    let o = kvmc(&[
        "check",
        "models/preempt-store.toml",
        "--variant",
        "pre-29870",
        "--max-depth",
        "5",
        "--property",
        "source-freshness",
    ]);
    assert_eq!(o.status.code(), Some(10), "{}", stdout(&o));
}

#[test]
fn simulation_never_claims_holds() {
    let o =
        kvmc(&["check", "models/shared-prefix.toml", "--strategy", "simulate", "--timeout", "0.3", "--format", "json"]);
    assert_eq!(o.status.code(), Some(13), "{}", stdout(&o));
}

#[test]
fn missing_model_file_exits_2_naming_it() {
    let o = kvmc(&["check", "models/no-such-model.toml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("models/no-such-model.toml"), "{}", stderr(&o));
}

#[test]
fn malformed_toml_exits_2_with_file_and_line() {
    let d = tempdir("badtoml");
    let p = d.join("bad.toml");
    std::fs::write(&p, "description = \"x\"\n[engine]\nblock_size = 2\ngpu_blocks = = 4\n").unwrap();
    let o = kvmc(&["check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("bad.toml:4:"), "names file and line: {e}");
}

#[test]
fn invalid_values_exit_2_with_their_line() {
    let d = tempdir("badvalue");
    let p = d.join("m.toml");
    std::fs::write(
        &p,
        "[engine]\nblock_size = 2\ngpu_blocks = 4\nmax_num_batched_tokens = 4\nprofile = \"vllm-9.9\"\n[[request]]\nname = \"A\"\nprompt = \"ab\"\noutput = \"x\"\n",
    )
    .unwrap();
    let o = kvmc(&["check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("m.toml:5: unknown profile 'vllm-9.9'"), "{}", stderr(&o));
    std::fs::write(&p, "[engine]\nblock_size = 2\ngpu_blocks = 4\nmax_num_batched_tokens = 4\nwidth = 3\n").unwrap();
    let o = kvmc(&["check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("m.toml:5:"), "unknown keys are errors with a line: {}", stderr(&o));
}

#[test]
fn bad_flags_exit_2() {
    for args in [
        &["check", "--strategy", "sideways"][..],
        &["check", "models/shared-prefix.toml", "--variant", "pre-99999"],
        &["check", "--shard", "3/2"],
        &["check", "models/shared-prefix.toml", "--property", "no-such-property"],
        &["check", "--variant", "pre-63010"],
        &["explain", "no-such-property"],
        &["frobnicate"],
    ] {
        let o = kvmc(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}");
    }
}

#[test]
fn bad_spec_exits_2_naming_file_and_line() {
    let d = tempdir("badspec");
    std::fs::create_dir_all(d.join("specs")).unwrap();
    std::fs::create_dir_all(d.join("models")).unwrap();
    std::fs::copy(root().join("models/shared-prefix.toml"), d.join("models/shared-prefix.toml")).unwrap();
    std::fs::write(
        d.join("specs/x.toml"),
        "property = \"host-integrity\"\nsummary = \"s\"\n[[expect]]\nmodel = \"shared-prefix\"\nverdict = \"maybe\"\n",
    )
    .unwrap();
    let o = kvmc_in(&d, &["check", "--specs", "specs"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("x.toml:5: verdict must be"), "{}", stderr(&o));
    std::fs::write(
        d.join("specs/x.toml"),
        "property = \"host-integrity\"\nsummary = \"s\"\n[[expect]]\nmodel = \"nope\"\nverdict = \"holds\"\n",
    )
    .unwrap();
    let o = kvmc_in(&d, &["check", "--specs", "specs"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("x.toml:4: no model 'nope'"), "{}", stderr(&o));
}

#[test]
fn a_spec_expectation_that_no_longer_matches_exits_10() {
    let d = tempdir("wrongspec");
    std::fs::create_dir_all(d.join("specs")).unwrap();
    std::fs::create_dir_all(d.join("models")).unwrap();
    std::fs::copy(root().join("models/error-mid-prefill.toml"), d.join("models/error-mid-prefill.toml")).unwrap();
    // Claims the fixed profile still has the bug: the checker disagrees.
    std::fs::write(
        d.join("specs/host-integrity.toml"),
        "property = \"host-integrity\"\nsummary = \"s\"\nreach = [\"reach-store-done\"]\n[[expect]]\nmodel = \"error-mid-prefill\"\nprofile = \"vllm-main\"\nverdict = \"violated\"\n",
    )
    .unwrap();
    let o = kvmc_in(&d, &["check", "--specs", "specs"]);
    assert_eq!(o.status.code(), Some(10), "{}", stdout(&o));
}

#[test]
fn a_holds_over_unreached_guards_is_vacuous() {
    let d = tempdir("vacuous");
    std::fs::create_dir_all(d.join("specs")).unwrap();
    std::fs::create_dir_all(d.join("models")).unwrap();
    std::fs::copy(root().join("models/decode-store.toml"), d.join("models/decode-store.toml")).unwrap();
    std::fs::write(
        d.join("specs/host-integrity.toml"),
        "property = \"host-integrity\"\nsummary = \"s\"\nreach = [\"reach-host-eviction\"]\n[[expect]]\nmodel = \"decode-store\"\nverdict = \"holds\"\n",
    )
    .unwrap();
    let o = kvmc_in(&d, &["check", "--specs", "specs"]);
    assert_eq!(o.status.code(), Some(10));
    assert!(stdout(&o).contains("VACUOUS: never reached reach-host-eviction"), "{}", stdout(&o));
}

#[test]
fn junit_output_is_well_formed_enough() {
    let o = kvmc(&["check", "models/preempt-store.toml", "--variant", "pre-29870", "--format", "junit"]);
    assert_eq!(o.status.code(), Some(10));
    let x = stdout(&o);
    assert!(x.starts_with("<?xml"));
    assert!(x.contains("<testsuite name=\"preempt-store\""));
    assert!(x.contains("<failure message=\"verdict violated (expected holds)\">"));
    assert_eq!(x.matches("<testsuite ").count(), x.matches("</testsuite>").count());
}

#[test]
fn shards_partition_the_gate() {
    let all = kvmc(&["check", "--format", "json"]);
    let a = kvmc(&["check", "--format", "json", "--shard", "1/2"]);
    let b = kvmc(&["check", "--format", "json", "--shard", "2/2"]);
    let n = |o: &std::process::Output| {
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["results"].as_array().unwrap().len()
    };
    assert_eq!(n(&a) + n(&b), n(&all));
    assert!(n(&a) > 0 && n(&b) > 0);
}

#[test]
fn list_and_explain_describe_the_catalogue() {
    let o = kvmc(&["list"]);
    assert_eq!(o.status.code(), Some(0));
    let out = stdout(&o);
    for w in [
        "vllm-0.33",
        "vllm-main",
        "pre-63010",
        "pre-29870",
        "pre-46014",
        "pre-54193",
        "mut-no-touch-dequeue",
        "store-coverage",
        "reach-host-hit",
    ] {
        assert!(out.contains(w), "kvmc list mentions {w}");
    }
    let o = kvmc(&["explain", "host-integrity"]);
    assert_eq!(o.status.code(), Some(0));
    let out = stdout(&o);
    assert!(
        out.contains("#63937") && out.contains("error-mid-prefill") && out.contains("error_watermark_computed"),
        "{out}"
    );
    let o = kvmc(&["list", "--rules"]);
    assert!(stdout(&o).contains("| `cursor_reset_on_lookup` |"));
}

#[test]
fn counterexample_files_are_written() {
    let d = tempdir("cxout");
    let o =
        kvmc(&["check", "models/error-mid-prefill.toml", "--property", "host-integrity", "--out", d.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(10));
    let stem = "error-mid-prefill__vllm-0.33__fixed__host-integrity";
    let f = |ext: &str| d.join(format!("{stem}.{ext}"));
    for ext in ["json", "itf.json", "dot", "scenario.toml"] {
        assert!(f(ext).exists(), "{} written", f(ext).display());
    }
    let steps: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(f("json")).unwrap()).unwrap();
    let n = steps["steps"].as_array().unwrap().len();
    let itf: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(f("itf.json")).unwrap()).unwrap();
    assert_eq!(itf["states"].as_array().unwrap().len(), n + 1, "init + one state per step");
    assert!(std::fs::read_to_string(f("dot")).unwrap().starts_with("digraph"));
}

#[test]
fn generated_docs_match_the_code() {
    let o = kvmc(&["explain", "--all"]);
    assert_eq!(
        stdout(&o),
        std::fs::read_to_string(root().join("docs/properties.md")).unwrap(),
        "regenerate: kvmc explain --all > docs/properties.md"
    );
    let o = kvmc(&["list", "--rules"]);
    assert_eq!(
        stdout(&o),
        std::fs::read_to_string(root().join("docs/rules.md")).unwrap(),
        "regenerate: kvmc list --rules > docs/rules.md"
    );
    let o = kvmc(&["list", "--releases"]);
    assert_eq!(
        stdout(&o),
        std::fs::read_to_string(root().join("docs/releases.md")).unwrap(),
        "regenerate: kvmc list --releases > docs/releases.md"
    );
}

#[test]
fn the_release_table_covers_every_profile_and_the_headline_bugs() {
    let t = stdout(&kvmc(&["list", "--releases"]));
    for p in ["vllm-0.24", "vllm-0.32", "vllm-0.33", "vllm-main"] {
        assert!(t.contains(p), "{p}");
    }
    for row in t.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| bug")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        // bug, property, model, then vllm-0.24, vllm-0.32, vllm-0.33, vllm-main, prime-rl
        // A cell may say that kvmc does not model the release there (0.24's Mooncake store),
        // never nothing.
        assert!(cells[3..7].iter().all(|c| *c != "—"), "every row names every vLLM release: {row}");
    }
    let row = t.lines().find(|l| l.contains("#60810") && l.contains("`mirror-table`")).expect("#60810 row");
    assert!(
        row.contains("| **violated** | **violated** | holds | holds |"),
        "0.24, 0.32 have it; 0.33, main do not: {row}"
    );
}

#[test]
fn expectation_files_merge_into_property_specs() {
    let d = tempdir("expectfile");
    std::fs::create_dir_all(d.join("specs")).unwrap();
    std::fs::create_dir_all(d.join("models")).unwrap();
    std::fs::copy(root().join("models/scpu-pressure.toml"), d.join("models/scpu-pressure.toml")).unwrap();
    std::fs::write(
        d.join("specs/host-accounting.toml"),
        "property = \"host-accounting\"\nsummary = \"s\"\ndescription = \"d\"\n",
    )
    .unwrap();
    std::fs::write(
        d.join("specs/more.toml"),
        "[notes]\nhost-accounting = \"n\"\n[[expect]]\nproperty = \"host-accounting\"\nmodel = \"scpu-pressure\"\nvariant = \"mut-scpu-pin-leak\"\nverdict = \"violated\"\n",
    )
    .unwrap();
    let o = kvmc_in(&d, &["check", "--specs", "specs"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let o = kvmc_in(&d, &["explain", "host-accounting", "--specs", "specs"]);
    assert!(stdout(&o).contains("d\n\nn"), "the note is appended: {}", stdout(&o));
    std::fs::write(d.join("specs/more.toml"), "[[expect]]\nmodel = \"scpu-pressure\"\nverdict = \"holds\"\n").unwrap();
    let o = kvmc_in(&d, &["check", "--specs", "specs"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("more.toml:2: an expectation outside"), "{}", stderr(&o));
}

/// `kvmc check models/*.toml` and `kvmc bench models/*.toml` pass over replay models (no
/// requests) with a note; a replay model alone is an input error.
#[test]
fn globs_skip_replay_models() {
    let replay = root().join("models/replay-mooncake.toml");
    let small = root().join("models/g1-pressure.toml");
    for cmd in ["check", "bench"] {
        let o = kvmc(&[cmd, replay.to_str().unwrap(), small.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{cmd}: {}", stderr(&o));
        assert!(stderr(&o).contains("a replay model, skipped"), "{cmd}: {}", stderr(&o));
    }
    let o = kvmc(&["check", replay.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("replay-mooncake.toml:1:"), "{}", stderr(&o));
}

#[test]
fn a_bad_huge_page_policy_exits_2_naming_the_variable() {
    let run = |v: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_kvmc"))
            .args(["list"])
            .env("KVMC_HUGE_PAGES", v)
            .current_dir(root())
            .output()
            .expect("kvmc runs")
    };
    let o = run("sometimes");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("KVMC_HUGE_PAGES must be all, tables or none"), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
    for ok in ["all", "tables", "none", ""] {
        let o = run(ok);
        assert_eq!(o.status.code(), Some(0), "KVMC_HUGE_PAGES={ok:?}: {}", stderr(&o));
    }
}
