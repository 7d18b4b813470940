//! One replay of a log against the model, as trace validation: the model's nondeterminism
//! (the orders in which vLLM walks a Python set; src/system/choice.rs) is searched at every
//! step. The replay keeps every model state consistent with the log so far (the frontier,
//! deduplicated); a step is run from each of them under every resolution of its choice points,
//! and the states whose decisions match the log's are kept. The log diverges when none is left.

use super::compare::{self, Memo};
use super::log::{Ev, Header, Line};
use super::validate::BadTransfer;
use super::{kv_events, model_counts, scope_of, Divergence, Report, StepChoice};
use crate::error::{KvmcError, Result};
use crate::props::{self, Kind};
use crate::system::choice::{Choices, Item, Point, MAX_PERMUTED};
use crate::system::connector::simple_cpu::worker::LOAD_EVENT;
use crate::system::engine::StepInput;
use crate::system::{Engine, Events};
use std::path::Path;

/// Resolutions of one step's choice points tried from one state (9!: the orders of one set of
/// up to 9 ids, or of two of 0.24's key sets of 6 and 5 keys, 86,400; about 10 s at worst).
pub const MAX_RESOLUTIONS: u32 = 362_880;
/// Model states kept consistent with the log at once.
pub const MAX_STATES: usize = 64;

/// A model state consistent with the log so far, with what its path found.
#[derive(Clone)]
struct Branch {
    engine: Engine,
    memo: Memo,
    findings: Vec<(String, u32)>,
    kv_counts: Vec<(u32, kv_events::Counts)>,
    /// Async scheduling: what the model cached, evicted, stored and evicted since the last
    /// `update_from_output`, which publishes it (`Scheduler.update_from_output` takes the
    /// KV cache manager's and the connector's events).
    kv_unpublished: kv_events::Counts,
    choices: Vec<StepChoice>,
}

