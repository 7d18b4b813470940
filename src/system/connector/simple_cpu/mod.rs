//! SimpleCPUOffloadConnector, scheduler side (vLLM `v1/simple_kv_offload/manager.py:
//! SimpleCPUOffloadScheduler`, 0.33 rules, eager and lazy mode): state, lookup, load preparation,
//! finish handling and completion processing. The eager store selection is in
//! `build_meta.rs`, the worker side in `worker.rs`.
//!
//! The host tier *is* a second vLLM `BlockPool` (one CPU block per GPU block, its own null
//! block 0), modelled by [`GpuPool`] with `Medium::Cpu`. A CPU block is registered in the
//! CPU pool's cached map under its GPU block's hash only when its store lands, so in-flight
//! stores are invisible to lookups. Eviction is the pool's free queue: FIFO by release, where
//! a release is a store completion, a load completion or a dropped lookup pin, and a
//! transfer's blocks are released head (prefix) first. GPU blocks are protected by pins
//! (`BlockPool.touch`), never by delaying a request's free: stores pin their sources, loads
//! their destinations.
//!
//! Lazy mode (`lazy_offload`) replaces the eager selection with a walk of the G1 free queue
//! (`build_meta.rs`, `_prepare_lazy_store_specs`); requests then have no store state.
//!
//! Not modelled: the disk backend, hybrid groups (Mamba boundary hand-offs,
//! sliding window null blocks, fine-grained hash blocks and the prompt partial tail),
//! `reset()`, world size > 1 (store events count one worker report), KV events payloads.

mod build_meta;
mod hooks;
mod pack;
pub mod worker;

use crate::system::connector::{BitSet, HookCtx, Phase, RequestRef};
use crate::system::events::{Event, Events};
use crate::system::ghost::{Breach, Ghost, Mark};
use crate::system::gpu_pool::GpuPool;
use crate::system::rules::Rules;
use crate::system::types::{cdiv, BlockHash, BlockId, ContentTag, JobId, ReqId, NULL_BLOCK};
use std::collections::BTreeMap;

/// `StoreRequestState` (eager mode): the mirror of the request's block table (from
/// `yield_req_data`), the store cursor (`num_stored_blocks`), its pending store events.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct StoreRequestState {
    pub(crate) mirror: Vec<BlockId>,
    pub(crate) cursor: u32,
    /// `store_events`, ascending.
    pub(crate) events: Vec<u32>,
    pub(crate) finished: bool,
}

/// `_pending_cpu_hits[req]`: the CPU hit blocks a lookup pinned, its hit length and the local
/// prefix (`num_computed_tokens`) it was resolved against.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct PendingHit {
    pub(crate) blocks: Vec<BlockId>,
    pub(crate) hit: u32,
    pub(crate) num_computed: u32,
}

/// `LoadRequestState` with its `TransferMeta` (CPU block i is copied into GPU block i).
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct LoadRequestState {
    pub(crate) gpu: Vec<BlockId>,
    pub(crate) cpu: Vec<BlockId>,
    /// `load_event`: set by `build_connector_meta`.
    pub(crate) event: Option<u32>,
    pub(crate) finished: bool,
}

/// Everything SimpleCPU keeps per request.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct SimpleCpuReq {
    pub(crate) store: Option<StoreRequestState>,
    pub(crate) pending: Option<PendingHit>,
    pub(crate) load: Option<LoadRequestState>,
    /// `_pending_local_hits[req]` (0.34, `scpu_refresh_local_hit`): the GPU prefix hit the last
    /// lookup saw, whose CPU copies `update_state_after_alloc` refreshes; 0 = none.
    pub(crate) local_hit: u32,
    /// Coverage ghost: blocks computed in the current run while the CPU pool lacked their
    /// hash, not yet handled by an eager scan.
    pub(crate) owed: BitSet,
}

/// A store's blocks (`TransferMeta`): GPU block i is copied into CPU block i.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct Transfer {
    pub(crate) gpu: Vec<BlockId>,
    pub(crate) cpu: Vec<BlockId>,
    /// The GPU blocks' hashes when the store was prepared (0.24 stamps these on the CPU
    /// blocks; also what source-freshness expects the copy to read).
    pub(crate) hashes: Vec<BlockHash>,
    /// Whose blocks these are (display only: vLLM's finish-time transfers carry no request).
    pub(crate) req: ReqId,
}

