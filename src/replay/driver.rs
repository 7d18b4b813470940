//! The replay loop: the reference implementation (`system::Engine`, unchanged) driven by a
//! trace. Each engine instance gets request slots on demand (a slot is reused once its
//! request is gone for good), specs built at arrival (a lazy workload), the engine's replay
//! aids (change logs and the read cache) and an incremental invariant checker that runs after
//! every action. Actions are the checker's own vocabulary (arrive, step, store copy done,
//! load copy done), so the history of a violation is a scenario the checker re-runs.

use super::arrivals::ArrivalQueue;
use super::invariants::{self, Checker, Violation};
use super::trace::{Format, Trace};
use crate::error::{KvmcError, Result};
use crate::scope::replay::ReplayModel;
use crate::system::events::ReqStats;
use crate::system::ghost::Mark;
use crate::system::input::{apply_in_place, Input};
use crate::system::types::{JobId, ReqId, Status, Token};
use crate::system::{Ctx, Direction, EndKind, Engine, Events, RequestSpec, Rules, Workload};
use std::collections::HashMap;

/// One action of an instance's history.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Act {
    /// Trace row `r` arrives.
    Arrive(u32),
    Step,
    /// A step in which the stores submitted at its start finished (`store_steps = 0`).
    StepStoresDrain,
    Done(Direction),
}

/// What happened to one trace row.
#[derive(Clone, Debug, Default)]
pub struct RowResult {
    pub engine: u16,
    pub arrived: bool,
    pub finished: bool,
    /// Refused before it reached the engine: its prompt does not fit `max_model_len` (vLLM's
    /// input processor raises), or an earlier turn of its session was refused.
    pub rejected: bool,
    pub arrival_us: u64,
    pub finish_us: u64,
    pub stats: ReqStats,
}

/// One engine and everything replay keeps beside it.
pub struct Instance {
    pub engine: Engine,
    pub wl: Workload,
    pub ev: Events,
    pub checker: Checker,
    slot_row: Vec<u32>,
    live: Vec<ReqId>,
    draining: Vec<ReqId>,
    free: Vec<ReqId>,
    /// Model time (µs).
    pub clock: u64,
    pub steps: u64,
    pub actions: u64,
    pub full_checks: u64,
    issued: HashMap<JobId, u64>,
    next_job: JobId,
    /// The history (for a violation's scenario).
    pub log: Vec<Act>,
    /// Rows in arrival order.
    pub arrived: Vec<u32>,
    pub unfinished: u32,
    /// Times a request entered RUNNING (first admission, or again after a preemption), the
    /// most requests RUNNING after a step, and each slot's state after the last step.
    pub admissions: u64,
    pub max_running: u64,
    was_running: Vec<bool>,
}

/// Where a violation happened.
#[derive(Clone, Debug)]
pub struct Found {
    pub engine: usize,
    pub violation: Violation,
    /// The instance's action count when it was found.
    pub action: u64,
    pub step: u64,
}

pub struct Driver<'a> {
    pub trace: &'a Trace,
    pub model: &'a ReplayModel,
    pub rules: Rules,
    pub inst: Vec<Instance>,
    pub results: Vec<RowResult>,
    queue: ArrivalQueue<'a>,
    session_prompt: HashMap<u32, Vec<Token>>,
    routing: super::route::Routing,
    pub now: u64,
    /// Rows done: finished, or rejected.
    pub finished: u32,
    pub rejected: u32,
    /// Output tokens each row generates: its `output_length`, capped so that prompt and output
    /// fit `max_model_len` (the engine stops a request there, `check_stop`).
    pub out_len: Vec<u32>,
    /// Properties left out (`--skip-property`).
    pub skip: Vec<crate::props::PropId>,
    unfinished: u32,
    full_every: u64,
    /// Specs built before their rows arrive (see [`Driver::spec`]).
    ahead: Vec<(u32, RequestSpec)>,
    /// Ctrl-C stopped the run before the end of the trace (`crate::stop`).
    pub interrupted: bool,
}

/// How many rows' specs [`Driver::spec`] builds together: enough to keep the hash lanes of
/// [`RequestSpec::new_many`] busy while prompt lengths differ.
const AHEAD: usize = 16;

