//! One engine instance: the G1 pool, the scheduler's queues, every request's state, the
//! connector (with its host tier) and the ghost state the properties read.
//!
//! An engine moves only through the inputs below. The model checker chooses them
//! nondeterministically; trace replay and conformance take them from a trace or a log.

use super::collections::side::{ReadCache, Side, Stamp};
use super::config::EngineConfig;
use super::connector::SchedOut;
use super::connector::{Connector, RequestRef, WorkerCtx};
use super::events::{Event, Events};
use super::expert_rows::AuxState;
use super::ghost::{Breach, Ghost, Mark};
use super::gpu_pool::GpuPool;
use super::model_runner::WorkerOut;
use super::request::{Queue, ReqState};
use super::rules::Rules;
use super::step_bufs::StepBufs;
use super::types::{BlockId, FinishReason, JobId, ReqId, Status};
use super::workload::Workload;
use super::{model_runner, scheduler, scheduler_output};
use crate::system::collections::pack::pack_fields;

mod pack;

/// What every transition reads and never changes.
#[derive(Clone, Copy)]
pub struct Ctx<'a> {
    pub cfg: &'a EngineConfig,
    pub rules: &'a Rules,
    pub wl: &'a Workload,
}

/// A transfer handler of the worker (transfers complete in submission order per handler).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum Direction {
    /// GPU -> host stores.
    Store,
    /// Host -> GPU async loads.
    Load,
}

#[derive(PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct Engine {
    pub pool: GpuPool,
    pub reqs: Vec<ReqState>,
    pub running: Queue,
    pub waiting: Queue,
    /// `kv_holding_waiting`: waiting requests that hold blocks; drained first.
    pub kv_holding: Queue,
    /// `finished_req_ids`: finished since the last `schedule()`.
    pub finished_since: Vec<ReqId>,
    /// `finished_recving_kv_req_ids`.
    pub finished_recving: Vec<ReqId>,
    /// `failed_recving_kv_req_ids`.
    pub failed_recving: Vec<ReqId>,
    pub conn: Connector,
    pub ghost: Ghost,
    /// Async scheduling: batches scheduled and executed whose output is not processed yet
    /// (`EngineCore.batch_queue`, oldest first).
    pub batches: Vec<Batch>,
    /// `sched_step_seq` / `processed_step_seq` (deferred-free fences).
    pub sched_seq: u32,
    pub processed_seq: u32,
    /// `deferred_frees`: (fence, blocks in allocation order), FIFO.
    pub deferred_frees: Vec<(u32, Vec<BlockId>)>,
    /// `num_waiting_for_streaming_input`: up at every park, down when a parked session takes
    /// its next input or is finished. It counts parked sessions, unless (0.24 under async
    /// scheduling) an in-flight output stopped a parked session and parked it again.
    pub streaming_waiting: u16,
    /// Router replay: the rows connector, its worker and row store (None when off).
    pub aux: Option<Box<AuxState>>,
    /// Trace replay's read cache (not state; off in the checker).
    pub reads: Side<ReadCache>,
    /// P/D: the decode instance and the router (`src/system/pd`), on the prefill engine.
    pub pd: Option<Box<super::pd::PdState>>,
    /// Not state: which decoded frontier state this is (the checker's step memo; `Stamp`).
    #[serde(skip)]
    pub stamp: Stamp,
}

pack_fields!(clone Engine {
    pool,
    reqs,
    running,
    waiting,
    kv_holding,
    finished_since,
    finished_recving,
    failed_recving,
    conn,
    ghost,
    batches,
    sched_seq,
    processed_seq,
    deferred_frees,
    streaming_waiting,
    aux,
    reads,
    pd
} skip {
    stamp
});

/// A batch in flight: what was scheduled and what the worker reported for it.
#[derive(PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct Batch {
    pub(crate) out: SchedOut,
    pub(crate) wout: WorkerOut,
}

pack_fields!(clone Batch { out, wout });

