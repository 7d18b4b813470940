//! Round trips: a counterexample written out as a scenario replays to the same violation.

use crate::common::*;
use kvmc::check::replay;
use kvmc::scope::scenario::scenario_actions;

#[test]
fn counterexample_scenario_replays_to_the_same_violation() {
    let d = tempdir("rt");
    let o = kvmc(&[
        "check",
        "models/preempt-store.toml",
        "--variant",
        "pre-29870",
        "--property",
        "kv-read-integrity",
        "--out",
        d.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(10));
    let scen = d.join("preempt-store__vllm-0.33__pre-29870__kv-read-integrity.scenario.toml");
    let m = model("preempt-store", None, Some("pre-29870"));
    let acts = scenario_actions(&m.sys, &scen).expect("scenario resolves");
    let r = check("preempt-store", None, Some("pre-29870"));
    assert_eq!(&acts, r.outcome("kv-read-integrity").unwrap().path.as_ref().unwrap());
    let states = replay(&m, &acts).unwrap();
    let def = kvmc::props::find("kv-read-integrity").unwrap();
    assert!(!(def.check)(&m.sys, &states.last().unwrap().engine));
    // and the explorer accepts it (dry run: resolve the path, print the URL)
    let o = kvmc(&[
        "explore",
        "models/preempt-store.toml",
        "--variant",
        "pre-29870",
        "--path",
        scen.to_str().unwrap(),
        "--dry-run",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("&path=0/"), "{}", stdout(&o));
}

#[test]
fn a_scenario_with_an_impossible_action_is_an_input_error() {
    let d = tempdir("rtbad");
    let p = d.join("s.toml");
    std::fs::write(&p, "actions = [\"arrive A\", \"store copy done\"]\n").unwrap();
    let o = kvmc(&["explore", "models/preempt-store.toml", "--path", p.to_str().unwrap(), "--dry-run"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("action 2 (\"store copy done\") is not enabled"), "{}", stderr(&o));
}
