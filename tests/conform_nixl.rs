//! NixlConnector as the P/D producer in host-buffer mode, recorded on real vLLM
//! (tests/conformance/vllm/nixlprod.py; scenarios pd-*.toml, fixtures on 0.24, 0.32, 0.33 and
//! 0.34): what the logs show (#59102's half-written copy read by the consumer), that the
//! `connector = "nixl"` model reproduces them step by step and reports handoff-integrity where
//! vLLM's consumer read a stale copy, that the NIXL lines drive the comparison, and that bad
//! NIXL lines are input errors naming file and line.

use crate::common::*;
use kvmc::conform;
use std::path::PathBuf;

/// (scenario, the step from which handoff-integrity is violated, if it is).
const LOGS: [(&str, Option<u32>); 8] = [
    ("pd-chunked", Some(3)),
    ("pd-shared-held-hit", Some(3)),
    ("pd-shared-freed-hit", Some(3)),
    ("pd-shared-preempt", Some(5)),
    ("pd-shared-abort", None),
    ("pd-shared-heal", Some(6)),
    ("pd-finish-kinds", Some(4)),
    ("pd-small-budget", Some(14)),
];

/// (fixture directory, profile): 0.33's fixtures are at the top, the others per release.
const RELEASES: [(&str, &str); 4] =
    [("vllm-0.24/", "vllm-0.24"), ("vllm-0.32/", "vllm-0.32"), ("", "vllm-0.33"), ("vllm-0.34/", "vllm-0.34")];

fn fixture(dir: &str, name: &str) -> PathBuf {
    root().join(format!("tests/conformance/fixtures/{dir}{name}.jsonl"))
}

fn read(dir: &str, name: &str) -> String {
    std::fs::read_to_string(fixture(dir, name)).unwrap()
}

