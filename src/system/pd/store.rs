//! Decode-saved KV (design notes §7, scenario (E)): a P/D pair whose instances also share a
//! Mooncake pool. Each instance runs vLLM's `MultiConnector` over NixlConnector (the producer
//! side on P, the consumer side on D) and the MooncakeStoreConnector (`multi_connector.py`):
//! - `get_num_new_matched_tokens` asks every child in order and gives the request to the
//!   first child with a positive count (`_requests_to_connector`); a child still looking up
//!   (`None`) makes the whole answer `None`;
//! - `update_state_after_alloc` passes the blocks and the external count to the chosen child
//!   and empty blocks with 0 to the others;
//! - `build_connector_meta`, `request_finished` (delay-free if any child delays),
//!   `update_connector_output` and every worker hook go to both children.
//!
//! P's store is `kv_producer` (it puts the prompt blocks it computes); D's is `kv_consumer`,
//! which puts nothing unless `save_decode_cache`: then it puts the full blocks of its
//! decode phase (`MooncakeStoreScheduler.build_connector_meta`'s `is_decode` check). D's
//! blocks reach the pool that P looks up: a later turn's prefill on P may load blocks only D
//! forwarded. P's row store has no rows for them; prime-rl's clamp (wrapping the Mooncake
//! store's lookup) and its loaded-block cut keep P from ever reading them (E1, E2).
//!
//! The pool is one store behind one Mooncake master: both instances' copies of it are
//! unioned after every input (`share_pool`; nothing is ever deleted from it). Keys D put that
//! P had not are remembered as decode-saved, for the reachability guards. D's Mooncake jobs
//! run within the step that queues them (its steps drain); P's run whenever the environment
//! lets them, as for a colocated Mooncake store.

use crate::system::collections::pack::{Pack, Reader};
use crate::system::connector::{
    BitSet, ConnCtx, HookCtx, KvConnector, MooncakeState, RequestRef, SchedOut, StepScratch, WorkerCtx, WorkerStep,
};
use crate::system::engine::Direction;
use crate::system::events::Events;
use crate::system::ghost::{Ghost, Mark};
use crate::system::model_runner::WorkerOut;
use crate::system::request::ReqState;
use crate::system::rules::Rules;
use crate::system::types::{BlockHash, BlockId, JobId, ReqId};
use std::collections::BTreeSet;

/// `MultiConnector([nixl, MooncakeStoreConnector])` on one instance of the pair.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct PdStore<A> {
    pub(crate) nixl: A,
    pub(crate) store: MooncakeState,
    /// `_requests_to_connector`: 0 NIXL, 1 the store (None: neither had a hit).
    chosen: Vec<Option<u8>>,
    /// Pool keys D put that P had not put (P's side only; for the reachability guards).
    pub(crate) decode_saved: BTreeSet<BlockHash>,
}

/// Packed (`collections::pack`): its fields in order (the pool's keys in order).
impl<A: Pack> Pack for PdStore<A> {
    fn pack(&self, out: &mut Vec<u8>) {
        let PdStore { nixl, store, chosen, decode_saved } = self;
        nixl.pack(out);
        store.pack(out);
        chosen.pack(out);
        decode_saved.pack(out);
    }
    fn unpack(&mut self, r: &mut Reader<'_>) -> Option<()> {
        let PdStore { nixl, store, chosen, decode_saved } = self;
        nixl.unpack(r)?;
        store.unpack(r)?;
        chosen.unpack(r)?;
        decode_saved.unpack(r)
    }
}

/// A decoder's starting value (every field is then decoded).
impl<A: Default> Default for PdStore<A> {
    fn default() -> Self {
        PdStore::new(A::default(), MooncakeState::default(), 0)
    }
}

impl<A> PdStore<A> {
    pub fn new(nixl: A, store: MooncakeState, num_reqs: usize) -> Self {
        PdStore { nixl, store, chosen: vec![None; num_reqs], decode_saved: BTreeSet::new() }
    }
}

