//! NixlConnector, producer (prefill) side in host-buffer mode (`kv_buffer_device = "cpu"`),
//! pull mode, one worker rank, one full-attention group (vLLM 0.33 `distributed/kv_transfer/
//! kv_connector/v1/nixl/`: `base_scheduler.py: NixlConnectorSchedulerBase._build_save_meta,
//! build_connector_meta`, `pull_scheduler.py: update_state_after_alloc, request_finished`,
//! `connector.py: NixlConnector.wait_for_save`, `base_worker.py: save_kv_to_host,
//! get_finished`).
//!
//! Every request of a `nixl` model is a P/D prefill request (`do_remote_decode`): the proxy
//! sends it with `max_tokens = 1`, so a model's request samples exactly one token. When the
//! accelerator's memory cannot be registered with NIXL, the producer copies KV blocks to a
//! host transfer buffer indexed by GPU block id, and the decoder (the consumer) reads that
//! buffer:
//! - `update_state_after_alloc` enters the request in `_reqs_need_save`;
//! - `build_connector_meta` (`_build_save_meta`) turns each scheduled request of
//!   `_reqs_need_save` into a save of the block ids `yield_req_data` gives it: the whole table
//!   of a new (or re-admitted) request, only the step's newly allocated blocks of a running one;
//!   a running request with no new block saves nothing. The request leaves `_reqs_need_save`
//!   once a step with a save reaches the end of its prompt (`not is_partial`);
//! - `wait_for_save` (after the forward pass, `save_kv_to_host`) copies each saved block from
//!   G1 into its host slot, synchronously;
//! - `request_finished` of a request that stopped (length or EOS) delays the free of its blocks
//!   (`delay_free_blocks`) and queues it in `_reqs_need_send`; an aborted or failed one leaves
//!   `_reqs_need_save` and frees at once;
//! - the consumer reads the request's blocks (`remote_block_ids`, the first
//!   `remote_num_tokens = num_computed_tokens` positions) from the host buffer whenever the
//!   environment lets it after the finish, and notifies the producer; the next `get_finished`
//!   reports the request in `finished_sending` and the scheduler frees its blocks.
//!
//! #59102: with chunked prefill, the block holding a chunk boundary is copied at the end of
//! the step that allocated it, partly written, and the next chunk completes it without
//! allocating it again: nothing copies it again and the consumer reads a half-stale block.
//! vLLM 0.24, 0.32 and 0.33 all save only new block ids (`_build_save_meta` is the same in the
//! three releases; the fix is open upstream, so `vllm-main` has the bug too). The fix (variant
//! `fix-59102`, rule `nixl_resave_partial`) re-saves the block that straddles the boundary:
//! a step that starts in the middle of a block copies that block again, also when it
//! allocates no new block. (The PR text was not available; this is the
//! rule its summary names, "re-save the block that straddles a chunked-prefill boundary".)
//!
//! Held against real vLLM 0.24 to 0.34 by the conformance recorder
//! (tests/conformance/vllm/nixlprod.py, tests/conform_nixl.rs): every `pd-*` log conforms.
//!
//! Not modelled: the consumer's own instance (its allocation, its load into G1, its
//! recompute of the backoff tokens), direct GPU-to-GPU transfer (no host buffer), push mode,
//! send leases and their expiry (`_reap_expired_send_leases`), heartbeats, handshakes,
//! heterogeneous TP and block-size mapping, hybrid (SWA, Mamba) groups and the prefill
//! backoff, bidirectional transfer, async scheduling, streaming sessions.

pub mod consumer;
mod hooks;
mod pack;

use crate::system::connector::{ConnCtx, SchedOut, StepScratch};
use crate::system::events::{Event, Events};
use crate::system::ghost::{Breach, Ghost, Mark};
use crate::system::gpu_pool::GpuPool;
use crate::system::model_runner::tag_serves;
use crate::system::request::ReqState;
use crate::system::types::{cdiv, BlockId, ContentTag, FinishReason, ReqId, Status};
use crate::system::workload::{RequestSpec, Workload};

