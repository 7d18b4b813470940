//! Comparing one step: every logged decision kind against what the model did in that step.
//! Within a kind order matters (it is vLLM's call order); across kinds it does not.

use super::log::{Ev, Line};
use super::Divergence;
use crate::scope::Scope;
use crate::system::types::{BlockHash, FinishReason};
use crate::system::{Engine, Event};
use std::collections::BTreeMap;

/// What the comparison carries from step to step: the CPU blocks of every SimpleCPU store
/// event the model built (its `store_completed` names them).
#[derive(Default, Clone)]
pub struct Memo {
    store_slots: BTreeMap<u32, Vec<u32>>,
}

struct Kind {
    name: &'static str,
    logged: Vec<(usize, String)>,
    model: Vec<String>,
    /// Only compared when the log has lines of this kind for the step (snapshots).
    optional: bool,
}

fn sorted(v: &[String]) -> Vec<String> {
    let mut v = v.to_vec();
    v.sort();
    v
}

/// Where an implementation logs each kind within a step (docs/conformance-format.md), used
/// only to place a decision the log lacks.
fn rank(kind: &str) -> usize {
    match kind {
        "lookup" | "load" | "evict" | "store" | "store_refused" | "flush" => 10,
        // Queued at input time, right after its `stream_input` / `stream_end` line.
        "stream_queued" => 0,
        // NIXL: the consumer's read is an input before the step; the host-buffer copies and
        // `finished_sending` come from the worker, after `schedule`.
        "consumer_read" => 0,
        "nixl_save" | "finished_sending" => 30,
        "schedule" => 20,
        "sampled" => 40,
        // In update_from_output (turn_start also at input time, for a parked session).
        "finish" | "turn_end" | "turn_start" | "store_completed" | "load_completed" => 50,
        _ => 60,
    }
}

/// Where input lines sit: arrivals, aborts, errors and stream inputs before the step's decisions, reported
/// transfers after `schedule`, sampled tokens after those.
fn input_rank(ev: &Ev) -> usize {
    match ev {
        Ev::TransferDone { .. } | Ev::TransferFailed { .. } => 30,
        Ev::Sampled { .. } => 40,
        _ => 0,
    }
}

