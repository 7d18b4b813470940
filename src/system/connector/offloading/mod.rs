//! OffloadingConnector, scheduler side (vLLM `distributed/kv_transfer/kv_connector/v1/
//! offloading/scheduler.py: OffloadingConnectorScheduler`, 0.33 rules).
//!
//! Per request it keeps the offload keys (one per complete chunk), the *mirror table* (its
//! copy of the GPU block table, from `yield_req_data`), the *store cursor*
//! (`next_stored_chunk_idx`) and the request's in-flight transfer jobs. Store jobs pair keys
//! and GPU blocks purely by index into the mirror table. GPU blocks are never held for a
//! store: a store that still has to read a freed block is *flushed* (copied before the
//! block's next writer runs).

mod build_meta;
mod hooks;
pub mod host_arc;
pub mod host_tier;
mod pack;
mod recycle;
pub mod reference_order;
pub mod worker;

use crate::system::collections::inline_vec::InlineVec;
use crate::system::collections::opt_vec::OptVec;
use crate::system::collections::pack::pack_fields;
use crate::system::collections::side::{SideVal, WordHasher};
use crate::system::collections::vec_map::VecMap;
use crate::system::connector::offloading::host_tier::{HostTier, Key, Lookup, ReqAccess};
use crate::system::connector::{BitSet, ConnCtx, HookCtx, RequestRef, StepScratch};
use crate::system::events::Event;
use crate::system::ghost::{Breach, Mark};
use crate::system::request::ReqState;
use crate::system::rules::{HostLru, Rules};
use crate::system::types::{cdiv, BlockHash, BlockId, ContentTag, JobId, ReqId, TableIds, NULL_BLOCK};
use crate::system::workload::RequestSpec;

/// Per-request connector state (`RequestOffloadState` with one `RequestGroupState`).
#[derive(PartialEq, Eq, Hash, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct OffloadingReq {
    /// `len(offload_keys)`: keys are the request's block hashes at every chunk end.
    pub(crate) num_keys: u32,
    /// The mirror table (`block_ids`).
    pub(crate) mirror: TableIds,
    /// Replay: the mirror's first `.0` blocks equalled the block table when `.1` tables had
    /// been taken (`PoolLog::table_takes`); the mirror-table check then compares the rest.
    pub(crate) mirror_ok: SideVal<(u32, u64)>,
    /// The store cursor (`next_stored_chunk_idx`).
    pub(crate) cursor: u32,
    /// In-flight job ids, ascending.
    pub(crate) transfer_jobs: InlineVec<JobId, 2>,
    pub(crate) finished_signaled: bool,
    /// `num_locally_computed_tokens` at the last lookup.
    pub(crate) num_local: u32,
    /// The manager's request context (LRU request rank, keys seen).
    pub(crate) access: ReqAccess,
    /// Coverage ghost: chunks computed in the current run and not yet offered.
    pub(crate) owed: BitSet,
    /// final-store-kept ghost: chunks the host tier refused (no room) at the request's latest
    /// store visit.
    pub(crate) refused: BitSet,
    /// `load_failed` (0.34, rule `failed_load_request_level`): an async load of this request
    /// failed; every later lookup of it finds 0 tokens.
    pub(crate) load_failed: bool,
}

pack_fields!(clone_bitwise OffloadingReq {
    num_keys,
    mirror,
    mirror_ok,
    cursor,
    transfer_jobs,
    finished_signaled,
    num_local,
    access,
    owed,
    refused,
    load_failed
});

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub enum JobKind {
    Store,
    Load { sync: bool },
}

/// Where a job is in the worker's pipeline.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum Phase {
    /// In this step's metadata; not yet handed to the worker.
    Built,
    /// Stores queued by `wait_for_save`, not yet submitted.
    Queued,
    /// Submitted to a transfer handler; copying.
    Submitted,
    /// The copy finished; the worker reports it at its next `get_finished`.
    Done,
    /// A load that failed; reported like `Done` plus its invalid blocks.
    Failed,
    /// `get_finished` delivered it; the scheduler applies it when it processes that output.
    Reported,
}