/// A store event: all stores of one step (`_store_event_to_blocks` + `_store_event_to_reqs`),
/// and where the worker is with its copy.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct StoreEvent {
    pub(crate) id: u32,
    pub(crate) parts: Vec<Transfer>,
    /// Requests whose `store_events` hold this event (not the finish-time stores' owners).
    pub(crate) reqs: Vec<ReqId>,
    pub(crate) phase: Phase,
    /// What the copy read, per GPU source block in order (taken when it was launched).
    pub(crate) snapshot: Vec<ContentTag>,
}

impl StoreEvent {
    pub fn gpu(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.parts.iter().flat_map(|t| t.gpu.iter().copied())
    }
    pub fn cpu(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.parts.iter().flat_map(|t| t.cpu.iter().copied())
    }
    pub fn hashes(&self) -> impl Iterator<Item = BlockHash> + '_ {
        self.parts.iter().flat_map(|t| t.hashes.iter().copied())
    }
}

/// A load event: all loads of one step (`_load_event_to_reqs`), with the worker's copy list.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct LoadEvent {
    pub(crate) id: u32,
    pub(crate) reqs: Vec<ReqId>,
    pub(crate) gpu: Vec<BlockId>,
    pub(crate) cpu: Vec<BlockId>,
    pub(crate) phase: Phase,
}

/// SimpleCPU's scheduler-side state, its CPU pool, and the worker's view of its events.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct SimpleCpuState {
    /// `cpu_block_pool`.
    pub cpu: GpuPool,
    pub(crate) reqs: Vec<SimpleCpuReq>,
    /// Store events not yet processed, ascending id.
    pub(crate) stores: Vec<StoreEvent>,
    /// Load events not yet processed, ascending id.
    pub(crate) loads: Vec<LoadEvent>,
    /// `_in_flight_store_gpu_blocks`, ascending.
    pub(crate) in_flight: Vec<BlockId>,
    /// `_pending_finished_stores`: finish-time stores, emitted with the next store event.
    pub(crate) pending_finished: Vec<Transfer>,
    pub(crate) next_store: u32,
    pub(crate) next_load: u32,
    /// Ghost (eviction-order): the CPU pool's free blocks in the order the policy names,
    /// FIFO by release, kept apart from the pool's own linked list.
    pub(crate) fifo: Vec<BlockId>,
    /// Lazy mode (`lazy_offload`): `_target_free`, the G1 free-queue blocks one walk covers
    /// (`_estimate_lazy_target_blocks`); 0 in eager mode.
    pub(crate) lazy_target: u32,
    /// Lazy mode: `_cursor`, the G1 block the last walk visited last (rule
    /// `scpu_lazy_cursor`; always None without it).
    pub(crate) cursor: Option<BlockId>,
}

impl SimpleCpuState {
    /// `lazy_target`: `_target_free` in lazy mode, 0 in eager mode.
    pub fn new(num_reqs: usize, cpu_blocks: u32, lazy_target: u32) -> Self {
        // The rest as a decoder starts from (`Default`, pack.rs): no job, counters at 0.
        SimpleCpuState {
            cpu: GpuPool::new_cpu(cpu_blocks),
            reqs: vec![SimpleCpuReq::default(); num_reqs],
            fifo: (1..cpu_blocks).collect(),
            lazy_target,
            ..SimpleCpuState::default()
        }
    }

    /// Lazy mode (`lazy_offload`).
    pub fn is_lazy(&self) -> bool {
        self.lazy_target > 0
    }

    // --- the CPU pool, with the eviction-order reference list kept beside it ---

    /// `cpu_block_pool.touch`: a ref-0 block leaves the free queue (and the reference list).
    pub(super) fn cpu_touch(&mut self, blocks: &[BlockId]) {
        for &b in blocks {
            if b != NULL_BLOCK && self.cpu.ref_cnt(b) == 0 {
                self.fifo.retain(|&x| x != b);
            }
        }
        self.cpu.touch(blocks, true);
    }