/// The environment's choices for one engine step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepInput {
    /// This step's sync loads fail from this block index on.
    pub sync_load_fail: Option<u32>,
    /// Every copy submitted by the end of the step finishes before the worker reports.
    pub drain: bool,
    /// Every store submitted by the end of the step finishes before the worker reports;
    /// loads keep their time (OffloadingConnector; trace replay's `store_steps = 0`).
    pub drain_stores: bool,
    /// These copies (if submitted) finish before the worker reports (conformance logs).
    pub complete: Vec<JobId>,
    /// These loads (if submitted) fail before the worker reports, from that block index on.
    pub fail: Vec<(JobId, u32)>,
    /// These loads fail from their first block in the given set on (conformance logs name
    /// the invalid blocks); a sync load of this step fails when it runs.
    pub fail_blocks: Vec<(JobId, Vec<crate::system::types::BlockId>)>,
    /// The copies the worker reports in this step, in the order it reports them (a
    /// conformance log's transfer lines: the order of `completed_jobs`, which the scheduler
    /// side processes in turn). Empty: the real worker's order (OffloadingConnector: stores,
    /// then async loads, then sync loads, `CpuGpuOffloadingHandlers.get_finished`).
    pub reported: Vec<JobId>,
}

impl Engine {
    pub fn new(cfg: &EngineConfig, wl: &Workload, rules: &Rules) -> Self {
        let n = wl.requests.len();
        let conn = Connector::new(cfg, n, rules);
        // The rest as a decoder starts from (`Default`, engine/pack.rs): empty queues, no
        // batch in flight, counters at 0.
        Engine {
            pool: GpuPool::new(cfg.num_gpu_blocks),
            reqs: vec![ReqState::new(); n],
            conn,
            aux: cfg.router_replay.as_ref().map(|c| {
                // 0.33 `AuxOutputSchedulerConnector.__init__`: `num_blocks * (2 if kv_connector
                // else 1)`, for any KV connector (OffloadingConnector, SimpleCPU, Mooncake store).
                let with_connector = cfg.connector_kind() != super::config::ConnectorKind::None;
                let capacity = cfg.num_gpu_blocks * if with_connector { 2 } else { 1 };
                Box::new(AuxState::new(
                    n,
                    c.store_objects,
                    capacity,
                    rules.aux_store_evicts_live,
                    rules.aux_store_grows,
                ))
            }),
            ..Engine::default()
        }
    }

    /// Trace replay: log what every transition changes (for incremental invariant checks)
    /// and let forward passes skip re-reading prefixes already found right. Behaviour is
    /// unchanged; only the cost of a step follows what it changes.
    pub fn enable_replay_aids(&mut self) {
        self.pool.enable_log();
        self.reads = Side(Some(Box::default()));
        self.conn.enable_replay_aids();
    }

    /// Trace replay: one more request slot (a pending request of `wl`'s new last slot).
    pub fn add_slot(&mut self) -> ReqId {
        self.reqs.push(ReqState::new());
        self.conn.add_slot();
        if let Some(a) = self.aux.as_mut() {
            a.add_slot();
        }
        (self.reqs.len() - 1) as ReqId
    }

    /// Trace replay: slot `r`'s request is gone for good (finished, reported, blocks and
    /// connector state released, no batch in flight names it), so the slot may carry another.
    pub fn slot_reusable(&self, r: ReqId) -> bool {
        let q = &self.reqs[r as usize];
        q.status.is_finished()
            && q.table.is_empty()
            && !self.finished_since.contains(&r)
            && !self.finished_recving.contains(&r)
            && !self.failed_recving.contains(&r)
            && self.conn.slot_idle(r)
            && self.aux.as_ref().is_none_or(|a| a.slot_idle(r))
            && self
                .batches
                .iter()
                .all(|bt| bt.out.scheduled.iter().all(|s| s.req != r) && !bt.out.finished.contains(&r))
    }

