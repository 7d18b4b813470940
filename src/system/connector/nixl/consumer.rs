//! NixlConnector, consumer (decode) side, pull mode, one worker rank (vLLM 0.33
//! `kv_connector/v1/nixl/pull_scheduler.py: get_num_new_matched_tokens,
//! update_state_after_alloc`, `base_scheduler.py: build_connector_meta`, `base_worker.py:
//! start_load_kv, get_finished, get_block_ids_with_load_errors`).
//!
//! A decode instance D gets each request from the router with P's `kv_transfer_params`
//! (`do_remote_prefill`, the producer's block ids). At its first admission the lookup reports
//! a remote hit of the prompt less the local hit (`_get_remote_prefill_token_count`: the whole
//! prompt since 0.24; variant `nixl-hit-prompt-minus-one`: the older prompt less one token), to
//! load asynchronously; `update_state_after_alloc` clears `do_remote_prefill` (a request
//! resumed after a preemption recomputes instead) and queues the read of the request's blocks
//! `[local, local + ext)`. The read itself is an environment choice of the P/D system
//! (`src/system/pd`): it copies the producer's host-buffer slots into D's blocks (or fails as
//! a whole: the worker reports every block of the read invalid) and notifies the producer;
//! D's next `get_finished` reports the request in `finished_recving` and the failed blocks as
//! invalid, so the scheduler's `_update_waiting_for_remote_kv` caches what landed and
//! recomputes the last prompt token (`num_computed = num_tokens - 1`), or
//! `_handle_invalid_blocks` lowers the valid prefix to the local hit. With no external tokens
//! (a full local hit: only `nixl-hit-prompt-minus-one` or a trimmed hit gets there) vLLM still
//! queues an empty read: the worker only notifies the producer, which frees its blocks, and
//! reports nothing (the request never waited).
//!
//! Not modelled: push mode, handshakes and heartbeats, heterogeneous TP, the Mamba backoff.

use crate::system::connector::{HookCtx, KvConnector, RequestRef, StepScratch, WorkerCtx, WorkerStep};
use crate::system::engine::Direction;
use crate::system::model_runner::WorkerOut;
use crate::system::types::{cdiv, BadKind, BlockId, ContentTag, JobId, ReqId};
use std::collections::BTreeSet;

/// One read of a producer's blocks into D's blocks.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct Recv {
    pub(crate) req: ReqId,
    /// D's blocks to fill, the request's block indices `first..`.
    pub(crate) blocks: Vec<BlockId>,
    pub(crate) first: u32,
    /// The read landed (`Some(None)`) or failed from this job block on (`Some(Some(k))`).
    pub(crate) done: Option<Option<u32>>,
}

/// The consumer's scheduler and worker state.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct NixlConsumer {
    /// `do_remote_prefill` still set, per request.
    pub(crate) remote: Vec<bool>,
    /// Reads queued or in flight, oldest first.
    pub(crate) recvs: Vec<Recv>,
}

impl NixlConsumer {
    pub fn new(num_reqs: usize) -> Self {
        NixlConsumer { remote: vec![false; num_reqs], recvs: Vec::new() }
    }

    /// The router sent request `r` with the producer's `kv_transfer_params`.
    pub fn remote_prefill(&mut self, r: ReqId) {
        self.remote[r as usize] = true;
    }

    /// The oldest read in flight: (request, D's blocks, their first block index).
    pub fn next_read(&self) -> Option<&Recv> {
        self.recvs.iter().find(|x| x.done.is_none())
    }

    /// The read of `r` landed, or failed from job block `fail` on: D's blocks get the
    /// producer's `tags` (the host-buffer slots of the same block indices).
    pub fn read_done(&mut self, r: ReqId, tags: &[ContentTag], fail: Option<u32>, cx: &mut WorkerCtx) {
        let x = self.recvs.iter_mut().find(|x| x.req == r && x.done.is_none()).expect("a read in flight");
        let first_bad = fail.unwrap_or(u32::MAX);
        for (j, &blk) in x.blocks.iter().enumerate() {
            let tag = if j as u32 >= first_bad {
                ContentTag::Bad(BadKind::LoadFailed)
            } else {
                tags.get(j).copied().unwrap_or(ContentTag::Bad(BadKind::LoadFailed))
            };
            cx.pool.set_content(blk, tag);
        }
        x.done = Some(fail);
    }
}