    /// `cpu_block_pool.free_blocks(blocks)` with `blocks` in vLLM's order (head first).
    /// `pool_order` is the order the pool really gets (a mutation may reverse it); the
    /// reference list always follows the policy: released hashed blocks join its tail in
    /// transfer order, unhashed ones its head.
    pub(super) fn cpu_free(&mut self, blocks: &[BlockId], pool_order: &[BlockId], ghost: &mut Ghost) {
        self.cpu.free_blocks(pool_order.iter().copied(), ghost);
        let mut head = Vec::new();
        for &b in blocks {
            if b == NULL_BLOCK || self.cpu.ref_cnt(b) != 0 || self.fifo.contains(&b) {
                continue;
            }
            if self.cpu.block_hash(b).is_some() {
                self.fifo.push(b);
            } else {
                head.push(b);
            }
        }
        if !head.is_empty() {
            head.append(&mut self.fifo);
            self.fifo = head;
        }
    }

    /// `cpu_block_pool.get_new_blocks(n)`: each victim must be the reference list's head.
    pub(super) fn cpu_alloc(&mut self, n: u32, ghost: &mut Ghost, ev: &mut Events) -> Vec<BlockId> {
        let got = self.cpu.get_new_blocks(n, ghost, ev);
        for &b in &got {
            if self.fifo.first() != Some(&b) {
                ghost.breach(Breach::EvictionOrder);
                let want = self.fifo.first().copied();
                ev.emit(|| Event::Violation {
                    property: "eviction-order",
                    detail: format!("CPU pool hands out block {b}; FIFO by release names {want:?}"),
                });
            }
            self.fifo.retain(|&x| x != b);
            // An in-flight load still reads this block: it must have been pinned.
            if self.loads_reading(b) {
                ghost.breach(Breach::EvictedPinned);
                ev.emit(|| Event::Violation {
                    property: "load-safety",
                    detail: format!("CPU block {b} is handed out while a load still reads it"),
                });
            }
        }
        got
    }

    /// #62444: a GPU-side hit moves a free CPU block to the MRU end (pin count unchanged).
    pub(super) fn cpu_refresh(&mut self, b: BlockId, ghost: &mut Ghost) {
        if self.cpu.in_free_queue(b) {
            self.cpu.move_to_tail(b);
            self.fifo.retain(|&x| x != b);
            self.fifo.push(b);
            ghost.mark(Mark::HostRefresh);
        }
    }

    fn loads_reading(&self, b: BlockId) -> bool {
        self.reqs.iter().filter_map(|q| q.load.as_ref()).any(|l| l.cpu.contains(&b))
    }

    /// `_free_pending_cpu_hit`.
    fn free_pending(&mut self, p: &PendingHit, rules: &Rules, ghost: &mut Ghost) {
        if rules.scpu_lookup_pins {
            self.cpu_free(&p.blocks, &p.blocks, ghost);
        }
    }

    /// `get_num_new_matched_tokens(req, num_computed)`: consecutive CPU hits past the local
    /// prefix, pinned until `update_state_after_alloc`; always an async load.
    pub(super) fn get_num_new_matched_tokens(
        &mut self,
        q: RequestRef,
        num_local: u32,
        cx: &mut HookCtx,
    ) -> (Option<u32>, bool) {
        let (r, req, spec) = (q.id, q.state, q.spec);
        let (c, ghost) = (&cx.c, &mut *cx.ghost);
        if let Some(stale) = self.reqs[r as usize].pending.take() {
            // A pin held since an earlier step (the request failed admission).
            ghost.mark(Mark::StalePinDropped);
            if c.rules.scpu_drop_stale_pin {
                self.free_pending(&stale, c.rules, ghost);
            }
        }
        // 0.34: remember the GPU prefix hit for update_state_after_alloc (refreshed at every
        // lookup: a request waiting for blocks repeats it each step).
        // Eager mode only: lazy mode keeps no `_pending_local_hits` (0.34).
        let refresh = c.rules.scpu_refresh_local_hit && !self.is_lazy();
        self.reqs[r as usize].local_hit = if refresh { num_local } else { 0 };
        // Restarting from token 0 (preemption): the coverage ghost starts a new run.
        if req.preempted {
            ghost.mark(Mark::Restart);
        }
        self.reqs[r as usize].owed.clear();
        let b = c.block_size;
        let hashes = req.block_hashes(spec, b);
        let skip = (num_local / b) as usize;
        if skip >= hashes.len() {
            return (Some(0), false);
        }
        // At least the last token is recomputed (as kv_cache_manager.get_computed_blocks).
        let max_hit = i64::from(req.num_tokens(spec)) - 1 - i64::from(num_local);
        if max_hit <= 0 {
            return (Some(0), false);
        }
        let hit = self.cpu.find_longest_cache_hit(&hashes[skip..], max_hit as u32, b);
        if hit.is_empty() {
            return (Some(0), false);
        }
        if c.rules.scpu_lookup_pins {
            self.cpu_touch(&hit);
        }
        let n = hit.len() as u32 * b;
        self.reqs[r as usize].pending = Some(PendingHit { blocks: hit, hit: n, num_computed: num_local });
        (Some(n), true)
    }