    /// Trace replay: make reusable slot `r` pending again for its next request.
    pub fn reset_slot(&mut self, r: ReqId) {
        debug_assert!(self.slot_reusable(r));
        self.reqs[r as usize] = ReqState::new();
        self.conn.reset_slot(r);
        if let Some(a) = self.aux.as_mut() {
            a.reset_slot(r);
        }
    }

    /// Requests not yet finished (a parked session too: it waits for its client), or finished
    /// but still holding blocks or connector state.
    pub fn has_work(&self) -> bool {
        self.reqs.iter().any(|r| r.status.is_live() || (r.status.is_finished() && !r.table.is_empty()))
            || !self.finished_since.is_empty()
            || self.conn.has_pending_work()
            || !self.batches.is_empty()
            || !self.deferred_frees.is_empty()
            || self.pd.as_ref().is_some_and(|x| x.has_work())
    }

    /// `Scheduler.has_requests`: unfinished requests, finished ones not yet reported or still
    /// holding blocks (delayed free), or connector push work (`has_pending_push_work`; 0.24's
    /// SimpleCPU has none: rule `scpu_pending_keeps_alive`). A parked session
    /// (WAITING_FOR_STREAMING_REQ) is not an unfinished request: `get_num_unfinished_requests`
    /// subtracts `num_waiting_for_streaming_input`, so with nothing else live `EngineCore`
    /// does not schedule (under async scheduling it only drains the batch queue).
    ///
    /// vLLM 0.24 (rule `session_stop_drops_in_flight` false) counts its queues' entries less the
    /// parks counter (`get_num_unfinished_requests`), which its stale outputs can put out of
    /// step: a session parked twice and then ended leaves a running request uncounted, and the
    /// engine stops stepping (finding 30). vLLM 0.32 counts the same way; there (rule
    /// `stop_requeue_first`) a session stopped while preempted is in no queue (finding 36) and
    /// is not counted either: with nothing else live the engine goes idle.
    pub fn has_requests(&self, rules: &Rules) -> bool {
        let unfinished = if rules.session_stop_drops_in_flight && !rules.stop_requeue_first {
            self.reqs.iter().any(|r| r.status.is_live() && r.status != Status::Parked)
        } else {
            self.running.len() + self.waiting.len() + self.kv_holding.len() > usize::from(self.streaming_waiting)
        };
        unfinished
            || self.reqs.iter().any(|r| r.status.is_finished() && !r.table.is_empty())
            || !self.finished_since.is_empty()
            || (self.conn.has_pending_work()
                && (rules.scpu_pending_keeps_alive || !matches!(self.conn, Connector::SimpleCpu(_))))
    }

    /// `add_request`: a new request joins the tail of `waiting`.
    pub fn arrive(&mut self, ctx: Ctx, r: ReqId, ev: &mut Events) {
        let _ = ctx;
        assert_eq!(self.reqs[r as usize].status, Status::Pending, "request arrives once");
        self.reqs[r as usize].status = Status::Waiting;
        self.waiting.push(r);
        self.conn.on_new_request(r);
        self.ghost.idle_steps = 0;
        ev.emit(|| Event::Arrived { req: r });
    }

    /// `finish_requests([r], FINISHED_ABORTED)` from the client.
    pub fn abort(&mut self, ctx: Ctx, r: ReqId, ev: &mut Events) {
        self.ghost.mark(Mark::Abort);
        scheduler_output::finish_requests(self, ctx, &[r], FinishReason::Aborted, ev);
    }

    /// `add_request` with a live session's id: the client sends the session's next input, or
    /// the end-of-session sentinel after its last one. A parked session takes it at once
    /// (the sentinel finishes it as aborted); otherwise it waits in `streaming_queue`.
    pub fn stream_input(&mut self, ctx: Ctx, r: ReqId, ev: &mut Events) {
        assert!(self.stream_input_enabled(ctx, r), "no input left to send");
        let q = &mut self.reqs[r as usize];
        q.sent += 1;
        self.ghost.idle_steps = 0;
        if q.status != Status::Parked {
            ev.emit(|| Event::StreamQueued { req: r });
        } else if q.sent == ctx.wl.num_turns(r) {
            scheduler_output::finish_requests(self, ctx, &[r], FinishReason::Aborted, ev);
        } else {
            self.streaming_waiting -= 1;
            scheduler_output::update_request_as_session(self, ctx, r, ev);
        }
    }