#[derive(PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct Job {
    pub(crate) id: JobId,
    pub(crate) req: ReqId,
    pub(crate) kind: JobKind,
    pub(crate) keys: InlineVec<Key, 2>,
    /// Store: GPU source blocks; load: GPU destination blocks.
    pub(crate) blocks: InlineVec<BlockId, 4>,
    pub(crate) slots: InlineVec<u32, 2>,
    pub(crate) phase: Phase,
    /// Store: what the copy read, per source block (taken when the copy was ordered).
    pub(crate) snapshot: InlineVec<ContentTag, 4>,
    /// Store: a source block was written while the copy ran.
    pub(crate) torn: bool,
    /// Load: index (into `blocks`) of the first block that failed to load.
    pub(crate) invalid_from: Option<u32>,
    /// Load: position of the first destination block inside its chunk (`block_indices`).
    pub(crate) block_offset: u32,
}

crate::system::collections::bitwise::bitwise_copy!(JobKind, Phase);
pack_fields!(clone_bitwise Job { id, req, kind, keys, blocks, slots, phase, snapshot, torn, invalid_from, block_offset });

impl Job {
    pub fn is_store(&self) -> bool {
        matches!(self.kind, JobKind::Store)
    }
    pub fn is_async_load(&self) -> bool {
        matches!(self.kind, JobKind::Load { sync: false })
    }
}

/// The connector's scheduler-side state plus its host tier.
#[derive(PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct OffloadingState {
    /// Copied record over record, all in one `memcpy` while every record is inline (`OptVec`);
    /// the packed form decodes a record over a record.
    pub(crate) reqs: OptVec<OffloadingReq>,
    /// Jobs not yet completed, ascending id.
    pub(crate) jobs: Vec<Job>,
    pub(crate) next_job: JobId,
    /// `_block_id_to_pending_jobs`: GPU blocks a finished request's stores still read.
    pub(crate) fences: VecMap<BlockId, Vec<JobId>, 4>,
    pub(crate) host: HostTier,
    /// fix-final-store: finished requests whose blocks the connector holds until their last
    /// store lands, in finish order.
    pub(crate) held: Vec<Held>,
}

// `Clone`: in `recycle` (a copy into a reused state reuses its jobs and fence lists, and spares).

/// fix-final-store (`final_store_waits`): a finished request whose blocks the connector keeps
/// (`request_finished` returned `delay_free_blocks`) until its last store is settled and
/// copied; the worker then reports it in `finished_sending` and the scheduler frees them.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct Held {
    pub(crate) req: ReqId,
    /// Its last store was refused for lack of room and is offered again at the next step.
    pub(crate) waiting: bool,
}

impl OffloadingState {
    pub fn new(num_reqs: usize, o: &crate::system::config::OffloadConfig, rules: &Rules) -> Self {
        let mut host = HostTier::with_policy(o.host_chunks, rules.host_lru, rules.evict_mru);
        if o.eviction_policy == crate::system::config::EvictionPolicy::Arc {
            host.use_arc(rules.arc_t1_fallback, rules.arc_ghost_trim);
        }
        OffloadingState {
            reqs: OptVec(vec![None; num_reqs]),
            jobs: Vec::new(),
            next_job: 0,
            fences: VecMap::new(),
            host,
            held: Vec::new(),
        }
    }

