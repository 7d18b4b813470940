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

/// Byte ranges of the msgpack values (batches) in a KV event stream.
fn batch_ranges(bytes: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut cur = std::io::Cursor::new(bytes);
    let mut out = Vec::new();
    while (cur.position() as usize) < bytes.len() {
        let start = cur.position() as usize;
        rmpv::decode::read_value(&mut cur).unwrap();
        out.push(start..cur.position() as usize);
    }
    out
}

#[test]
fn every_kv_event_stream_is_consistent_and_matches_the_model() {
    let mut n = 0;
    for f in fixtures() {
        let ev = f.with_extension("kvevents");
        assert!(ev.exists(), "{} has a KV event stream", f.display());
        let o = kvmc(&["conform", f.to_str().unwrap(), "--kv-events", ev.to_str().unwrap()]);
        let out = stdout(&o);
        assert!(out.contains("consistent and matches the model step by step"), "{}: {out}", ev.display());
        // Findings (vLLM's own violations) may make the log part exit 0 anyway: conform is not strict.
        assert_eq!(o.status.code(), Some(0), "{}: {out}", ev.display());
        n += 1;
    }
    assert!(n >= 10);
}

#[test]
fn dropping_any_kv_event_batch_or_moving_it_a_step_is_caught() {
    let d = tempdir("kvevents-tamper");
    let mut checked = 0;
    for f in fixtures() {
        let ev = f.with_extension("kvevents");
        let bytes = std::fs::read(&ev).unwrap();
        let steps: Vec<u32> =
            serde_json::from_str(&std::fs::read_to_string(format!("{}.steps.json", ev.display())).unwrap()).unwrap();
        let ranges = batch_ranges(&bytes);
        assert_eq!(ranges.len(), steps.len(), "{}: one step number per batch", ev.display());
        for (i, r) in ranges.iter().enumerate() {
            let p = d.join("t.kvevents");
            let run = |b: &[u8], s: &[u32]| {
                std::fs::write(&p, b).unwrap();
                std::fs::write(d.join("t.kvevents.steps.json"), serde_json::to_string(s).unwrap()).unwrap();
                kvmc(&["conform", f.to_str().unwrap(), "--kv-events", p.to_str().unwrap()])
            };
            // Drop batch i.
            let mut b = bytes[..r.start].to_vec();
            b.extend_from_slice(&bytes[r.end..]);
            let mut s = steps.clone();
            s.remove(i);
            let o = run(&b, &s);
            assert_eq!(o.status.code(), Some(10), "{}: dropping batch {} went unnoticed", ev.display(), i + 1);
            // Publish batch i one step later (unless the next batch is that step: then drop is enough).
            let mut s = steps.clone();
            s[i] += 1;
            if !steps.contains(&s[i]) {
                let o = run(&bytes, &s);
                assert_eq!(o.status.code(), Some(10), "{}: moving batch {} went unnoticed", ev.display(), i + 1);
            }
            checked += 1;
        }
    }
    assert!(checked > 100, "every batch of every stream ({checked})");
}

#[test]
fn bad_kv_event_streams_exit_2_naming_the_file() {
    let d = tempdir("kvevents-bad");
    let log = root().join("tests/conformance/fixtures/main.jsonl");
    for (body, want) in [
        (vec![0x93u8, 0xcb, 0x00], "not msgpack"),
        (vec![0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xc0], "events is not an array"),
        (vec![0x05], "a batch is an array"),
    ] {
        let p = d.join("bad.kvevents");
        std::fs::write(&p, &body).unwrap();
        let o = kvmc(&["conform", log.to_str().unwrap(), "--kv-events", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{body:?}");
        assert!(stderr(&o).contains("bad.kvevents") && stderr(&o).contains(want), "{want} in {}", stderr(&o));
    }
}