    /// `update_state_after_alloc(req, blocks, num_external)`: register the request's store
    /// state; turn the lookup pin into a load (CPU and GPU blocks pinned until it completes).
    pub(super) fn update_state_after_alloc(&mut self, q: RequestRef, num_external: u32, cx: &mut HookCtx) {
        let (r, req, q_spec) = (q.id, q.state, q.spec);
        let (c, pool, ghost, ev) = (&cx.c, &mut *cx.pool, &mut *cx.ghost, &mut *cx.ev);
        let lazy = self.is_lazy();
        let q = &mut self.reqs[r as usize];
        // Store tracking is eager mode's only: lazy stores belong to no request.
        if q.store.is_none() && !lazy {
            q.store = Some(StoreRequestState::default());
        }
        let local = std::mem::take(&mut q.local_hit);
        if local > 0 {
            // 0.34 (#62444): eager CPU is inclusive, so a GPU prefix hit also uses the CPU
            // copy; move that copy's longest cached prefix to the MRU end, tail released first
            // (`touch`, then `free_blocks(reversed(prefix_blocks))`).
            let hashes = req.block_hashes(q_spec, c.block_size);
            let hit = self.cpu.find_longest_cache_hit(hashes, local, c.block_size);
            if !hit.is_empty() {
                self.cpu_touch(&hit);
                let rev: Vec<BlockId> = hit.iter().rev().copied().collect();
                self.cpu_free(&rev, &rev, ghost);
                ghost.mark(Mark::HostRefresh);
            }
        }
        let q = &mut self.reqs[r as usize];
        let pending = q.pending.take();
        let Some(p) = pending else {
            return; // no external tokens (or vLLM's "no pending CPU hit" warning: no load)
        };
        if num_external == 0 {
            self.free_pending(&p, c.rules, ghost);
            return;
        }
        let b = c.block_size;
        let take = (cdiv(num_external, b) as usize).min(p.blocks.len());
        let cpu: Vec<BlockId> = p.blocks[..take].to_vec();
        let start = (p.num_computed / b) as usize;
        let gpu: Vec<BlockId> = req.table[start..start + take].to_vec();
        if c.rules.scpu_load_pins {
            self.cpu_touch(&cpu);
        }
        self.free_pending(&p, c.rules, ghost);
        pool.touch(&gpu, c.rules.touch_dequeues);
        if self.reqs[r as usize].load.is_some() {
            // vLLM asserts `self._reqs_to_load.get(req_id) is None`.
            ghost.breach(Breach::UnsafeLoad);
            ev.emit(|| Event::Violation {
                property: "load-safety",
                detail: format!("a load for request {r} is prepared while its previous load is still registered"),
            });
        }
        ghost.mark(Mark::HostHit);
        self.reqs[r as usize].load = Some(LoadRequestState { gpu, cpu, event: None, finished: false });
    }

