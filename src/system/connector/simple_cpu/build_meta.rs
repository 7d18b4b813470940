//! SimpleCPUOffloadConnector, scheduler side: `build_connector_meta` with the eager store
//! selection (vLLM `SimpleCPUOffloadScheduler.build_connector_meta`,
//! `_prepare_eager_store_specs`, `_select_eager_blocks_to_store`,
//! `_classify_store_candidate`), the finish-time store (`_queue_finished_eager_store`) and
//! the store-coverage ghost they feed; in lazy mode, the walk of the G1 free queue instead
//! (`_prepare_lazy_store_specs`, [`SimpleCpuState::lazy_store`]).
//!
//! A request's blocks are stored one step after they are *confirmed* (computed by an earlier
//! step's forward), by a scan of its mirror table from the store cursor: a block that is not
//! hashed, already being stored, or already cached in the CPU pool is skipped and the cursor
//! moves past it; the scan stops (without moving the cursor) once it has selected as many
//! blocks as the CPU pool has free (a partial store: the rest is retried at the request's
//! next scheduled step). All stores of one step form one store event.

use super::{LoadEvent, SimpleCpuState, StoreEvent, Transfer};
use crate::system::connector::{ConnCtx, HookCtx, Phase, RequestRef, SchedOut};
use crate::system::events::{Event, Events};
use crate::system::ghost::{Breach, Ghost, Mark};
use crate::system::gpu_pool::GpuPool;
use crate::system::request::ReqState;
use crate::system::types::{BlockHash, BlockId, ReqId, NO_REQ, NULL_BLOCK};
use crate::system::workload::RequestSpec;

/// What one eager scan chose.
#[derive(Default)]
struct Selection {
    gpu: Vec<BlockId>,
    hashes: Vec<BlockHash>,
    /// Mirror positions the cursor moves past (selected or skipped).
    advanced: u32,
    /// The position where the scan stopped at the CPU free count, and the scan's end.
    capped: Option<(u32, u32)>,
}