impl KvConnector for NixlConsumer {
    /// `get_num_new_matched_tokens`: the remote prefill's tokens past the local hit, async.
    fn get_num_new_matched_tokens(
        &mut self,
        q: RequestRef,
        num_local: u32,
        _max_new: Option<u32>,
        _scratch: &mut StepScratch,
        cx: &mut HookCtx,
    ) -> (Option<u32>, bool) {
        if !self.remote[q.id as usize] {
            return (Some(0), false);
        }
        let p = q.spec.prompt_len;
        let actual = if cx.c.rules.nixl_consumer_full_prompt { p } else { p - 1 };
        let count = actual.saturating_sub(num_local);
        (Some(count), count > 0)
    }

    /// `update_state_after_alloc`: `do_remote_prefill` is cleared; the read of the blocks
    /// past the local hit is queued.
    fn update_state_after_alloc(
        &mut self,
        q: RequestRef,
        num_external: u32,
        _scratch: &mut StepScratch,
        cx: &mut HookCtx,
    ) {
        if !std::mem::take(&mut self.remote[q.id as usize]) {
            return;
        }
        if num_external == 0 {
            // `_reqs_need_recv[req] = (req, (), ..., False)`: notify-only (`_read_blocks`'s full
            // prefix-cache-hit path), so the producer frees the blocks it holds for D.
            self.recvs.push(Recv { req: q.id, blocks: Vec::new(), first: 0, done: None });
            return;
        }
        let b = cx.c.block_size;
        // The lookup answered `actual - local` (see above), so the local hit is the rest.
        let p = q.spec.prompt_len;
        let actual = if cx.c.rules.nixl_consumer_full_prompt { p } else { p - 1 };
        let local = actual - num_external;
        let first = local / b;
        let blocks = q.state.table[first as usize..cdiv(local + num_external, b) as usize].to_vec();
        self.recvs.push(Recv { req: q.id, blocks, first, done: None });
    }

    /// `get_transfer_results` and `get_block_ids_with_load_errors`: reads that landed or
    /// failed. A failed read is in `finished_recving`, all its blocks are invalid, and (rule
    /// `nixl_failed_recving`, 0.32 to 0.34) it is in `failed_recving` too:
    /// `_handle_failed_recving` then resets the request to 0 computed tokens under `recompute`,
    /// its promotion frees its blocks and it looks up again.
    fn worker_after_forward(&mut self, _s: WorkerStep, cx: &mut WorkerCtx) -> WorkerOut {
        let per_request = cx.ctx.rules.nixl_failed_recving;
        let mut w = WorkerOut::default();
        let mut invalid = BTreeSet::new();
        for x in self.recvs.iter().filter(|x| x.done.is_some()) {
            if x.blocks.is_empty() {
                continue; // notify-only: never reported (the scheduler asserts on it)
            }
            w.finished_recving.push(x.req);
            if let Some(Some(k)) = x.done {
                if per_request {
                    w.failed_recving.push(x.req);
                }
                invalid.extend(x.blocks.iter().skip(k as usize).copied());
            }
        }
        self.recvs.retain(|x| x.done.is_none());
        w.invalid_blocks = invalid;
        w
    }

    fn next_transfer(&self, d: Direction) -> Option<JobId> {
        (d == Direction::Load).then(|| self.next_read().map(|x| JobId::from(x.req))).flatten()
    }

    fn loading_blocks(&self) -> BTreeSet<BlockId> {
        self.recvs.iter().filter(|x| x.done.is_none()).flat_map(|x| x.blocks.iter().copied()).collect()
    }

    fn load_job_blocks(&self, id: JobId) -> u32 {
        self.recvs.iter().find(|x| JobId::from(x.req) == id).map_or(0, |x| x.blocks.len() as u32)
    }

    fn slot_idle(&self, r: ReqId) -> bool {
        !self.remote[r as usize] && self.recvs.iter().all(|x| x.req != r)
    }

    /// P/D trace replay: one more request slot.
    fn add_slot(&mut self) {
        self.remote.push(false);
    }
}
