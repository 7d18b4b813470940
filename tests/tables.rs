//! The tables kvmc keeps in one place: every switch of `Rules` has its row in the rules table
//! (docs/rules.md, `kvmc list --rules`, `Display for Rules`); every property of the catalogue
//! maps to what replay evaluates (always-properties) or reports as reached (guards); and the
//! fix-final-store variant, whose switch the rules table gained.

use crate::common::*;
use kvmc::check::Verdict;
use kvmc::model::Action;
use kvmc::props::{Kind, REGISTRY};
use kvmc::replay::invariants;
use kvmc::replay::{run_trace, Options};
use kvmc::scope::replay::ReplayModel;
use kvmc::system::ghost::Breach;
use kvmc::system::rules::{self, RULE_ROWS};
use kvmc::system::{Direction, Event, Events};
use stateright::Model;

/// The top-level field names of a `{:?}`-printed struct (`Name { a: x, b: Some(y) }`).
fn debug_fields(s: &str) -> Vec<String> {
    let body = s.split_once(" { ").map(|x| x.1).unwrap_or("").trim_end_matches(" }");
    body.split(", ").map(|f| f.split(':').next().unwrap_or("").to_string()).collect()
}

/// Every switch of `Rules` has exactly one row, and so appears in `Display for Rules`, in
/// `kvmc list --rules` and docs/rules.md (generated_docs_match_the_code keeps the file equal).
/// Two switches once had none (`aux_clamp_exempts_resumed`, `aux_emit_last_token`); the
/// struct and its rows now come from one macro (src/system/rules/table.rs).
#[test]
fn every_rules_switch_has_one_row() {
    let r = rules::resolve("vllm-0.33", None).unwrap();
    let fields = debug_fields(&format!("{r:?}"));
    let rows: Vec<&str> = RULE_ROWS.iter().map(|row| row.name).collect();
    assert!(fields.len() > 40, "{fields:?}");
    assert_eq!(fields, rows, "the rules table lists every switch of Rules once, in field order");
    let shown = r.to_string();
    let listed = stdout(&kvmc(&["list", "--rules"]));
    for f in &fields {
        assert!(shown.lines().any(|l| l.split_whitespace().next() == Some(f.as_str())), "Display lacks {f}");
        assert!(listed.contains(&format!("| `{f}` |")), "kvmc list --rules lacks {f}");
    }
    for f in ["aux_clamp_exempts_resumed", "aux_emit_last_token", "final_store_waits"] {
        assert!(rows.contains(&f), "{f}");
    }
}

/// Every always-property is evaluated by replay and every reachability guard is reported by
/// it when reached, both read from the property's catalogue entry (its ghost breaches, mark
/// or predicate), so a property without a replay mapping fails here.
#[test]
fn every_property_and_guard_has_a_replay_mapping() {
    for p in REGISTRY {
        match p.kind {
            Kind::Always => assert!(invariants::handles(p.name), "replay does not evaluate {}", p.name),
            Kind::Sometimes => assert!(invariants::reports(p.name), "replay cannot report {} as reached", p.name),
        }
    }
    let guards = REGISTRY.iter().filter(|p| p.kind == Kind::Sometimes).count();
    assert_eq!(guards, 35);
}

/// Replay's "situations reached" once left out the guards its own list did not map
/// (reach-readmit-full-table, reach-stale-pin, reach-partial-store, reach-host-refresh among
/// them). SimpleCPU under vllm-main on the first 100 rows of the real trace, with a CPU pool
/// under pressure, reaches all four; the run reaches the end (reach-all-finished).
#[test]
fn replay_reports_every_guard_it_reaches() {
    let model = simple_cpu_replay_model("vllm-main");
    let d = tempdir("reached");
    let t = real_trace_head(100);
    let m = ReplayModel::parse("m", &d.join("m.toml"), &model).expect("model parses");
    let opts =
        Options { out_dir: Some(d.clone()), skip_properties: vec!["final-store-kept".into()], ..Default::default() };
    let o = run_trace(&t, &m, &opts).expect("replay runs");
    assert!(o.finding.is_none(), "{:?}", o.finding);
    assert_eq!(
        o.checks.reached,
        [
            "reach-g1-hit",
            "reach-g1-eviction",
            "reach-preemption",
            "reach-host-hit",
            "reach-host-eviction",
            "reach-store-done",
            "reach-restart",
            "reach-finish-store",
            "reach-readmit-full-table",
            "reach-stale-pin",
            "reach-partial-store",
            "reach-host-refresh",
            "reach-all-finished",
        ]
    );
}