/// Compare step `step`; None when every decision matches. `queued` is the model's
/// `streaming_queue` length after each input it queued this step, in order. `snapshots` are
/// the snapshot kinds the log records (then every step must have them).
#[allow(clippy::too_many_arguments)]
pub fn step(
    scope: &Scope,
    e: &Engine,
    step: u32,
    lines: &[&Line],
    events: &[Event],
    queued: &[u32],
    snapshots: &[&str],
    memo: &mut Memo,
) -> Option<Divergence> {
    let wl = &scope.workload;
    let name = |r: &u16| wl.req_name(*r).to_string();
    let label = |h: &BlockHash| wl.label(*h);
    let names = |v: &[u16]| v.iter().map(name).collect::<Vec<_>>();
    let mut kinds: Vec<Kind> = [
        "lookup",
        "load",
        "store",
        "store_refused",
        "evict",
        "flush",
        "schedule",
        "finish",
        "sampled",
        "stream_queued",
        "turn_end",
        "turn_start",
        "store_completed",
        "load_completed",
        "g1",
        "host",
        "cpu",
        "mooncake",
        "nixl_save",
        "consumer_read",
        "finished_sending",
        "nixl",
    ]
    .iter()
    .map(|&n| Kind {
        name: n,
        logged: Vec::new(),
        model: Vec::new(),
        optional: matches!(n, "g1" | "host" | "cpu" | "mooncake" | "nixl" | "schedule") && !snapshots.contains(&n),
    })
    .collect();
    let mut push_log =
        |k: &str, no: usize, s: String| kinds.iter_mut().find(|x| x.name == k).unwrap().logged.push((no, s));
    for l in lines {
        match &l.ev {
            Ev::Lookup { req, local, external, load_async, pins, .. } => push_log(
                "lookup",
                l.no,
                format!("{req} local={local} external={external:?} async={load_async}{}", pins.as_ref().map_or(String::new(), |p| format!(" pins={p:?}"))),
            ),
            Ev::Load { job, req, keys, blocks, slots, sync, .. } => {
                push_log("load", l.no, format!("job {job} {req} keys={keys:?} blocks={blocks:?} slots={slots:?} sync={sync}"))
            }
            Ev::Store { job, req, keys, blocks, slots, .. } => push_log("store", l.no, format!("job {job} {req} keys={keys:?} blocks={blocks:?} slots={slots:?}")),
            Ev::StoreRefused { req, keys, .. } => push_log("store_refused", l.no, format!("{req} keys={keys:?}")),
            Ev::Evict { keys, .. } => {
                for k in keys {
                    push_log("evict", l.no, k.clone());
                }
            }
            Ev::Flush { jobs, .. } => {
                let mut j = jobs.clone();
                j.sort_unstable();
                push_log("flush", l.no, format!("{j:?}"));
            }
            Ev::Schedule { scheduled, new, resumed, preempted, finished, tables, .. } => push_log(
                "schedule",
                l.no,
                format!("scheduled={scheduled:?} new={new:?} resumed={resumed:?} preempted={:?} finished={:?} tables={tables:?}", sorted(preempted), sorted(finished)),
            ),
            Ev::Finish { req, reason, .. } => push_log("finish", l.no, format!("{req} {reason}")),
            Ev::Sampled { req, .. } => push_log("sampled", l.no, req.clone()),
            Ev::StreamQueued { req, queued, .. } => push_log("stream_queued", l.no, format!("{req} queued={queued}")),
            Ev::TurnEnd { req, turn, reason, .. } => push_log("turn_end", l.no, format!("{req} turn={turn} {reason}")),
            Ev::TurnStart { req, turn, num_computed, num_prompt_tokens, .. } => push_log(
                "turn_start",
                l.no,
                format!("{req} turn={turn} num_computed={num_computed} num_prompt_tokens={num_prompt_tokens}"),
            ),
            Ev::G1 { free, cached, .. } => push_log("g1", l.no, format!("free={free:?} cached={cached:?}")),
            Ev::StoreCompleted { job, keys, slots, .. } => {
                push_log("store_completed", l.no, format!("job {job} keys={keys:?} slots={slots:?}"))
            }
            Ev::LoadCompleted { req, job, .. } => push_log("load_completed", l.no, format!("{req} job {job}")),
            Ev::Cpu { free, cached, refs, pins, .. } => {
                // Block ids are validated numbers (log::parse).
                let refs: BTreeMap<u32, u32> = refs.iter().map(|(k, v)| (k.parse().unwrap_or(u32::MAX), *v)).collect();
                push_log("cpu", l.no, format!("free={free:?} cached={cached:?} refs={refs:?} pins={pins:?}"))
            }
            Ev::Mooncake { pool, pinned, .. } => {
                // Job ids are validated numbers (log::parse).
                let pinned: BTreeMap<u32, &Vec<u32>> =
                    pinned.iter().map(|(k, v)| (k.parse().unwrap_or(u32::MAX), v)).collect();
                push_log("mooncake", l.no, format!("pool={:?} pinned={pinned:?}", sorted(pool)))
            }
            Ev::NixlSave { req, blocks, filled, .. } => {
                push_log("nixl_save", l.no, format!("{req} blocks={blocks:?} filled={filled:?}"))
            }
            Ev::ConsumerRead { req, blocks, tokens, stale, .. } => {
                push_log("consumer_read", l.no, format!("{req} blocks={blocks:?} tokens={tokens} stale={stale:?}"))
            }
            Ev::FinishedSending { req, .. } => push_log("finished_sending", l.no, req.clone()),
            Ev::Nixl { need_save, held, .. } => {
                push_log("nixl", l.no, format!("need_save={:?} held={held:?}", sorted(need_save)))
            }
            Ev::Host { entries, order, arc, .. } => {
                let mut es: Vec<String> = entries.iter().map(|x| format!("{} slot={} ref={}", x.key, x.slot, x.ref_cnt)).collect();
                es.sort();
                let arc = arc.as_ref().map_or(String::new(), |a| arc_text([&a.t1, &a.t2, &a.b1, &a.b2], a.target));
                push_log("host", l.no, format!("entries={es:?} order={order:?}{arc}"));
            }
            _ => {}
        }
    }
    // The model's decisions in the order it made them: (kind, index within its kind).
    let mut seq: Vec<(&'static str, usize)> = Vec::new();
    let mut push_model = |k: &str, s: String| {
        let kind = kinds.iter_mut().find(|x| x.name == k).unwrap();
        seq.push((kind.name, kind.model.len()));
        kind.model.push(s);
    };
    let mut nq = 0;
    let sc = e.conn.simple_cpu();
    // SimpleCPU: the CPU blocks a lookup pinned are the ones its load copies (a hit is always
    // loaded whole), or, when the request did not fit, the pin it still holds at the end of
    // the step (a request is looked up at most once per step).
    let pins = |r: u16| -> Vec<u32> {
        events
            .iter()
            .find_map(|x| match x {
                Event::LoadJob { req, slots, .. } if *req == r => Some(slots.clone()),
                _ => None,
            })
            .or_else(|| sc.and_then(|sc| sc.reqs[r as usize].pending.as_ref()).map(|p| p.blocks.clone()))
            .unwrap_or_default()
    };
    let mut last_stored: Vec<BlockHash> = Vec::new();
    // NIXL's `finished_sending` (a set; the recorder writes it sorted).
    let mut sent: Vec<String> = Vec::new();
    let mut loads_done: Vec<(String, String)> = Vec::new();
    for ev in events {
        match ev {
            Event::Lookup { req, local, external, load_async } => push_model(
                "lookup",
                format!(
                    "{} local={local} external={external:?} async={load_async}{}",
                    name(req),
                    if sc.is_some() { format!(" pins={:?}", pins(*req)) } else { String::new() }
                ),
            ),
            Event::LoadJob { job, req, keys, blocks, slots, sync } => push_model(
                "load",
                format!(
                    "job {job} {} keys={:?} blocks={blocks:?} slots={slots:?} sync={sync}",
                    name(req),
                    keys.iter().map(label).collect::<Vec<_>>()
                ),
            ),
            Event::StoreJob { job, req, keys, blocks, slots } => {
                memo.store_slots.entry(*job).or_default().extend_from_slice(slots);
                push_model(
                    "store",
                    format!(
                        "job {job} {} keys={:?} blocks={blocks:?} slots={slots:?}",
                        name(req),
                        keys.iter().map(label).collect::<Vec<_>>()
                    ),
                )
            }
            // SimpleCPU's `_process_store_event`: the keys it registered (HostStored, just
            // before) on the event's CPU blocks.
            Event::HostStored { keys } if sc.is_some() => last_stored = keys.clone(),
            Event::JobCompleted { job } if sc.is_some() => {
                // `update_connector_output` processes the finished loads before the stores.
                flush_loads(&mut loads_done, &mut push_model);
                let keys: Vec<String> = std::mem::take(&mut last_stored).iter().map(label).collect();
                let slots = memo.store_slots.remove(job).unwrap_or_default();
                push_model("store_completed", format!("job {job} keys={keys:?} slots={slots:?}"))
            }
            // vLLM processes `finished_recving` (a set) in no fixed order: compared sorted by name.
            Event::HostLoadDone { req, job } => loads_done.push((name(req), format!("{} job {job}", name(req)))),
            Event::StoreRefused { req, keys } => push_model(
                "store_refused",
                format!("{} keys={:?}", name(req), keys.iter().map(label).collect::<Vec<_>>()),
            ),
            Event::HostEvicted { key } => push_model("evict", label(key)),
            Event::PdSaved { req, blocks, filled } => {
                push_model("nixl_save", format!("{} blocks={blocks:?} filled={filled:?}", name(req)))
            }
            Event::PdRead { req, blocks, tokens, stale } => {
                push_model("consumer_read", format!("{} blocks={blocks:?} tokens={tokens} stale={stale:?}", name(req)))
            }
            Event::PdSent { req } => sent.push(name(req)),
            Event::JobsToFlush { jobs } => push_model("flush", format!("{jobs:?}")),
            Event::StepScheduled { scheduled, new, resumed, preempted, finished, tables } => {
                let sched: Vec<(String, i64)> = scheduled.iter().map(|(r, n)| (name(r), *n)).collect();
                let tables: BTreeMap<String, Vec<u32>> = tables.iter().map(|(r, t)| (name(r), t.clone())).collect();
                push_model(
                    "schedule",
                    format!(
                        "scheduled={sched:?} new={:?} resumed={:?} preempted={:?} finished={:?} tables={tables:?}",
                        names(new),
                        names(resumed),
                        sorted(&names(preempted)),
                        sorted(&names(finished))
                    ),
                );
            }
            Event::Finished { req, reason } => push_model("finish", format!("{} {}", name(req), reason_str(*reason))),
            Event::Sampled { req, .. } => push_model("sampled", name(req)),
            Event::StreamQueued { req } => {
                let n = queued.get(nq).map_or_else(|| "?".to_string(), |q| q.to_string());
                nq += 1;
                push_model("stream_queued", format!("{} queued={n}", name(req)))
            }
            Event::TurnEnded { req, turn, reason } => {
                push_model("turn_end", format!("{} turn={} {}", name(req), turn + 1, reason_str(*reason)))
            }
            Event::SessionResumed { req, turn, num_computed } => push_model(
                "turn_start",
                format!(
                    "{} turn={} num_computed={num_computed} num_prompt_tokens={}",
                    name(req),
                    turn + 1,
                    wl.spec(*req, *turn).num_prompt_tokens()
                ),
            ),
            _ => {}
        }
    }
    flush_loads(&mut loads_done, &mut push_model);
    sent.sort();
    for r in sent {
        push_model("finished_sending", r);
    }
    // End-of-step snapshots.
    let cached: BTreeMap<String, Vec<u32>> =
        e.pool.cached().into_iter().map(|(h, b)| (label(&h), b.to_vec())).collect();
    push_model("g1", format!("free={:?} cached={cached:?}", e.pool.free_queue()));
    if let Some(oc) = e.conn.offloading() {
        let mut es: Vec<String> =
            oc.host.entries().map(|(k, x)| format!("{} slot={} ref={}", label(k), x.slot, x.ref_cnt)).collect();
        es.sort();
        let order: Vec<String> = oc.host.eviction_order().iter().map(label).collect();
        let arc = oc.host.arc.as_deref().map_or(String::new(), |a| {
            let [t1, t2, b1, b2] = [&a.t1, &a.t2, &a.b1, &a.b2].map(|v| v.iter().map(label).collect::<Vec<_>>());
            arc_text([&t1, &t2, &b1, &b2], a.target.get())
        });
        push_model("host", format!("entries={es:?} order={order:?}{arc}"));
    }
    if let Some(sc) = sc {
        let cached: BTreeMap<String, Vec<u32>> =
            sc.cpu.cached().into_iter().map(|(h, b)| (label(&h), b.to_vec())).collect();
        let refs: BTreeMap<u32, u32> = (1..sc.cpu.num_blocks())
            .filter(|&b| sc.cpu.ref_cnt(b) > 0)
            .map(|b| (b, u32::from(sc.cpu.ref_cnt(b))))
            .collect();
        let pins: BTreeMap<String, Vec<u32>> = sc
            .reqs
            .iter()
            .enumerate()
            .filter_map(|(r, q)| q.pending.as_ref().map(|p| (name(&(r as u16)), p.blocks.clone())))
            .collect();
        push_model("cpu", format!("free={:?} cached={cached:?} refs={refs:?} pins={pins:?}", sc.cpu.free_queue()));
    }
    if let Some(mc) = e.conn.mooncake() {
        let pool: Vec<String> = mc.pool.keys().map(label).collect();
        // `_pinned_saves` holds a job only while it references blocks.
        let pinned: BTreeMap<u32, &Vec<u32>> =
            mc.saves.iter().filter(|j| !j.pinned.is_empty()).map(|j| (j.id, &j.pinned)).collect();
        push_model("mooncake", format!("pool={:?} pinned={pinned:?}", sorted(&pool)));
    }
    if let Some(nx) = e.conn.nixl() {
        let need_save: Vec<String> = nx.need_save.iter().map(name).collect();
        let held: BTreeMap<String, &Vec<u32>> = nx.sending.iter().map(|x| (name(&x.req), &x.blocks)).collect();
        push_model("nixl", format!("need_save={:?} held={held:?}", sorted(&need_save)));
    }
    let last_line = lines.last().map_or(0, |l| l.no);
    let matched = |kind: &str, idx: usize| -> Option<usize> {
        let k = kinds.iter().find(|x| x.name == kind)?;
        let (no, text) = k.logged.get(idx)?;
        (k.model.get(idx) == Some(text)).then_some(*no)
    };
    let mut first: Option<Divergence> = None;
    for k in &kinds {
        if k.optional && k.logged.is_empty() {
            continue;
        }
        let n = k.logged.len().max(k.model.len());
        for i in 0..n {
            let lg = k.logged.get(i);
            let md = k.model.get(i);
            if lg.map(|x| &x.1) != md {
                // The logged item appears later in the model's list: the model's items in
                // between are missing from the log (a deleted line), so place the first one.
                let missing = match lg {
                    None => true,
                    Some(x) => k.model[i..].iter().skip(1).any(|m| *m == x.1),
                };
                let line = if !missing {
                    lg.unwrap().0
                } else {
                    // It belongs after the decisions the model made before it that the log has
                    // (the latest of their lines: the log may order kinds differently, e.g. a
                    // session's turn_end after every sampled line), past the inputs the
                    // implementation logs before this kind.
                    let pos = seq.iter().position(|&(kk, ii)| kk == k.name && ii == i).unwrap_or(seq.len());
                    let before = seq[..pos].iter().filter_map(|&(kk, ii)| matched(kk, ii)).max();
                    let start = before.unwrap_or(lines.first().map_or(0, |l| l.no.saturating_sub(1)));
                    lines
                        .iter()
                        .filter(|l| l.no > start)
                        .find(|l| !(l.ev.is_input() && input_rank(&l.ev) <= rank(k.name)))
                        .map_or(last_line + 1, |l| l.no)
                };
                let d = Divergence {
                    step,
                    line,
                    what: k.name.to_string(),
                    logged: lg.map_or("(nothing)".into(), |x| x.1.clone()),
                    model: md.cloned().unwrap_or_else(|| "(nothing)".into()),
                    window: Vec::new(),
                    under: Vec::new(),
                    tried: 1,
                };
                if first.as_ref().is_none_or(|f| d.line < f.line) {
                    first = Some(d);
                }
                break;
            }
        }
    }
    first
}

/// The `load_completed` decisions gathered so far, sorted by request (the harness sorts them).
fn flush_loads(loads: &mut Vec<(String, String)>, push: &mut impl FnMut(&str, String)) {
    loads.sort();
    for (_, s) in loads.drain(..) {
        push("load_completed", s);
    }
}

fn reason_str(r: FinishReason) -> &'static str {
    r.as_str()
}

/// The ARC part of a `host` line, the same text for the log and the model: T1, T2, B1, B2 (key
/// labels, LRU first) and `target_t1_size`: `int(target)` exactly (what eviction reads), the
/// float to 9 decimals. vLLM adds and subtracts the ghost-hit deltas in the order it walks a
/// step's keys, which can follow a set's (hash-seed) order, and float addition is not
/// associative: the same deltas in another order differ in the last bits.
fn arc_text(lists: [&Vec<String>; 4], target: f64) -> String {
    let [t1, t2, b1, b2] = lists;
    format!(" arc: t1={t1:?} t2={t2:?} b1={b1:?} b2={b2:?} target={target:.9} (int {})", target.trunc() as i64)
}