    /// The client may send session `r` another input (or end it).
    pub fn stream_input_enabled(&self, ctx: Ctx, r: ReqId) -> bool {
        let q = &self.reqs[r as usize];
        ctx.wl.is_session(r) && q.status.is_live() && q.sent < ctx.wl.num_turns(r)
    }

    /// `finish_requests([r], FINISHED_ERROR)`: a request fails (grammar, encoder, ...).
    pub fn error(&mut self, ctx: Ctx, r: ReqId, ev: &mut Events) {
        self.ghost.mark(Mark::ErrorFinish);
        scheduler_output::finish_requests(self, ctx, &[r], FinishReason::Error, ev);
    }

    /// NIXL P/D: the consumer reads finished request `r`'s blocks from the producer's host
    /// buffer and notifies it (the producer frees them at its next step).
    pub fn consumer_read(&mut self, ctx: Ctx, r: ReqId, ev: &mut Events) {
        let q = RequestRef { id: r, state: &self.reqs[r as usize], spec: ctx.wl.spec(r, self.reqs[r as usize].turn) };
        self.conn.consumer_read(q, &mut WorkerCtx { ctx, pool: &mut self.pool, ghost: &mut self.ghost, ev });
    }

    /// Requests whose blocks the consumer may read now (NIXL P/D).
    pub fn consumer_readable(&self) -> Vec<ReqId> {
        self.conn.consumer_readable()
    }

    /// The job a handler completes next: the oldest submitted job of that direction.
    pub fn next_transfer(&self, d: Direction) -> Option<JobId> {
        self.conn.next_transfer(d)
    }

    /// The worker finished copying `job` of direction `d` (the scheduler learns it at the
    /// next step).
    pub fn transfer_done(&mut self, ctx: Ctx, d: Direction, job: JobId, ev: &mut Events) {
        let mut cx = WorkerCtx { ctx, pool: &mut self.pool, ghost: &mut self.ghost, ev };
        self.conn.complete_transfer(d, job, None, &mut cx);
    }

    /// A load failed: blocks from index `first_bad` of its destination were not written.
    pub fn transfer_failed(&mut self, ctx: Ctx, job: JobId, first_bad: u32, ev: &mut Events) {
        self.ghost.mark(Mark::LoadFailure);
        let mut cx = WorkerCtx { ctx, pool: &mut self.pool, ghost: &mut self.ghost, ev };
        self.conn.complete_transfer(Direction::Load, job, Some(first_bad), &mut cx);
    }

    /// The engine is gone: the rows worker raised (rows-present), the scheduler's connector
    /// asserted (connector-assert), the scheduler raised on a queue entry (queue-sound) or
    /// asserted on a negative scheduled count (tokens-positive).
    /// Nothing moves any more.
    pub fn is_dead(&self) -> bool {
        self.aux.as_ref().is_some_and(|a| a.dead)
            || self.ghost.has(Breach::ConnectorAssert)
            || self.ghost.has(Breach::QueueRaised)
            || self.ghost.has(Breach::TokensNonPositive)
            || self.pd.as_ref().is_some_and(|x| x.d.is_dead())
    }