impl SimpleCpuState {
    /// `build_connector_meta`: this step's store event (eager selection plus the finish-time
    /// stores queued since the last step) and load event.
    pub(super) fn build_connector_meta(
        &mut self,
        out: &SchedOut,
        reqs: &[ReqState],
        load_order: &[ReqId],
        cx: &mut HookCtx,
    ) {
        let (c, pool, ghost, ev) = (&cx.c, &mut *cx.pool, &mut *cx.ghost, &mut *cx.ev);
        let wl = c.wl;
        let b = c.block_size;
        let spec_of = |r: ReqId| wl.spec(r, reqs[r as usize].turn);
        // Coverage ghost: blocks whose last token this step computes are owed a store (eager
        // mode's promise; lazy mode stores what nears eviction, whoever computed it).
        let eager = !self.is_lazy();
        for s in out.scheduled.iter().filter(|_| eager) {
            let spec = spec_of(s.req);
            for i in s.start / b..(s.start + s.tokens) / b {
                if let Some(h) = spec.hashes.get(i as usize) {
                    if self.cpu.get_one_block(*h).is_none() {
                        self.reqs[s.req as usize].owed.insert(i);
                    }
                }
            }
        }
        // Preemption frees the request's blocks; it resumes with a full new table.
        for &p in &out.preempted {
            let q = &mut self.reqs[p as usize];
            if let Some(st) = q.store.as_mut().filter(|_| c.rules.scpu_reset_on_preempt) {
                st.mirror.clear();
                st.cursor = 0;
            }
            q.owed.clear();
        }
        // yield_req_data order: new requests, then resumed ones (MRV2), then cached requests.
        let order = out.yield_order();
        let mut parts: Vec<Transfer> = Vec::new();
        let mut event_reqs: Vec<ReqId> = Vec::new();
        for s in order {
            let r = s.req;
            let Some(st) = self.reqs[r as usize].store.as_mut() else {
                continue;
            };
            if st.finished {
                continue;
            }
            if s.full_table && (s.resumed || s.start > 0) {
                ghost.mark(Mark::ReadmitFullTable);
            }
            // 0.33: a full table replaces the mirror (cursor kept); 0.24/0.32 append it
            // (#60810: a resumed streaming session's new blocks sit past duplicates).
            if s.full_table && c.rules.full_table_resets_mirror {
                st.mirror.clear();
            }
            st.mirror.extend_from_slice(&s.blocks);
            let table = &reqs[r as usize].table;
            if st.mirror != *table {
                ghost.breach(Breach::MirrorMismatch);
                let (mirror, table) = (st.mirror.clone(), table.clone());
                let name = &wl.spec(r, 0).name;
                ev.emit(|| Event::Violation {
                    property: "mirror-table",
                    detail: format!("{name}: the connector's block table {mirror:?} is not the scheduler's {table:?}"),
                });
            }
            if s.tokens == 0 {
                continue;
            }
            let (cursor, mirror) = (st.cursor, st.mirror.clone());
            let q = RequestRef { id: r, state: &reqs[r as usize], spec: spec_of(r) };
            let sel = self.select(q, cursor, &mirror, pool, c, ghost);
            if !sel.gpu.is_empty() {
                let mut cx = HookCtx { c: *c, pool: &mut *pool, ghost: &mut *ghost, ev: &mut *ev };
                parts.push(self.prepare_transfer(r, sel.gpu, sel.hashes, &mut cx));
                event_reqs.push(r);
            }
            self.reqs[r as usize].store.as_mut().expect("tracked").cursor += sel.advanced;
        }
        if self.is_lazy() && (c.rules.scpu_lazy_walk_idle || out.scheduled.iter().any(|s| s.tokens > 0)) {
            let mut cx = HookCtx { c: *c, pool: &mut *pool, ghost: &mut *ghost, ev: &mut *ev };
            if let Some(t) = self.lazy_store(&mut cx) {
                parts.push(t);
            }
        }
        parts.append(&mut self.pending_finished);
        if !parts.is_empty() {
            let id = self.next_store;
            self.next_store += 1;
            for &r in &event_reqs {
                if let Some(st) = self.reqs[r as usize].store.as_mut() {
                    st.events.push(id);
                }
            }
            for t in &parts {
                ev.emit(|| Event::StoreJob {
                    job: id,
                    req: t.req,
                    keys: t.hashes.clone(),
                    blocks: t.gpu.clone(),
                    slots: t.cpu.clone(),
                });
            }
            let n: u64 = parts.iter().map(|t| t.gpu.len() as u64).sum();
            ev.stat(|s| {
                s.store_jobs += 1;
                s.stored_chunks += n;
            });
            self.stores.push(StoreEvent { id, parts, reqs: event_reqs, phase: Phase::Built, snapshot: Vec::new() });
        }
        // Loads prepared this step form one load event, in the order they were prepared
        // (`_reqs_to_load` is a dict); any other unsent load after them, by request id.
        let unsent = |r: ReqId| self.reqs[r as usize].load.as_ref().is_some_and(|l| l.event.is_none());
        let mut new: Vec<ReqId> = load_order.iter().copied().filter(|&r| unsent(r)).collect();
        new.extend((0..self.reqs.len() as ReqId).filter(|&r| unsent(r) && !load_order.contains(&r)));
        if !new.is_empty() {
            let id = self.next_load;
            self.next_load += 1;
            let (mut gpu, mut cpu) = (Vec::new(), Vec::new());
            for &r in &new {
                let l = self.reqs[r as usize].load.as_mut().expect("listed");
                l.event = Some(id);
                gpu.extend_from_slice(&l.gpu);
                cpu.extend_from_slice(&l.cpu);
                let l = self.reqs[r as usize].load.as_ref().expect("listed");
                ev.emit(|| Event::LoadJob {
                    job: id,
                    req: r,
                    keys: l.cpu.iter().filter_map(|&x| self.cpu.block_hash(x)).collect(),
                    blocks: l.gpu.clone(),
                    slots: l.cpu.clone(),
                    sync: false,
                });
            }
            let n = cpu.len() as u64;
            ev.stat(|s| {
                s.load_jobs += 1;
                s.loaded_chunks += n;
            });
            self.loads.push(LoadEvent { id, reqs: new, gpu, cpu, phase: Phase::Built });
        }
    }

