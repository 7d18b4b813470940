//! `kvmc testgen`: recorder scenarios that together cover every decision kind ("rule
//! branch": an engine or connector event, qualified where one event has several outcomes, e.g.
//! a lookup that hits, misses or asks to retry) and every environment action kind the
//! exploration of a model reaches. A connector team records them against its own
//! implementation and conforms the logs (docs/conformance.md, "Test generation").
//!
//! The exploration is a breadth-first search of the model (canonical states, parent links);
//! the first transition that shows an item is its witness, so each witness path is a
//! shortest one. Witnesses are taken longest first, and one is kept only if it shows an item
//! the kept ones do not (each kept path is replayed for everything it shows): a greedy cover.
//! Each kept path becomes a scenario through [`super::reproduce::to_recorder`].

use super::reproduce::{to_recorder, Reproduction};
use crate::model::{Action, KvModel, KvState};
use crate::system::{Event, Events, Input};
use stateright::Model;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The coverage items an event shows.
fn event_item(e: &Event) -> Option<String> {
    let name = |e: &Event| {
        let d = format!("{e:?}");
        d.split(|c: char| !c.is_alphanumeric()).next().unwrap_or_default().to_string()
    };
    Some(match e {
        Event::Lookup { local, external, load_async, .. } => match external {
            None => "lookup: retry later (null)".into(),
            Some(0) if *local > 0 => "lookup: G1 hit only".into(),
            Some(0) => "lookup: miss".into(),
            Some(_) if *load_async => "lookup: host hit, async load".into(),
            Some(_) => "lookup: host hit, sync load".into(),
        },
        Event::Admitted { resumed, num_computed, .. } => {
            format!(
                "admit{}{}",
                if *resumed { " (resumed)" } else { "" },
                if *num_computed > 0 { " with a hit" } else { "" }
            )
        }
        Event::Promoted { failed, .. } => {
            format!("promoted after a{} load", if *failed { " failed" } else { "n async" })
        }
        Event::LoadJob { sync, .. } => format!("load job ({})", if *sync { "sync" } else { "async" }),
        Event::JobsToFlush { jobs } if jobs.is_empty() => return None,
        Event::Finished { reason, .. } => format!("finish ({reason:?})"),
        Event::Violation { property, .. } => format!("violation ({property})"),
        Event::Arrived { .. } | Event::Scheduled { .. } | Event::StepScheduled { .. } | Event::Freed { .. } => {
            return None
        }
        other => name(other),
    })
}

fn action_item(a: &Action) -> String {
    match a {
        Input::Arrive(_) => "action: arrive".into(),
        Input::Step => "action: step".into(),
        Input::StepDrain => "action: step (copies finish within it)".into(),
        Input::StepStoresDrain => "action: step (stores finish within it)".into(),
        Input::StepSyncLoadFails(_) => "action: step (sync load fails)".into(),
        Input::TransferDone(d) => format!("action: {d:?} copy done").to_lowercase(),
        Input::LoadFails(_) => "action: load fails".into(),
        Input::Abort(_) => "action: abort".into(),
        Input::Error(_) => "action: error".into(),
        Input::StreamInput(_) => "action: next session input".into(),
        Input::ConsumerRead(_) => "action: consumer read".into(),
        Input::Decode(_) => "action: decode instance".into(),
    }
}

fn items_of(a: &Action, ev: &Events) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = ev.list.iter().filter_map(event_item).collect();
    out.insert(action_item(a));
    out
}

/// What `testgen` made of a model.
pub struct TestSuite {
    pub unique_states: usize,
    /// The exploration stopped at the state bound (coverage is of what it reached).
    pub truncated: bool,
    /// Every item the exploration reached, with the scenario (index) that covers it.
    pub items: BTreeMap<String, usize>,
    pub scenarios: Vec<Reproduction>,
}

/// Explore `model` (at most `max_states` states) and write a covering set of scenarios named
/// `{name}-tNN`.
pub fn generate(model: &KvModel, name: &str, source: &str, max_states: usize) -> Result<TestSuite, String> {
    let init = model.init();
    let mut states: Vec<KvState> = vec![init.clone()];
    let mut parent: Vec<Option<(usize, Action)>> = vec![None];
    let mut seen: HashMap<KvState, usize> = HashMap::from([(init, 0)]);
    // item -> (the state its witness transition reaches, by index)
    let mut witness: BTreeMap<String, usize> = BTreeMap::new();
    let mut truncated = false;
    let mut i = 0;
    while i < states.len() {
        let s = states[i].clone();
        let mut acts = Vec::new();
        model.actions(&s, &mut acts);
        for a in acts {
            let mut ev = Events::on();
            let Some(engine) = model.apply(&s.engine, a, &mut ev, true) else { continue };
            let next = KvState { engine, sys: s.sys.clone() };
            let fresh: Vec<String> = items_of(&a, &ev).into_iter().filter(|x| !witness.contains_key(x)).collect();
            let idx = match seen.get(&next) {
                Some(&j) if fresh.is_empty() => j,
                _ if states.len() >= max_states => {
                    truncated = true;
                    continue;
                }
                // A known state reached by a new transition: keep a copy with this parent.
                _ => {
                    states.push(next.clone());
                    parent.push(Some((i, a)));
                    seen.entry(next).or_insert(states.len() - 1);
                    states.len() - 1
                }
            };
            for x in fresh {
                witness.insert(x, idx);
            }
        }
        i += 1;
    }
    let path = |mut k: usize| {
        let mut p = Vec::new();
        while let Some((j, a)) = parent[k] {
            p.push(a);
            k = j;
        }
        p.reverse();
        p
    };
    let mut order: Vec<(usize, usize)> = witness.values().map(|&k| (path(k).len(), k)).collect();
    order.sort_by(|a, b| b.cmp(a));
    order.dedup();
    let mut items: BTreeMap<String, usize> = BTreeMap::new();
    let mut scenarios = Vec::new();
    for (_, k) in order {
        let p = path(k);
        let mut shown = BTreeSet::new();
        let mut e = model.init().engine;
        for a in &p {
            let mut ev = Events::on();
            e = model.apply(&e, *a, &mut ev, false).ok_or("a witness path does not replay")?;
            shown.extend(items_of(a, &ev));
        }
        if shown.iter().all(|x| items.contains_key(x)) {
            continue;
        }
        let n = scenarios.len();
        let sname = format!("{name}-t{:02}", n + 1);
        scenarios.push(to_recorder(model, &p, &sname, source, false)?);
        for x in shown {
            items.entry(x).or_insert(n);
        }
    }
    let missing: Vec<&String> = witness.keys().filter(|x| !items.contains_key(*x)).collect();
    if !missing.is_empty() {
        return Err(format!("internal: items without a scenario: {missing:?}"));
    }
    Ok(TestSuite { unique_states: seen.len(), truncated, items, scenarios })
}