/// One replay of the log; also returns the sampled lines the model did not append before the
/// first divergence (if any), which the next replay leaves out.
#[allow(clippy::too_many_arguments)]
pub(super) fn replay(
    path: &Path,
    h: &Header,
    lines: &[Line],
    dropped: &[usize],
    profile: &str,
    variant: Option<&str>,
    window: usize,
    bad: Option<&BadTransfer>,
    raised: bool,
    unsent_next: bool,
) -> Result<(Report, Vec<usize>)> {
    let rules = crate::system::rules::resolve(profile, variant).map_err(KvmcError::Usage)?;
    let mut scope = scope_of(path, h, lines, dropped, &rules, unsent_next)?;
    let kv_cpu_as_gpu = h.connector == "simple-cpu" && !rules.scpu_cpu_kv_events;
    let safety: Vec<_> = props::REGISTRY
        .iter()
        .filter(|p| p.kind == Kind::Always && props::applies(p, &scope.cfg) && p.id != props::PropId::RequestsFinish)
        .collect();
    let sys = scope.system(Some(profile), variant).map_err(KvmcError::Usage)?;
    // The profile's workload (0.24 keys a session's later inputs by unrehashed hashes): labels
    // and comparisons name the keys the model uses.
    scope.workload = sys.workload.clone();
    let ctx = sys.ctx();
    let idx = |name: &str| scope.workload.requests.iter().position(|r| r.name == name).expect("validated") as u16;
    let name = |r: u16| scope.workload.requests[r as usize].name.clone();
    let item = |x: Item| match x {
        Item::Req(r) => name(r),
        Item::Key(k) => scope.workload.label(k),
    };
    let last = lines.last().map_or(0, |l| l.ev.step());
    let snapshots: Vec<&str> = [
        ("schedule", lines.iter().any(|l| matches!(l.ev, Ev::Schedule { .. }))),
        ("g1", lines.iter().any(|l| matches!(l.ev, Ev::G1 { .. }))),
        ("host", lines.iter().any(|l| matches!(l.ev, Ev::Host { .. }))),
        ("cpu", lines.iter().any(|l| matches!(l.ev, Ev::Cpu { .. }))),
        ("mooncake", lines.iter().any(|l| matches!(l.ev, Ev::Mooncake { .. }))),
        ("nixl", lines.iter().any(|l| matches!(l.ev, Ev::Nixl { .. }))),
    ]
    .iter()
    .filter(|(_, on)| *on)
    .map(|(k, _)| *k)
    .collect();
    let mut frontier = vec![Branch {
        engine: sys.init(),
        memo: Memo::default(),
        findings: Vec::new(),
        kv_counts: Vec::new(),
        kv_unpublished: kv_events::Counts::new(),
        choices: Vec::new(),
    }];
    let mut decisions = 0;
    let mut bounded: Option<String> = None;
    let report = |decisions, steps, b: &Branch, divergence, bounded: &Option<String>| Report {
        steps,
        decisions,
        divergence,
        findings: b.findings.clone(),
        kv_counts: b.kv_counts.clone(),
        kv_cpu_as_gpu,
        partial: None,
        choices: b.choices.clone(),
        search_bound: bounded.clone(),
        death: None,
    };
    for step in 1..=last {
        let this: Vec<&Line> = lines.iter().filter(|l| l.ev.step() == step && !dropped.contains(&l.no)).collect();
        decisions += this.iter().filter(|l| !l.ev.is_input()).count();
        let mut next: Vec<Branch> = Vec::new();
        // The divergence that comes latest in the log (the resolution that explains most of
        // it; the first such one in search order), and its step's choices.
        let mut best: Option<(Divergence, Vec<StepChoice>, u32)> = None;
        let mut drop_first: Option<Vec<usize>> = None;
        let mut tried_total = 0;
        let hints = step_hints(&scope.workload, &this);
        // A set of this step too large to search every order of (a divergence here is then
        // no verdict).
        let mut unsearched: Option<String> = None;
        for b in &frontier {
            let mut plan = Some(Vec::new());
            let mut matched: Vec<(Branch, Vec<StepChoice>)> = Vec::new();
            let mut tried = 0;
            while let Some(p) = plan.take() {
                if tried == MAX_RESOLUTIONS {
                    bounded.get_or_insert(format!(
                        "step {step}: more than {MAX_RESOLUTIONS} orders of vLLM's sets from one model state"
                    ));
                    break;
                }
                tried += 1;
                let mut engine = b.engine.clone();
                let mut ev = Events::on();
                ev.choices = Some(Box::new(Choices::with_hints(p, hints.clone())));
                let (queued, processed) = apply_step(&mut engine, ctx, &this, &idx, &mut ev);
                let taken = ev.choices.take().map(|c| *c).unwrap_or_default();
                plan = taken.next_plan();
                if let Some(c) = taken.taken.iter().find(|c| !c.exhaustive) {
                    unsearched.get_or_insert_with(|| {
                        format!(
                            "step {step}: {} has {} items, more than kvmc searches every order of ({MAX_PERMUTED}); only the model's order and the log's were tried",
                            c.point.as_str(),
                            c.canonical.len()
                        )
                    });
                }
                let here: Vec<StepChoice> = taken
                    .taken
                    .iter()
                    .map(|c| StepChoice {
                        step,
                        point: c.point.as_str(),
                        canonical: c.canonical.iter().map(|&x| item(x)).collect(),
                        chosen: c.chosen.iter().map(|&x| item(x)).collect(),
                        orders: c.count,
                        tried: 0,
                        matching: 0,
                    })
                    .collect();
                // A logged sample the model did not append: the implementation dropped it.
                let appended: Vec<String> = ev
                    .list
                    .iter()
                    .filter_map(|e| match e {
                        crate::system::Event::Sampled { req, .. } => Some(name(*req)),
                        _ => None,
                    })
                    .collect();
                let newly: Vec<usize> = this
                    .iter()
                    .filter(|l| matches!(&l.ev, Ev::Sampled { req, .. } if !appended.contains(req)))
                    .map(|l| l.no)
                    .collect();
                if !newly.is_empty() {
                    drop_first.get_or_insert(newly);
                    continue;
                }
                let mut memo = b.memo.clone();
                let diverged = compare::step(&scope, &engine, step, &this, &ev.list, &queued, &snapshots, &mut memo);
                match diverged {
                    Some(d) => {
                        if best.as_ref().is_none_or(|(x, _, _)| d.line > x.line) {
                            best = Some((d, here, 0));
                        }
                    }
                    None => {
                        let mut nb = Branch { engine, memo, ..b.clone() };
                        let c = model_counts(&ev.list, kv_cpu_as_gpu, h.connector != "mooncake");
                        if !h.async_scheduling {
                            if !c.is_empty() {
                                nb.kv_counts.push((step, c));
                            }
                        } else {
                            // Published by the next step that processes a batch's output
                            // (this one, if it does): a step that only schedules keeps them.
                            for (m, (st, rm)) in c {
                                let e = nb.kv_unpublished.entry(m).or_default();
                                e.0 += st;
                                e.1 += rm;
                            }
                            if processed && !nb.kv_unpublished.is_empty() {
                                nb.kv_counts.push((step, std::mem::take(&mut nb.kv_unpublished)));
                            }
                        }
                        for p in &safety {
                            if !(p.check)(&sys, &nb.engine) && !nb.findings.iter().any(|(n, _)| n == p.name) {
                                nb.findings.push((p.name.to_string(), step));
                            }
                        }
                        nb.engine.ghost.marks = 0;
                        matched.push((nb, here));
                    }
                }
            }
            tried_total += tried;
            let n = matched.len() as u32;
            for (mut nb, mut here) in matched {
                for c in &mut here {
                    (c.tried, c.matching) = (tried, n);
                }
                nb.choices.extend(here);
                if next.iter().any(|x| x.engine == nb.engine) {
                    continue;
                }
                if next.len() == MAX_STATES {
                    bounded.get_or_insert(format!("step {step}: more than {MAX_STATES} model states match the log"));
                    continue;
                }
                next.push(nb);
            }
        }
        if next.is_empty() {
            if let Some(newly) = drop_first {
                return Ok((report(decisions, step, &frontier[0], None, &bounded), newly));
            }
        }
        // A transfer report the log cannot make, unless a decision before it diverged.
        if let Some(b) = bad
            .filter(|b| b.step == step && (!next.is_empty() || best.as_ref().is_none_or(|(d, _, _)| d.line > b.line)))
        {
            return Err(KvmcError::input(path, b.line, b.why.clone()));
        }
        if next.is_empty() {
            if let Some(u) = unsearched {
                bounded.get_or_insert(u);
            }
            let (mut d, under, _) = best.expect("a step that matches nothing has a divergence");
            let first = d.line;
            d.window = lines
                .iter()
                .filter(|l| l.no < first)
                .rev()
                .take(window)
                .map(|l| (l.no, l.text.clone()))
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            d.under = under;
            d.tried = tried_total;
            return Ok((report(decisions, step, &frontier[0], Some(d), &bounded), Vec::new()));
        }
        frontier = next;
    }
    let mut r = report(decisions, last, &frontier[0], None, &bounded);
    if raised {
        let starts: Vec<&Engine> = frontier.iter().map(|b| &b.engine).collect();
        r.death = Some(super::death::after(&sys, &starts));
    }
    Ok((r, Vec::new()))
}