    /// The request's offload keys so far, in chunk order.
    pub(super) fn keys_of(st: &OffloadingReq, spec: &RequestSpec, c: &ConnCtx) -> Vec<Key> {
        (0..st.num_keys).map(|ci| key_of(spec, ci, c)).collect()
    }

    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.jobs.iter().find(|j| j.id == id)
    }
    pub fn job_mut(&mut self, id: JobId) -> Option<&mut Job> {
        self.jobs.iter_mut().find(|j| j.id == id)
    }

    pub(super) fn new_job_id(&mut self) -> JobId {
        let id = self.next_job;
        self.next_job += 1;
        id
    }

    /// `_chunks_being_loaded`: keys of async loads not yet completed.
    fn being_loaded(&self) -> std::collections::HashSet<Key, std::hash::BuildHasherDefault<WordHasher>> {
        self.jobs.iter().filter(|j| j.is_async_load()).flat_map(|j| j.keys.iter().copied()).collect()
    }

    /// `on_new_request`.
    pub fn on_new_request(&mut self, r: ReqId) {
        self.reqs[r as usize] = Some(OffloadingReq::default());
    }

    pub(super) fn update_offload_keys(st: &mut OffloadingReq, req: &ReqState, spec: &RequestSpec, c: &ConnCtx) {
        let n = req.block_hashes(spec, c.block_size).len() as u32 / c.blocks_per_chunk;
        st.num_keys = st.num_keys.max(n);
    }

    /// `get_num_new_matched_tokens(req, num_local)`: `(None, _)` asks the scheduler to retry.
    pub(super) fn get_num_new_matched_tokens(
        &mut self,
        q: RequestRef,
        num_local: u32,
        max_new: Option<u32>,
        scratch: &mut StepScratch,
        cx: &mut HookCtx,
    ) -> (Option<u32>, bool) {
        let (r, req, spec) = (q.id, q.state, q.spec);
        let (c, ghost) = (&cx.c, &mut *cx.ghost);
        let rules = c.rules;
        let st = self.reqs[r as usize].as_mut().expect("tracked request");
        // Restarting at token 0: the mirror is rebuilt from the full table at admission
        // (room for the whole request up front: it grows a few blocks per step).
        st.mirror.clear();
        st.mirror.reserve((spec.tokens.len() as u32).div_ceil(c.block_size) as usize + 1);
        st.mirror_ok.0 .0 = 0;
        if rules.cursor_reset_on_lookup {
            st.cursor = 0;
        }
        if st.owed.any() || req.preempted {
            ghost.mark(Mark::Restart);
        }
        st.owed.clear();
        if !st.transfer_jobs.is_empty() {
            ghost.mark(Mark::LookupInflight);
            if rules.inflight_lookup_guard {
                return (None, false);
            }
        }
        Self::update_offload_keys(st, req, spec, c);
        st.num_local = num_local;
        let st = self.reqs[r as usize].as_ref().expect("tracked request");
        // 0.34: a request whose load failed never loads again (`req_status.load_failed`).
        let hit = if st.load_failed {
            Some(0)
        } else {
            self.lookup_complete_chunks(st, req.num_tokens(spec), max_new, spec, c)
        };
        // 0.24: `_touch(req)` after the lookup, whatever it found.
        if rules.host_lru == HostLru::ReleaseOrder {
            let keys = Self::keys_of(st, spec, c);
            self.host.touch(&keys);
        }
        // _reserve_sync_load
        scratch.sync_loads.retain(|&x| x != r);
        let sync = match hit {
            Some(h)
                if h > 0
                    && c.sync_budget > 0
                    && num_local + h < req.num_tokens(spec)
                    && scratch.sync_used + h <= c.sync_budget =>
            {
                scratch.sync_used += h;
                scratch.sync_loads.push(r);
                true
            }
            _ => false,
        };
        (hit, hit.is_some_and(|h| h > 0) && !sync)
    }

    /// What the last lookup of `r` would have found without `max_num_new_tokens` (no side
    /// effects; for reporting what a clamp gave up).
    pub(super) fn peek_unbounded_hit(
        &self,
        q: RequestRef,
        _num_local: u32,
        num_tokens: u32,
        c: &ConnCtx,
    ) -> Option<u32> {
        let (r, spec) = (q.id, q.spec);
        let st = self.reqs[r as usize].as_ref()?;
        self.lookup_complete_chunks(st, num_tokens, None, spec, c)
    }

    /// `_lookup_complete_chunks` for one full-attention group.
    /// `max_new` is `max_num_new_tokens` (`_max_loadable_tokens`, which prime-rl's clamp wraps).
    fn lookup_complete_chunks(
        &self,
        st: &OffloadingReq,
        num_tokens: u32,
        max_new: Option<u32>,
        spec: &RequestSpec,
        c: &ConnCtx,
    ) -> Option<u32> {
        let tokens_per_chunk = c.tokens_per_chunk();
        let local = st.num_local;
        let max_hit =
            num_tokens.min(local.saturating_add(max_new.unwrap_or(u32::MAX))).min(st.num_keys * tokens_per_chunk);
        if max_hit < local + tokens_per_chunk {
            return Some(0);
        }
        let num_chunks = cdiv(max_hit, tokens_per_chunk).min(st.num_keys);
        let start = local / tokens_per_chunk;
        let mut hits = 0;
        let mut defer = false;
        for ci in start..num_chunks {
            match self.host.lookup(&key_of(spec, ci, c)) {
                Lookup::Hit => hits += 1,
                Lookup::HitPending if c.rules.pending_lookup_defers => {
                    hits += 1;
                    defer = true;
                }
                Lookup::HitPending => break,
                Lookup::Miss => break,
            }
        }
        if hits == 0 && !defer {
            return Some(0);
        }
        let mut max_hit = max_hit;
        if !defer {
            max_hit = max_hit.min(tokens_per_chunk * (start + hits));
        }
        if max_hit < local + tokens_per_chunk {
            return Some(0);
        }
        if defer {
            return None;
        }
        let hit = max_hit - local;
        let end = cdiv(local + hit, tokens_per_chunk);
        if c.caching && self.jobs.iter().any(|j| j.is_async_load()) {
            let loading = self.being_loaded();
            if (start..end).any(|ci| loading.contains(&key_of(spec, ci, c))) {
                return None;
            }
        }
        Some(hit)
    }

    /// `update_state_after_alloc(req, blocks, num_external)`: prepare the load.
    pub(super) fn update_state_after_alloc(
        &mut self,
        q: RequestRef,
        num_external: u32,
        scratch: &mut StepScratch,
        cx: &mut HookCtx,
    ) {
        let (r, req, spec) = (q.id, q.state, q.spec);
        let (c, pool, ghost, ev) = (&cx.c, &*cx.pool, &mut *cx.ghost, &mut *cx.ev);
        scratch.allocated.extend(req.table.iter().copied().filter(|&b| b != NULL_BLOCK));
        if num_external == 0 {
            return;
        }
        let sync = scratch.sync_loads.contains(&r);
        let (b, blocks_per_chunk, tokens_per_chunk) = (c.block_size, c.blocks_per_chunk, c.tokens_per_chunk());
        let st = self.reqs[r as usize].as_ref().expect("tracked request");
        let num_local = st.num_local;
        let num_cached = num_local + num_external;
        let num_gpu_blocks = cdiv(num_cached, b);
        let first_fresh = cdiv(num_local, b);
        let load_start = (first_fresh..num_gpu_blocks)
            .find(|&i| {
                let blk = req.table[i as usize];
                blk != NULL_BLOCK && (sync || pool.block_hash(blk).is_none())
            })
            .unwrap_or(num_gpu_blocks);
        let num_chunks = cdiv(num_cached, tokens_per_chunk);
        // The load's `(key, end position)` list, in the step's reused offer list.
        let keys = &mut scratch.offer;
        keys.clear();
        if num_gpu_blocks > load_start {
            for ci in load_start / blocks_per_chunk..num_chunks {
                keys.push((key_of(spec, ci, c), (ci + 1) * tokens_per_chunk));
            }
        }
        let dst: Vec<BlockId> = req.table[load_start as usize..num_gpu_blocks as usize].to_vec();
        let st = self.reqs[r as usize].as_mut().expect("tracked request");
        st.cursor = num_chunks; // CHUNK_LEVEL: hit chunks are not offered again.
        let slots = self.host.prepare_load(keys, &mut self.reqs[r as usize].as_mut().unwrap().access, ghost, ev);
        let id = self.new_job_id();
        let st = self.reqs[r as usize].as_mut().unwrap();
        if !st.transfer_jobs.is_empty() {
            // vLLM asserts `not req_status.transfer_jobs` here (#46014).
            ghost.breach(Breach::UnsafeLoad);
            ev.emit(|| Event::Violation {
                property: "load-safety",
                detail: format!("load job {id} created while request has jobs {:?} in flight", st.transfer_jobs),
            });
        }
        st.transfer_jobs.push(id);
        let keys: Vec<Key> = keys.iter().map(|(k, _)| *k).collect();
        let n = keys.len() as u64;
        ev.stat(|s| {
            s.load_jobs += 1;
            s.loaded_chunks += n;
            s.sync_loads += u64::from(sync);
        });
        ghost.mark(Mark::HostHit);
        if sync {
            ghost.mark(Mark::SyncLoad);
        }
        ev.emit(|| Event::LoadJob {
            job: id,
            req: r,
            keys: keys.clone(),
            blocks: dst.clone(),
            slots: slots.clone(),
            sync,
        });
        self.jobs.push(Job {
            id,
            req: r,
            kind: JobKind::Load { sync },
            keys: InlineVec::from_slice(&keys),
            blocks: InlineVec::from_slice(&dst),
            slots: InlineVec::from_slice(&slots),
            phase: Phase::Built,
            snapshot: InlineVec::new(),
            torn: false,
            invalid_from: None,
            block_offset: load_start % blocks_per_chunk,
        });
        scratch.load_jobs.push(id);
    }

    /// `request_finished`: refresh the keys and fence the blocks in-flight stores still read.
    /// Returns `delay_free_blocks`: vLLM's OffloadingConnector never delays (it fences
    /// instead); under fix-final-store a request whose finish-time store has chunks to offer
    /// keeps its blocks until that store is settled and copied.
    pub(super) fn request_finished(&mut self, q: RequestRef, c: &ConnCtx) -> bool {
        let (r, req, spec) = (q.id, q.state, q.spec);
        let Some(st) = self.reqs[r as usize].as_mut() else {
            return false;
        };
        Self::update_offload_keys(st, req, spec, c);
        let hold = c.rules.final_store_waits
            && c.rules.visit_finished
            && Self::store_candidates(st, req, spec, None, c).0.next().is_some();
        if hold {
            self.held.push(Held { req: r, waiting: false });
        }
        // (`jobs` and `fences` are disjoint fields: the store's blocks are read in place.)
        let (jobs, fences) = (&self.jobs, &mut self.fences);
        for &id in st.transfer_jobs.iter() {
            let blocks =
                jobs.iter().find(|j| j.id == id).filter(|j| j.is_store()).map_or(&[][..], |j| j.blocks.as_slice());
            for &b in blocks {
                let v = recycle::fence_list(fences, b);
                if !v.contains(&id) {
                    v.push(id);
                    v.sort_unstable();
                }
            }
        }
        hold
    }

    /// fix-final-store, the worker's `get_finished`: held requests whose last store is settled
    /// and whose store copies have all finished (reported) give their blocks back.
    pub fn finished_sending(&mut self) -> Vec<ReqId> {
        if self.held.is_empty() {
            return Vec::new();
        }
        let jobs = &self.jobs;
        let done = |h: &Held| !h.waiting && jobs.iter().all(|j| j.req != h.req || j.phase == Phase::Reported);
        let out: Vec<ReqId> = self.held.iter().filter(|h| done(h)).map(|h| h.req).collect();
        self.held.retain(|h| !out.contains(&h.req));
        out
    }

    /// `update_connector_output`: apply the worker's reported completions.
    pub(super) fn update_connector_output(&mut self, completed: &[JobId], reqs: &[ReqState], cx: &mut HookCtx) {
        let (c, ghost, ev) = (&cx.c, &mut *cx.ghost, &mut *cx.ev);
        for &id in completed {
            let Some(pos) = self.jobs.iter().position(|j| j.id == id) else {
                ghost.breach(Breach::BadCompletion);
                continue;
            };
            let job = self.jobs.remove(pos);
            let times = if c.rules.double_complete { 2 } else { 1 };
            for _ in 0..times {
                if job.is_store() {
                    self.host.complete_store(&job.keys, ghost, ev);
                } else {
                    self.host.complete_load(&job.keys, ghost, ev);
                }
            }
            // 0.34: the job is in `failed_jobs`; a failed load marks its request `load_failed`
            // (the model's failed sync loads stay block-level: not marked).
            let failed_async = job.is_async_load() && job.invalid_from.is_some();
            if failed_async && c.rules.failed_load_request_level {
                if let Some(st) = self.reqs[job.req as usize].as_mut() {
                    st.load_failed = true;
                }
            }
            ev.emit(|| Event::JobCompleted { job: id });
            // `_remove_pending_job(job_id, deferred_fence_block_ids)`, for a finished request's
            // store while any fence is registered: each listed block's set must hold the job.
            // A block listed twice (a mirror duplicated by #60810) is gone the second time:
            // KeyError in the scheduler, the engine dies (finding 35, connector-assert).
            if reqs[job.req as usize].status.is_finished() && job.is_store() && !self.fences.is_empty() {
                for (i, b) in job.blocks.iter().enumerate() {
                    match self.fences.get_mut(b) {
                        Some(v) if v.contains(&id) => {
                            v.retain(|&x| x != id);
                            if v.is_empty() {
                                if let Some(list) = self.fences.remove(b) {
                                    recycle::retire_list(list);
                                }
                            }
                        }
                        _ => {
                            ghost.breach(Breach::ConnectorAssert);
                            let listed = job.blocks.iter().take(i).any(|x| x == b);
                            ev.emit(|| Event::Violation {
                                property: "connector-assert",
                                detail: format!(
                                    "store job {id} of a finished request completes; _remove_pending_job finds block {b} no longer fenced for it{}: KeyError in the scheduler, the engine dies",
                                    if listed { " (the job lists it twice)" } else { "" }
                                ),
                            });
                            return;
                        }
                    }
                }
            }
            if let Some(st) = self.reqs[job.req as usize].as_mut() {
                st.transfer_jobs.retain(|&x| x != id);
                if st.finished_signaled && st.transfer_jobs.is_empty() {
                    self.reqs[job.req as usize] = None;
                }
            }
        }
    }

    /// `has_pending_push_work`: jobs keep the engine stepping.
    pub fn has_pending_work(&self) -> bool {
        !self.jobs.is_empty()
    }

    /// Renumber job ids 0..n (order kept) and LRU ranks densely: equal histories, equal
    /// states. `outside` are job ids held elsewhere (in-flight batches' worker reports).
    pub fn canonicalize<'a>(&mut self, outside: impl Iterator<Item = &'a mut JobId>) {
        let dense =
            self.jobs.iter().enumerate().all(|(i, j)| j.id == i as JobId) && self.next_job == self.jobs.len() as JobId;
        if !dense {
            // The new id is the old one's place (the last, as the map this replaced kept it; a
            // few jobs at most: a scan, no map).
            let old: smallvec::SmallVec<[JobId; 8]> = self.jobs.iter().map(|j| j.id).collect();
            // A reported id whose job is gone is a bug being recorded (BadCompletion); keep
            // it out of the live range.
            let m = |id: &mut JobId| *id = old.iter().rposition(|x| x == id).map_or(JobId::MAX, |i| i as JobId);
            for j in &mut self.jobs {
                m(&mut j.id);
            }
            for st in self.reqs.iter_mut().flatten() {
                st.transfer_jobs.iter_mut().for_each(m);
            }
            for v in self.fences.values_mut() {
                v.iter_mut().for_each(m);
            }
            outside.for_each(m);
            self.next_job = self.jobs.len() as JobId;
        }
        self.host.canonicalize(self.reqs.iter_mut().flatten().map(|st| &mut st.access.rank));
    }
}

/// The offload key of chunk `ci` of `spec`: the hash of the chunk's last block.
pub fn key_of(spec: &RequestSpec, ci: u32, c: &ConnCtx) -> BlockHash {
    spec.hashes[((ci + 1) * c.blocks_per_chunk - 1) as usize]
}
