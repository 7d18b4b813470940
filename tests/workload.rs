//! Workloads as a search dimension (issue 21 items 1 and 6): the `[workload]` table, its
//! canonical form, the outer loop through the gate's own `execute`, sharding and `kvmc merge`.

use crate::common::*;
use kvmc::check::gate::{self, Job};
use kvmc::check::{RunOpts, Verdict};
use kvmc::workload::gen::{canonical, Req, Shape, Workload};
use kvmc::workload::Family;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const BASE: &str = "description = \"test family\"\n\n[engine]\nprofile = \"vllm-0.33\"\nconnector = \"offloading\"\nblock_size = 2\ngpu_blocks = 4\nmax_num_batched_tokens = 2\n\n[offload]\nhost_chunks = 2\n\n";

fn req(blocks: &[u8], tail: u8, tail_letter: u8, after: Option<u8>) -> Req {
    Req {
        prompt: Shape { blocks: blocks.to_vec(), tail, tail_letter },
        output: 1,
        stop: false,
        room: false,
        after,
        start: 0,
        turns: vec![],
    }
}

fn wl(reqs: Vec<Req>, any: bool) -> Workload {
    Workload { reqs, any, gpu_blocks: 4, host: 2 }
}

#[test]
fn isomorphic_workloads_have_one_canonical_form() {
    // Renaming letters (a <-> b) and, under any arrivals, requests (A <-> B, with the after
    // link following its request) gives the same canonical workload.
    let x = wl(vec![req(&[0, 1], 1, 0, None), req(&[0], 0, 0, Some(0))], true);
    let y = wl(vec![req(&[1], 0, 0, Some(1)), req(&[1, 0], 1, 1, None)], true);
    assert_eq!(canonical(&x, &[]), canonical(&y, &[]));
    // In order, the request order is part of the workload: no renaming of requests.
    let xi = Workload { any: false, ..x.clone() };
    let yi = Workload { any: false, ..y.clone() };
    assert_ne!(canonical(&xi, &[]), canonical(&yi, &[]));
    // ...but letters still rename.
    let zi = wl(vec![req(&[1, 0], 1, 1, None), req(&[1], 0, 0, Some(0))], false);
    assert_eq!(canonical(&xi, &[]), canonical(&zi, &[]));
    // Not isomorphic: a shared prefix against a disjoint prompt.
    let shared = wl(vec![req(&[0], 0, 0, None), req(&[0, 1], 0, 0, None)], true);
    let disjoint = wl(vec![req(&[0], 0, 0, None), req(&[1, 1], 0, 0, None)], true);
    assert_ne!(canonical(&shared, &[]), canonical(&disjoint, &[]));
    // A letter of a Mooncake preload keeps its identity.
    let a = wl(vec![req(&[0], 0, 0, None)], true);
    let b = wl(vec![req(&[1], 0, 0, None)], true);
    assert_eq!(canonical(&a, &[]), canonical(&b, &[]));
    assert_ne!(canonical(&a, &[0]), canonical(&b, &[0]));
    // The tail letter of a prompt without a tail does not matter.
    let t0 = wl(vec![req(&[0], 0, 0, None)], true);
    let t1 = wl(vec![req(&[0], 0, 1, None)], true);
    assert_eq!(canonical(&t0, &[]), canonical(&t1, &[]));
}

#[test]
fn the_space_holds_each_isomorphism_class_once() {
    let d = tempdir("wl-space");
    let p = write(&d, "f.toml", &format!("{BASE}[workload]\nrequests = [1, 2]\nalphabet = 2\nprompt_blocks = [1, 2]\npartial = true\n\n[bounds]\narrivals = \"any\"\n"));
    let text = std::fs::read_to_string(&p).unwrap();
    let f = Family::parse("f", &p, &text).expect("parses");
    // One request: a, a+a, a+b, aa, ab, aa+a, aa+b, ab+a, ab+b (letters renamed).
    assert_eq!(f.workloads.iter().filter(|w| w.reqs.len() == 1).count(), 9);
    let mut seen = std::collections::BTreeSet::new();
    for w in &f.workloads {
        assert_eq!(&canonical(w, &[]), w, "only canonical forms are kept");
        assert!(seen.insert(w.clone()));
    }
    // Smallest first.
    assert!(f.workloads.windows(2).all(|p| p[0].reqs.len() <= p[1].reqs.len()));
}