/// One pool behind one master: after any input both instances see every key either put.
/// Keys only D had are decode-saved (P's record).
pub fn share_pool(p: &mut PdStore<impl KvConnector>, d: &mut MooncakeState) {
    for (k, v) in &d.pool {
        if !p.store.pool.contains_key(k) {
            p.store.pool.insert(*k, *v);
            p.decode_saved.insert(*k);
        }
    }
    if d.pool.len() != p.store.pool.len() {
        d.pool = p.store.pool.clone();
    }
}

/// Reachability marks of a lookup on P: a request whose prompt holds decode-saved blocks, with
/// a start past 0 (a bridged turn) or at 0 (a non-bridged retry); and a load of such blocks.
fn mark_lookup(decode_saved: &BTreeSet<BlockHash>, q: RequestRef, b: u32, ghost: &mut Ghost) {
    let full = (q.spec.prompt_len / b) as usize;
    if !q.spec.hashes.iter().take(full).any(|h| decode_saved.contains(h)) {
        return;
    }
    ghost.mark(if q.spec.rows_start > 0 { Mark::PdBridgedTurn } else { Mark::PdNonBridgedRetry });
}

impl<A: KvConnector> KvConnector for PdStore<A> {
    fn on_new_request(&mut self, r: ReqId) {
        self.nixl.on_new_request(r);
        self.store.on_new_request(r);
    }

    /// `MultiConnector.get_num_new_matched_tokens`; prime-rl's limit wraps the store only.
    fn get_num_new_matched_tokens(
        &mut self,
        q: RequestRef,
        num_local: u32,
        max_new: Option<u32>,
        scratch: &mut StepScratch,
        cx: &mut HookCtx,
    ) -> (Option<u32>, bool) {
        if !self.decode_saved.is_empty() {
            mark_lookup(&self.decode_saved, q, cx.c.block_size, cx.ghost);
        }
        self.chosen[q.id as usize] = None;
        let a = self.nixl.get_num_new_matched_tokens(q, num_local, None, scratch, cx);
        if a.0.is_none() {
            return (None, false);
        }
        let s = KvConnector::get_num_new_matched_tokens(&mut self.store, q, num_local, max_new, scratch, cx);
        if s.0.is_none() {
            return (None, false);
        }
        if a.0 > Some(0) {
            self.chosen[q.id as usize] = Some(0);
            a
        } else if s.0 > Some(0) {
            self.chosen[q.id as usize] = Some(1);
            s
        } else {
            (Some(0), false)
        }
    }

    fn peek_unbounded_hit(&self, q: RequestRef, num_local: u32, num_tokens: u32, c: &ConnCtx) -> Option<u32> {
        KvConnector::peek_unbounded_hit(&self.store, q, num_local, num_tokens, c)
    }

    fn update_state_after_alloc(&mut self, q: RequestRef, n: u32, scratch: &mut StepScratch, cx: &mut HookCtx) {
        let chosen = self.chosen[q.id as usize];
        let spec_range = self.store.reqs[q.id as usize].load_spec.map(|l| (l.vllm_cached, l.kvpool_cached));
        self.nixl.update_state_after_alloc(q, if chosen == Some(0) { n } else { 0 }, scratch, cx);
        let ns = if chosen == Some(1) { n } else { 0 };
        KvConnector::update_state_after_alloc(&mut self.store, q, ns, scratch, cx);
        if let Some((from, to)) = spec_range.filter(|_| ns > 0) {
            let b = cx.c.block_size;
            let keys = &q.spec.hashes[(from / b) as usize..(to / b) as usize];
            if keys.iter().any(|h| self.decode_saved.contains(h)) {
                cx.ghost.mark(Mark::PdDecodeSavedLoad);
            }
        }
    }

    fn build_connector_meta(&mut self, out: &SchedOut, reqs: &[ReqState], scratch: &mut StepScratch, cx: &mut HookCtx) {
        self.nixl.build_connector_meta(out, reqs, scratch, cx);
        KvConnector::build_connector_meta(&mut self.store, out, reqs, scratch, cx);
    }

