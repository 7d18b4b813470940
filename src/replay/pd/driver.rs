//! The P/D replay loop: arrivals (timestamps, a closed loop or sessions in flight), the
//! router's choice of a pair, P's and D's steps on their clocks, the router's sends and D's
//! NIXL reads, invariants after every action (see the module above).

use super::pair::{Found, Pair, Row, Side};
use super::PdRouter;
use crate::error::{KvmcError, Result};
use crate::replay::arrivals::ArrivalQueue;
use crate::replay::invariants;
use crate::replay::trace::{Format, Trace};
use crate::scope::replay::ReplayModel;
use crate::system::events::ReqStats;
use crate::system::input::{apply_in_place, Arrivals, Environment, Faults, Input, StreamInput, System};
use crate::system::pd::{self, PdInput, PdSys, Route};
use crate::system::types::{ReqId, Token};
use crate::system::{EndKind, RequestSpec, Rules, Workload};
use std::collections::HashMap;

pub struct PdDriver<'a> {
    pub(super) trace: &'a Trace,
    pub(super) model: &'a ReplayModel,
    pub(super) rules: Rules,
    pub(super) pairs: Vec<Pair>,
    pub(super) rows: Vec<Row>,
    pub(super) queue: ArrivalQueue<'a>,
    pub(super) session_prompt: HashMap<u32, Vec<Token>>,
    pub(super) routing: crate::replay::route::Routing,
    pub(super) now: u64,
    pub(super) finished: u32,
    pub(super) rejected: u32,
    pub(super) out_len: Vec<u32>,
    pub(super) skip: Vec<crate::props::PropId>,
    pub(super) unfinished: u32,
    pub(super) full_every: u64,
    pub(super) interrupted: bool,
}