/// Explorations of isomorphic workloads agree: same verdicts, same state counts.
#[test]
fn isomorphic_workloads_explore_alike() {
    let d = tempdir("wl-iso");
    let run = |reqs: &str| -> Vec<(String, Verdict, usize)> {
        let p = write(&d, "m.toml", &format!("{BASE}[faults]\nabort = true\n\n[bounds]\narrivals = \"any\"\n{reqs}"));
        let plan = gate::plan_paths(&[p], None, None, &[], &[]).unwrap();
        gate::execute(&plan[0], &RunOpts::default())
            .unwrap()
            .into_iter()
            .map(|r| (r.property, r.verdict, r.unique_states))
            .collect()
    };
    let x = run("[[request]]\nname = \"A\"\nprompt = \"aa|b\"\noutput = \"P\"\n[[request]]\nname = \"B\"\nprompt = \"aa|bb\"\noutput = \"Q\"\n");
    let y = run("[[request]]\nname = \"A\"\nprompt = \"bb|aa\"\noutput = \"P\"\n[[request]]\nname = \"B\"\nprompt = \"bb|a\"\noutput = \"Q\"\n");
    assert_eq!(x, y);
}

#[test]
fn bad_workload_tables_exit_2_with_file_and_line() {
    let d = tempdir("wl-bad");
    let cases: &[(&str, &str, usize)] = &[
        ("requests = 9\n", "requests must be", 14),
        ("requests = 1\nalphabet = 0\n", "alphabet must be", 15),
        ("requests = 2\nfoo = 1\n", "unknown field", 15),
        ("requests = 2\nstarts = [0]\n", "starts needs a [router_replay]", 13),
        ("requests = 6\nalphabet = 6\nprompt_blocks = [1, 3]\n", "narrow the bounds", 13),
        ("requests = 3\nalphabet = 3\nprompt_blocks = [1, 2]\npartial = true\n", "max_workloads", 13),
        ("requests = 1\nprompt_blocks = 5\n", "fits the engine", 13),
    ];
    for (i, (table, says, line)) in cases.iter().enumerate() {
        let p = write(&d, &format!("b{i}.toml"), &format!("{BASE}[workload]\n{table}"));
        let o = kvmc(&["check", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{table}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains(&format!("b{i}.toml:{line}")) && err.contains(says), "{table}: {err}");
    }
    // Requests and a workload table together.
    let p = write(
        &d,
        "both.toml",
        &format!("{BASE}[workload]\nrequests = 1\n\n[[request]]\nname = \"A\"\nprompt = \"a\"\noutput = \"b\"\n"),
    );
    let o = kvmc(&["check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("both.toml:16") && stderr(&o).contains("not both"), "{}", stderr(&o));
    // An error in another table names its own line (the workload table is commented out in
    // place, lines are kept).
    let p = write(
        &d,
        "eng.toml",
        &format!("{}[workload]\nrequests = 1\n", BASE.replace("block_size = 2", "block_size = 99")),
    );
    let o = kvmc(&["check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("eng.toml:6") && stderr(&o).contains("block_size"), "{}", stderr(&o));
    // A command that takes one scope refuses a family with a clear message.
    let p = write(&d, "one.toml", &format!("{BASE}[workload]\nrequests = 1\n"));
    let o = kvmc(&["explore", p.to_str().unwrap(), "--addr", "127.0.0.1:0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("one.toml:13") && stderr(&o).contains("[workload]"), "{}", stderr(&o));
}

/// A family with a known violation: final-store-kept on vllm-0.33 (every profile has it).
fn family_file(d: &Path) -> PathBuf {
    write(d, "fam.toml", &format!("{BASE}[workload]\nrequests = [1, 2]\nalphabet = 2\nprompt_blocks = [1, 2]\npartial = true\n\n[bounds]\narrivals = \"any\"\n"))
}

#[test]
fn a_family_runs_every_workload_through_the_gate_and_exports_its_counterexample() {
    let d = tempdir("wl-fam");
    let p = family_file(&d);
    let out = d.join("cx");
    let o = kvmc(&[
        "check",
        p.to_str().unwrap(),
        "--property",
        "final-store-kept",
        "--property",
        "host-integrity",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(10), "{}", stderr(&o));
    let s = stdout(&o);
    assert!(s.contains("final-store-kept") && s.contains("violated") && s.contains("first counterexample in w"), "{s}");
    assert!(s.contains("workloads 99/99 explored of 99 distinct"), "host-integrity holds over all of them: {s}");
    // The workload, exported as an ordinary model file, shows the same violation on its own.
    let m = out.join("fam__vllm-0.33__fixed__final-store-kept.model.toml");
    let text = std::fs::read_to_string(&m).expect("the workload was written");
    assert!(text.contains("[[request]]") && text.contains("# [workload]"), "{text}");
    let o2 = kvmc(&["check", m.to_str().unwrap(), "--property", "final-store-kept"]);
    assert_eq!(o2.status.code(), Some(10), "{}", stdout(&o2));
    assert!(stdout(&o2).contains("violated"));
}

#[test]
fn shards_split_the_workloads_and_merge_gives_the_unsharded_verdicts() {
    let d = tempdir("wl-shard");
    let p = family_file(&d);
    let ps = p.to_str().unwrap();
    let whole = kvmc(&["check", ps, "--format", "json"]);
    let n = 3;
    let mut files = Vec::new();
    // N processes at once, as a CI matrix would run them.
    let children: Vec<_> = (1..=n)
        .map(|i| {
            std::process::Command::new(env!("CARGO_BIN_EXE_kvmc"))
                .args(["check", ps, "--format", "json", "--shard", &format!("{i}/{n}")])
                .output()
        })
        .collect();
    let mut explored = 0;
    for (i, c) in children.into_iter().enumerate() {
        let o = c.unwrap();
        let f = d.join(format!("s{}.json", i + 1));
        std::fs::write(&f, &o.stdout).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let row = v["results"].as_array().unwrap().iter().find(|r| r["property"] == "host-integrity").unwrap();
        explored += row["workloads"]["explored"].as_u64().unwrap();
        files.push(f.to_str().unwrap().to_string());
    }
    assert_eq!(explored, 99, "the shards split the 99 workloads between them");
    let mut args = vec!["merge", "--format", "json"];
    args.extend(files.iter().map(String::as_str));
    let m = kvmc(&args);
    assert_eq!(m.status.code(), whole.status.code(), "{}", stderr(&m));
    let verdicts = |v: &serde_json::Value| -> BTreeMap<String, (String, u64)> {
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let states = if r["verdict"] == "holds" { r["unique_states"].as_u64().unwrap() } else { 0 };
                (r["property"].as_str().unwrap().to_string(), (r["verdict"].as_str().unwrap().to_string(), states))
            })
            .collect()
    };
    let wv: serde_json::Value = serde_json::from_slice(&whole.stdout).unwrap();
    let mv: serde_json::Value = serde_json::from_slice(&m.stdout).unwrap();
    assert_eq!(verdicts(&wv), verdicts(&mv));
    // The counterexample of the smallest workload wins, as in the unsharded run.
    let cx = |v: &serde_json::Value| {
        v["results"].as_array().unwrap().iter().find(|r| r["property"] == "final-store-kept").unwrap()["workloads"]
            ["counterexample_workload"]["index"]
            .clone()
    };
    assert_eq!(cx(&wv), cx(&mv));
    // A missing shard is an error; so is a shard given twice.
    let o = kvmc(&["merge", &files[0], &files[1]]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("missing shard report(s): 3/3"), "{}", stderr(&o));
    let o = kvmc(&["merge", &files[0], &files[0], &files[1], &files[2]]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn the_fast_gate_plans_no_family_and_the_deep_tier_only_families() {
    let specs = kvmc::check::specs::load_embedded().unwrap();
    let fast = gate::plan_specs(&specs, &root().join("models")).unwrap();
    assert!(fast.iter().all(|j: &Job| j.family.is_none()));
    let deep = gate::plan_tier(&specs, &root().join("models"), true).unwrap();
    assert!(!deep.is_empty());
    assert!(deep.iter().all(|j| j.family.is_some()));
    // Sharding keeps every family in every shard, each with its slice of workloads.
    let s: Vec<Job> = kvmc::check::family::shard_jobs(deep.clone(), 2, 3);
    for j in &s {
        let f: &Arc<Family> = j.family.as_ref().unwrap();
        assert_eq!(f.shard, (2, 3));
        assert!(f.mine().all(|k| k % 3 == 1));
    }
}
