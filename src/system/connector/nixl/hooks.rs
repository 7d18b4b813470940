//! NixlConnector's producer side behind [`KvConnector`]: which of its functions answers each
//! hook. Its producer requests (`do_remote_decode`) load nothing; `has_pending_push_work` is
//! False (its held blocks keep the engine stepping).

use super::NixlState;
use crate::system::connector::{HookCtx, KvConnector, RequestRef, SchedOut, StepScratch, WorkerCtx, WorkerStep};
use crate::system::events::Event;
use crate::system::model_runner::WorkerOut;
use crate::system::request::ReqState;
use crate::system::types::ReqId;

impl KvConnector for NixlState {
    fn update_state_after_alloc(
        &mut self,
        q: RequestRef,
        _num_external: u32,
        _scratch: &mut StepScratch,
        _cx: &mut HookCtx,
    ) {
        self.update_state_after_alloc(q.id)
    }
    fn build_connector_meta(&mut self, out: &SchedOut, reqs: &[ReqState], scratch: &mut StepScratch, cx: &mut HookCtx) {
        self.build_connector_meta(out, reqs, cx.c.wl, &cx.c, scratch)
    }
    fn request_finished(&mut self, q: RequestRef, _cx: &mut HookCtx) -> bool {
        self.request_finished(q.id, q.state)
    }

    /// `wait_for_save` (host-buffer copies), then `get_finished`.
    fn worker_after_forward(&mut self, s: WorkerStep, cx: &mut WorkerCtx) -> WorkerOut {
        let b = cx.ctx.cfg.block_size;
        self.save_kv_to_host(cx.pool, s.reqs, cx.ctx.wl, b, s.scratch, cx.ghost, cx.ev);
        let finished_sending = self.get_finished();
        for &req in &finished_sending {
            cx.ev.emit(|| Event::PdSent { req });
        }
        WorkerOut { finished_sending, ..WorkerOut::default() }
    }

    fn consumer_readable(&self) -> Vec<ReqId> {
        self.readable().collect()
    }
    fn consumer_read(&mut self, q: RequestRef, cx: &mut WorkerCtx) {
        // No decode instance modelled: the consumer reads every block sent.
        self.consumer_read(q.id, 0, u32::MAX, q.spec, cx.ctx.wl, cx.ctx.cfg.block_size, cx.ghost, cx.ev)
    }

    /// P/D trace replay: nothing to save and no blocks held for the consumer.
    fn slot_idle(&self, r: ReqId) -> bool {
        self.need_save.binary_search(&r).is_err() && self.sending.iter().all(|s| s.req != r)
    }
}