/// A finished request whose blocks wait for the consumer (`_reqs_need_send`).
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct Send {
    pub(crate) req: ReqId,
    /// `remote_block_ids`: the request's block table when it finished.
    pub(crate) blocks: Vec<BlockId>,
    /// `remote_num_tokens`: `num_computed_tokens` when it finished.
    pub(crate) tokens: u32,
    /// The consumer read the blocks and notified the producer (reported in the next
    /// `finished_sending`).
    pub(crate) read: bool,
}

/// The connector's state and the worker's host transfer buffer.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct NixlState {
    /// `host_xfer_buffers`: what each GPU block id's host slot holds.
    pub(crate) host: Vec<ContentTag>,
    /// `_reqs_need_save`, ascending.
    pub(crate) need_save: Vec<ReqId>,
    /// Finished requests holding their blocks for the consumer, in finish order.
    pub(crate) sending: Vec<Send>,
}

impl NixlState {
    pub fn new(num_gpu_blocks: u32) -> Self {
        NixlState { host: vec![ContentTag::Empty; num_gpu_blocks as usize], need_save: Vec::new(), sending: Vec::new() }
    }

    /// `update_state_after_alloc`: a producer request in host-buffer mode needs saving.
    pub fn update_state_after_alloc(&mut self, r: ReqId) {
        if let Err(i) = self.need_save.binary_search(&r) {
            self.need_save.insert(i, r);
        }
    }

    /// `build_connector_meta` → `_build_save_meta`: this step's saves (`reqs_to_save`), new
    /// requests first, as `yield_req_data` yields them.
    pub fn build_connector_meta(
        &mut self,
        out: &SchedOut,
        reqs: &[ReqState],
        wl: &Workload,
        c: &ConnCtx,
        scratch: &mut StepScratch,
    ) {
        let b = c.block_size;
        for s in out.yield_order() {
            let Ok(pos) = self.need_save.binary_search(&s.req) else { continue };
            let q = &reqs[s.req as usize];
            let mut blocks = s.blocks.clone();
            if c.rules.nixl_resave_partial && s.start % b != 0 {
                // #59102: the block the previous chunk left partly written.
                if let Some(&straddle) = q.table.get((s.start / b) as usize) {
                    if !blocks.contains(&straddle) {
                        blocks.insert(0, straddle);
                    }
                }
            }
            if blocks.is_empty() {
                continue; // `new_block_id_groups is None`: nothing to save, no pop either
            }
            scratch.nixl_save.push((s.req, blocks));
            let prompt = wl.spec(s.req, q.turn).prompt_len;
            if s.start + s.tokens >= prompt {
                self.need_save.remove(pos);
            }
        }
    }

    /// `request_finished`: a stopped request keeps its blocks for the consumer (returns true:
    /// `delay_free_blocks`); an aborted or failed one stops being tracked and frees at once.
    pub fn request_finished(&mut self, r: ReqId, req: &ReqState) -> bool {
        let stopped = matches!(
            req.status,
            Status::Finished(FinishReason::LengthCapped) | Status::Finished(FinishReason::Stopped)
        );
        if !stopped {
            if let Ok(pos) = self.need_save.binary_search(&r) {
                self.need_save.remove(pos);
            }
            return false;
        }
        if req.table.is_empty() {
            return false;
        }
        self.sending.push(Send { req: r, blocks: req.table.clone(), tokens: req.num_computed, read: false });
        true
    }