    /// One engine step. Synchronous scheduling: `schedule()`, the worker (connector hooks
    /// and the forward pass), `update_from_output()`. Async scheduling: one iteration of
    /// `EngineCore.step_with_batch_queue` (schedule and execute a batch if there are requests;
    /// process the oldest batch's output once two are in flight or nothing more can be
    /// scheduled).
    pub fn step(&mut self, ctx: Ctx, input: &StepInput, ev: &mut Events) {
        if !ctx.cfg.async_scheduling {
            // `EngineCore.step` schedules nothing without `Scheduler.has_requests()`: 0.24's
            // SimpleCPU stores in flight wait for the next request (rule
            // `scpu_pending_keeps_alive`, finding 27), and no lazy walk runs in an engine with
            // nothing to do. A P/D pair steps for its decode instance too.
            if self.pd.is_none() && !self.has_requests(ctx.rules) {
                return;
            }
            let mut bufs = StepBufs::take();
            self.schedule_and_execute(ctx, input, &mut bufs, ev);
            // Unless the worker or the scheduler raised: the engine is gone.
            if !self.is_dead() {
                scheduler_output::update_from_output(self, ctx, &bufs.out, &mut bufs.wout, ev);
            }
            bufs.give_back();
            return;
        }
        if self.has_requests(ctx.rules) {
            let mut bufs = StepBufs::take();
            self.schedule_and_execute(ctx, input, &mut bufs, ev);
            let b = Batch { out: std::mem::take(&mut bufs.out), wout: std::mem::take(&mut bufs.wout) };
            bufs.give_back();
            let executed = b.out.scheduled.iter().any(|s| s.tokens > 0);
            self.batches.push(b);
            if self.batches.len() < 2 && (executed || self.has_requests(ctx.rules)) {
                return;
            }
        } else if self.batches.is_empty() {
            return;
        }
        let mut b = self.batches.remove(0);
        scheduler_output::update_from_output(self, ctx, &b.out, &mut b.wout, ev);
        // The processed batch's buffers serve the next batch scheduled on this thread.
        let mut bufs = StepBufs::take();
        (bufs.out, bufs.wout) = (b.out, b.wout);
        bufs.give_back();
    }

    /// `schedule()` and the worker's step, into `bufs.out` and `bufs.wout` (both empty).
    fn schedule_and_execute(&mut self, ctx: Ctx, input: &StepInput, bufs: &mut StepBufs, ev: &mut Events) {
        let StepBufs { scratch, out, wout } = bufs;
        scheduler::schedule(self, ctx, scratch, out, ev);
        if self.is_dead() {
            return; // schedule() raised
        }
        model_runner::execute(self, ctx, out, scratch, input, wout, ev);
    }

    /// Equal but for the last transition's marks and the idle-step counter (a step that
    /// changed nothing else is no step at all).
    pub fn same_ignoring_marks(&self, o: &Engine) -> bool {
        self.ghost.violations == o.ghost.violations
            && self.ghost.faults == o.ghost.faults
            && self.reqs == o.reqs
            && self.running == o.running
            && self.waiting == o.waiting
            && self.kv_holding == o.kv_holding
            && self.finished_since == o.finished_since
            && self.finished_recving == o.finished_recving
            && self.failed_recving == o.failed_recving
            && self.pool == o.pool
            && self.conn == o.conn
            && self.batches == o.batches
            && self.sched_seq == o.sched_seq
            && self.processed_seq == o.processed_seq
            && self.deferred_frees == o.deferred_frees
            && self.aux == o.aux
            && match (&self.pd, &o.pd) {
                (Some(x), Some(y)) => x.route == y.route && x.d.same_ignoring_marks(&y.d),
                (x, y) => x.is_none() && y.is_none(),
            }
    }

    /// Make equal histories equal states (the model checker only): renumber job ids and
    /// LRU ranks densely, and step sequence numbers relative to the processed one.
    pub fn canonicalize(&mut self) {
        if let Some(x) = self.pd.as_mut() {
            x.d.canonicalize();
        }
        self.conn.canonicalize(self.batches.iter_mut().flat_map(|b| b.wout.completed.iter_mut()));
        let base = self.processed_seq;
        if base > 0 {
            // Only comparisons with processed_seq matter: anything at or below it is done.
            self.processed_seq = 0;
            self.sched_seq -= base;
            for q in &mut self.reqs {
                q.last_sched_seq = q.last_sched_seq.saturating_sub(base);
            }
            for (fence, _) in &mut self.deferred_frees {
                *fence = fence.saturating_sub(base);
            }
        }
    }
}
