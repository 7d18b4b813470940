//! Recordings from vLLM's own unit tests (issue 22, item 6): logs that
//! `scripts/record-vllm-tests.sh --vllm VERSION` took from the Schedulers vLLM's tests build
//! (tests/conformance/vllm/vllm_tests_plugin.py), a small chosen set committed under
//! tests/conformance/fixtures/from-vllm-tests/vllm-X.Y/ (docs/conformance.md, "vLLM's own
//! tests"). Each conforms to its release's profile without Python, and each one's decisions
//! are really compared: a changed free-queue order in it diverges.

use crate::common::*;
use kvmc::conform;
use std::path::PathBuf;

fn dirs() -> Vec<(PathBuf, String)> {
    let base = root().join("tests/conformance/fixtures/from-vllm-tests");
    let mut v: Vec<(PathBuf, String)> = std::fs::read_dir(&base)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| {
            let n = p.file_name().unwrap().to_str().unwrap().to_string();
            (p, n)
        })
        .collect();
    v.sort();
    v
}

fn logs(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    v.sort();
    v
}

#[test]
fn every_log_from_vllms_own_tests_conforms_to_its_release() {
    let dirs = dirs();
    let names: Vec<&str> = dirs.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(names, ["vllm-0.24", "vllm-0.32", "vllm-0.33", "vllm-0.34"], "one directory per release");
    for (dir, profile) in &dirs {
        let fx = logs(dir);
        assert!(fx.len() >= 4, "{}: at least 4 logs", dir.display());
        let version = format!("\"version\":\"{}.0\"", profile.trim_start_matches("vllm-"));
        for f in &fx {
            let text = std::fs::read_to_string(f).unwrap();
            assert!(text.lines().next().unwrap().contains(&version), "{}: recorded on {version}", f.display());
            let r = conform::check(f, profile, None, 8).expect("log parses");
            assert!(r.divergence.is_none(), "{} under {profile}: {:?}", f.display(), r.divergence);
            assert!(r.decisions > 0, "{}: compares decisions", f.display());
        }
    }
}

/// Swap the first two blocks of the first G1 free queue with at least two: the model's queue
/// is then not vLLM's, and conform must say so at that step.
fn tamper(text: &str) -> Option<String> {
    let mut out = Vec::new();
    let mut done = false;
    for line in text.lines() {
        if !done && line.contains("\"ev\":\"g1\"") {
            let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
            let free = v["free"].as_array_mut().unwrap();
            if free.len() >= 2 && free[0] != free[1] {
                free.swap(0, 1);
                out.push(serde_json::to_string(&v).unwrap());
                done = true;
                continue;
            }
        }
        out.push(line.to_string());
    }
    done.then(|| out.join("\n") + "\n")
}

#[test]
fn a_changed_decision_in_a_log_from_vllms_tests_diverges() {
    let mut tampered = 0;
    for (dir, profile) in dirs() {
        for f in logs(&dir) {
            let text = std::fs::read_to_string(&f).unwrap();
            let Some(bad) = tamper(&text) else { continue };
            let r = conform::check_text(&f, &bad, &profile, None, 8).expect("tampered log parses");
            assert!(r.divergence.is_some(), "{}: a swapped free queue still conforms", f.display());
            tampered += 1;
        }
    }
    assert!(tampered >= 4, "at least 4 logs with a free queue to change, got {tampered}");
}