    /// `request_finished_all_groups(req, block_ids)`: queue the finish-time store (0.32+),
    /// check store coverage, then `request_finished`: release the lookup pin, defer or clean up
    /// load and store state. Blocks are never held back (returns False in vLLM).
    pub(super) fn request_finished(&mut self, q: RequestRef, cx: &mut HookCtx) {
        let (r, req, spec) = (q.id, q.state, q.spec);
        let (c, pool, ghost, ev) = (&cx.c, &mut *cx.pool, &mut *cx.ghost, &mut *cx.ev);
        if c.rules.scpu_finish_flush {
            // The scheduler hands over the table clipped to the computed tokens
            // (get_block_ids_for_computed_tokens).
            let n = (cdiv(req.num_computed, c.block_size) as usize).min(req.table.len());
            let table = req.table[..n].to_vec();
            let mut cx = HookCtx { c: *c, pool: &mut *pool, ghost: &mut *ghost, ev: &mut *ev };
            self.queue_finished_store(q, &table, &mut cx);
        }
        self.check_coverage(r, spec, ghost, ev);
        self.reqs[r as usize].local_hit = 0;
        if let Some(p) = self.reqs[r as usize].pending.take() {
            self.free_pending(&p, c.rules, ghost);
        }
        if let Some(l) = self.reqs[r as usize].load.as_mut() {
            if l.event.is_some() {
                l.finished = true;
            } else {
                self.cleanup_load(r, pool, c.rules, ghost);
            }
        }
        let q = &mut self.reqs[r as usize];
        if let Some(st) = q.store.as_mut() {
            if st.events.is_empty() {
                q.store = None;
            } else {
                st.finished = true;
            }
        }
    }

    /// `_cleanup_load_request`: forget the load, release its CPU and GPU pins (head first).
    fn cleanup_load(&mut self, r: ReqId, pool: &mut GpuPool, rules: &Rules, ghost: &mut Ghost) {
        let Some(l) = self.reqs[r as usize].load.take() else {
            return;
        };
        if let Some(id) = l.event {
            if let Some(pos) = self.loads.iter().position(|e| e.id == id) {
                self.loads[pos].reqs.retain(|&x| x != r);
                if self.loads[pos].reqs.is_empty() {
                    self.loads.remove(pos);
                }
            }
        }
        if rules.scpu_load_pins {
            self.cpu_free(&l.cpu, &l.cpu, ghost);
        }
        pool.free_blocks(l.gpu.iter().copied(), ghost);
    }

    /// `update_connector_output`: finished loads (by request), then store events reported
    /// complete by the worker.
    pub(super) fn update_connector_output(&mut self, completed: &[JobId], recving: &[ReqId], cx: &mut HookCtx) {
        let (c, pool, ghost, ev) = (&cx.c, &mut *cx.pool, &mut *cx.ghost, &mut *cx.ev);
        for &r in recving {
            if let Some(job) = self.reqs[r as usize].load.as_ref().and_then(|l| l.event) {
                ev.emit(|| Event::HostLoadDone { req: r, job });
            }
            self.cleanup_load(r, pool, c.rules, ghost);
        }
        for &id in completed {
            // `_process_store_event`: an unknown event is ignored (stale after a reset).
            let Some(pos) = self.stores.iter().position(|e| e.id == id) else {
                continue;
            };
            let event = self.stores.remove(pos);
            let gpu: Vec<BlockId> = event.gpu().collect();
            self.in_flight.retain(|b| !gpu.contains(b));
            let times = if c.rules.double_complete { 2 } else { 1 };
            for _ in 0..times {
                self.store_completion(&event, pool, c.rules, ghost, ev);
            }
            ev.emit(|| Event::JobCompleted { job: id });
            for &r in &event.reqs {
                let q = &mut self.reqs[r as usize];
                if let Some(st) = q.store.as_mut() {
                    st.events.retain(|&x| x != id);
                    if st.finished && st.events.is_empty() {
                        q.store = None;
                    }
                }
            }
        }
    }

    /// `_process_store_completion`: register every CPU block under its hash, then free the
    /// CPU blocks and the GPU sources (both head first).
    fn store_completion(
        &mut self,
        event: &StoreEvent,
        pool: &mut GpuPool,
        rules: &Rules,
        ghost: &mut Ghost,
        ev: &mut Events,
    ) {
        let gpu: Vec<BlockId> = event.gpu().collect();
        let cpu: Vec<BlockId> = event.cpu().collect();
        let mut stored = Vec::new();
        for ((&g, &cb), stamped) in gpu.iter().zip(&cpu).zip(event.hashes()) {
            let h = if rules.scpu_hash_at_prep { Some(stamped) } else { pool.block_hash(g) };
            match h {
                Some(h) => {
                    if self.cpu.insert_hash(cb, h) {
                        stored.push(h);
                    }
                    ghost.mark(Mark::StoreCompleted);
                }
                // vLLM asserts the GPU block still carries a hash; only an unpinned source
                // block can lose it (its slot was handed to another request).
                None => ghost.breach(Breach::StaleSource),
            }
        }
        if !stored.is_empty() {
            ev.emit(|| Event::HostStored { keys: stored });
        }
        let order: Vec<BlockId> =
            if rules.scpu_release_head_first { cpu.clone() } else { cpu.iter().rev().copied().collect() };
        self.cpu_free(&cpu, &order, ghost);
        if rules.scpu_store_pins_gpu {
            // 0.34: a lazy store's sources came from the eviction end and the CPU pool now
            // holds them: they go back to the head of the free queue (`evict_first`).
            let evict_first = self.is_lazy() && rules.scpu_lazy_evict_first;
            pool.free_blocks_with(gpu.iter().copied(), evict_first, ghost);
        }
    }

