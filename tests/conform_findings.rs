//! Findings on real vLLM (tests/conformance/findings/, docs/findings.md) that conformance
//! fuzzing and the checker's counterexamples led to: the logs recorded on each release, where
//! vLLM dies or hangs, conform up to their end, and the checker finds the same on the model.

use crate::common::*;
use kvmc::check::Verdict;
use kvmc::conform;

/// Finding 28 on real vLLM (tests/conformance/findings/stream-stale-crash.toml): on 0.24.0 a
/// streaming session's stale in-flight output stops its parked turn a second time, the session
/// is enqueued twice, and `schedule()` raises on the second entry; 0.32.0 to 0.34.0 drop the
/// stale output, run to the end and conform. The partial 0.24 log ends before the session's
/// next input (the engine died first): every step recorded conforms; the checker finds the
/// crash itself (queue-sound, model stream-stale-crash).
#[test]
fn finding_28_a_stale_output_stops_a_parked_session_twice_and_0_24_dies() {
    let dir = root().join("tests/conformance/findings");
    let log = dir.join("vllm-0.24/stream-stale-crash.jsonl.partial");
    let text = std::fs::read_to_string(&log).unwrap();
    let ends: Vec<&str> = text.lines().filter(|l| l.contains(r#""ev":"turn_end""#)).collect();
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert!(ends[0].contains(r#""step":3,"req":"A","turn":1,"reason":"stop""#), "{}", ends[0]);
    assert!(ends[1].contains(r#""step":4,"req":"A","turn":1,"reason":"length""#), "{}", ends[1]);
    assert!(!text.contains("stream_input"), "no input between the two stops");
    let last = text.lines().last().unwrap();
    assert!(last.contains(r#""ev":"partial","step":5"#) && last.contains("Invalid request status: RUNNING"), "{last}");
    // The log ends in the step the engine died in, before the session's next input: every
    // recorded step conforms (a partial log may end before a session's second input).
    let r = conform::check(&log, "vllm-0.24", None, 8).unwrap();
    assert!(r.divergence.is_none() && r.partial.is_some(), "{:?}", r.divergence);
    for release in ["vllm-0.32", "vllm-0.33", "vllm-0.34"] {
        let log = dir.join(format!("{release}/stream-stale-crash.jsonl"));
        let r = kvmc::conform::check(&log, release, None, 8).unwrap();
        assert!(
            r.divergence.is_none() && r.partial.is_none() && r.findings.is_empty(),
            "{release}: {:?}",
            r.divergence
        );
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(text.matches(r#""ev":"turn_end""#).count(), 2, "{release}: one stop per turn");
    }
}

/// Finding 30 on real vLLM (tests/conformance/findings/stream-park-count.toml): on 0.24.0 the
/// stale output of B's first input parks B a second time, `num_waiting_for_streaming_input`
/// keeps one park too many after B's session ends, and A, arriving in step 12, is never
/// scheduled (the recorder stops: the engine went idle with A unfinished). Every recorded step
/// conforms to the 0.24 model, which keeps that counter; 0.32.0 to 0.34.0 serve A.
#[test]
fn finding_30_a_session_parked_twice_leaves_a_later_request_unserved_on_0_24() {
    let dir = root().join("tests/conformance/findings");
    let log = dir.join("vllm-0.24/stream-park-count.jsonl.partial");
    let text = std::fs::read_to_string(&log).unwrap();
    let ends = text.lines().filter(|l| l.contains(r#""ev":"turn_end","step""#) && l.contains(r#""turn":1"#)).count();
    assert_eq!(ends, 2, "B's first input stops twice");
    let last = text.lines().last().unwrap();
    assert!(last.contains("the engine went idle with unfinished requests: A"), "{last}");
    let r = conform::check(&log, "vllm-0.24", None, 8).unwrap();
    assert!(r.divergence.is_none() && r.partial.is_some(), "{:?}", r.divergence);
    // The model's own 0.32 rule drops the stale output: it diverges where 0.24 parks B again.
    assert!(conform::check(&log, "vllm-0.32", None, 8).unwrap().divergence.is_some());
    for release in ["vllm-0.32", "vllm-0.33", "vllm-0.34"] {
        let log = dir.join(format!("{release}/stream-park-count.jsonl"));
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains(r#""ev":"finish","step":13,"req":"A""#), "{release}: A is served");
        let r = conform::check(&log, release, None, 8).unwrap();
        assert!(r.divergence.is_none() && r.partial.is_none(), "{release}: {:?}", r.divergence);
    }
}

/// Finding 31 on real vLLM (tests/conformance/findings/skipped-head-starves.toml, written by
/// `kvmc reproduce` from the deep tier's requests-finish counterexample under vllm-0.24): on
/// 0.24.0 B waits at the head of `skipped_waiting`, looked up every step and never fitting, and
/// A, whose async load landed, is never promoted behind it: the recorder gives up after 207
/// steps, every one of which conforms to the 0.24 model. On 0.33.0 every request finishes.
#[test]
fn finding_31_a_request_that_cannot_fit_starves_a_loaded_one_on_0_24() {
    let dir = root().join("tests/conformance/findings");
    let log = dir.join("vllm-0.24/skipped-head-starves.jsonl.partial");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.lines().last().unwrap().contains("did not finish in 207 steps"));
    let lookups = text.lines().filter(|l| l.contains(r#""ev":"lookup""#) && l.contains(r#""req":"B""#)).count();
    assert!(lookups > 200, "B is looked up every step: {lookups}");
    let finished = |text: &str, req: &str| {
        let who = format!(r#""req":"{req}","reason""#);
        text.lines().any(|l| l.contains(r#""ev":"finish""#) && l.contains(&who))
    };
    assert!(!finished(&text, "A") && !finished(&text, "B"), "A and B never finish");
    let r = conform::check(&log, "vllm-0.24", None, 8).unwrap();
    assert!(r.divergence.is_none() && r.partial.is_some(), "{:?}", r.divergence);
    let log = dir.join("vllm-0.33/skipped-head-starves.jsonl.partial");
    let text = std::fs::read_to_string(&log).unwrap();
    for req in ["A", "B", "C"] {
        assert!(finished(&text, req), "0.33 finishes {req}");
    }
    let r = conform::check(&log, "vllm-0.33", None, 8).unwrap();
    assert!(r.divergence.is_none(), "{:?}", r.divergence);
}

/// Finding 31 with a streaming session as the holder (tests/conformance/findings/
/// session-behind-head.toml, the shape of two hangs of fuzz seed 700 on 0.24.0): S's next input
/// is queued while its first runs, so S goes back to the end of `waiting` holding its blocks; P
/// preempts itself to the head. On 0.24.0 P never fits and `schedule()` stops at it: S is never
/// served, nothing runs from step 6 until the recorder gives up after 40 steps, and every step
/// conforms to the 0.24 model (also with `fix-session-hold`, which frees only the head's
/// blocks). 0.32.0 to 0.34.0 serve S first (`kv_holding_waiting`) and finish both; the 0.24 log
/// under the 0.33 rules diverges at step 7, where 0.33 schedules S.
#[test]
fn finding_31_a_preempted_head_starves_a_session_that_holds_its_blocks_on_0_24() {
    let dir = root().join("tests/conformance/findings");
    let log = dir.join("vllm-0.24/session-behind-head.jsonl.partial");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.lines().last().unwrap().contains("did not finish in 40 steps"));
    let schedules: Vec<&str> = text.lines().filter(|l| l.contains(r#""ev":"schedule""#)).collect();
    assert!(schedules[5].contains(r#""preempted":["P"]"#), "{}", schedules[5]);
    assert!(schedules[6..].iter().all(|l| l.contains(r#""scheduled":[]"#)), "nothing runs after step 6");
    assert!(schedules.last().unwrap().contains(r#""tables":{"S":[6,7]}"#), "S keeps its blocks");
    let finished = |text: &str, req: &str| {
        let who = format!(r#""req":"{req}","reason""#);
        text.lines().any(|l| l.contains(r#""ev":"finish""#) && l.contains(&who))
    };
    assert!(!finished(&text, "P") && !finished(&text, "S"));
    for variant in [None, Some("fix-session-hold")] {
        let r = conform::check(&log, "vllm-0.24", variant, 8).unwrap();
        assert!(r.divergence.is_none() && r.partial.is_some(), "{variant:?}: {:?}", r.divergence);
    }
    let d = conform::check(&log, "vllm-0.33", None, 8).unwrap().divergence.expect("0.33 serves S");
    assert_eq!(d.step, 7, "{}", d.what);
    for release in ["0.32", "0.33", "0.34"] {
        let log = dir.join(format!("vllm-{release}/session-behind-head.jsonl"));
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(finished(&text, "P") && finished(&text, "S"), "{release} finishes both");
        let r = conform::check(&log, &format!("vllm-{release}"), None, 8).unwrap();
        assert!(r.divergence.is_none() && r.partial.is_none(), "{release}: {:?}", r.divergence);
    }
}

/// Finding 33 on real vLLM (tests/conformance/findings/sessions-hold-pool.toml, found by
/// `gen_scenarios.py --kind stress`): two streaming sessions hold all of G1 between their
/// inputs; both take their next input in step 2 and each needs one more block. Nothing runs, so
/// nothing is preempted, and every release schedules nothing from step 2 on until the recorder
/// gives up; every recorded step conforms. The checker finds the same hang
/// (`models/stream-sessions-hold-pool.toml`, requests-finish, every profile).
#[test]
fn finding_33_streaming_sessions_that_hold_the_pool_hang_every_release() {
    let dir = root().join("tests/conformance/findings");
    for release in ["vllm-0.24", "vllm-0.32", "vllm-0.33", "vllm-0.34"] {
        let log = dir.join(format!("{release}/sessions-hold-pool.jsonl.partial"));
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.lines().last().unwrap().contains("did not finish in 30 steps"), "{release}");
        for s in ["A", "B"] {
            let start =
                format!(r#""ev":"turn_start","step":2,"req":"{s}","turn":2,"num_computed":3,"num_prompt_tokens":5"#);
            assert!(text.contains(&start), "{release}: {s} takes its next input in step 2");
        }
        let schedules: Vec<&str> = text.lines().filter(|l| l.contains(r#""ev":"schedule""#)).collect();
        assert_eq!(schedules.len(), 30, "{release}");
        assert!(schedules[1..].iter().all(|l| l.contains(r#""scheduled":[]"#)), "{release}: nothing from step 2");
        let r = conform::check(&log, release, None, 8).unwrap();
        assert!(r.divergence.is_none() && r.partial.is_some(), "{release}: {:?}", r.divergence);
        assert!(r.death.is_none(), "{release}: a hang is not the implementation raising");
    }
}

/// Finding 35 on real vLLM (tests/conformance/findings/fence-keyerror.toml, the checker's
/// counterexample on `models/stream-resume-fence.toml` written as a scenario): session S takes
/// its next input; before 0.33 the connector appends S's full table to its mirror, so the
/// store of S's first two-block chunk reads blocks [1, 1]. S ends while that copy runs, and
/// the copy's completion meets block 1's fence a second time: vLLM 0.24.0 and 0.32.0 raise
/// `KeyError: 1` in `_remove_pending_job`. 0.33.0 and 0.34.0 store [1, 2] and finish. Every
/// recorded step conforms, and the checker finds the crash on the same workload
/// (connector-assert under vllm-0.24 and vllm-0.32, 6 actions; it holds on 0.33 and 0.34).
#[test]
fn finding_35_a_store_listing_a_block_twice_kills_0_24_and_0_32() {
    let dir = root().join("tests/conformance/findings");
    for release in ["vllm-0.24", "vllm-0.32"] {
        let log = dir.join(format!("{release}/fence-keyerror.jsonl.partial"));
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.contains(r#""ev":"store","step":2,"job":0,"req":"S","keys":["S@2.1"],"blocks":[1,1]"#),
            "{release}"
        );
        assert!(text.contains(r#""ev":"finish","step":3,"req":"S""#), "{release}: S ends with its store in flight");
        assert!(text.lines().last().unwrap().contains("KeyError: 1"), "{release}");
        let r = conform::check(&log, release, None, 8).unwrap();
        assert!(r.divergence.is_none() && r.partial.is_some(), "{release}: {:?}", r.divergence);
        // From the last recorded state the model dies in the next step, the same way.
        let (prop, detail, inputs) = r.death.unwrap().found.expect("the model dies too");
        assert_eq!(prop, "connector-assert", "{release}");
        assert!(detail.contains("block 1 ") && detail.contains("KeyError"), "{release}: {detail}");
        assert_eq!(inputs.last().map(String::as_str), Some("step (copies finish within it)"), "{release}");
        let o = kvmc(&["conform", "--format", "json", "--profile", release, log.to_str().unwrap()]);
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let d = &v["logs"][0]["partial"]["model_death"];
        assert_eq!(d["property"], "connector-assert", "{release}: {v}");
        let c = check("stream-resume-fence", Some(release), None);
        assert_eq!(c.verdict("connector-assert"), Verdict::Violated, "{release}: the checker finds the crash");
        let path = c.outcome("connector-assert").unwrap().path.clone().unwrap();
        assert_eq!(path.len(), 6, "{release}");
    }
    for release in ["vllm-0.33", "vllm-0.34"] {
        let log = dir.join(format!("{release}/fence-keyerror.jsonl"));
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains(r#""blocks":[1,2]"#), "{release}: the mirror does not repeat");
        let r = conform::check(&log, release, None, 8).unwrap();
        assert!(r.divergence.is_none() && r.partial.is_none(), "{release}: {:?}", r.divergence);
        let c = check("stream-resume-fence", Some(release), None);
        assert_eq!(c.verdict("connector-assert"), Verdict::Holds, "{release}");
    }
}

/// The death search of a partial log is bounded, and a search cut by its bound says so: no
/// death found within the bound is not "the model does not die".
#[test]
fn a_death_search_cut_by_its_bound_says_so() {
    let s = scope("stream-resume-fence");
    let sys = s.system(Some("vllm-0.32"), None).unwrap();
    let e = sys.init();
    let cut = conform::death::after_within(&sys, &[&e], 1);
    assert!(cut.bounded && cut.found.is_none() && cut.states == 1, "{cut:?}");
    let whole = conform::death::after(&sys, &[&e]);
    assert!(!whole.bounded && whole.found.is_none(), "nothing dies from the initial state: {whole:?}");
}

/// Finding 36 on real vLLM (tests/conformance/findings/session-preempt-lost*.toml): under
/// async scheduling session S is preempted while the decode that ends its first input is in
/// flight. 0.24 and 0.32 enqueue the session and then take it out of the waiting queues with
/// the requests stopped while not running: with its next input queued before the stop, both
/// go idle with S unfinished; with the input sent while S is parked, 0.32 never schedules S
/// again (0.24 keeps a parked session in `skipped_waiting`, which it does not clear, and goes
/// on). 0.33 and 0.34 conform to the end. kvmc's 0.24 and 0.32 logs diverge at S's
/// `turn_start` (finding 34: the lost tokens are flagged, session-history, not modelled); the
/// checker finds both on the same workload (`models/stream-preempt-lost.toml`).
#[test]
fn finding_36_a_session_stopped_while_preempted_leaves_every_queue_on_0_24_and_0_32() {
    let dir = root().join("tests/conformance/findings");
    let text = |p: &str| std::fs::read_to_string(dir.join(p)).unwrap();
    let q024 = text("vllm-0.24/session-preempt-lost-queued.jsonl.partial");
    let q032 = text("vllm-0.32/session-preempt-lost-queued.jsonl.partial");
    for t in [&q024, &q032] {
        assert!(t.contains(r#""preempted":["S"]"#) && t.contains(r#""ev":"turn_end","step":3,"req":"S""#));
        assert!(t.lines().last().unwrap().contains("went idle with unfinished requests: S"));
    }
    let p032 = text("vllm-0.32/session-preempt-lost.jsonl.partial");
    assert!(p032.lines().last().unwrap().contains("did not finish in 30 steps"));
    let after: Vec<&str> = p032.lines().filter(|l| l.contains(r#""ev":"schedule""#)).skip(3).collect();
    assert!(!after.is_empty() && after.iter().all(|l| !l.contains(r#"["S","#)), "0.32 never schedules S again");
    assert!(text("vllm-0.24/session-preempt-lost.jsonl").contains(r#""ev":"finish","step":8,"req":"S""#));
    // Finding 34 modelled (layout `Lost`): every step of these logs conforms; on 0.24 the
    // parked S runs its next input from its one new token, with an extra decode step that the
    // overstated num_prompt_tokens lets through (step 7), and finishes.
    for (release, log) in [
        ("vllm-0.24", "vllm-0.24/session-preempt-lost.jsonl"),
        ("vllm-0.32", "vllm-0.32/session-preempt-lost.jsonl.partial"),
        ("vllm-0.24", "vllm-0.24/session-preempt-lost-queued.jsonl.partial"),
        ("vllm-0.32", "vllm-0.32/session-preempt-lost-queued.jsonl.partial"),
    ] {
        let r = conform::check(&dir.join(log), release, None, 8).unwrap();
        assert!(r.divergence.is_none(), "{log}: {:?}", r.divergence.map(|d| d.what));
        assert_eq!(r.partial.is_some(), log.ends_with(".partial"), "{log}");
        assert!(r.findings.iter().any(|(p, _)| p == "session-history"), "{log}: {:?}", r.findings);
    }
    let p024 = text("vllm-0.24/session-preempt-lost.jsonl");
    assert!(p024.contains(r#""ev":"turn_start","step":4,"req":"S","turn":2,"num_computed":0,"num_prompt_tokens":2"#));
    assert!(
        p024.contains(r#""ev":"schedule","step":5,"scheduled":[["S",1]],"new":["S"]"#),
        "S computes its one held token"
    );
    assert!(p024.contains(r#""ev":"schedule","step":7,"scheduled":[["S",1]]"#), "an extra decode: 2 + 2 - 1 < 2 + 2");
    for (release, log) in [
        ("vllm-0.33", "vllm-0.33/session-preempt-lost.jsonl"),
        ("vllm-0.34", "vllm-0.34/session-preempt-lost.jsonl"),
        ("vllm-0.33", "vllm-0.33/session-preempt-lost-queued.jsonl"),
    ] {
        let r = conform::check(&dir.join(log), release, None, 8).unwrap();
        assert!(r.divergence.is_none() && r.partial.is_none(), "{log}: {:?}", r.divergence);
    }
    for release in ["vllm-0.24", "vllm-0.32"] {
        let c = check("stream-preempt-lost", Some(release), None);
        assert_eq!(c.verdict("requests-finish"), Verdict::Violated, "{release}");
        assert_eq!(c.verdict("session-history"), Verdict::Violated, "{release}");
    }
    for release in ["vllm-0.33", "vllm-0.34"] {
        let c = check("stream-preempt-lost", Some(release), None);
        assert_eq!(c.verdict("requests-finish"), Verdict::Holds, "{release}");
        assert_eq!(c.verdict("session-history"), Verdict::Holds, "{release}");
    }
}

/// Finding 34 on real vLLM (tests/conformance/findings/session-lost-history.toml, from
/// `gen_scenarios.py --kind stress`, seed 519): under async scheduling session F is preempted
/// while its last decode is in flight, and that output ends its first input. On 0.24.0 and
/// 0.32.0 `_update_request_as_session` keeps the tokens up to `num_computed_tokens` (0): F's
/// next input starts with 27 prompt tokens counted (24 + the 3 new) but only the 3 new tokens
/// held, its prompt and its 7 kept outputs gone. 0.24 computes 3 tokens for it and later dies;
/// 0.32 never schedules it again. 0.33.0 and 0.34.0 keep everything but the last sampled token
/// (34 prompt tokens) and conform to the end. kvmc models the loss (layout `Lost`, rule
/// `session_keeps_computed_only`): both logs conform up to their recorder's marker.
#[test]
fn finding_34_a_preempted_session_loses_its_tokens_on_0_24_and_0_32() {
    let dir = root().join("tests/conformance/findings");
    let start =
        |n: u32| format!(r#""ev":"turn_start","step":13,"req":"F","turn":2,"num_computed":0,"num_prompt_tokens":{n}"#);
    for release in ["vllm-0.24", "vllm-0.32"] {
        let log = dir.join(format!("{release}/session-lost-history.jsonl.partial"));
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains(&start(27)), "{release}: F's next input keeps nothing");
        let r = conform::check(&log, release, None, 8).unwrap();
        assert!(r.divergence.is_none(), "{release}: {:?}", r.divergence.map(|d| d.what));
        assert!(r.partial.is_some(), "{release}");
        assert!(r.findings.iter().any(|(p, s)| p == "session-history" && *s == 13), "{release}: {:?}", r.findings);
    }
    let v024 = std::fs::read_to_string(dir.join("vllm-0.24/session-lost-history.jsonl.partial")).unwrap();
    assert!(v024.contains(r#"["F",3]"#), "0.24 computes F's 3 new tokens alone");
    // 0.24 stops F's second input at step 21 and again at 22: the decode scheduled in step 21,
    // which the overstated num_prompt_tokens let through, stops the parked F a second time
    // (finding 28's double stop; the recorder dies in step 24).
    assert!(v024.contains(r#""ev":"turn_end","step":22,"req":"F","turn":2"#));
    let v032 = std::fs::read_to_string(dir.join("vllm-0.32/session-lost-history.jsonl.partial")).unwrap();
    assert!(v032.lines().last().unwrap().contains("did not finish in 400 steps"));
    let after_13 =
        v032.lines().filter(|l| l.contains(r#""ev":"schedule""#)).skip_while(|l| !l.contains(r#""step":13,"#));
    assert!(
        after_13.clone().count() > 0 && after_13.clone().all(|l| !l.contains(r#"["F","#)),
        "0.32 never schedules F again"
    );
    // 0.24 keeps a lost session's block hashes (tests/conformance/findings/session-lost-old-kv.toml):
    // S holds its 3 new tokens alone, but its block 0 key is still the prefix it shared with B,
    // and 0.24.0 hands it B's cached block 1 (a 2-token prefix hit; kvmc: kv-read-integrity).
    let old = dir.join("vllm-0.24/session-lost-old-kv.jsonl");
    let text = std::fs::read_to_string(&old).unwrap();
    assert!(text.contains(r#""ev":"turn_start","step":4,"req":"S","turn":2,"num_computed":0,"num_prompt_tokens":5"#));
    assert!(text.contains(
        r#""scheduled":[["S",1]],"new":["S"],"resumed":[],"preempted":[],"finished":["B"],"tables":{"S":[1,3]}"#
    ));
    let r = conform::check(&old, "vllm-0.24", None, 8).unwrap();
    assert!(r.divergence.is_none() && r.partial.is_none(), "{:?}", r.divergence.map(|d| d.what));
    assert!(r.findings.iter().any(|(p, s)| p == "kv-read-integrity" && *s == 5), "{:?}", r.findings);
    for (release, log) in [
        ("vllm-0.32", "vllm-0.32/session-lost-old-kv.jsonl.partial"),
        ("vllm-0.33", "vllm-0.33/session-lost-old-kv.jsonl"),
        ("vllm-0.34", "vllm-0.34/session-lost-old-kv.jsonl"),
    ] {
        let r = conform::check(&dir.join(log), release, None, 8).unwrap();
        assert!(r.divergence.is_none(), "{log}: {:?}", r.divergence.map(|d| d.what));
        assert!(!r.findings.iter().any(|(p, _)| p == "kv-read-integrity"), "{log}: {:?}", r.findings);
    }
    for release in ["vllm-0.33", "vllm-0.34"] {
        let log = dir.join(format!("{release}/session-lost-history.jsonl"));
        assert!(std::fs::read_to_string(&log).unwrap().contains(&start(34)), "{release}");
        let r = conform::check(&log, release, None, 8).unwrap();
        assert!(r.divergence.is_none() && r.partial.is_none(), "{release}: {:?}", r.divergence);
    }
}

/// A session's other layouts name no block of the run (tests/conformance/findings/
/// session-layout-label.toml, `--kind stress` seed 523 on 0.24.0): A's first input stops while
/// a decode is in flight, that output joins the parked input and the next input cuts it off;
/// E's prompt later holds A's second input's tokens. The model named E's block 1 after A's
/// layout where the output came first (never taken in this run), `A@2.1`; the recorder names it
/// `E.1`, and so does the model now. At step 39 session D loses its history (finding 34, now
/// modelled: its 0.24 block hashes keep all six keys of its first input while it holds 3
/// tokens), and the log conforms to its end, where the model dies as vLLM does.
#[test]
fn a_session_layout_that_never_ran_names_no_block() {
    let log = root().join("tests/conformance/findings/vllm-0.24/session-layout-label.jsonl.partial");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains(r#""ev":"store","step":22,"job":3,"req":"E","keys":["E.1"]"#));
    assert!(text.contains(r#""ev":"turn_start","step":39,"req":"D","turn":2,"num_computed":0,"num_prompt_tokens":43"#));
    let r = conform::check(&log, "vllm-0.24", None, 8).unwrap();
    assert!(r.divergence.is_none(), "{:?}", r.divergence.map(|d| d.what));
    assert!(r.findings.iter().any(|(p, s)| p == "session-history" && *s == 39), "{:?}", r.findings);
    let (prop, _, _) = r.death.unwrap().found.expect("the model dies too");
    assert_eq!(prop, "queue-sound");
}

/// Finding 37 on real vLLM (tests/conformance/findings/session-outgrows-len.toml, seed 523
/// scenario 387): 0.24 keeps session C's first `max_tokens`, C grows past `max_model_len` (60),
/// and the step after its last prefill schedules it -4 tokens (logged as such); the next
/// `update_from_output` asserts. Every recorded step conforms and the model dies there
/// (tokens-positive). 0.32+ honour each input's `max_tokens` and conform to the end; with three
/// more inputs C outgrows it there too (session-outgrows-clamped), and the cap is clamped at 0.
#[test]
fn finding_37_a_session_past_max_model_len_is_scheduled_negative_tokens_and_0_24_dies() {
    let dir = root().join("tests/conformance/findings");
    let log = dir.join("vllm-0.24/session-outgrows-len.jsonl.partial");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains(r#""ev":"turn_start","step":51,"req":"C","turn":4,"num_computed":59,"num_prompt_tokens":63"#));
    assert!(text.contains(r#""ev":"schedule","step":52,"scheduled":[["C",-4]]"#));
    assert!(text.lines().last().unwrap().contains(r#""ev":"partial","step":53,"error":"AssertionError"#));
    let r = conform::check(&log, "vllm-0.24", None, 8).unwrap();
    assert!(r.divergence.is_none() && r.partial.is_some(), "{:?}", r.divergence);
    let (prop, detail, inputs) = r.death.unwrap().found.expect("the model dies too");
    assert_eq!(prop, "tokens-positive");
    assert!(detail.contains("C was scheduled -4 tokens"), "{detail}");
    assert_eq!(inputs.len(), 1, "{inputs:?}: the next step");
    // A negative count only in a schedule line's counts: an arrival's max_tokens stays a u32.
    let bad = text.replacen(r#""max_tokens":6"#, r#""max_tokens":-6"#, 1);
    assert!(conform::log::parse(&log, &bad, true).is_err());
    // Seed 540 scenario 24: session E, 66 prompt tokens over 64, the OffloadingConnector.
    let log = dir.join("vllm-0.24/session-outgrows-offload.jsonl.partial");
    assert!(std::fs::read_to_string(&log).unwrap().contains(r#""scheduled":[["E",-3]]"#));
    let r = conform::check(&log, "vllm-0.24", None, 8).unwrap();
    assert!(r.divergence.is_none() && r.partial.is_some(), "{:?}", r.divergence);
    assert_eq!(r.death.unwrap().found.expect("the model dies too").0, "tokens-positive");
    for release in ["vllm-0.32", "vllm-0.33", "vllm-0.34"] {
        for name in ["session-outgrows-len", "session-outgrows-clamped"] {
            let log = dir.join(format!("{release}/{name}.jsonl"));
            let r = conform::check(&log, release, None, 8).unwrap();
            assert!(r.divergence.is_none() && r.partial.is_none(), "{release} {name}: {:?}", r.divergence);
        }
        let text = std::fs::read_to_string(dir.join(format!("{release}/session-outgrows-clamped.jsonl"))).unwrap();
        assert!(text.contains(r#""req":"C","turn":7,"num_computed":59,"num_prompt_tokens":63"#), "{release}");
        assert!(!text.contains(",-"), "{release}: no negative count");
    }
}