    /// `_prepare_lazy_store_specs`: walk the G1 free queue (blocks in eviction order, so the
    /// next ones the allocator reuses) over at most `lazy_target` blocks, from the block after
    /// the cursor (rule `scpu_lazy_cursor`, reset when that block left the queue) or from the
    /// head, and store every hashed block whose hash the CPU pool lacks, as many as the CPU
    /// pool has free blocks. One transfer, owned by no request ([`NO_REQ`]).
    fn lazy_store(&mut self, cx: &mut HookCtx) -> Option<Transfer> {
        let (pool, c) = (&*cx.pool, &cx.c);
        let num_cpu_free = self.cpu.num_free();
        if self.cursor.is_some_and(|b| pool.ref_cnt(b) > 0) {
            self.cursor = None; // stale: the block left the free queue
        }
        let (mut gpu, mut hashes) = (Vec::new(), Vec::new());
        let mut last = self.cursor;
        for (covered, blk) in pool.free_after(self.cursor).enumerate() {
            if covered as u32 >= self.lazy_target || gpu.len() as u32 >= num_cpu_free {
                break;
            }
            last = Some(blk);
            if let Some(h) = pool.block_hash(blk).filter(|_| blk != NULL_BLOCK) {
                if self.cpu.get_one_block(h).is_none() {
                    gpu.push(blk);
                    hashes.push(h);
                }
            }
        }
        if c.rules.scpu_lazy_cursor {
            self.cursor = last;
        }
        if gpu.is_empty() {
            return None;
        }
        Some(self.prepare_transfer(NO_REQ, gpu, hashes, cx))
    }

    /// Allocate CPU destinations for `gpu`, pin the sources, mark them in flight (eager mode:
    /// `_in_flight_store_gpu_blocks`; lazy mode keeps no such set).
    fn prepare_transfer(&mut self, r: ReqId, gpu: Vec<BlockId>, hashes: Vec<BlockHash>, cx: &mut HookCtx) -> Transfer {
        let (pool, c, ghost, ev) = (&mut *cx.pool, &cx.c, &mut *cx.ghost, &mut *cx.ev);
        let cpu = self.cpu_alloc(gpu.len() as u32, ghost, ev);
        let eager = !self.is_lazy();
        for &g in gpu.iter().filter(|_| eager) {
            if let Err(i) = self.in_flight.binary_search(&g) {
                self.in_flight.insert(i, g);
            }
        }
        if c.rules.scpu_store_pins_gpu {
            pool.touch(&gpu, c.rules.touch_dequeues);
        }
        if c.rules.scpu_register_at_prep {
            for (&cb, &h) in cpu.iter().zip(&hashes) {
                self.cpu.insert_hash(cb, h);
            }
        }
        Transfer { gpu, cpu, hashes, req: r }
    }

    /// `_select_eager_blocks_to_store` over `ids` (the mirror, or the real table at finish)
    /// from `cursor`: confirmed blocks, classified by `_classify_store_candidate`.
    fn select(
        &mut self,
        q: RequestRef,
        cursor: u32,
        ids: &[BlockId],
        pool: &GpuPool,
        c: &ConnCtx,
        ghost: &mut Ghost,
    ) -> Selection {
        let (r, req, spec) = (q.id, q.state, q.spec);
        let b = c.block_size;
        // KV written by earlier steps' forwards (this step's blocks are stored next step).
        let confirmed = req.num_computed.saturating_sub(u32::from(req.placeholders));
        let ready = (ids.len() as u32).min(confirmed / b);
        let num_free = self.cpu.num_free();
        let mut sel = Selection::default();
        if num_free == 0 && !c.rules.scpu_scan_when_full {
            if cursor < ready {
                sel.capped = Some((cursor, ready));
                ghost.mark(Mark::PartialStore);
            }
            return sel;
        }
        let mut i = cursor;
        while i < ready {
            let blk = ids[i as usize];
            let h = if blk == NULL_BLOCK { None } else { pool.block_hash(blk) };
            let Some(h) = h else {
                i += 1; // NULL_BLOCK / NOT_HASHED: skipped, the cursor moves on
                continue;
            };
            if self.in_flight.binary_search(&blk).is_ok() {
                self.pay(r, spec, h);
                i += 1; // IN_FLIGHT
                continue;
            }
            if let Some(cb) = self.cpu.get_one_block(h) {
                // ALREADY_CACHED: 0.33 leaves its FIFO position alone (#62444).
                if c.rules.scpu_refresh_on_gpu_hit {
                    self.cpu_refresh(cb, ghost);
                }
                self.pay(r, spec, h);
                i += 1;
                continue;
            }
            if sel.gpu.len() as u32 >= num_free {
                sel.capped = Some((i, ready));
                ghost.mark(Mark::PartialStore);
                break;
            }
            sel.gpu.push(blk);
            sel.hashes.push(h);
            self.pay(r, spec, h);
            i += 1;
        }
        sel.advanced = i.saturating_sub(cursor);
        sel
    }

