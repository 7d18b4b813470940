//! Conformance logs that are new (issue 19, item 17): the recorded step in which vLLM 0.33
//! lists a resumed request after the new ones.

use crate::common::*;
use kvmc::conform;
use kvmc::system::connector::{SchedOut, Scheduled};
use kvmc::system::rules;
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    root().join(format!("tests/conformance/fixtures/{name}.jsonl"))
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
    };
    // Running X, then admitted: B (resumed after a preemption), C (new).
    let mut out =
        SchedOut { scheduled: vec![s(0, false, false), s(1, true, true), s(2, true, false)], ..Default::default() };
    let order = |o: &SchedOut| o.yield_order().map(|x| x.req).collect::<Vec<_>>();
    out.resumed_after_new = true;
    assert_eq!(order(&out), vec![2, 1, 0], "0.24 to 0.33: new, then resumed, then running");
    out.resumed_after_new = false;
    assert_eq!(order(&out), vec![1, 2, 0], "0.34: admission order, then running");
    // Every profile kvmc models lists resumed requests last (0.24 and 0.32 have the same
    // `scheduled_new_reqs.extend(scheduled_resumed_reqs)` under Model Runner V2).
    for p in rules::PROFILES {
        assert!((p.rules)().resumed_after_new, "{}", p.name);
    }
    let o = kvmc(&["list", "--rules"]);
    assert!(stdout(&o).contains("resumed_after_new"), "{}", stdout(&o));
}
