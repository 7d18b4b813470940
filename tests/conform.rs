//! Conformance against real vLLM 0.33 (fixtures recorded by tests/conformance/vllm/record.py):
//! every fixture conforms, and every single decision line deleted or altered is caught at
//! that line.

use crate::common::*;
use kvmc::conform;
use std::path::{Path, PathBuf};

pub(crate) fn fixtures() -> Vec<PathBuf> {
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

/// A second alteration for the decision fields the first one leaves alone: the pins of a
/// SimpleCPU lookup, the keys a store registered, the ref counts and pins of a CPU snapshot.
fn alter_more(line: &str) -> Option<String> {
    let mut v: serde_json::Value = serde_json::from_str(line).ok()?;
    match v["ev"].as_str()? {
        "lookup" => v.get_mut("pins")?.as_array_mut()?.push(serde_json::json!(99)),
        "store_completed" => v["keys"].as_array_mut()?.reverse(),
        "cpu" => {
            v["refs"].as_object_mut()?.insert("99".into(), serde_json::json!(1));
            v["pins"].as_object_mut()?.insert("Z".into(), serde_json::json!([99]));
        }
        "mooncake" => {
            v["pinned"].as_object_mut()?.insert("99".into(), serde_json::json!([99]));
        }
        "nixl_save" => v["blocks"].as_array_mut()?.push(serde_json::json!(99)),
        "nixl" => {
            v["held"].as_object_mut()?.insert("Z".into(), serde_json::json!([99]));
        }
        _ => return None,
    }
    (v != serde_json::from_str::<serde_json::Value>(line).ok()?).then(|| v.to_string())
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
        "stream_queued" => bump(&mut v["queued"]),
        "turn_end" => v["reason"] = serde_json::json!(if v["reason"] == "stop" { "length" } else { "stop" }),
        "turn_start" => bump(&mut v["num_computed"]),
        "g1" => v["free"].as_array_mut()?.push(serde_json::json!(999)),
        "host" => v["order"].as_array_mut()?.push(serde_json::json!("X.9")),
        "store_completed" | "load_completed" => bump(&mut v["job"]),
        "cpu" => v["free"].as_array_mut()?.push(serde_json::json!(999)),
        "mooncake" => v["pool"].as_array_mut()?.push(serde_json::json!("X.9")),
        "nixl_save" => v["filled"].as_array_mut()?.push(serde_json::json!(9)),
        "nixl" => v["need_save"].as_array_mut()?.push(serde_json::json!("X")),
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
    let mut kinds: std::collections::BTreeMap<String, usize> = Default::default();
    for f in fixtures() {
        let text = std::fs::read_to_string(&f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        // SimpleCPU and Mooncake logs' decisions are counted apart ("scpu lookup", "mc load").
        let scpu = if lines[0].contains(r#""connector":"simple-cpu""#) {
            "scpu "
        } else if lines[0].contains(r#""connector":"mooncake""#) {
            "mc "
        } else if lines[0].contains(r#""connector":"nixl""#) {
            "nx "
        } else {
            ""
        };
        // Steps where the model chose an order of one of vLLM's sets: a deleted line there is
        // reported where the resolution that explains most of the step needs it, which is
        // at or after the line and inside the step (tests/conform_seeds.rs).
        let choice_steps: Vec<u32> =
            conform::check(&f, "vllm-0.33", None, 4).unwrap().choices.iter().map(|c| c.step).collect();
        let step_of = |l: &str| serde_json::from_str::<serde_json::Value>(l).unwrap()["step"].as_u64().unwrap_or(0);
        for (i, l) in lines.iter().enumerate() {
            let Some(altered) = alter(l) else { continue };
            let no = i + 1;
            let mut a = lines.clone();
            a[i] = &altered;
            assert_eq!(diverges_at(&f, &(a.join("\n") + "\n")), Some(no), "{}: altering line {no} ({l})", f.display());
            if let Some(more) = alter_more(l) {
                let mut a = lines.clone();
                a[i] = &more;
                assert_eq!(
                    diverges_at(&f, &(a.join("\n") + "\n")),
                    Some(no),
                    "{}: altering line {no} ({l}) to {more}",
                    f.display()
                );
                let ev = serde_json::from_str::<serde_json::Value>(l).unwrap()["ev"].as_str().unwrap().to_string();
                *kinds.entry(format!("{scpu}{ev} (second field)")).or_default() += 1;
            }
            let mut d = lines.clone();
            d.remove(i);
            let got = diverges_at(&f, &(d.join("\n") + "\n"));
            let step = step_of(l);
            if choice_steps.contains(&(step as u32)) {
                // The last line of the step, after the deletion, plus one.
                let end = (i..d.len()).find(|&j| step_of(d[j]) > step).map_or(d.len(), |j| j) + 1;
                assert!(got.is_some_and(|g| g >= no && g <= end), "{}: deleting line {no} ({l}): {got:?}", f.display());
            } else {
                assert_eq!(got, Some(no), "{}: deleting line {no} ({l})", f.display());
            }
            checked += 1;
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            *kinds.entry(format!("{scpu}{}", v["ev"].as_str().unwrap())).or_default() += 1;
        }
    }
    assert!(checked > 500, "every decision line of every fixture ({checked})");
    // The streaming-session decisions (parking, resuming, queueing) are among them, and
    // SimpleCPU's: lookup pins, processed completions, CPU pool snapshots.
    for k in [
        "stream_queued",
        "turn_end",
        "turn_start",
        "finish",
        "schedule",
        "store",
        "load",
        "lookup",
        "scpu lookup",
        "scpu lookup (second field)",
        "scpu load",
        "scpu store",
        "scpu evict",
        "scpu store_completed",
        "scpu store_completed (second field)",
        "scpu load_completed",
        "scpu schedule",
        "scpu finish",
        "scpu turn_end",
        "scpu turn_start",
        "scpu g1",
        "scpu cpu",
        "scpu cpu (second field)",
        "mc lookup",
        "mc load",
        "mc store",
        "mc schedule",
        "mc finish",
        "mc g1",
        "mc mooncake",
        "mc mooncake (second field)",
        "nx nixl_save",
        "nx nixl_save (second field)",
        "nx nixl",
        "nx nixl (second field)",
        "nx schedule",
        "nx g1",
    ] {
        assert!(kinds.get(k).copied().unwrap_or(0) > 0, "{k} lines are checked: {kinds:?}");
    }
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
        (head.replace("\"lru\"", "\"lfu\"") + "\n", "log.jsonl:1: eviction_policy \"lfu\" is not modelled"),
        (String::new(), "log.jsonl:1: empty log"),
    ] {
        let p = d.join("log.jsonl");
        std::fs::write(&p, &body).unwrap();
        let o = kvmc(&["conform", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{body}");
        assert!(stderr(&o).contains(want), "{want} in {}", stderr(&o));
    }
}

#[test]
fn streaming_sessions_on_real_vllm_park_resume_and_queue() {
    // What the session fixtures record (and the model reproduces, step by step).
    let read = |n: &str| std::fs::read_to_string(root().join(format!("tests/conformance/fixtures/{n}.jsonl"))).unwrap();
    let has = |text: &str, want: &[&str]| want.iter().all(|w| text.contains(w));
    let resume = read("stream-resume");
    assert!(has(
        &resume,
        &[
            r#""resumable":true"#,
            r#"{"ev":"turn_end","step":3,"req":"S","turn":1,"reason":"length"}"#,
            r#"{"ev":"turn_start","step":4,"req":"S","turn":2,"num_computed":14,"num_prompt_tokens":20}"#,
            r#"{"ev":"turn_start","step":7,"req":"S","turn":3"#,
            r#"{"ev":"finish","step":9,"req":"S","reason":"abort"}"#,
            r#""req":"C","keys":["S.2","S@2.3","S@2.4","S@3.5"]"#,
        ]
    ));
    let queued = read("stream-queued");
    assert!(has(
        &queued,
        &[
            r#"{"ev":"stream_queued","step":2,"req":"S","queued":1}"#,
            r#"{"ev":"turn_start","step":4,"req":"S","turn":2"#,
            r#"{"ev":"stream_end","step":6,"req":"S"}"#,
            r#"{"ev":"turn_end","step":7,"req":"S","turn":2,"reason":"length"}"#,
            r#"{"ev":"finish","step":7,"req":"S","reason":"length"}"#,
        ]
    ));
    for n in ["stream-resume", "stream-queued", "stream-parked-slot"] {
        let r = conform::check(&root().join(format!("tests/conformance/fixtures/{n}.jsonl")), "vllm-0.33", None, 8)
            .unwrap();
        assert!(r.divergence.is_none(), "{n}: {:?}", r.divergence);
        assert!(r.findings.is_empty(), "{n}: {:?}", r.findings);
    }
    // An idle step (only the parked session is left): no schedule line, and the model idles too.
    let parked = read("stream-parked-slot");
    assert!(!parked.contains(r#""ev":"schedule","step":10,"#) && parked.contains(r#""ev":"g1","step":10,"#));
}

#[test]
fn bad_session_lines_exit_2_naming_file_and_line() {
    let d = tempdir("conform-bad-session");
    let text = std::fs::read_to_string(root().join("tests/conformance/fixtures/stream-queued.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let head = lines[0];
    let arrive_s = lines[1];
    assert!(arrive_s.contains(r#""resumable":true"#), "{arrive_s}");
    let arrive_plain = arrive_s.replace(r#","resumable":true"#, "");
    let input = |step: u32| {
        format!(r#"{{"ev":"stream_input","step":{step},"req":"S","prompt":[5,6],"max_tokens":2,"eos_token_id":null}}"#)
    };
    let end = |step: u32| format!(r#"{{"ev":"stream_end","step":{step},"req":"S"}}"#);
    for (body, want) in [
        (vec![head.to_string(), input(1)], "log.jsonl:2: request S is used before it arrives"),
        (vec![head.to_string(), arrive_plain.clone(), input(2)], "log.jsonl:3: request S is not a streaming session"),
        (vec![head.to_string(), arrive_plain, end(2)], "log.jsonl:3: request S is not a streaming session"),
        (vec![head.to_string(), arrive_s.to_string(), end(2)], "log.jsonl:3: session S ends before its second input"),
        (
            vec![head.to_string(), arrive_s.to_string(), input(2), end(3), input(4)],
            "log.jsonl:5: session S was already ended",
        ),
        (vec![head.to_string(), arrive_s.to_string()], "log.jsonl:2: session S is sent no second input"),
        (
            vec![head.to_string(), arrive_s.to_string(), input(2).replace("[5,6]", "[]")],
            "log.jsonl:3: session S: an input with an empty prompt",
        ),
        (
            vec![head.to_string(), arrive_s.to_string(), input(2).replace(r#""max_tokens":2"#, r#""max_tokens":0"#)],
            "log.jsonl:3: session S: an input with an empty prompt or max_tokens 0",
        ),
        (
            vec![
                head.to_string(),
                arrive_s.to_string(),
                input(2),
                r#"{"ev":"turn_end","step":2,"req":"S","turn":0,"reason":"stop"}"#.into(),
            ],
            "log.jsonl:4: request S: turns count from 1",
        ),
        (
            vec![
                head.to_string(),
                arrive_s.to_string(),
                input(2),
                r#"{"ev":"stream_queued","step":2,"req":"S"}"#.into(),
            ],
            "log.jsonl:4: not a valid event",
        ),
        (
            vec![
                head.to_string(),
                arrive_s.to_string(),
                input(2),
                r#"{"ev":"turn_start","step":2,"req":"Z","turn":2,"num_computed":1,"num_prompt_tokens":3}"#.into(),
            ],
            "log.jsonl:4: request Z is used before it arrives",
        ),
        (vec![head.to_string(), arrive_s.replace("true", "7")], "log.jsonl:2: not a valid event"),
    ] {
        let p = d.join("log.jsonl");
        std::fs::write(&p, body.join("\n") + "\n").unwrap();
        let o = kvmc(&["conform", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{body:?}");
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

/// Logs whose inputs were changed (a session input deleted, moved a step, another
/// `max_tokens`, EOS sampled elsewhere) give a verdict or an input error, never a crash.
#[test]
fn changed_session_inputs_never_crash_the_driver() {
    let mut verdicts = 0;
    for n in ["stream-resume", "stream-queued", "stream-parked-slot", "scpu-stream-resume"] {
        let f = root().join(format!("tests/conformance/fixtures/{n}.jsonl"));
        let text = std::fs::read_to_string(&f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let ev = v["ev"].as_str().unwrap();
            if !["stream_input", "stream_end", "sampled", "arrive", "transfer_done"].contains(&ev) {
                continue;
            }
            let mut variants: Vec<Vec<String>> = Vec::new();
            let mut d: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
            d.remove(i);
            variants.push(d);
            for m in [1u64, 2, 7] {
                let mut v2 = v.clone();
                if v2.get("max_tokens").is_some() {
                    v2["max_tokens"] = serde_json::json!(m);
                    let mut a: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
                    a[i] = v2.to_string();
                    variants.push(a);
                }
                if v2.get("token").is_some() {
                    v2["token"] = serde_json::json!(2);
                    let mut a: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
                    a[i] = v2.to_string();
                    variants.push(a);
                }
            }
            // Move the line one step earlier and later.
            for delta in [-1i64, 1] {
                let mut v2 = v.clone();
                let s = v2["step"].as_i64().unwrap() + delta;
                if s >= 1 {
                    v2["step"] = serde_json::json!(s);
                    let mut a: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
                    a[i] = v2.to_string();
                    variants.push(a);
                }
            }
            for a in variants {
                let t = a.join("\n") + "\n";
                let r = std::panic::catch_unwind(|| conform::check_text(&f, &t, "vllm-0.33", None, 2));
                assert!(r.is_ok(), "{n}: line {} ({l}) changed: the driver panics", i + 1);
                verdicts += usize::from(matches!(r, Ok(Ok(_))));
            }
        }
    }
    assert!(verdicts > 100, "most changed logs still parse and are replayed ({verdicts})");
}
