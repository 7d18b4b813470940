//! Conformance logs that are bad, partial or new (issue 19, items 12, 17 and 22): transfer
//! reports the log cannot make, partial logs a recorder left, and the recorded step in which
//! vLLM 0.33 lists a resumed request after the new ones.

use crate::common::*;
use kvmc::conform;
use kvmc::system::connector::{SchedOut, Scheduled};
use kvmc::system::rules;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    root().join(format!("tests/conformance/fixtures/{name}.jsonl"))
}

fn fixtures() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join("tests/conformance/fixtures"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    v.sort();
    v
}

/// The error `conform::check_text` returns for `text`, as printed ("FILE:LINE: message").
fn input_error(path: &Path, text: &str) -> String {
    match conform::check_text(path, text, "vllm-0.33", None, 4) {
        Ok(r) => panic!("{}: accepted ({:?})", path.display(), r.divergence.map(|d| (d.line, d.what))),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_repeated_or_orphan_transfer_report_is_bad_input_at_its_line() {
    let mut checked = 0;
    for f in fixtures() {
        let text = std::fs::read_to_string(&f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if !(l.contains(r#""ev":"transfer_done""#) || l.contains(r#""ev":"transfer_failed""#)) {
                continue;
            }
            let (no, at) = (i + 1, i + 2);
            // The same report again, right after it.
            let mut dup = lines.clone();
            dup.insert(i + 1, l);
            let e = input_error(&f, &(dup.join("\n") + "\n"));
            let want = format!("{}:{at}: ", f.display());
            assert!(e.starts_with(&want) && e.contains(&format!("already reported finished at line {no}")), "{e}");
            // A report of a job no load or store line created.
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["job"] = serde_json::json!(v["job"].as_u64().unwrap() + 1000);
            let orphan = v.to_string();
            let mut o = lines.clone();
            o.insert(i + 1, &orphan);
            let e = input_error(&f, &(o.join("\n") + "\n"));
            assert!(e.starts_with(&want) && e.contains("was never created"), "{e}");
            checked += 1;
        }
    }
    assert!(checked > 100, "every transfer report of every fixture ({checked})");
    // The CLI: exit 2 naming the file and line, never "conforms".
    let d = tempdir("conform-transfer");
    let text = std::fs::read_to_string(fixture("main")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let i = lines.iter().position(|l| l.contains(r#""ev":"transfer_done""#)).unwrap();
    for (extra, want) in [
        (lines[i].to_string(), format!("log.jsonl:{}: transfer_done: job 0 was already reported finished", i + 2)),
        (
            lines[i].replace(r#""job":0"#, r#""job":77"#),
            format!("log.jsonl:{}: transfer_done: job 77 was never created", i + 2),
        ),
    ] {
        let mut m = lines.clone();
        m.insert(i + 1, &extra);
        let p = d.join("log.jsonl");
        std::fs::write(&p, m.join("\n") + "\n").unwrap();
        let o = kvmc(&["conform", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
        assert!(stderr(&o).contains(&want), "{want} in {}", stderr(&o));
        assert!(!stdout(&o).contains("conforms"), "{}", stdout(&o));
    }
    // SimpleCPU counts store and load events apart: a load report needs a load line.
    let text = std::fs::read_to_string(fixture("scpu-main")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let i =
        lines.iter().position(|l| l.contains(r#""ev":"transfer_done""#) && l.contains(r#""kind":"store""#)).unwrap();
    let job = serde_json::from_str::<serde_json::Value>(lines[i]).unwrap()["job"].as_u64().unwrap();
    let loads: Vec<u64> = lines
        .iter()
        .filter(|l| l.contains(r#""ev":"load""#))
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["job"].as_u64().unwrap())
        .collect();
    let fresh = (0..).find(|j| !loads.contains(j) && *j >= job).unwrap();
    let as_load = lines[i]
        .replace(r#""kind":"store""#, r#""kind":"load""#)
        .replace(&format!(r#""job":{job}"#), &format!(r#""job":{fresh}"#));
    let mut m = lines.clone();
    m.insert(i + 1, &as_load);
    let e = input_error(&fixture("scpu-main"), &(m.join("\n") + "\n"));
    assert!(e.contains(&format!(":{}: transfer_done: load event {fresh} was never created", i + 2)), "{e}");
}

#[test]
fn a_partial_log_is_checked_up_to_its_marker_and_says_so() {
    let d = tempdir("conform-partial");
    let text = std::fs::read_to_string(fixture("main")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // Steps 1 to 8 (what the recorder writes when step 9 fails), then the marker.
    let upto = lines.iter().rposition(|l| l.contains(r#""step":8,"#)).unwrap() + 1;
    let marker = r#"{"ev":"partial","step":9,"error":"RuntimeError: boom"}"#;
    let partial = lines[..upto].join("\n") + "\n" + marker + "\n";
    let r = conform::check_text(&fixture("main"), &partial, "vllm-0.33", None, 4).expect("a partial log parses");
    assert!(r.divergence.is_none(), "{:?}", r.divergence);
    assert_eq!(r.steps, 8);
    let p = r.partial.expect("reported partial");
    assert_eq!((p.line, p.step, p.error.as_str()), (upto + 1, 9, "RuntimeError: boom"));
    // A whole log is not partial.
    assert!(conform::check(&fixture("main"), "vllm-0.33", None, 4).unwrap().partial.is_none());
    let run = |body: &str| {
        let f = d.join("log.jsonl.partial");
        std::fs::write(&f, body).unwrap();
        kvmc(&["conform", f.to_str().unwrap()])
    };
    // The CLI: no "conforms" verdict on the whole run (exit 13, incomplete), and where it stopped.
    let o = run(&partial);
    assert_eq!(o.status.code(), Some(13), "{}", stdout(&o));
    assert!(stdout(&o).contains("PARTIAL log: the 8 steps recorded conform"), "{}", stdout(&o));
    assert!(
        stdout(&o).contains(&format!(
            "log.jsonl.partial:{}: partial log: the recorder stopped in step 9: RuntimeError: boom",
            upto + 1
        )),
        "{}",
        stdout(&o)
    );
    // A divergence before the marker is still a divergence (exit 10), and the log is still called partial.
    let altered = partial.replacen(r#""local":0,"#, r#""local":1000,"#, 1);
    assert_ne!(altered, partial);
    let o = run(&altered);
    assert_eq!(o.status.code(), Some(10), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("diverges at step") && stdout(&o).contains("partial log: the recorder stopped"),
        "{}",
        stdout(&o)
    );
    // A marker that is not the last line, or that names a step the log already passed: exit 2.
    let o = run(&(lines[..upto].join("\n") + "\n" + marker + "\n" + lines[upto] + "\n"));
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(&format!(":{}: a partial-log marker must be the log's last line", upto + 1)),
        "{}",
        stderr(&o)
    );
    let o = run(&(lines[..upto].join("\n") + "\n" + &marker.replace(r#""step":9"#, r#""step":3"#) + "\n"));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("the partial-log marker names step 3, before the log's last step 8"), "{}", stderr(&o));
}

#[test]
fn vllm_033_lists_a_resumed_request_after_the_new_ones() {
    // Recorded from vLLM 0.33: B, preempted in step 10, is admitted again in step 15 with the
    // new C and D; num_scheduled_tokens is in admission order, scheduled_new_reqs is not.
    let f = fixture("resume-with-new");
    let text = std::fs::read_to_string(&f).unwrap();
    assert!(
        text.contains(r#"{"ev":"schedule","step":10,"scheduled":[["A",1]],"new":[],"resumed":[],"preempted":["B"]"#)
    );
    let line = r#"{"ev":"schedule","step":15,"scheduled":[["B",1],["C",2],["D",3]],"new":["C","D","B"]"#;
    assert!(text.contains(line), "the step the fixture was recorded for");
    let r = conform::check(&f, "vllm-0.33", None, 4).unwrap();
    assert!(r.divergence.is_none(), "{:?}", r.divergence);
    // The same step in admission order (0.34's rule) diverges there under 0.33.
    let no = text.lines().position(|l| l.starts_with(line)).unwrap() + 1;
    let admission = text.replacen(r#""new":["C","D","B"]"#, r#""new":["B","C","D"]"#, 1);
    let d = conform::check_text(&f, &admission, "vllm-0.33", None, 4).unwrap().divergence.expect("diverges");
    assert_eq!((d.line, d.what.as_str()), (no, "schedule"));
    assert!(d.model.contains(r#"new=["C", "D", "B"]"#), "{}", d.model);
}

#[test]
fn scheduled_new_reqs_order_is_a_rule_per_release() {
    let s = |req: u16, full_table: bool, resumed: bool| Scheduled {
        req,
        start: 0,
        tokens: 1,
        blocks: Vec::new(),
        full_table,
        samples: false,
        resumed,
        negative: 0,
    };
    // Running X, then admitted: B (resumed after a preemption), C (new).
    let mut out =
        SchedOut { scheduled: vec![s(0, false, false), s(1, true, true), s(2, true, false)], ..Default::default() };
    let order = |o: &SchedOut| o.yield_order().map(|x| x.req).collect::<Vec<_>>();
    out.resumed_after_new = true;
    assert_eq!(order(&out), vec![2, 1, 0], "0.24 to 0.33: new, then resumed, then running");
    out.resumed_after_new = false;
    assert_eq!(order(&out), vec![1, 2, 0], "0.34: admission order, then running");
    // Every profile but 0.34 (and vllm-main, rebased on it) lists resumed requests last (0.24
    // and 0.32 have the same `scheduled_new_reqs.extend(scheduled_resumed_reqs)` under Model
    // Runner V2); 0.34 keeps admission order (its `resume-with-new` recording,
    // tests/conform_releases.rs).
    for p in rules::PROFILES {
        assert_eq!((p.rules)().resumed_after_new, !["vllm-0.34", "vllm-main"].contains(&p.name), "{}", p.name);
    }
    let o = kvmc(&["list", "--rules"]);
    assert!(stdout(&o).contains("resumed_after_new"), "{}", stdout(&o));
}

#[test]
fn the_recorder_keeps_a_failed_runs_log_marked_partial() {
    // record.py's own tests (tests/conformance/vllm/test_record.py: the standard library only,
    // vLLM replaced by stand-ins): a failed run's log is kept as NAME.jsonl.partial, ending with
    // the marker kvmc reads above; --hash-seed is checked and named in the header.
    python_unittest("tests/conformance/vllm/test_record.py", 10);
}

/// A bad log in a batch is reported where it stands and the other logs are still checked; the
/// run exits 2 (docs/exit-codes.md). With one log, or none readable, it is the run's error.
#[test]
fn a_bad_log_in_a_batch_exits_2_and_the_others_are_still_checked() {
    let d = tempdir("conform-batch-bad");
    let good = root().join("tests/conformance/fixtures/main.jsonl");
    let bad = d.join("bad.jsonl");
    std::fs::write(&bad, "not json\n").unwrap();
    let missing = d.join("missing.jsonl");
    let (g, b, m) = (good.to_str().unwrap(), bad.to_str().unwrap(), missing.to_str().unwrap());

    let o = kvmc(&["conform", b, g]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("bad.jsonl:1: not a valid event"), "{}", stderr(&o));
    assert!(stdout(&o).contains("main.jsonl: conforms"), "{}", stdout(&o));
    assert!(stdout(&o).contains("bad.jsonl: not checked, bad input: not a valid event"), "{}", stdout(&o));

    let o = kvmc(&["conform", g, b, m, "--format", "json"]);
    assert_eq!(o.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["exit_code"], 2);
    assert_eq!(v["ok"], false);
    assert_eq!(v["logs"].as_array().unwrap().len(), 1);
    assert_eq!(v["logs"][0]["verdict"], "conforms");
    let bad_logs = v["bad_logs"].as_array().unwrap();
    assert_eq!(bad_logs.len(), 2);
    assert_eq!((bad_logs[0]["kind"].as_str(), bad_logs[0]["line"].as_u64()), (Some("input"), Some(1)));
    assert_eq!((bad_logs[1]["kind"].as_str(), bad_logs[1]["line"].as_u64()), (Some("io"), None));

    let o = kvmc(&["conform", g, b, "--format", "junit"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stdout(&o).contains("tests=\"2\" failures=\"0\" errors=\"1\""), "{}", stdout(&o));
    assert!(stdout(&o).contains("<error message=\""), "{}", stdout(&o));

    // A divergence in the batch does not hide the bad log: 2 before 10.
    let diverging = d.join("diverging.jsonl");
    let text = std::fs::read_to_string(&good).unwrap();
    let cut: Vec<&str> = text.lines().collect();
    let changed = cut.iter().position(|l| l.contains("\"ev\":\"schedule\"")).unwrap();
    let mut lines: Vec<String> = cut.iter().map(|l| l.to_string()).collect();
    lines.remove(changed);
    std::fs::write(&diverging, lines.join("\n") + "\n").unwrap();
    let o = kvmc(&["conform", diverging.to_str().unwrap(), b]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stdout(&o).contains("diverges"), "{}", stdout(&o));

    // Every log bad: the run's error, as with one log (the JSON error object).
    let o = kvmc(&["conform", b, m, "--format", "json"]);
    assert_eq!(o.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["error"]["kind"], "input");
}

/// Finding 28 at a session's third input (tests/conformance/findings/stream-stale-crash-later.toml,
/// found by fuzzing: seed 545, scenario 12 on 0.24.0): the session's second input stops on EOS
/// with a decode in flight, the stale output stops it again, and 0.24 raises when its third
/// input arrives. The log never shows that input (the engine died in its step), so the model's
/// death search sends a placeholder input to every session the log leaves open; before, only a
/// session with no logged input had one, and the model "did not die". 0.32.0 to 0.34.0 conform.
#[test]
fn a_session_that_dies_at_a_later_input_is_predicted_from_its_partial_log() {
    let dir = root().join("tests/conformance/findings");
    let log = dir.join("vllm-0.24/stream-stale-crash-later.jsonl.partial");
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.matches(r#""ev":"stream_input""#).count(), 1, "the second input only");
    let ends: Vec<&str> = text.lines().filter(|l| l.contains(r#""ev":"turn_end""#)).collect();
    assert_eq!(ends.len(), 3, "{ends:?}");
    assert!(ends[1].contains(r#""turn":2,"reason":"stop""#) && ends[2].contains(r#""turn":2,"reason":"length""#));
    let r = conform::check(&log, "vllm-0.24", None, 8).unwrap();
    assert!(r.divergence.is_none() && r.partial.is_some(), "{:?}", r.divergence);
    let (prop, detail, inputs) = r.death.expect("searched").found.expect("the model dies too");
    assert_eq!(prop, "queue-sound", "{detail}");
    assert_eq!(inputs, ["next input for A", "step"], "{detail}");
    for release in ["vllm-0.32", "vllm-0.33", "vllm-0.34"] {
        let log = dir.join(format!("{release}/stream-stale-crash-later.jsonl"));
        let r = conform::check(&log, release, None, 8).unwrap();
        assert!(r.divergence.is_none() && r.partial.is_none() && r.findings.is_empty(), "{release}");
    }
}