/// The orders this step's log lines show for a choice point: vLLM 0.24's host-tier LRU order
/// after the step (the last `host` line's `order`), for `TransferJobStatus.keys`, whose walk
/// appends the keys it releases to that order.
pub(super) fn step_hints(wl: &crate::system::Workload, this: &[&Line]) -> Vec<(Point, Vec<Item>)> {
    let order = this.iter().rev().find_map(|l| match &l.ev {
        Ev::Host { order, .. } => Some(order),
        _ => None,
    });
    order.map_or_else(Vec::new, |o| {
        vec![(Point::TransferJobKeys, o.iter().flat_map(|k| wl.keys_by_label(k)).map(Item::Key).collect())]
    })
}

/// Apply a step's inputs to `engine` and run the step (if vLLM's engine steps); returns the
/// length of the session's `streaming_queue` after each input the model queued, and whether
/// the step processed a batch's output (`update_from_output`).
pub(super) fn apply_step(
    engine: &mut Engine,
    ctx: crate::system::Ctx,
    this: &[&Line],
    idx: &dyn Fn(&str) -> u16,
    ev: &mut Events,
) -> (Vec<u32>, bool) {
    let mut input = StepInput::default();
    let mut queued: Vec<u32> = Vec::new();
    for l in this {
        match &l.ev {
            Ev::Arrive { req, .. } => engine.arrive(ctx, idx(req), ev),
            Ev::StreamInput { req, .. } | Ev::StreamEnd { req, .. } => {
                let r = idx(req);
                // An input the model's session cannot take (it already finished) shows as
                // a difference in this step's decisions.
                if engine.stream_input_enabled(ctx, r) {
                    let before = ev.list.len();
                    engine.stream_input(ctx, r, ev);
                    if ev.list[before..].iter().any(|e| matches!(e, crate::system::Event::StreamQueued { .. })) {
                        let q = &engine.reqs[r as usize];
                        queued.push(u32::from(q.sent - ctx.wl.input_no(r, q.turn)));
                    }
                }
            }
            Ev::Abort { req, .. } => engine.abort(ctx, idx(req), ev),
            // NIXL: the decode instance reads a request it may read (one that holds its blocks
            // for the consumer); a read the model does not allow shows as a difference in the
            // step's `consumer_read` decision.
            Ev::ConsumerRead { req, .. } if engine.consumer_readable().contains(&idx(req)) => {
                engine.consumer_read(ctx, idx(req), ev)
            }
            Ev::Error { req, .. } => engine.error(ctx, idx(req), ev),
            // SimpleCPU's store and load events (Mooncake's save and load jobs) have separate
            // counters. A job reported
            // twice is bad input (reported after this step's decisions are compared);
            // the model's worker sees it once.
            Ev::TransferDone { job, kind, .. } => {
                let id = if kind.as_deref() == Some("load") { *job | LOAD_EVENT } else { *job };
                if !input.complete.contains(&id) {
                    input.complete.push(id);
                    input.reported.push(id);
                }
            }
            Ev::TransferFailed { job, invalid_blocks: Some(invalid), .. }
                if !input.fail_blocks.iter().any(|(j, _)| j == job) =>
            {
                input.fail_blocks.push((*job, invalid.clone()));
                input.reported.push(*job);
            }
            // Request-level (0.34): the whole job failed; it wrote none of its blocks.
            Ev::TransferFailed { job, invalid_blocks: None, .. } if !input.fail.iter().any(|(j, _)| j == job) => {
                input.fail.push((*job, 0));
                input.reported.push(*job);
            }
            _ => {}
        }
    }
    // EngineCore.has_work(): requests to schedule, or (async scheduling) batches in flight.
    let mut processed = false;
    if engine.has_requests(ctx.rules) || !engine.batches.is_empty() {
        let in_flight = engine.batches.len();
        let first = ev.list.len();
        engine.step(ctx, &input, ev);
        let scheduled = ev.list[first..].iter().any(|e| matches!(e, crate::system::Event::StepScheduled { .. }));
        processed = in_flight + usize::from(scheduled) > engine.batches.len() || !ctx.cfg.async_scheduling;
    }
    (queued, processed)
}
