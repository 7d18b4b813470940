//! SimpleCPUOffloadConnector behind [`KvConnector`]: which of its functions answers each hook.

use super::worker as sc_worker;
use super::SimpleCpuState;
use crate::system::connector::{
    BitSet, HookCtx, KvConnector, RequestRef, SchedOut, StepScratch, WorkerCtx, WorkerStep,
};
use crate::system::engine::Direction;
use crate::system::events::Events;
use crate::system::ghost::Ghost;
use crate::system::model_runner::WorkerOut;
use crate::system::request::ReqState;
use crate::system::rules::Rules;
use crate::system::types::{BlockId, JobId, ReqId};
use std::collections::BTreeSet;

impl KvConnector for SimpleCpuState {
    /// SimpleCPU is not wrapped by prime-rl's load limit (`max_new` is ignored).
    fn get_num_new_matched_tokens(
        &mut self,
        q: RequestRef,
        num_local: u32,
        _max_new: Option<u32>,
        _scratch: &mut StepScratch,
        cx: &mut HookCtx,
    ) -> (Option<u32>, bool) {
        self.get_num_new_matched_tokens(q, num_local, cx)
    }
    fn update_state_after_alloc(
        &mut self,
        q: RequestRef,
        num_external: u32,
        scratch: &mut StepScratch,
        cx: &mut HookCtx,
    ) {
        let r = q.id;
        self.update_state_after_alloc(q, num_external, cx);
        // `_reqs_to_load` is a dict: the step's load event lists requests in the order their
        // loads were prepared (admission order), not by request id.
        let prepared = self.reqs[r as usize].load.as_ref().is_some_and(|l| l.event.is_none());
        if prepared && !scratch.load_order.contains(&r) {
            scratch.load_order.push(r);
        }
    }
    fn build_connector_meta(&mut self, out: &SchedOut, reqs: &[ReqState], scratch: &mut StepScratch, cx: &mut HookCtx) {
        self.build_connector_meta(out, reqs, &scratch.load_order, cx)
    }
    fn request_finished(&mut self, q: RequestRef, cx: &mut HookCtx) -> bool {
        self.request_finished(q, cx);
        false
    }
    fn update_connector_output(&mut self, w: &WorkerOut, _reqs: &[ReqState], cx: &mut HookCtx) {
        self.update_connector_output(&w.completed, &w.finished_recving, cx)
    }
    fn has_pending_work(&self) -> bool {
        self.has_pending_work()
    }

    fn worker_before_forward(&mut self, s: WorkerStep, cx: &mut WorkerCtx) -> BTreeSet<BlockId> {
        sc_worker::handle_preemptions(self, cx.pool, !s.out.preempted.is_empty(), cx.ghost, cx.ev);
        BTreeSet::new()
    }
    /// Every write: a store still copying the block is torn.
    fn forward_watch(&self, _room: usize) -> Option<BitSet> {
        None
    }
    fn forward_write(&mut self, block: BlockId, ghost: &mut Ghost, ev: &mut Events) {
        sc_worker::forward_write(self, block, ghost, ev)
    }
    fn worker_after_forward(&mut self, s: WorkerStep, cx: &mut WorkerCtx) -> WorkerOut {
        sc_worker::after_forward(self, cx.pool, cx.ctx, s.input, cx.ghost, cx.ev)
    }
    fn next_transfer(&self, d: Direction) -> Option<JobId> {
        sc_worker::next_transfer(self, d)
    }
    fn complete_transfer(&mut self, d: Direction, job: JobId, fail: Option<u32>, cx: &mut WorkerCtx) {
        assert!(fail.is_none(), "only the OffloadingConnector and the Mooncake store report load failures");
        sc_worker::complete(self, cx.pool, d, job, cx.ev)
    }

    fn loading_blocks(&self) -> BTreeSet<BlockId> {
        self.loading_blocks().into_iter().collect()
    }
    fn gpu_pins(&self, rules: &Rules) -> Vec<BlockId> {
        self.gpu_pins(rules)
    }
    fn canonicalize<'a>(&mut self, outside: impl Iterator<Item = &'a mut JobId>) {
        self.canonicalize(outside)
    }
    fn enable_replay_aids(&mut self) {
        self.cpu.enable_log();
    }

    fn add_slot(&mut self) {
        self.reqs.push(Default::default());
    }
    fn slot_idle(&self, r: ReqId) -> bool {
        let q = &self.reqs[r as usize];
        q.store.is_none()
            && q.pending.is_none()
            && q.load.is_none()
            && self.stores.iter().all(|e| !e.reqs.contains(&r) && e.parts.iter().all(|t| t.req != r))
            && self.loads.iter().all(|e| !e.reqs.contains(&r))
            && self.pending_finished.iter().all(|t| t.req != r)
    }
    fn reset_slot(&mut self, r: ReqId) {
        self.reqs[r as usize] = Default::default();
    }
}
