//! MooncakeStoreConnector behind [`KvConnector`]: which of its functions answers each hook.

use super::worker as mc_worker;
use super::MooncakeState;
use crate::system::connector::{
    ConnCtx, HookCtx, KvConnector, RequestRef, SchedOut, StepScratch, WorkerCtx, WorkerStep,
};
use crate::system::engine::Direction;
use crate::system::model_runner::WorkerOut;
use crate::system::request::ReqState;
use crate::system::rules::Rules;
use crate::system::types::{BlockId, JobId, ReqId};
use std::collections::BTreeSet;

impl KvConnector for MooncakeState {
    /// `max_new`: prime-rl wraps the Mooncake store's `get_num_new_matched_tokens`.
    fn get_num_new_matched_tokens(
        &mut self,
        q: RequestRef,
        num_local: u32,
        max_new: Option<u32>,
        _scratch: &mut StepScratch,
        cx: &mut HookCtx,
    ) -> (Option<u32>, bool) {
        self.get_num_new_matched_tokens(q, num_local, max_new, &cx.c)
    }
    fn peek_unbounded_hit(&self, q: RequestRef, num_local: u32, _num_tokens: u32, c: &ConnCtx) -> Option<u32> {
        Some(self.peek_unbounded_hit(q, num_local, c))
    }
    fn update_state_after_alloc(
        &mut self,
        q: RequestRef,
        num_external: u32,
        _scratch: &mut StepScratch,
        cx: &mut HookCtx,
    ) {
        self.update_state_after_alloc(q, num_external, cx)
    }
    fn build_connector_meta(
        &mut self,
        out: &SchedOut,
        reqs: &[ReqState],
        _scratch: &mut StepScratch,
        cx: &mut HookCtx,
    ) {
        self.build_connector_meta(out, reqs, cx)
    }
    /// MooncakeStoreConnector returns (False, None) and keeps its state until the id comes
    /// back in `finished_req_ids`.
    fn request_finished(&mut self, _q: RequestRef, _cx: &mut HookCtx) -> bool {
        false
    }
    fn update_connector_output(&mut self, w: &WorkerOut, _reqs: &[ReqState], cx: &mut HookCtx) {
        self.update_connector_output(&w.completed, cx)
    }
    fn has_pending_work(&self) -> bool {
        self.has_pending_work()
    }

    fn worker_after_forward(&mut self, s: WorkerStep, cx: &mut WorkerCtx) -> WorkerOut {
        mc_worker::after_forward(self, s.out, s.input, cx)
    }
    fn next_transfer(&self, d: Direction) -> Option<JobId> {
        mc_worker::next_transfer(self, d)
    }
    fn complete_transfer(&mut self, d: Direction, job: JobId, fail: Option<u32>, cx: &mut WorkerCtx) {
        mc_worker::complete(self, d, job, fail, cx)
    }

    fn loading_blocks(&self) -> BTreeSet<BlockId> {
        self.loading_blocks().into_iter().collect()
    }
    fn gpu_pins(&self, _rules: &Rules) -> Vec<BlockId> {
        self.gpu_pins()
    }
    fn load_job_blocks(&self, id: JobId) -> u32 {
        self.loads.iter().find(|j| j.id == id).map_or(0, |j| j.blocks.len() as u32)
    }
    fn canonicalize<'a>(&mut self, outside: impl Iterator<Item = &'a mut JobId>) {
        self.canonicalize(outside)
    }
    fn enable_replay_aids(&mut self) {
        self.log = crate::system::collections::side::Side(Some(Box::default()));
    }

    fn add_slot(&mut self) {
        self.reqs.push(Default::default());
    }
    fn slot_idle(&self, r: ReqId) -> bool {
        self.reqs[r as usize] == Default::default()
            && self.unfinished.iter().all(|(x, _)| *x != r)
            && self.saves.iter().all(|j| j.req != r)
            && self.loads.iter().all(|j| j.req != r)
    }
    fn reset_slot(&mut self, r: ReqId) {
        self.reqs[r as usize] = Default::default();
    }
}
