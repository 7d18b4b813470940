//! A log's run through the model, step by step, for the explorer (src/explorer/conform.rs):
//! the model state after every step up to the first divergence (or the log's end), with the
//! step's events, under the orders of vLLM's sets that matched the log (the report's
//! `choices`; at the diverging step, the orders the divergence is shown under).

use super::log::{self, Line};
use super::{check_text, replay, scope_of, validate, Report};
use crate::error::{KvmcError, Result};
use crate::system::choice::{Choices, Item};
use crate::system::{Engine, Event, Events, System};
use std::path::Path;

/// One step of the model beside the log.
pub struct TrailStep {
    pub step: u32,
    /// The model after the step.
    pub engine: Engine,
    pub events: Vec<Event>,
    /// The log's lines of this step (inputs and decisions), in log order.
    pub lines: Vec<Line>,
}

/// The log's header, the report `kvmc conform` gives, the system the model ran, and the
/// model state before the first step and after each step up to the divergence.
pub struct Trail {
    pub header: log::Header,
    pub report: Report,
    pub sys: System,
    pub init: Engine,
    pub steps: Vec<TrailStep>,
}

/// Run the log at `path` (its text) through the model as `kvmc conform` does, and keep the
/// model's states.
pub fn trail(path: &Path, text: &str, profile: &str, variant: Option<&str>, window: usize) -> Result<Trail> {
    let report = check_text(path, text, profile, variant, window)?;
    let (body, partial) = validate::split_partial(path, text)?;
    let (h, lines) = log::parse(path, body, partial.is_some())?;
    let bad = validate::bad_transfer(&lines, h.connector == "simple-cpu");
    // The sampled lines the implementation dropped, as `check_text` finds them.
    let mut dropped: Vec<usize> = Vec::new();
    loop {
        let (_, newly) =
            replay::replay(path, &h, &lines, &dropped, profile, variant, window, bad.as_ref(), false, false)?;
        if newly.is_empty() {
            break;
        }
        dropped.extend(newly);
    }
    let rules = crate::system::rules::resolve(profile, variant).map_err(KvmcError::Usage)?;
    let scope = scope_of(path, &h, &lines, &dropped, &rules, false)?;
    let sys = scope.system(Some(profile), variant).map_err(KvmcError::Usage)?;
    let ctx = sys.ctx();
    let idx = |name: &str| scope.workload.requests.iter().position(|r| r.name == name).expect("validated") as u16;
    let name = |x: Item| match x {
        Item::Req(r) => scope.workload.requests[r as usize].name.clone(),
        Item::Key(k) => scope.workload.label(k),
    };
    let init = sys.init();
    let mut engine = init.clone();
    let last = report.divergence.as_ref().map_or(report.steps, |d| d.step);
    let mut steps = Vec::new();
    for step in 1..=last {
        let this: Vec<&Line> = lines.iter().filter(|l| l.ev.step() == step && !dropped.contains(&l.no)).collect();
        // The orders that matched the log in this step (at a divergence: those it is shown under).
        let wanted: Vec<(&str, Vec<String>)> = match &report.divergence {
            Some(d) if d.step == step => d.under.iter().map(|c| (c.point, c.chosen.clone())).collect(),
            _ => report.choices.iter().filter(|c| c.step == step).map(|c| (c.point, c.chosen.clone())).collect(),
        };
        let hints = replay::step_hints(&sys.workload, &this);
        let mut plan = Some(Vec::new());
        let mut first: Option<(Engine, Vec<Event>)> = None;
        let mut found = None;
        while let Some(p) = plan.take() {
            let mut e = engine.clone();
            let mut ev = Events::on();
            ev.choices = Some(Box::new(Choices::with_hints(p, hints.clone())));
            replay::apply_step(&mut e, ctx, &this, &idx, &mut ev);
            let taken = ev.choices.take().map(|c| *c).unwrap_or_default();
            plan = taken.next_plan();
            let here: Vec<(&str, Vec<String>)> =
                taken.taken.iter().map(|c| (c.point.as_str(), c.chosen.iter().map(|&x| name(x)).collect())).collect();
            if here == wanted {
                found = Some((e, ev.list));
                break;
            }
            first.get_or_insert((e, ev.list));
        }
        let (e, events) = found.or(first).expect("a step runs under at least one plan");
        engine = e.clone();
        steps.push(TrailStep { step, engine: e, events, lines: this.into_iter().cloned().collect() });
    }
    Ok(Trail { header: h, report, sys, init, steps })
}