#[test]
fn the_nixl_producer_conforms_on_every_release_and_shows_59102() {
    for (dir, profile) in RELEASES {
        for (name, violated_from) in LOGS {
            let f = fixture(dir, name);
            let r = conform::check(&f, profile, None, 8).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            assert!(r.divergence.is_none(), "{dir}{name}: {:?}", r.divergence);
            assert!(r.decisions > 10, "{dir}{name}: {}", r.decisions);
            let hi = r.findings.iter().find(|(p, _)| p == "handoff-integrity").map(|(_, s)| *s);
            assert_eq!(hi, violated_from, "{dir}{name}: {:?}", r.findings);
            // The header names the release, which picks the profile by itself.
            assert_eq!(conform::profile::choose(&read(dir, name), None).profile, profile, "{dir}{name}");
        }
        // #59102 on every release: A's second block is copied after its first chunk wrote one
        // of its two positions; the last chunk allocates no block, so nothing copies it again
        // and the consumer reads the half-written copy.
        let text = read(dir, "pd-chunked");
        for want in [
            r#""connector":"nixl""#,
            r#"{"ev":"schedule","step":1,"scheduled":[["A",3]],"new":["A"],"resumed":[],"preempted":[],"finished":[],"tables":{"A":[1,2]}}"#,
            r#"{"ev":"nixl_save","step":1,"req":"A","blocks":[1,2],"filled":[2,1]}"#,
            r#"{"ev":"nixl","step":2,"need_save":["A"],"held":{"A":[1,2]}}"#,
            r#"{"ev":"consumer_read","step":3,"req":"A","blocks":[1,2],"tokens":4,"stale":[2]}"#,
            r#"{"ev":"finished_sending","step":3,"req":"A"}"#,
        ] {
            assert!(text.contains(want), "{dir}pd-chunked: {want}");
        }
        assert!(!text.contains(r#""ev":"nixl_save","step":2"#), "{dir}: step 2 saves nothing");
        // `conform --strict` shows it (exit 10, the property named).
        let o = kvmc(&["conform", "--strict", fixture(dir, "pd-chunked").to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(10), "{}", stdout(&o));
        assert!(stdout(&o).contains("invariant handoff-integrity is violated from step 3 on"), "{}", stdout(&o));
    }
}

#[test]
fn what_the_pd_shared_logs_show() {
    let has = |name: &str, want: &[&str]| {
        let text = read("", name);
        for w in want {
            assert!(text.contains(w), "{name}: {w}");
        }
    };
    // B hits A.0 in G1 while A still runs; both hold their blocks; B's save copies the shared
    // block again; both are sent in one step.
    has(
        "pd-shared-held-hit",
        &[
            r#"{"ev":"lookup","step":2,"req":"B","local":2,"external":0,"async":false}"#,
            r#"{"ev":"nixl_save","step":2,"req":"B","blocks":[1,3],"filled":[2,2]}"#,
            r#""held":{"A":[1,2],"B":[1,3]}"#,
            r#"{"ev":"consumer_read","step":3,"req":"B","blocks":[1,3],"tokens":4,"stale":[]}"#,
        ],
    );
    // C cannot grow while B holds its blocks for the consumer: preempted, then run again.
    has(
        "pd-shared-freed-hit",
        &[
            r#"{"ev":"lookup","step":4,"req":"B","local":2,"external":0,"async":false}"#,
            r#"{"ev":"nixl_save","step":4,"req":"C","blocks":[2],"filled":[1]}"#,
            r#""preempted":["C"],"finished":["B"]"#,
            r#"{"ev":"nixl_save","step":6,"req":"C","blocks":[2,3],"filled":[2,1]}"#,
        ],
    );
    // A preempted request stays in _reqs_need_save and saves its whole table again.
    has(
        "pd-shared-preempt",
        &[
            r#""preempted":["C"],"finished":["A"]"#,
            r#"{"ev":"nixl","step":3,"need_save":["A","C"],"held":{"A":[1,2]}}"#,
            r#"{"ev":"nixl_save","step":6,"req":"C","blocks":[3,2],"filled":[2,1]}"#,
        ],
    );
    // B's whole-table save copies the block A left half written again, whole: A's late read
    // finds it whole; D's half-written block is read stale.
    has(
        "pd-shared-heal",
        &[
            r#"{"ev":"nixl_save","step":1,"req":"A","blocks":[1,2],"filled":[2,1]}"#,
            r#"{"ev":"nixl_save","step":2,"req":"A","blocks":[3],"filled":[2]}"#,
            r#"{"ev":"nixl_save","step":4,"req":"B","blocks":[1,2,4],"filled":[2,2,2]}"#,
            r#"{"ev":"consumer_read","step":6,"req":"A","blocks":[1,2,3],"tokens":6,"stale":[]}"#,
            r#"{"ev":"consumer_read","step":6,"req":"D","blocks":[1,5,6],"tokens":5,"stale":[5]}"#,
        ],
    );
    // EOS as the one token holds the blocks too; an abort of a finished request is ignored;
    // an error mid-prefill frees at once.
    has(
        "pd-finish-kinds",
        &[
            r#"{"ev":"finish","step":2,"req":"B","reason":"stop"}"#,
            r#"{"ev":"nixl","step":2,"need_save":["A"],"held":{"A":[1,2],"B":[3]}}"#,
            r#"{"ev":"abort","step":3,"req":"A"}"#,
            r#"{"ev":"consumer_read","step":4,"req":"A","blocks":[1,2],"tokens":4,"stale":[2]}"#,
            r#"{"ev":"finish","step":5,"req":"C","reason":"error"}"#,
            r#"{"ev":"nixl","step":5,"need_save":["A"],"held":{}}"#,
        ],
    );
    // A budget below the block size: every block of B copied half written, all read stale;
    // C re-admitted into the block it half wrote before its preemption: the copy holds only
    // what C wrote since (found by random scenarios: the recorder had counted the freed
    // block's leftover position, the model does not).
    has(
        "pd-small-budget",
        &[
            r#"{"ev":"consumer_read","step":14,"req":"B","blocks":[2,1,3],"tokens":11,"stale":[2,1,3]}"#,
            r#"{"ev":"schedule","step":11,"scheduled":[],"new":[],"resumed":[],"preempted":["C"]"#,
            r#"{"ev":"nixl_save","step":12,"req":"C","blocks":[4],"filled":[2]}"#,
        ],
    );
    // An aborted request frees at once and leaves _reqs_need_save: nothing to read.
    let abort = read("", "pd-shared-abort");
    assert!(abort.contains(r#"{"ev":"abort","step":2,"req":"A"}"#));
    assert!(!abort.contains(r#""ev":"consumer_read","step":3,"req":"A""#), "nothing of A is read");
    assert!(!abort.contains(r#"{"ev":"finished_sending","step":3,"req":"A"}"#));
    // B hits A's freed first block; C waits until the consumer read B (two steps late).
    assert!(abort.contains(r#"{"ev":"nixl","step":2,"need_save":[],"held":{"B":[1,2]}}"#), "{abort}");
    assert!(abort.contains(r#"{"ev":"finished_sending","step":4,"req":"B"}"#), "{abort}");
    assert!(abort.contains(r#"{"ev":"schedule","step":5,"scheduled":[["C",3]]"#), "{abort}");
}

#[test]
fn the_59102_fix_and_the_nixl_lines_drive_the_comparison() {
    // With #59102's fix (the straddling block re-saved) the model copies A's second block
    // again in step 2, which vLLM does not do: every release diverges there.
    for (dir, profile) in RELEASES {
        let f = fixture(dir, "pd-chunked");
        let d = conform::check(&f, profile, Some("fix-59102"), 8).unwrap().divergence.expect("fix differs");
        assert_eq!((d.step, d.what.as_str(), d.model.as_str()), (2, "nixl_save", "A blocks=[2] filled=[2]"), "{dir}");
    }
    let f = fixture("", "pd-chunked");
    let text = read("", "pd-chunked");
    let lines: Vec<&str> = text.lines().collect();
    let no = |want: &str| lines.iter().position(|l| l.contains(want)).unwrap() + 1;
    let diverges = |t: &str| conform::check_text(&f, t, "vllm-0.33", None, 4).unwrap().divergence;
    // A consumer that read the copy whole: the model finds it stale.
    let read_line = no(r#""ev":"consumer_read""#);
    let d = diverges(&text.replace(r#""stale":[2]"#, r#""stale":[]"#)).expect("stale matters");
    assert_eq!((d.line, d.what.as_str()), (read_line, "consumer_read"));
    let d = diverges(&text.replace(r#""tokens":4,"#, r#""tokens":3,"#)).expect("tokens matter");
    assert_eq!(d.line, read_line);
    // Without the read, the model sends nothing: the worker's finished_sending is not its.
    let sent = no(r#""ev":"finished_sending""#);
    let without: String = text.lines().filter(|l| !l.contains("consumer_read")).map(|l| format!("{l}\n")).collect();
    let d = diverges(&without).expect("the read drives the send");
    assert_eq!((d.line, d.what.as_str()), (sent - 1, "finished_sending"), "{d:?}");
    // A deleted finished_sending line is caught at its line.
    let without: String = text.lines().filter(|l| !l.contains("finished_sending")).map(|l| format!("{l}\n")).collect();
    let d = diverges(&without).expect("the send is a decision");
    assert_eq!((d.line, d.what.as_str()), (sent, "finished_sending"), "{d:?}");
    // A read the model does not allow (A has not finished): a difference at that line.
    let early = text.replacen(
        r#"{"ev":"schedule","step":2,"#,
        &format!("{}\n{{\"ev\":\"schedule\",\"step\":2,", lines[read_line - 1].replace(r#""step":3"#, r#""step":2"#)),
        1,
    );
    let d = diverges(&early).expect("an early read");
    assert_eq!((d.step, d.what.as_str()), (2, "consumer_read"), "{d:?}");
}

#[test]
fn the_held_requests_choose_the_free_order() {
    // A and B are sent in one step: vLLM frees them in the order it walks the finished_sending
    // set (under seed 0, B first), which the model searches (choice point finished_sending).
    let r = conform::check(&fixture("", "pd-shared-held-hit"), "vllm-0.33", None, 8).unwrap();
    let c = r.choices.iter().find(|c| c.point == "finished_sending").expect("a choice point");
    assert_eq!((c.step, c.orders), (3, 2));
    assert_eq!(c.chosen, vec!["B", "A"]);
}

#[test]
fn bad_nixl_lines_exit_2_naming_file_and_line() {
    let d = tempdir("nixl-bad");
    let text = read("", "pd-chunked");
    let header = text.lines().next().unwrap();
    let main = read("", "main");
    let cases: Vec<(String, &str, &str)> = vec![
        (text.replacen(r#""max_tokens":1"#, r#""max_tokens":2"#, 1), ":2:", "every request is a P/D prefill request"),
        (
            text.replacen(r#""async_scheduling":false"#, r#""async_scheduling":true"#, 1),
            ":1:",
            "synchronous scheduling only",
        ),
        (
            format!("{header}\n{}\n", r#"{"ev":"store","step":1,"job":0,"req":"A","keys":[],"blocks":[],"slots":[]}"#),
            ":2:",
            "no load or store jobs",
        ),
        (
            format!("{}\n{}\n", main.lines().next().unwrap(), r#"{"ev":"nixl","step":1,"need_save":[],"held":{}}"#),
            ":2:",
            "go with the nixl connector",
        ),
        (text.replacen(r#""filled":[2,1]"#, r#""filled":"x""#, 1), ":5:", "not a valid event"),
        (
            text.replacen(
                r#""ev":"finished_sending","step":3,"req":"A""#,
                r#""ev":"finished_sending","step":3,"req":"Q""#,
                1,
            ),
            ":15:",
            "request Q is used before it arrives",
        ),
    ];
    for (i, (body, at, want)) in cases.iter().enumerate() {
        let p = d.join(format!("b{i}.jsonl"));
        std::fs::write(&p, body).unwrap();
        let o = kvmc(&["conform", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "case {i}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains(&format!("b{i}.jsonl{at}")), "case {i}: {at} in {err}");
        assert!(err.contains(want), "case {i}: {want} in {err}");
    }
}

#[test]
fn the_nixl_recorder_parts_pass_their_own_tests() {
    // The connector = "nixl" and [[consumer_read]] tables and the fake worker's rules, without vLLM.
    python_unittest("tests/conformance/vllm/test_nixlprod.py", 10);
}