    /// Requests the consumer may read now.
    pub fn readable(&self) -> impl Iterator<Item = ReqId> + '_ {
        self.sending.iter().filter(|s| !s.read).map(|s| s.req)
    }

    /// The consumer reads request `r`'s blocks from the host buffer (a NIXL READ of
    /// `remote_block_ids`) and notifies the producer. Each block it uses must hold the KV of
    /// the request's own tokens over the positions it sends (handoff-integrity). The consumer
    /// uses the `n` blocks from block index `from` on: a decode instance's READ skips the
    /// blocks of its own prefix-cache hit (`_apply_prefix_caching` end-trims
    /// `remote_block_ids` to its unhashed blocks), uses nothing of a failed READ (the worker
    /// reports every block of it invalid) and reads nothing when it only notifies (a full
    /// local hit); an abstract consumer (no decode instance modelled) reads them all.
    #[allow(clippy::too_many_arguments)]
    pub fn consumer_read(
        &mut self,
        r: ReqId,
        from: u32,
        n: u32,
        spec: &RequestSpec,
        wl: &Workload,
        b: u32,
        ghost: &mut Ghost,
        ev: &mut Events,
    ) {
        let Some(s) = self.sending.iter_mut().find(|s| s.req == r && !s.read) else {
            return;
        };
        s.read = true;
        let mut stale = Vec::new();
        let mut stale_blocks = Vec::new();
        let used = s.blocks.iter().enumerate().take(cdiv(s.tokens, b) as usize).skip(from as usize).take(n as usize);
        for (i, &blk) in used {
            let need = (s.tokens - i as u32 * b).min(b);
            let tag = self.host[blk as usize];
            if !tag_serves(tag, spec, i, need, b) {
                stale.push(format!("block {blk} (its block {i}, {need} positions) holds {}", wl.describe(tag)));
                stale_blocks.push(blk);
            }
        }
        ghost.mark(Mark::PdHandoff);
        let (blocks, tokens) = (s.blocks.clone(), s.tokens);
        ev.emit(|| Event::PdRead { req: r, blocks, tokens, stale: stale_blocks });
        if !stale.is_empty() {
            ghost.breach(Breach::PdStaleSend);
            ev.emit(|| Event::Violation {
                property: "handoff-integrity",
                detail: format!(
                    "the consumer reads {}'s KV from the host buffer: {}; the GPU block was written after its last copy",
                    spec.name,
                    stale.join(", ")
                ),
            });
        }
    }

    /// Worker, `wait_for_save` → `save_kv_to_host`: copy the step's saved blocks from G1 to
    /// their host slots (after the forward pass). A block copied before the request has
    /// written every prompt position it holds is a partial save.
    #[allow(clippy::too_many_arguments)]
    pub fn save_kv_to_host(
        &mut self,
        pool: &GpuPool,
        reqs: &[ReqState],
        wl: &Workload,
        b: u32,
        scratch: &StepScratch,
        ghost: &mut Ghost,
        ev: &mut Events,
    ) {
        for (r, blocks) in &scratch.nixl_save {
            let q = &reqs[*r as usize];
            let prompt = wl.spec(*r, q.turn).prompt_len;
            for &blk in blocks {
                let tag = pool.content(blk);
                self.host[blk as usize] = tag;
                let Some(i) = q.table.iter().position(|&x| x == blk) else { continue };
                let need = prompt.saturating_sub(i as u32 * b).min(b);
                if matches!(tag, ContentTag::Kv { len, .. } if u32::from(len) < need) {
                    ghost.mark(Mark::PdPartialSave);
                }
            }
            ghost.mark(Mark::StoreCompleted);
            let spec = wl.spec(*r, q.turn);
            let host = &self.host;
            ev.emit(|| Event::PdSaved {
                req: *r,
                blocks: blocks.clone(),
                // The leading positions of each copy that hold the request's own KV.
                filled: blocks
                    .iter()
                    .map(|&blk| {
                        let tag = host[blk as usize];
                        match (tag, q.table.iter().position(|&x| x == blk)) {
                            (ContentTag::Kv { len, .. }, Some(i)) if tag_serves(tag, spec, i, len.into(), b) => {
                                len.into()
                            }
                            _ => 0,
                        }
                    })
                    .collect(),
            });
        }
    }

    /// Worker, `get_finished`: requests the consumer has read are done sending.
    pub fn get_finished(&mut self) -> Vec<ReqId> {
        let done: Vec<ReqId> = self.sending.iter().filter(|s| s.read).map(|s| s.req).collect();
        self.sending.retain(|s| !s.read);
        done
    }
}
