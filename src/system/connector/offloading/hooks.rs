//! The OffloadingConnector behind [`KvConnector`]: which of its functions answers each hook.

use super::worker as conn;
use super::{JobKind, OffloadingState, Phase};
use crate::system::connector::{
    BitSet, ConnCtx, HookCtx, KvConnector, RequestRef, SchedOut, StepScratch, WorkerCtx, WorkerStep,
};
use crate::system::engine::Direction;
use crate::system::events::{Event, Events};
use crate::system::ghost::{Breach, Ghost, Mark};
use crate::system::model_runner::WorkerOut;
use crate::system::request::ReqState;
use crate::system::types::{BadKind, BlockId, ContentTag, JobId, ReqId};
use smallvec::SmallVec;
use std::collections::BTreeSet;

impl OffloadingState {
    /// This step's scratch names a sync load (it lands before the forward).
    fn has_sync_load(&self, scratch: &StepScratch) -> bool {
        scratch.load_jobs.iter().any(|&id| self.job(id).is_some_and(|j| matches!(j.kind, JobKind::Load { sync: true })))
    }
}

impl KvConnector for OffloadingState {
    fn on_new_request(&mut self, r: ReqId) {
        self.on_new_request(r)
    }
    fn get_num_new_matched_tokens(
        &mut self,
        q: RequestRef,
        num_local: u32,
        max_new: Option<u32>,
        scratch: &mut StepScratch,
        cx: &mut HookCtx,
    ) -> (Option<u32>, bool) {
        self.get_num_new_matched_tokens(q, num_local, max_new, scratch, cx)
    }
    fn peek_unbounded_hit(&self, q: RequestRef, num_local: u32, num_tokens: u32, c: &ConnCtx) -> Option<u32> {
        self.peek_unbounded_hit(q, num_local, num_tokens, c)
    }
    fn update_state_after_alloc(
        &mut self,
        q: RequestRef,
        num_external: u32,
        scratch: &mut StepScratch,
        cx: &mut HookCtx,
    ) {
        self.update_state_after_alloc(q, num_external, scratch, cx)
    }
    fn build_connector_meta(&mut self, out: &SchedOut, reqs: &[ReqState], scratch: &mut StepScratch, cx: &mut HookCtx) {
        self.build_connector_meta(out, reqs, scratch, cx)
    }
    fn request_finished(&mut self, q: RequestRef, cx: &mut HookCtx) -> bool {
        self.request_finished(q, &cx.c)
    }
    fn update_connector_output(&mut self, w: &WorkerOut, reqs: &[ReqState], cx: &mut HookCtx) {
        self.update_connector_output(&w.completed, reqs, cx)
    }
    fn has_pending_work(&self) -> bool {
        self.has_pending_work()
    }
    fn keyed_tokens(&self, r: ReqId, c: &ConnCtx) -> u32 {
        self.reqs[r as usize].as_ref().map_or(0, |st| st.num_keys * c.tokens_per_chunk())
    }

    fn worker_before_forward(&mut self, s: WorkerStep, cx: &mut WorkerCtx) -> BTreeSet<BlockId> {
        let (pool, ctx, ghost, ev) = (&mut *cx.pool, cx.ctx, &mut *cx.ghost, &mut *cx.ev);
        conn::handle_preemptions(self, pool, ctx, s.scratch, ghost, ev);
        if self.has_sync_load(s.scratch) {
            conn::start_load_kv(self, pool, ctx, s.scratch, Some(s.input), ghost, ev)
        } else {
            BTreeSet::new()
        }
    }

    /// The blocks submitted store copies still read (a write to one tears that copy).
    fn forward_watch(&self, room: usize) -> Option<BitSet> {
        let mut sources = BitSet::with_room(room);
        for j in self.jobs.iter().filter(|j| j.is_store() && j.phase == Phase::Submitted) {
            sources.extend(j.blocks.iter().copied());
        }
        Some(sources)
    }