    fn request_finished(&mut self, q: RequestRef, cx: &mut HookCtx) -> bool {
        let a = self.nixl.request_finished(q, cx);
        let s = KvConnector::request_finished(&mut self.store, q, cx);
        self.chosen[q.id as usize] = None;
        a || s
    }

    fn update_connector_output(&mut self, w: &WorkerOut, reqs: &[ReqState], cx: &mut HookCtx) {
        self.nixl.update_connector_output(w, reqs, cx);
        KvConnector::update_connector_output(&mut self.store, w, reqs, cx);
    }

    fn has_pending_work(&self) -> bool {
        self.nixl.has_pending_work() || KvConnector::has_pending_work(&self.store)
    }

    fn worker_before_forward(&mut self, s: WorkerStep, cx: &mut WorkerCtx) -> BTreeSet<BlockId> {
        let mut bad = self.nixl.worker_before_forward(s, cx);
        bad.extend(self.store.worker_before_forward(s, cx));
        bad
    }

    fn forward_watch(&self, room: usize) -> Option<BitSet> {
        let mut w = self.nixl.forward_watch(room)?;
        w.extend(self.store.forward_watch(room)?.iter());
        Some(w)
    }

    fn forward_write(&mut self, block: BlockId, ghost: &mut Ghost, ev: &mut Events) {
        self.nixl.forward_write(block, ghost, ev);
        self.store.forward_write(block, ghost, ev);
    }

    /// Both children's reports, merged (`MultiConnector.get_finished`).
    fn worker_after_forward(&mut self, s: WorkerStep, cx: &mut WorkerCtx) -> WorkerOut {
        let mut w = self.nixl.worker_after_forward(s, cx);
        let x = self.store.worker_after_forward(s, cx);
        w.completed.extend(x.completed);
        w.finished_recving.extend(x.finished_recving);
        w.invalid_blocks.extend(x.invalid_blocks);
        w.failed_recving.extend(x.failed_recving);
        w.finished_sending.extend(x.finished_sending);
        w.rows.extend(x.rows);
        w
    }

    fn worker_end_step(&mut self, s: WorkerStep, w: &mut WorkerOut, cx: &mut WorkerCtx) {
        self.nixl.worker_end_step(s, w, cx);
        self.store.worker_end_step(s, w, cx);
    }

    fn next_transfer(&self, d: Direction) -> Option<JobId> {
        self.nixl.next_transfer(d).or_else(|| KvConnector::next_transfer(&self.store, d))
    }

    fn complete_transfer(&mut self, d: Direction, job: JobId, fail: Option<u32>, cx: &mut WorkerCtx) {
        if self.nixl.next_transfer(d) == Some(job) {
            self.nixl.complete_transfer(d, job, fail, cx)
        } else {
            self.store.complete_transfer(d, job, fail, cx)
        }
    }

    fn loading_blocks(&self) -> BTreeSet<BlockId> {
        let mut l = self.nixl.loading_blocks();
        l.extend(KvConnector::loading_blocks(&self.store));
        l
    }

    fn gpu_pins(&self, rules: &Rules) -> Vec<BlockId> {
        let mut p = self.nixl.gpu_pins(rules);
        p.extend(KvConnector::gpu_pins(&self.store, rules));
        p
    }

    fn load_job_blocks(&self, id: JobId) -> u32 {
        if self.nixl.next_transfer(Direction::Load) == Some(id) {
            self.nixl.load_job_blocks(id)
        } else {
            self.store.load_job_blocks(id)
        }
    }

    /// Only the store numbers jobs.
    fn canonicalize<'a>(&mut self, outside: impl Iterator<Item = &'a mut JobId>) {
        KvConnector::canonicalize(&mut self.store, outside)
    }

    fn consumer_readable(&self) -> Vec<ReqId> {
        self.nixl.consumer_readable()
    }

    fn consumer_read(&mut self, q: RequestRef, cx: &mut WorkerCtx) {
        self.nixl.consumer_read(q, cx)
    }

    /// Not replayed (the replay driver refuses NIXL models).
    fn slot_idle(&self, _r: ReqId) -> bool {
        false
    }
}