impl Instance {
    fn new(model: &ReplayModel, rules: &Rules, bpc: u32, skip: &[crate::props::PropId]) -> Instance {
        let wl = Workload::lazy(model.cfg.block_size, bpc > 1);
        let mut engine = Engine::new(&model.cfg, &wl, rules);
        engine.enable_replay_aids();
        let checker = Checker::new(&engine, &model.cfg, rules, model.replay.progress_steps).skipping(skip);
        Instance {
            engine,
            wl,
            ev: Events::counting(),
            checker,
            slot_row: Vec::new(),
            live: Vec::new(),
            draining: Vec::new(),
            free: Vec::new(),
            clock: 0,
            steps: 0,
            actions: 0,
            full_checks: 0,
            issued: HashMap::new(),
            next_job: 0,
            log: Vec::new(),
            arrived: Vec::new(),
            unfinished: 0,
            admissions: 0,
            max_running: 0,
            was_running: Vec::new(),
        }
    }

    fn busy(&self) -> bool {
        self.engine.has_work()
    }
}

impl<'a> Driver<'a> {
    pub fn new(
        trace: &'a Trace,
        model: &'a ReplayModel,
        rules: Rules,
        full_every: u64,
        skip: Vec<crate::props::PropId>,
    ) -> Result<Driver<'a>> {
        let cfg = &model.cfg;
        let (queue, out_len) = ArrivalQueue::new(trace, model);
        let bpc = cfg.offload().map_or(1, |o| o.blocks_per_chunk);
        let inst = (0..model.replay.engines).map(|_| Instance::new(model, &rules, bpc, &skip)).collect();
        Ok(Driver {
            trace,
            model,
            rules,
            inst,
            results: vec![RowResult::default(); trace.rows.len()],
            queue,
            session_prompt: HashMap::new(),
            routing: Default::default(),
            now: 0,
            finished: 0,
            rejected: 0,
            out_len,
            skip,
            unfinished: 0,
            full_every,
            ahead: Vec::new(),
            interrupted: false,
        })
    }

    fn ctx<'b>(model: &'b ReplayModel, rules: &'b Rules, wl: &'b Workload) -> Ctx<'b> {
        Ctx { cfg: &model.cfg, rules, wl }
    }

    /// Run to the end of the trace, to the first violation, or to Ctrl-C (then
    /// `interrupted` is set and the counts are those reached). `tick` is called now and then
    /// with the number of finished rows.
    pub fn run(&mut self, tick: &mut dyn FnMut(u32)) -> Result<Option<Found>> {
        let total = self.trace.rows.len() as u32;
        let mut since_tick = 0u32;
        loop {
            for inst in &mut self.inst {
                inst.draining.retain(|&s| {
                    if inst.engine.slot_reusable(s) {
                        inst.free.push(s);
                        false
                    } else {
                        true
                    }
                });
            }
            let busy_min = self.inst.iter().filter(|i| i.busy()).map(|i| i.clock).min();
            let Some(now) = self.queue.next_time(busy_min, self.now) else { break };
            self.now = self.now.max(now);
            self.queue.release(self.now, busy_min);
            while let Some(r) = self.queue.admit(self.unfinished) {
                if self.queue.refused(r) {
                    self.reject(r);
                    continue;
                }
                if let Some(f) = self.arrive(r)? {
                    return Ok(Some(f));
                }
            }
            // Step the busy instance that is furthest behind in model time.
            let Some(k) =
                (0..self.inst.len()).filter(|&k| self.inst[k].busy()).min_by_key(|&k| (self.inst[k].clock, k))
            else {
                if self.queue.is_empty() {
                    break;
                }
                continue;
            };
            if let Some(f) = self.step(k)? {
                return Ok(Some(f));
            }
            since_tick += 1;
            if since_tick >= 512 {
                since_tick = 0;
                tick(self.finished);
                if crate::stop::interrupted() {
                    self.interrupted = true;
                    return Ok(None);
                }
            }
        }
        tick(self.finished);
        if self.finished != total {
            return Err(KvmcError::Internal(format!(
                "replay ended with {} of {total} requests finished",
                self.finished
            )));
        }
        // A last look at the whole state of every engine.
        for k in 0..self.inst.len() {
            if let Some(f) = self.full_check(k) {
                return Ok(Some(f));
            }
        }
        Ok(None)
    }

    /// The full-state predicates over engine `k` (counted as one full check).
    fn full_check(&mut self, k: usize) -> Option<Found> {
        let v = self.full_verdict(k)?;
        let inst = &self.inst[k];
        Some(Found { engine: k, violation: v, action: inst.actions, step: inst.steps })
    }

    /// The full-state predicates' verdict on engine `k` (counted as one full check).
    fn full_verdict(&mut self, k: usize) -> Option<Violation> {
        let inst = &mut self.inst[k];
        inst.full_checks += 1;
        invariants::full(
            &inst.engine,
            &inst.wl,
            &self.model.cfg,
            &self.rules,
            self.model.replay.progress_steps,
            &self.skip,
        )
    }

    fn route(&mut self, r: u32) -> usize {
        let unfinished: Vec<u32> = self.inst.iter().map(|x| x.unfinished).collect();
        self.routing.route(self.model.replay.router, self.trace, r, &unfinished)
    }

    /// Row `r`'s request. A row whose prompt depends on nothing but the trace (every row but
    /// a later turn of a `mooncake-delta` session) is built together with the next such rows
    /// that will arrive, so that their hash chains are computed together
    /// ([`RequestSpec::new_many`]); those wait in `ahead` until they arrive.
    fn spec(&mut self, r: u32) -> RequestSpec {
        if let Some(i) = self.ahead.iter().position(|(x, _)| *x == r) {
            return self.ahead.swap_remove(i).1;
        }
        let t = self.trace;
        let row = &t.rows[r as usize];
        let prompt = match (t.format, row.session) {
            (Format::MooncakeDelta, Some(s)) => {
                let before = self.session_prompt.remove(&s).unwrap_or_default();
                let p = t.prompt_after(r, &before);
                if row.next.is_some() {
                    self.session_prompt.insert(s, p.clone());
                }
                p
            }
            _ => {
                let mut rows = vec![r];
                if self.ahead.is_empty() {
                    let own = |x: u32| !(t.format == Format::MooncakeDelta && t.rows[x as usize].session.is_some());
                    let later = (r + 1..t.rows.len() as u32).filter(|&x| own(x) && !self.queue.refused(x));
                    rows.extend(later.take(AHEAD - 1));
                }
                let reqs = rows.iter().map(|&x| (t.name(x), t.prompt(x), self.output(x), EndKind::Length)).collect();
                let mut specs = RequestSpec::new_many(reqs, self.model.cfg.block_size).into_iter();
                let first = specs.next().expect("row r's spec");
                self.ahead.extend(rows[1..].iter().copied().zip(specs));
                return first;
            }
        };
        RequestSpec::new(&t.name(r), prompt, self.output(r), EndKind::Length, self.model.cfg.block_size)
    }

    /// The tokens row `r` generates.
    fn output(&self, r: u32) -> Vec<Token> {
        self.trace.output(r).take(self.out_len[r as usize] as usize).collect()
    }

    /// Row `r` never reaches an engine; a later turn of its session is refused in turn.
    fn reject(&mut self, r: u32) {
        self.results[r as usize].rejected = true;
        self.rejected += 1;
        self.finished += 1;
        self.queue.reject(r, self.now);
    }

    fn arrive(&mut self, r: u32) -> Result<Option<Found>> {
        let k = self.route(r);
        let spec = self.spec(r);
        let now = self.now;
        let inst = &mut self.inst[k];
        inst.clock = inst.clock.max(now);
        let slot = match inst.free.pop() {
            Some(s) => {
                inst.engine.reset_slot(s);
                s
            }
            None => {
                let s = inst.engine.add_slot();
                let w = inst.wl.push_slot();
                debug_assert_eq!(s, w);
                inst.slot_row.push(u32::MAX);
                s
            }
        };
        inst.wl.set_spec(slot, spec);
        inst.slot_row[slot as usize] = r;
        inst.ev.stat(|st| *st.req(slot) = ReqStats::default());
        let ctx = Self::ctx(self.model, &self.rules, &inst.wl);
        apply_in_place(ctx, &mut inst.engine, Input::Arrive(slot), &mut inst.ev);
        inst.live.push(slot);
        inst.arrived.push(r);
        inst.unfinished += 1;
        self.unfinished += 1;
        let res = &mut self.results[r as usize];
        res.engine = k as u16;
        res.arrived = true;
        res.arrival_us = inst.clock;
        inst.log.push(Act::Arrive(r));
        self.after_action(k)
    }

    /// Invariants after an action of instance `k`.
    fn after_action(&mut self, k: usize) -> Result<Option<Found>> {
        let inst = &mut self.inst[k];
        inst.actions += 1;
        let found = inst.checker.check(&mut inst.engine, &inst.wl);
        if self.full_every == 1 {
            // Self-test mode: the incremental verdict must equal the full one.
            let full = self.full_verdict(k);
            if full.as_ref().map(|v| v.property) != found.as_ref().map(|v| v.property) {
                return Err(KvmcError::Internal(format!(
                    "incremental invariant check disagrees with the full one after action {} of engine {k}: \
                     incremental {:?}, full {:?}",
                    self.inst[k].actions,
                    found.map(|v| v.property),
                    full.map(|v| v.property)
                )));
            }
        }
        let inst = &self.inst[k];
        Ok(found.map(|violation| Found { engine: k, violation, action: inst.actions, step: inst.steps }))
    }

    fn step(&mut self, k: usize) -> Result<Option<Found>> {
        let (store_l, load_l) = (u64::from(self.model.replay.store_steps), u64::from(self.model.replay.load_steps));
        let (prefill_us, decode_us) = (self.model.replay.prefill_us, self.model.replay.decode_us);
        {
            let inst = &mut self.inst[k];
            let (p0, d0) = inst.ev.stats.as_ref().map_or((0, 0), |s| (s.prefill_pass_tokens, s.decode_tokens));
            let ctx = Self::ctx(self.model, &self.rules, &inst.wl);
            // store_steps = 0: a store finishes within the step that submits it.
            let input = if store_l == 0 { Input::StepStoresDrain } else { Input::Step };
            apply_in_place(ctx, &mut inst.engine, input, &mut inst.ev);
            inst.steps += 1;
            inst.max_running = inst.max_running.max(inst.engine.running.len() as u64);
            for &s in &inst.live {
                let st = inst.engine.reqs[s as usize].status;
                let now = st == Status::Running;
                let was = inst.was_running.get(s as usize).copied().unwrap_or(false);
                if (now || st.is_finished()) && !was {
                    inst.admissions += 1;
                }
                if inst.was_running.len() <= s as usize {
                    inst.was_running.resize(s as usize + 1, false);
                }
                inst.was_running[s as usize] = now;
            }
            let (p1, d1) = inst.ev.stats.as_ref().map_or((0, 0), |s| (s.prefill_pass_tokens, s.decode_tokens));
            inst.clock += if p1 > p0 {
                prefill_us
            } else if d1 > d0 {
                decode_us
            } else {
                0
            };
            inst.log.push(if store_l == 0 && inst.engine.ghost.marked(Mark::Drained) {
                Act::StepStoresDrain
            } else {
                Act::Step
            });
            if let Some(oc) = inst.engine.conn.offloading() {
                for j in &oc.jobs {
                    if j.id >= inst.next_job {
                        inst.issued.insert(j.id, inst.steps);
                    }
                }
                inst.next_job = oc.next_job;
            }
        }
        if let Some(f) = self.after_action(k)? {
            return Ok(Some(f));
        }
        if self.full_every > 1 && self.inst[k].steps.is_multiple_of(self.full_every) {
            if let Some(f) = self.full_check(k) {
                return Ok(Some(f));
            }
        }
        // Copies that are due finish between this step and the next, oldest first.
        for (d, lat) in [(Direction::Store, store_l), (Direction::Load, load_l)] {
            loop {
                let inst = &mut self.inst[k];
                let Some(j) = inst.engine.next_transfer(d) else { break };
                let issued = inst.issued.get(&j).copied().unwrap_or(0);
                if issued + lat > inst.steps {
                    break;
                }
                inst.issued.remove(&j);
                let ctx = Self::ctx(self.model, &self.rules, &inst.wl);
                apply_in_place(ctx, &mut inst.engine, Input::TransferDone(d), &mut inst.ev);
                inst.log.push(Act::Done(d));
                if let Some(f) = self.after_action(k)? {
                    return Ok(Some(f));
                }
            }
        }
        // Finished requests: record them, and let their sessions' next turns become ready.
        let inst = &mut self.inst[k];
        let mut done: Vec<(u32, ReqId)> = Vec::new();
        inst.live.retain(|&s| {
            if inst.engine.reqs[s as usize].status.is_finished() {
                done.push((inst.slot_row[s as usize], s));
                false
            } else {
                true
            }
        });
        for (r, s) in done {
            inst.draining.push(s);
            inst.unfinished -= 1;
            self.unfinished -= 1;
            self.finished += 1;
            let stats = inst.ev.stats.as_deref_mut().map(|st| st.req(s).clone()).unwrap_or_default();
            let res = &mut self.results[r as usize];
            res.finished = true;
            res.finish_us = inst.clock;
            res.stats = stats;
            self.queue.finished(r, inst.clock);
        }
        Ok(None)
    }
}