/// fix-final-store (not in vLLM): a finished request keeps its blocks until its last store
/// is accepted and copied, and a store refused for lack of room is offered again while a
/// transfer in flight can make room. It holds on final-store under every profile with a
/// finish-time store, with the refusal reached (specs/final-store-kept.toml); 0.24 has no
/// finish-time store, so nothing is kept there.
#[test]
fn the_final_store_fix_holds_where_releases_lose_the_store() {
    for profile in ["vllm-0.33", "vllm-0.32", "vllm-main", "prime-rl"] {
        assert_eq!(check("final-store", Some(profile), None).verdict("final-store-kept"), Verdict::Violated);
        let fixed = check("final-store", Some(profile), Some("fix-final-store"));
        assert_eq!(fixed.verdict("final-store-kept"), Verdict::Holds, "{profile}");
        assert_eq!(fixed.verdict("requests-finish"), Verdict::Holds, "{profile}");
        assert!(
            fixed.outcome("reach-store-refused").is_some_and(|o| o.discovered),
            "{profile}: the refusal is reached"
        );
    }
    let old = check("final-store", Some("vllm-0.24"), Some("fix-final-store"));
    assert_eq!(old.verdict("final-store-kept"), Verdict::Violated);
}

/// The released counterexample (R finishes while L's load pins the host tier's one chunk;
/// R's last store is refused and lost) run again under fix-final-store: the refusal happens,
/// R keeps its blocks, its store is offered again once L's load lands, and R's blocks are
/// freed only after that store was copied.
#[test]
fn the_final_store_fix_retries_after_the_pin_goes() {
    let released = check("final-store", None, None);
    let path = released.outcome("final-store-kept").and_then(|o| o.path.clone()).expect("a counterexample");
    let m = model("final-store", None, Some("fix-final-store"));
    let r = m.scope.workload.requests.iter().position(|q| q.name == "R").expect("R") as u16;
    let mut e = m.init_states().remove(0).engine;
    let mut events = Vec::new();
    for a in &path {
        let mut ev = Events::on();
        e = m.apply(&e, *a, &mut ev, false).unwrap_or_else(|| panic!("{a:?} applies under the fix"));
        events.extend(ev.list);
    }
    let refused = events.iter().any(|x| matches!(x, Event::StoreRefused { req, .. } if *req == r));
    assert!(refused, "R's last store is refused along the released counterexample: {events:?}");
    assert!(!e.ghost.has(Breach::FinalStoreLost));
    assert!(!e.reqs[r as usize].table.is_empty(), "R keeps its blocks while its store waits");
    // Run on: loads land first, then stores, then steps.
    for _ in 0..50 {
        let order = [Action::TransferDone(Direction::Load), Action::TransferDone(Direction::Store), Action::Step];
        let mut ev = Events::on();
        let Some(next) = order.iter().find_map(|a| m.apply(&e, *a, &mut ev, false)) else { break };
        e = next;
        events.extend(ev.list);
    }
    assert!(!e.has_work(), "everything finished and was released");
    assert!(!e.ghost.has(Breach::FinalStoreLost));
    let at = |f: &dyn Fn(&Event) -> bool| events.iter().position(f);
    let refusal = at(&|x| matches!(x, Event::StoreRefused { req, .. } if *req == r)).unwrap();
    let store = at(&|x| matches!(x, Event::StoreJob { req, .. } if *req == r)).expect("R's store is offered again");
    let job = match &events[store] {
        Event::StoreJob { job, .. } => *job,
        _ => unreachable!(),
    };
    let landed = at(&|x| matches!(x, Event::JobCompleted { job: j } if *j == job)).expect("and lands");
    let freed = at(&|x| matches!(x, Event::Freed { req, .. } if *req == r)).expect("R's blocks are freed");
    assert!(refusal < store && store < landed && landed < freed, "{refusal} {store} {landed} {freed}");
}