impl<'a> PdDriver<'a> {
    pub fn new(
        trace: &'a Trace,
        model: &'a ReplayModel,
        rules: Rules,
        profile: &str,
        full_every: u64,
        skip: Vec<crate::props::PropId>,
    ) -> Result<PdDriver<'a>> {
        let cfg = &model.cfg;
        if !rules.aux_pd_bypass {
            // vLLM refuses routed experts with a P/D connector; only prime-rl bypasses it.
            return Err(KvmcError::Usage(crate::scope::pd_refusal(profile)));
        }
        let (queue, out_len) = ArrivalQueue::new(trace, model);
        let b = cfg.block_size;
        let mut pairs = Vec::new();
        for _ in 0..model.replay.pairs {
            let pdsys = PdSys::new(cfg, Workload::lazy(b, false));
            let sys = System {
                cfg: cfg.clone(),
                workload: Workload::lazy(b, false),
                env: Environment {
                    after: Vec::new(),
                    faults: Faults::default(),
                    arrivals: Arrivals::Any,
                    stream_input: StreamInput::Any,
                    progress_steps: model.replay.progress_steps,
                },
                rules: rules.clone(),
                pd: Some(Box::new(pdsys)),
            };
            let mut e = sys.init();
            e.enable_replay_aids();
            e.pd.as_mut().expect("a P/D state").d.enable_replay_aids();
            let p = Side::new(&e, cfg, &rules, model, &skip);
            let dcfg = sys.pd.as_ref().expect("P/D").cfg.clone();
            let d = Side::new(&e.pd.as_ref().expect("a P/D state").d, &dcfg, &rules, model, &skip);
            pairs.push(Pair {
                sys,
                e,
                p,
                d,
                slot_row: Vec::new(),
                live: Vec::new(),
                draining: Vec::new(),
                free: Vec::new(),
                read_issued: HashMap::new(),
                unfinished: 0,
                router: PdRouter { pair: pairs.len() as u32, ..Default::default() },
                router_violation: None,
            });
        }
        Ok(PdDriver {
            trace,
            model,
            rules,
            pairs,
            rows: vec![Row::default(); trace.rows.len()],
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
            interrupted: false,
        })
    }

    /// Run to the end of the trace, to the first violation, or to Ctrl-C.
    pub(super) fn run(&mut self, tick: &mut dyn FnMut(u32)) -> Result<Option<Found>> {
        let total = self.trace.rows.len() as u32;
        let mut since_tick = 0u32;
        loop {
            for pair in &mut self.pairs {
                let mut keep = Vec::new();
                for s in std::mem::take(&mut pair.draining) {
                    if pair.reusable(s) {
                        pair.free.push(s);
                    } else {
                        keep.push(s);
                    }
                }
                pair.draining = keep;
            }
            let busy = self.busy();
            let busy_min = busy.iter().map(|&(_, _, c)| c).min();
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
            // Step the busy instance furthest behind in model time; stalled instances only
            // when every busy instance is stalled (requests-finish then finds a livelock).
            let busy = self.busy();
            let pick = busy
                .iter()
                .filter(|&&(k, role, _)| !self.side(k, role).stalled)
                .min_by_key(|&&(k, role, c)| (c, k, role))
                .or_else(|| busy.iter().min_by_key(|&&(k, role, c)| (c, k, role)));
            let Some(&(k, role, _)) = pick else {
                if self.queue.is_empty() {
                    break;
                }
                continue;
            };
            let found = if role == 0 { self.step_p(k)? } else { self.step_d(k)? };
            if let Some(f) = found {
                return Ok(Some(f));
            }
            self.finish_answered(k);
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
                "P/D replay ended with {} of {total} requests answered",
                self.finished
            )));
        }
        for k in 0..self.pairs.len() {
            for role in [0, 1] {
                if let Some(f) = self.full_check(k, role) {
                    return Ok(Some(f));
                }
            }
        }
        Ok(None)
    }

    /// Busy instances: (pair, role 0 = P / 1 = D, clock).
    fn busy(&self) -> Vec<(usize, u8, u64)> {
        let mut out = Vec::new();
        for (k, pair) in self.pairs.iter().enumerate() {
            if pair.p_busy() {
                out.push((k, 0, pair.p.clock));
            }
            if pair.d_busy() {
                out.push((k, 1, pair.d.clock));
            }
        }
        out
    }

    fn side(&self, k: usize, role: u8) -> &Side {
        if role == 0 {
            &self.pairs[k].p
        } else {
            &self.pairs[k].d
        }
    }

    fn route(&mut self, r: u32) -> usize {
        let unfinished: Vec<u32> = self.pairs.iter().map(|x| x.unfinished).collect();
        self.routing.route(self.model.replay.router, self.trace, r, &unfinished)
    }

    /// Row `r`'s whole request (D's spec); P's is its prompt with the first output token.
    fn spec(&mut self, r: u32) -> RequestSpec {
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
            _ => t.prompt(r),
        };
        let output = t.output(r).take(self.out_len[r as usize] as usize).collect();
        RequestSpec::new(&t.name(r), prompt, output, EndKind::Length, self.model.cfg.block_size)
    }

    fn reject(&mut self, r: u32) {
        self.rejected += 1;
        self.finished += 1;
        self.queue.reject(r, self.now);
    }

    fn arrive(&mut self, r: u32) -> Result<Option<Found>> {
        let k = self.route(r);
        let full = self.spec(r);
        let b = self.model.cfg.block_size;
        let prompt = full.tokens[..full.prompt_len as usize].to_vec();
        let first = full.tokens[full.prompt_len as usize];
        let mut pspec = RequestSpec::with_limits(&full.name, prompt, vec![first], 1, None, b);
        pspec.rows_start = full.rows_start;
        let now = self.now;
        let pair = &mut self.pairs[k];
        pair.p.clock = pair.p.clock.max(now);
        let slot = match pair.free.pop() {
            Some(s) => {
                pair.e.reset_slot(s);
                pair.d_mut().reset_slot(s);
                pair.e.pd.as_mut().expect("a P/D state").route[s as usize] = Route::Prefill;
                s
            }
            None => {
                let s = pair.e.add_slot();
                let ds = pair.d_mut().add_slot();
                let w = pair.sys.workload.push_slot();
                let dw = pair.sys.pd.as_mut().expect("P/D").wl.push_slot();
                debug_assert!(s == ds && s == w && s == dw);
                pair.e.pd.as_mut().expect("a P/D state").route.push(Route::Prefill);
                pair.slot_row.push(u32::MAX);
                s
            }
        };
        pair.sys.workload.set_spec(slot, pspec);
        pair.sys.pd.as_mut().expect("P/D").wl.set_spec(slot, full);
        pair.slot_row[slot as usize] = r;
        pair.p.ev.stat(|st| *st.req(slot) = ReqStats::default());
        Side::fresh_slot(&mut pair.p, slot);
        Side::fresh_slot(&mut pair.d, slot);
        pair.d.ev.stat(|st| *st.req(slot) = ReqStats::default());
        pair.p.stalled = false;
        apply_in_place(pair.sys.ctx(), &mut pair.e, Input::Arrive(slot), &mut pair.p.ev);
        pair.sync();
        pair.live.push(slot);
        pair.p.arrived.push(r);
        pair.unfinished += 1;
        self.unfinished += 1;
        let row = &mut self.rows[r as usize];
        row.pair = k as u16;
        row.arrived = true;
        row.arrival_us = pair.p.clock;
        self.after_action(k, 0)
    }

    /// Invariants after an action of pair `k`'s instance `role`: that instance's, then P's
    /// (D's flags and the router's merge land in P's ghost).
    fn after_action(&mut self, k: usize, role: u8) -> Result<Option<Found>> {
        let roles: &[u8] = if role == 0 { &[0] } else { &[1, 0] };
        if role == 0 {
            self.pairs[k].p.actions += 1;
        } else {
            self.pairs[k].d.actions += 1;
        }
        for &x in roles {
            let pair = &mut self.pairs[k];
            let (side, e, wl) = if x == 0 {
                (&mut pair.p, &mut pair.e, &pair.sys.workload)
            } else {
                let pdsys = pair.sys.pd.as_deref().expect("P/D");
                (&mut pair.d, &mut pair.e.pd.as_mut().expect("a P/D state").d, &pdsys.wl)
            };
            let found = side.checker.check(e, wl);
            if self.full_every == 1 {
                let full = self.full_verdict(k, x);
                if full.as_ref().map(|v| v.property) != found.as_ref().map(|v| v.property) {
                    return Err(KvmcError::Internal(format!(
                        "incremental invariant check disagrees with the full one after action {} of pair {k} ({}): incremental {:?}, full {:?}",
                        self.side(k, x).actions,
                        if x == 0 { "P" } else { "D" },
                        found.map(|v| v.property),
                        full.map(|v| v.property)
                    )));
                }
            }
            let side = self.side(k, x);
            if let Some(violation) = found {
                return Ok(Some(Found {
                    instance: 2 * k + usize::from(x),
                    violation,
                    action: side.actions,
                    step: side.steps,
                }));
            }
        }
        Ok(None)
    }

    fn full_check(&mut self, k: usize, role: u8) -> Option<Found> {
        let v = self.full_verdict(k, role)?;
        let side = self.side(k, role);
        Some(Found { instance: 2 * k + usize::from(role), violation: v, action: side.actions, step: side.steps })
    }

    /// The full-state predicates' verdict on pair `k`'s instance `role` (one full check).
    fn full_verdict(&mut self, k: usize, role: u8) -> Option<invariants::Violation> {
        let pair = &mut self.pairs[k];
        let (side, e, wl, cfg) = if role == 0 {
            (&mut pair.p, &pair.e, &pair.sys.workload, &pair.sys.cfg)
        } else {
            let pdsys = pair.sys.pd.as_deref().expect("P/D");
            (&mut pair.d, &pair.e.pd.as_ref().expect("a P/D state").d, &pdsys.wl, &pdsys.cfg)
        };
        side.full_checks += 1;
        invariants::full(e, wl, cfg, &self.rules, self.model.replay.progress_steps, &self.skip)
    }

    fn step_p(&mut self, k: usize) -> Result<Option<Found>> {
        {
            let pair = &mut self.pairs[k];
            let before = pair.p.work();
            let idle = pair.e.ghost.idle_steps;
            pair.d_mut().ghost.marks = 0;
            apply_in_place(pair.sys.ctx(), &mut pair.e, Input::Step, &mut pair.p.ev);
            pair.sync();
            Side::account(&mut pair.p, &pair.e, before, idle, self.model);
        }
        if let Some(f) = self.after_action(k, 0)? {
            return Ok(Some(f));
        }
        if self.full_every > 1 && self.pairs[k].p.steps.is_multiple_of(self.full_every) {
            if let Some(f) = self.full_check(k, 0) {
                return Ok(Some(f));
            }
        }
        // The router sends what P answered to D at once, in slot order.
        let ready: Vec<u16> = {
            let st = self.pairs[k].e.pd.as_ref().expect("a P/D state");
            (0..st.route.len() as u16).filter(|&r| matches!(st.route[r as usize], Route::Prefilled(_))).collect()
        };
        for r in ready {
            let pair = &mut self.pairs[k];
            pair.d.clock = pair.d.clock.max(pair.p.clock);
            pair.d.stalled = false;
            let row = pair.slot_row[r as usize];
            pair.d.arrived.push(row);
            if let Some(f) = self.decode_input(k, PdInput::Send(r))? {
                return Ok(Some(f));
            }
        }
        Ok(None)
    }

    /// One input of D or the router in pair `k` (marks reset as `System::apply` does).
    fn decode_input(&mut self, k: usize, a: PdInput) -> Result<Option<Found>> {
        {
            let pair = &mut self.pairs[k];
            pair.e.ghost.marks = 0;
            pair.d_mut().ghost.marks = 0;
            let pdsys = pair.sys.pd.as_deref().expect("P/D");
            pd::apply_with(&pair.sys, pdsys, &mut pair.e, a, &mut pair.p.ev, &mut pair.d.ev);
            pair.sync();
            if !matches!(a, PdInput::Step) {
                pair.p.stalled = false;
            }
        }
        self.after_action(k, 1)
    }

    fn step_d(&mut self, k: usize) -> Result<Option<Found>> {
        let (before, idle) = {
            let pair = &mut self.pairs[k];
            let before = pair.d.work();
            let d = pair.d_mut();
            // D's livelock counter, as `apply_in_place` keeps P's.
            let idle = d.ghost.idle_steps;
            d.ghost.idle_steps = idle.saturating_add(1);
            (before, idle)
        };
        if let Some(f) = self.decode_input(k, PdInput::Step)? {
            return Ok(Some(f));
        }
        {
            let pair = &mut self.pairs[k];
            let pdst = pair.e.pd.as_ref().expect("a P/D state");
            Side::account(&mut pair.d, &pdst.d, before, idle, self.model);
        }
        if self.full_every > 1 && self.pairs[k].d.steps.is_multiple_of(self.full_every) {
            if let Some(f) = self.full_check(k, 1) {
                return Ok(Some(f));
            }
        }
        // D's NIXL reads: queued ones get their issue step; due ones land, oldest first.
        let lat = u64::from(self.model.replay.load_steps);
        loop {
            let pair = &mut self.pairs[k];
            let steps = pair.d.steps;
            let queued: Vec<ReqId> = pair
                .d()
                .conn
                .nixl_decode()
                .map(|c| c.recvs.iter().filter(|x| x.done.is_none()).map(|x| x.req).collect())
                .unwrap_or_default();
            for r in &queued {
                pair.read_issued.entry(*r).or_insert(steps);
            }
            let Some(&next) = queued.first() else { break };
            let issued = pair.read_issued.get(&next).copied().unwrap_or(steps);
            if issued + lat > steps {
                break;
            }
            pair.read_issued.remove(&next);
            if let Some(f) = self.decode_input(k, PdInput::ReadDone)? {
                return Ok(Some(f));
            }
            self.pairs[k].d.stalled = false;
        }
        if self.pairs[k].d().conn.nixl_decode().is_some_and(|c| c.next_read().is_some()) {
            self.pairs[k].d.stalled = false; // a read in flight lands after more D steps
        }
        Ok(None)
    }

    /// Rows the router answered in pair `k`: record them, let their sessions go on.
    fn finish_answered(&mut self, k: usize) {
        let pair = &mut self.pairs[k];
        let st = pair.e.pd.as_ref().expect("a P/D state");
        let mut done = Vec::new();
        pair.live.retain(|&s| {
            if st.answered(s) {
                done.push((pair.slot_row[s as usize], s, st.route[s as usize]));
                false
            } else {
                true
            }
        });
        for (r, s, route) in done {
            pair.draining.push(s);
            pair.unfinished -= 1;
            self.unfinished -= 1;
            self.finished += 1;
            match route {
                Route::Merged => pair.router.merged += 1,
                Route::Http500 { stage: false } => pair.router.http_500_merge += 1,
                _ => pair.router.http_500_stage += 1,
            }
            let finish = match route {
                Route::Http500 { stage: true } => pair.p.clock.max(pair.d.clock),
                _ => pair.d.clock,
            };
            let row = &mut self.rows[r as usize];
            row.finished = true;
            row.finish_us = finish;
            row.p = pair.p.ev.stats.as_deref_mut().map(|x| x.req(s).clone()).unwrap_or_default();
            row.d = pair.d.ev.stats.as_deref_mut().map(|x| x.req(s).clone()).unwrap_or_default();
            self.queue.finished(r, finish);
        }
    }
}
