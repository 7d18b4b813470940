//! One P/D pair in trace replay: the pair's system and engines, and each instance's
//! bookkeeping (events with its statistics, invariant checker, clock).

use super::PdRouter;
use crate::replay::invariants::{Checker, Violation};
use crate::scope::replay::ReplayModel;
use crate::system::events::{ReqStats, Stats};
use crate::system::input::System;
use crate::system::pd;
use crate::system::types::{ReqId, Status};
use crate::system::{Engine, Events, Rules};
use std::collections::HashMap;

/// One instance's bookkeeping (its state is in the pair's engine).
pub(super) struct Side {
    pub(super) ev: Events,
    pub(super) checker: Checker,
    pub(super) clock: u64,
    pub(super) steps: u64,
    pub(super) actions: u64,
    pub(super) full_checks: u64,
    pub(super) admissions: u64,
    pub(super) max_running: u64,
    pub(super) was_running: Vec<bool>,
    /// The last step computed nothing and made no progress: wait for the other instance.
    pub(super) stalled: bool,
    /// Per slot: its request finished and was counted.
    pub(super) done: Vec<bool>,
    pub(super) arrived: Vec<u32>,
}

impl Side {
    pub(super) fn new(
        e: &Engine,
        cfg: &crate::system::EngineConfig,
        rules: &Rules,
        model: &ReplayModel,
        skip: &[crate::props::PropId],
    ) -> Side {
        Side {
            ev: Events::counting(),
            checker: Checker::new(e, cfg, rules, model.replay.progress_steps).skipping(skip),
            clock: 0,
            steps: 0,
            actions: 0,
            full_checks: 0,
            admissions: 0,
            max_running: 0,
            was_running: Vec::new(),
            stalled: false,
            done: Vec::new(),
            arrived: Vec::new(),
        }
    }

    /// Clock, step count, admissions and stall after a step of `side` over `e`.
    pub(super) fn account(side: &mut Side, e: &Engine, before: (u64, u64), idle_before: u16, model: &ReplayModel) {
        side.steps += 1;
        side.max_running = side.max_running.max(e.running.len() as u64);
        // Admissions: a request entering RUNNING (or finishing within the step that admitted
        // it), as the colocated driver counts them.
        for (s, q) in e.reqs.iter().enumerate() {
            if side.was_running.len() <= s {
                side.was_running.resize(s + 1, false);
                side.done.resize(s + 1, false);
            }
            if side.done[s] || q.status == Status::Pending {
                continue;
            }
            let now = q.status == Status::Running;
            if (now || q.status.is_finished()) && !side.was_running[s] {
                side.admissions += 1;
            }
            side.was_running[s] = now;
            side.done[s] = q.status.is_finished();
        }
        let after = side.work();
        side.clock += if after.0 > before.0 {
            model.replay.prefill_us
        } else if after.1 > before.1 {
            model.replay.decode_us
        } else {
            0
        };
        side.stalled = after == before && e.ghost.idle_steps > idle_before;
    }

    /// Slot `s` carries a new request on both instances.
    pub(super) fn fresh_slot(side: &mut Side, s: ReqId) {
        let s = s as usize;
        if side.was_running.len() <= s {
            side.was_running.resize(s + 1, false);
            side.done.resize(s + 1, false);
        }
        side.was_running[s] = false;
        side.done[s] = false;
    }

    pub(super) fn stats(&self) -> Stats {
        self.ev.stats.as_deref().cloned().unwrap_or_default()
    }

    pub(super) fn work(&self) -> (u64, u64) {
        self.ev.stats.as_ref().map_or((0, 0), |s| (s.prefill_pass_tokens, s.decode_tokens))
    }
}

/// One P/D pair.
pub(super) struct Pair {
    pub(super) sys: System,
    /// P, with D and the router in `e.pd`.
    pub(super) e: Engine,
    pub(super) p: Side,
    pub(super) d: Side,
    pub(super) slot_row: Vec<u32>,
    /// Slots whose request the router has not answered.
    pub(super) live: Vec<ReqId>,
    pub(super) draining: Vec<ReqId>,
    pub(super) free: Vec<ReqId>,
    /// D's reads in flight: D's step count when each was queued.
    pub(super) read_issued: HashMap<ReqId, u64>,
    pub(super) unfinished: u32,
    pub(super) router: PdRouter,
    /// What the router said when its merge broke pd-equals-colocated (replay's events are
    /// off; the router's are kept, one per answer).
    pub(super) router_violation: Option<String>,
}

impl Pair {
    pub(super) fn d(&self) -> &Engine {
        &self.e.pd.as_ref().expect("a P/D state").d
    }
    pub(super) fn d_mut(&mut self) -> &mut Engine {
        &mut self.e.pd.as_mut().expect("a P/D state").d
    }

    /// The router after an input (`pd::sync`), its events kept for a violation's detail.
    pub(super) fn sync(&mut self) {
        let mut rev = Events::on();
        pd::sync(&self.sys, self.sys.pd.as_deref().expect("P/D"), &mut self.e, &mut rev);
        for x in rev.list {
            if let crate::system::events::Event::Violation { detail, .. } = x {
                self.router_violation.get_or_insert(detail);
            }
        }
    }

    /// P can move: a live request, a finish to report, or blocks D has read.
    pub(super) fn p_busy(&self) -> bool {
        self.e.reqs.iter().any(|q| q.status.is_live())
            || !self.e.finished_since.is_empty()
            || !self.e.batches.is_empty()
            || self.e.conn.nixl().is_some_and(|n| n.sending.iter().any(|s| s.read))
    }

    pub(super) fn d_busy(&self) -> bool {
        self.d().has_work()
    }

    /// A slot the router, P and D are all done with.
    pub(super) fn reusable(&self, s: ReqId) -> bool {
        let st = self.e.pd.as_ref().expect("a P/D state");
        st.answered(s)
            && self.e.slot_reusable(s)
            && (st.d.reqs[s as usize].status == Status::Pending || st.d.slot_reusable(s))
    }
}

/// Where a violation happened.
pub(super) struct Found {
    pub(super) instance: usize,
    pub(super) violation: Violation,
    pub(super) action: u64,
    pub(super) step: u64,
}

/// What happened to one trace row.
#[derive(Clone, Debug, Default)]
pub(super) struct Row {
    pub(super) pair: u16,
    pub(super) arrived: bool,
    pub(super) finished: bool,
    pub(super) arrival_us: u64,
    pub(super) finish_us: u64,
    /// P's counters (the prompt) and D's (the decode).
    pub(super) p: ReqStats,
    pub(super) d: ReqStats,
}
