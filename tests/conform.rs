//! Conformance against real vLLM 0.33 (fixtures recorded by tests/conformance/vllm/record.py):
//! every fixture conforms, and every single decision line deleted or altered is caught at
//! that line.

use crate::common::*;
use kvmc::conform;
use std::path::{Path, PathBuf};

fn fixtures() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join("tests/conformance/fixtures"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    v.sort();
    v
}

#[test]
fn every_vllm_fixture_conforms() {
    let fx = fixtures();
    assert!(fx.len() >= 10, "at least 10 recorded fixtures");
    for f in &fx {
        let r = conform::check(f, "vllm-0.33", None, 8).expect("fixture parses");
        assert!(r.divergence.is_none(), "{}: {:?}", f.display(), r.divergence);
        assert!(r.decisions > 10, "{}: compares decisions", f.display());
    }
    let o = kvmc(&["conform", "tests/conformance/fixtures/main.jsonl"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
}

#[test]
fn vllm_itself_violates_what_the_checker_predicted() {
    // #63937 and GP S10, on vLLM's own recorded trajectories.
    let f = |n: &str| {
        conform::check(&root().join(format!("tests/conformance/fixtures/{n}.jsonl")), "vllm-0.33", None, 8).unwrap()
    };
    let r = f("error-mid-prefill");
    assert!(r.findings.iter().any(|(p, _)| p == "host-integrity"), "{:?}", r.findings);
    for n in ["gp-s10-abort", "gp-s10-preempt"] {
        let r = f(n);
        for p in ["g1-cache-sound", "kv-read-integrity"] {
            assert!(r.findings.iter().any(|(x, _)| x == p), "{n}: {p} in {:?}", r.findings);
        }
    }
    let r = f("main");
    assert!(r.findings.is_empty(), "main holds every invariant: {:?}", r.findings);
    let o = kvmc(&["conform", "--strict", "tests/conformance/fixtures/error-mid-prefill.jsonl"]);
    assert_eq!(o.status.code(), Some(10));
}

/// Change one field of a decision line so that it says something else.
fn alter(line: &str) -> Option<String> {
    let mut v: serde_json::Value = serde_json::from_str(line).ok()?;
    let bump = |x: &mut serde_json::Value| *x = serde_json::json!(x.as_u64().unwrap_or(0) + 1000);
    match v["ev"].as_str()? {
        "lookup" => bump(&mut v["local"]),
        "load" | "store" => bump(&mut v["job"]),
        "store_refused" | "evict" => v["keys"].as_array_mut()?.push(serde_json::json!("X.9")),
        "flush" => v["jobs"].as_array_mut()?.push(serde_json::json!(999)),
        "schedule" => v["preempted"].as_array_mut()?.push(serde_json::json!("X")),
        "finish" => v["reason"] = serde_json::json!(if v["reason"] == "abort" { "error" } else { "abort" }),
        "g1" => v["free"].as_array_mut()?.push(serde_json::json!(999)),
        "host" => v["order"].as_array_mut()?.push(serde_json::json!("X.9")),
        _ => return None,
    }
    Some(v.to_string())
}

fn diverges_at(path: &Path, text: &str) -> Option<usize> {
    match conform::check_text(path, text, "vllm-0.33", None, 4) {
        Ok(r) => r.divergence.map(|d| d.line),
        Err(e) => panic!("{}: mutated log must still parse: {e}", path.display()),
    }
}

#[test]
fn deleting_or_altering_any_decision_line_is_caught_at_that_line() {
    let mut checked = 0;
    for f in fixtures() {
        let text = std::fs::read_to_string(&f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let Some(altered) = alter(l) else { continue };
            let no = i + 1;
            let mut a = lines.clone();
            a[i] = &altered;
            assert_eq!(diverges_at(&f, &(a.join("\n") + "\n")), Some(no), "{}: altering line {no} ({l})", f.display());
            let mut d = lines.clone();
            d.remove(i);
            assert_eq!(diverges_at(&f, &(d.join("\n") + "\n")), Some(no), "{}: deleting line {no} ({l})", f.display());
            checked += 1;
        }
    }
    assert!(checked > 500, "every decision line of every fixture ({checked})");
}

#[test]
fn a_divergence_exits_10_with_the_line_and_a_window() {
    let d = tempdir("conform-div");
    let text = std::fs::read_to_string(root().join("tests/conformance/fixtures/preempt-restart.jsonl")).unwrap();
    let bad = text.replacen("\"preempted\":[\"R\"]", "\"preempted\":[]", 1);
    assert_ne!(bad, text);
    let p = d.join("log.jsonl");
    std::fs::write(&p, bad).unwrap();
    let o = kvmc(&["conform", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(10));
    let out = stdout(&o);
    assert!(
        out.contains("diverges at step")
            && out.contains("implementation:")
            && out.contains("model:")
            && out.contains("preceding events:"),
        "{out}"
    );
}

#[test]
fn bad_logs_exit_2_naming_file_and_line() {
    let d = tempdir("conform-bad");
    let head = std::fs::read_to_string(root().join("tests/conformance/fixtures/main.jsonl"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    for (body, want) in [
        ("not json\n".to_string(), "log.jsonl:1: not a valid event"),
        (format!("{head}\n{{\"ev\":\"teleport\",\"step\":1}}\n"), "log.jsonl:2: not a valid event"),
        (
            format!("{head}\n{{\"ev\":\"abort\",\"step\":1,\"req\":\"Z\"}}\n"),
            "log.jsonl:2: request Z is used before it arrives",
        ),
        ("{\"ev\":\"abort\",\"step\":1,\"req\":\"Z\"}\n".to_string(), "log.jsonl:1: the first line must be the header"),
        (head.replace("\"format\":1", "\"format\":7") + "\n", "log.jsonl:1: unsupported log format 7"),
        (head.replace("\"lru\"", "\"arc\"") + "\n", "log.jsonl:1: eviction_policy"),
        (String::new(), "log.jsonl:1: empty log"),
    ] {
        let p = d.join("log.jsonl");
        std::fs::write(&p, &body).unwrap();
        let o = kvmc(&["conform", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{body}");
        assert!(stderr(&o).contains(want), "{want} in {}", stderr(&o));
    }
}