    /// `has_pending_stores`: queued finish-time stores or store events not yet processed.
    pub fn has_pending_work(&self) -> bool {
        !self.pending_finished.is_empty() || !self.stores.is_empty()
    }

    /// GPU blocks SimpleCPU pins (one entry per reference), for g1-accounting.
    pub fn gpu_pins(&self, rules: &Rules) -> Vec<BlockId> {
        let mut out = Vec::new();
        if rules.scpu_store_pins_gpu {
            out.extend(self.stores.iter().flat_map(|e| e.gpu()));
            out.extend(self.pending_finished.iter().flat_map(|t| t.gpu.iter().copied()));
        }
        out.extend(self.reqs.iter().filter_map(|q| q.load.as_ref()).flat_map(|l| l.gpu.iter().copied()));
        out
    }

    /// CPU blocks SimpleCPU holds a reference on (one entry per reference), for
    /// host-accounting: lookup pins, load pins, blocks of stores not yet processed.
    pub fn cpu_refs(&self, rules: &Rules) -> Vec<BlockId> {
        let mut out = Vec::new();
        for q in &self.reqs {
            if rules.scpu_lookup_pins {
                out.extend(q.pending.iter().flat_map(|p| p.blocks.iter().copied()));
            }
            if rules.scpu_load_pins {
                out.extend(q.load.iter().flat_map(|l| l.cpu.iter().copied()));
            }
        }
        out.extend(self.stores.iter().flat_map(|e| e.cpu()));
        out.extend(self.pending_finished.iter().flat_map(|t| t.cpu.iter().copied()));
        out
    }

    /// GPU blocks that an unfinished load is still filling.
    pub fn loading_blocks(&self) -> Vec<BlockId> {
        self.loads
            .iter()
            .filter(|e| matches!(e.phase, Phase::Built | Phase::Submitted))
            .flat_map(|e| e.gpu.iter().copied())
            .collect()
    }

    /// Renumber store and load event ids densely (order kept): equal histories, equal
    /// states. `outside` are store event ids held in in-flight batches' worker reports.
    pub fn canonicalize<'a>(&mut self, outside: impl Iterator<Item = &'a mut JobId>) {
        let dense = self.stores.iter().enumerate().all(|(i, e)| e.id == i as u32)
            && self.next_store == self.stores.len() as u32;
        if !dense {
            let map: BTreeMap<u32, u32> = self.stores.iter().enumerate().map(|(i, e)| (e.id, i as u32)).collect();
            let m = |id: &mut u32| *id = map.get(id).copied().unwrap_or(u32::MAX);
            for e in &mut self.stores {
                m(&mut e.id);
            }
            for q in &mut self.reqs {
                if let Some(st) = q.store.as_mut() {
                    st.events.iter_mut().for_each(m);
                }
            }
            outside.for_each(m);
            self.next_store = self.stores.len() as u32;
        }
        let dense =
            self.loads.iter().enumerate().all(|(i, e)| e.id == i as u32) && self.next_load == self.loads.len() as u32;
        if !dense {
            let map: BTreeMap<u32, u32> = self.loads.iter().enumerate().map(|(i, e)| (e.id, i as u32)).collect();
            for e in &mut self.loads {
                e.id = map[&e.id];
            }
            for q in &mut self.reqs {
                if let Some(l) = q.load.as_mut() {
                    if let Some(id) = l.event.as_mut() {
                        *id = map.get(id).copied().unwrap_or(u32::MAX);
                    }
                }
            }
            self.next_load = self.loads.len() as u32;
        }
    }
}