    /// Coverage ghost: the block of `r` whose hash is `h` was handled by a scan.
    fn pay(&mut self, r: ReqId, spec: &RequestSpec, h: BlockHash) {
        if let Some(j) = spec.hashes.iter().position(|x| *x == h) {
            self.reqs[r as usize].owed.remove(j as u32);
        }
    }

    /// `_queue_finished_eager_store`: confirmed blocks above the cursor of the table the
    /// scheduler hands over, limited by the CPU free count; CPU blocks are allocated and GPU
    /// blocks pinned now, the transfer rides on the next store event.
    pub(super) fn queue_finished_store(&mut self, q: RequestRef, table: &[BlockId], cx: &mut HookCtx) {
        let (r, spec) = (q.id, q.spec);
        let (pool, c, ghost, ev) = (&mut *cx.pool, &cx.c, &mut *cx.ghost, &mut *cx.ev);
        let Some(st) = self.reqs[r as usize].store.as_ref() else {
            return;
        };
        let sel = self.select(q, st.cursor, table, pool, c, ghost);
        let mut refused = Vec::new();
        if let Some((from, to)) = sel.capped {
            // No room for these (every CPU block pinned or being written): a capacity loss,
            // not a coverage one, and this was the request's last offer (final-store-kept).
            for &blk in &table[from as usize..to as usize] {
                if let Some(h) = (blk < pool.num_blocks()).then(|| pool.block_hash(blk)).flatten() {
                    self.pay(r, spec, h);
                    refused.push(h);
                }
            }
        }
        if !sel.gpu.is_empty() {
            ghost.mark(Mark::FinishStore);
            let mut cx = HookCtx { c: *c, pool: &mut *pool, ghost: &mut *ghost, ev: &mut *ev };
            let t = self.prepare_transfer(r, sel.gpu, sel.hashes, &mut cx);
            self.pending_finished.push(t);
        }
        let lost: Vec<BlockHash> = refused.into_iter().filter(|h| !self.present_or_storing(h)).collect();
        if !lost.is_empty() {
            ghost.breach(Breach::FinalStoreLost);
            let labels: Vec<u32> =
                lost.iter().filter_map(|h| spec.hashes.iter().position(|x| x == h)).map(|i| i as u32).collect();
            ev.emit(|| Event::Violation {
                property: "final-store-kept",
                detail: format!(
                    "{} finished; its finish-time store found no free CPU block for blocks {labels:?}, which are lost",
                    spec.name
                ),
            });
        }
    }

    /// The CPU pool holds `h`, or a store not yet processed carries it there.
    fn present_or_storing(&self, h: &BlockHash) -> bool {
        self.cpu.get_one_block(*h).is_some()
            || self.stores.iter().any(|e| e.hashes().any(|x| x == *h))
            || self.pending_finished.iter().any(|t| t.hashes.contains(h))
    }

    /// store-coverage: when a request finishes (after its finish-time store is queued), every
    /// block it computed in its last run while the CPU pool lacked it was handled by a scan,
    /// or is in the CPU pool or on its way there anyway.
    pub(super) fn check_coverage(&mut self, r: ReqId, spec: &RequestSpec, ghost: &mut Ghost, ev: &mut Events) {
        let lost: Vec<u32> = self.reqs[r as usize]
            .owed
            .iter()
            .filter(|&i| spec.hashes.get(i as usize).is_some_and(|h| !self.present_or_storing(h)))
            .collect();
        if !lost.is_empty() {
            ghost.breach(Breach::CoverageLoss);
            ev.emit(|| Event::Violation {
                property: "store-coverage",
                detail: format!(
                    "{}: computed blocks {lost:?} were never offered for storing and are not in the CPU pool",
                    spec.name
                ),
            });
        }
        self.reqs[r as usize].owed.clear();
    }
}