    fn forward_write(&mut self, block: BlockId, ghost: &mut Ghost, ev: &mut Events) {
        for j in self.jobs.iter_mut().filter(|j| j.is_store() && j.phase == Phase::Submitted) {
            for (idx, &src) in j.blocks.iter().enumerate() {
                if src == block {
                    j.snapshot[idx] = ContentTag::Bad(BadKind::Torn);
                    j.torn = true;
                    ghost.breach(Breach::StaleSource);
                    let id = j.id;
                    ev.emit(|| Event::Violation {
                        property: "source-freshness",
                        detail: format!("block {block} is overwritten while store job {id} is still copying it"),
                    });
                }
            }
        }
    }

    fn worker_end_step(&mut self, s: WorkerStep, w: &mut WorkerOut, cx: &mut WorkerCtx) {
        let (pool, ctx, ghost, ev) = (&mut *cx.pool, cx.ctx, &mut *cx.ghost, &mut *cx.ev);
        let input = s.input;
        if !self.has_sync_load(s.scratch) {
            conn::start_load_kv(self, pool, ctx, s.scratch, None, ghost, ev);
        }
        conn::wait_for_save(self, s.scratch);
        // Copies that finish while this step runs are reported by this step's get_finished.
        if !input.drain {
            ghost.drainable.0 |= self.jobs.iter().any(|j| j.phase == Phase::Submitted);
        }
        let now: SmallVec<[JobId; 8]> = if input.drain || input.drain_stores {
            self.jobs
                .iter()
                .filter(|j| j.phase == Phase::Submitted && (input.drain || j.is_store()))
                .map(|j| j.id)
                .collect()
        } else {
            input
                .complete
                .iter()
                .copied()
                .filter(|&id| self.job(id).is_some_and(|j| j.phase == Phase::Submitted))
                .collect()
        };
        for id in now {
            ghost.mark(Mark::Drained);
            conn::complete(self, pool, ctx, id, None, ghost, ev);
        }
        let named = input.fail_blocks.iter().filter_map(|(id, bad)| {
            let j = self.job(*id)?;
            Some((*id, j.blocks.iter().position(|b| bad.contains(b)).unwrap_or(j.blocks.len()) as u32))
        });
        let fails: Vec<(JobId, u32)> = input.fail.iter().copied().chain(named).collect();
        for &(id, first_bad) in &fails {
            if self.job(id).is_some_and(|j| j.phase == Phase::Submitted) {
                ghost.mark(Mark::LoadFailure);
                conn::complete(self, pool, ctx, id, Some(first_bad), ghost, ev);
            }
        }
        conn::get_finished(self, ctx.rules.failed_load_request_level, &input.reported, w);
        w.finished_sending = self.finished_sending();
    }

    fn next_transfer(&self, d: Direction) -> Option<JobId> {
        self.jobs
            .iter()
            .filter(|j| j.phase == Phase::Submitted && (j.is_store() == (d == Direction::Store)))
            .map(|j| j.id)
            .min()
    }

    fn complete_transfer(&mut self, _d: Direction, job: JobId, fail: Option<u32>, cx: &mut WorkerCtx) {
        conn::complete(self, cx.pool, cx.ctx, job, fail, cx.ghost, cx.ev)
    }

    fn loading_blocks(&self) -> BTreeSet<BlockId> {
        self.jobs
            .iter()
            .filter(|j| !j.is_store() && !matches!(j.phase, Phase::Done | Phase::Failed | Phase::Reported))
            .flat_map(|j| j.blocks.iter().copied())
            .collect()
    }

    fn load_job_blocks(&self, id: JobId) -> u32 {
        self.job(id).map_or(0, |j| j.blocks.len() as u32)
    }

    fn canonicalize<'a>(&mut self, outside: impl Iterator<Item = &'a mut JobId>) {
        self.canonicalize(outside)
    }

    fn enable_replay_aids(&mut self) {
        self.host.enable_log();
    }

    fn add_slot(&mut self) {
        self.reqs.push(None);
    }

    fn slot_idle(&self, r: ReqId) -> bool {
        self.reqs[r as usize].is_none() && self.jobs.iter().all(|j| j.req != r) && self.held.iter().all(|h| h.req != r)
    }
}
