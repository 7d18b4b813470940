//! MooncakeStoreConnector, scheduler side (vLLM `distributed/kv_transfer/kv_connector/v1/
//! mooncake/store/scheduler.py: MooncakeStoreScheduler`, `data.py: LoadSpec, RequestTracker,
//! ReqMeta.from_request_tracker`, and the lookup the scheduler asks worker rank 0 for,
//! `worker.py: MooncakeStoreWorker.lookup`), 0.32/0.33 rules, one full-attention group.
//! 0.34.0 changes nothing this model covers (its store changes are the lookup prefetch,
//! timeout and circuit breaker, lookahead-hash saves, store chunk sizes below the block size,
//! and save offsets that only advance on success), so profile vllm-0.34 runs it unchanged.
//!
//! The Mooncake pool is an external KV store shared by every instance behind one master,
//! keyed by block hash (full blocks only). Another instance may already have put a prefix
//! there (the scope's `preload`): its KV is in the pool, but it was never forwarded on this
//! instance, so this instance's routed-experts row store has no rows for it.
//!
//! A lookup finds the longest prefix of the request's blocks present in the pool (a hit that
//! covers the whole request is re-derived one token shorter), records a `LoadSpec` and
//! reports the tokens past the local hit; `update_state_after_alloc` asserts that the
//! scheduler accepted exactly that many (else vLLM's scheduler dies: connector-assert).
//! `build_connector_meta` turns accepted loads into load jobs and every newly computed prompt
//! block into a save job that pins (touches) the request's whole current block table until
//! the worker reports the job done; pins are then released tail first. Loads are always
//! asynchronous (`load_async`; vLLM's worker asserts it). The worker side is in
//! `worker.rs`.
//!
//! prime-rl's clamp (router replay, RE C3) wraps `get_num_new_matched_tokens`: past its limit
//! it drops the LoadSpec (limit 0) or rewrites `kvpool_cached_tokens` and clears the tail
//! boundaries, so the assertion keeps holding.
//!
//! Not modelled: lookup_async (the lookup future), fine-grained hash hits and partial-tail or
//! Mamba boundary puts, more than one worker rank, put failures and pool eviction (a key the
//! pool lost shows up as a load failure), `reset_cache`, KV events, 0.24's store. So a
//! Mooncake scope is refused under vllm-0.24 (rule `mc_store_032`): 0.24's store pins nothing
//! (a finished request with saved tokens delays its free until `finished_sending`; a preempted
//! request's blocks are freed at once while its queued puts may still read them), counts jobs
//! per request id (a resumed request revives its previous generation's queued jobs), saves a
//! running request only in steps that allocate it new blocks, and re-puts `[0, token_len)`
//! from the tracker's append-only block mirror.

mod hooks;
mod pack;
pub mod worker;

use crate::system::collections::side::Side;
use crate::system::config::{KvRole, MooncakeConfig};
use crate::system::connector::{ConnCtx, HookCtx, Phase, RequestRef, SchedOut};
use crate::system::events::{Event, Events};
use crate::system::ghost::{Breach, Mark};
use crate::system::request::ReqState;
use crate::system::types::{cdiv, BlockHash, BlockId, ContentTag, JobId, ReqId, NULL_BLOCK};
use crate::system::workload::{RequestSpec, Workload};
use std::collections::BTreeMap;

/// `LoadSpec` (data.py) for one request.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct LoadSpec {
    /// `vllm_cached_tokens`: the local hit the lookup was resolved against.
    pub(crate) vllm_cached: u32,
    /// `kvpool_cached_tokens`: the pool hit (absolute); the load covers `[vllm_cached, this)`.
    pub(crate) kvpool_cached: u32,
    pub(crate) can_load: bool,
    /// `tail_key_boundaries` (one group): the token boundary whose hash keys the last loaded
    /// block; it equals the hit without fine-grained hash hits. prime-rl's clamp clears it.
    pub(crate) tail_key: Option<u32>,
}

/// `RequestTracker`, the fields that decide saves (its block-id mirror is not kept: save jobs
/// take the core's current block table, `_apply_current_save_block_ids`).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct Tracker {
    /// `token_len`: tokens computed once this step's forward is done.
    pub(crate) token_len: u32,
    /// `num_saved_tokens`: where the next save starts.
    pub(crate) num_saved: u32,
    /// `prefill_end_tokens`: the prefill range at the tracker's creation.
    pub(crate) prefill_end: u32,
}

/// The sending thread's ledger for one request (`stored_requests[r]`, `_saved_offset[r]`).
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Ledger {
    /// Save jobs of this request still queued or running, ascending.
    pub(crate) live: Vec<JobId>,
    /// `_saved_offset`: tokens actually put so far (the next put resumes here).
    pub(crate) saved_offset: u32,
}

/// Everything the connector keeps per request.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct MooncakeReq {
    /// `load_specs[r]`.
    pub(crate) load_spec: Option<LoadSpec>,
    /// `_request_trackers[r]` (a preempted request's tracker is reset: the same as none here).
    pub(crate) tracker: Option<Tracker>,
    /// Worker side: the sending thread's ledger (None = no entry).
    pub(crate) ledger: Option<Ledger>,
    /// Worker side: `finished_store_req` (finished; its ledger retires once its jobs drain).
    pub(crate) closing: bool,
}

/// A save (put) job: `ReqMeta` with `can_save` and its `store_job_id`.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct SaveJob {
    pub(crate) id: JobId,
    pub(crate) req: ReqId,
    /// `token_len_chunk`: save full blocks below this.
    pub(crate) token_len: u32,
    /// The request's current block table when the job was built.
    pub(crate) blocks: Vec<BlockId>,
    /// The request's block hashes below `token_len` (`ReqMeta.block_hashes`).
    pub(crate) hashes: Vec<BlockHash>,
    /// `_pinned_saves[id]`: the distinct non-null blocks of that table, referenced until the
    /// worker reports the job.
    pub(crate) pinned: Vec<BlockId>,
    pub(crate) phase: Phase,
}

/// A load job: `ReqMeta` with a `can_load` LoadSpec.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct LoadJob {
    pub(crate) id: JobId,
    pub(crate) req: ReqId,
    pub(crate) keys: Vec<BlockHash>,
    /// GPU destination blocks, one per key.
    pub(crate) blocks: Vec<BlockId>,
    pub(crate) phase: Phase,
    /// Index (into `blocks`) of the first block whose get failed.
    pub(crate) invalid_from: Option<u32>,
}

/// The connector's state, the shared pool, and the worker's threads.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct MooncakeState {
    /// The Mooncake pool: key (block hash) -> the KV put under it.
    pub(crate) pool: BTreeMap<BlockHash, ContentTag>,
    pub(crate) reqs: Vec<MooncakeReq>,
    /// `_unfinished_requests` in dict order: requests `update_state_after_alloc` saw, with the
    /// block ids it got when the request had external tokens (else none).
    pub(crate) unfinished: Vec<(ReqId, Vec<BlockId>)>,
    /// Save jobs not yet reported, ascending id (the sending thread's queue order).
    pub(crate) saves: Vec<SaveJob>,
    /// Load jobs not yet reported, ascending id (the receiving thread's queue order).
    pub(crate) loads: Vec<LoadJob>,
    pub(crate) next_save: JobId,
    pub(crate) next_load: JobId,
    /// Trace replay's change log: keys put into the pool (not state; off in the checker).
    pub(crate) log: Side<Vec<BlockHash>>,
}

/// What `build_connector_meta` decided for one request (`ReqMeta`).
struct Meta {
    req: ReqId,
    /// Save full blocks in `[from, to)` (`num_saved_tokens` before and after).
    save: Option<(u32, u32)>,
    load: Option<LoadSpec>,
}

impl MooncakeState {
    pub fn new(num_reqs: usize, cfg: &MooncakeConfig, block_size: u32) -> Self {
        MooncakeState {
            pool: cfg.preload.iter().map(|h| (*h, ContentTag::full(*h, block_size))).collect(),
            reqs: vec![MooncakeReq::default(); num_reqs],
            unfinished: Vec::new(),
            saves: Vec::new(),
            loads: Vec::new(),
            next_save: 0,
            next_load: 0,
            log: Side::default(),
        }
    }

    pub fn has(&self, k: &BlockHash) -> bool {
        self.pool.contains_key(k)
    }

    /// `MooncakeStoreWorker.lookup`: the longest prefix of full blocks present in the pool
    /// (aligned to the block size); a hit covering every token is re-derived on
    /// `num_tokens - 1` so that the last token is recomputed.
    pub fn pool_hit(&self, hashes: &[BlockHash], num_tokens: u32, b: u32) -> u32 {
        let token_len = num_tokens / b * b;
        if hashes.is_empty() || token_len == 0 {
            return 0;
        }
        let longest = |len: u32| hashes.iter().take((len / b) as usize).take_while(|h| self.has(h)).count() as u32 * b;
        let hit = longest(token_len);
        if hit < num_tokens {
            return hit;
        }
        let usable = (num_tokens - 1) / b * b;
        if usable == 0 {
            0
        } else {
            longest(usable)
        }
    }

    /// What `MooncakeStoreScheduler.get_num_new_matched_tokens` returns (no side effects):
    /// `(tokens to load past the local hit, pool hit)`.
    fn matched(
        &self,
        req: &ReqState,
        spec: &RequestSpec,
        num_computed: u32,
        cfg: &MooncakeConfig,
        b: u32,
    ) -> (u32, u32) {
        if !cfg.enable_lookup || req.num_tokens(spec) < b {
            return (0, 0);
        }
        let hit = self.pool_hit(req.block_hashes(spec, b), req.num_tokens(spec), b);
        (hit.saturating_sub(num_computed), hit)
    }

    /// The external hit the connector reports without prime-rl's clamp (for reporting what
    /// the clamp gave up).
    pub(super) fn peek_unbounded_hit(&self, q: RequestRef, num_computed: u32, c: &ConnCtx) -> u32 {
        let (req, spec) = (q.state, q.spec);
        c.mooncake.map_or(0, |cfg| self.matched(req, spec, num_computed, cfg, c.block_size).0)
    }

    /// `get_num_new_matched_tokens(req, num_computed)`; with `limit` (router replay under
    /// prime-rl: `_routed_experts_load_limit`) the call goes through prime-rl's wrapper
    /// (`monkey_patch_clamp_kv_offload_loads_for_routed_experts`, RE C3).
    pub(super) fn get_num_new_matched_tokens(
        &mut self,
        q: RequestRef,
        num_computed: u32,
        limit: Option<u32>,
        c: &ConnCtx,
    ) -> (Option<u32>, bool) {
        let (r, req, spec) = (q.id, q.state, q.spec);
        let Some(cfg) = c.mooncake else { return (Some(0), false) };
        let (need, hit) = self.matched(req, spec, num_computed, cfg, c.block_size);
        if need == 0 {
            // An earlier LoadSpec of this request (if any) is left as it was.
            return (Some(0), false);
        }
        self.reqs[r as usize].load_spec =
            Some(LoadSpec { vllm_cached: num_computed, kvpool_cached: hit, can_load: false, tail_key: Some(hit) });
        // load_async (vLLM's default; its worker asserts it).
        let answer = (need, true);
        let Some(limit) = limit else { return (Some(answer.0), answer.1) };
        // prime-rl's wrapper: pass through what fits under the limit; else drop the LoadSpec
        // (limit 0) or move its end to num_computed + limit, a full block keyed by its own
        // hash (no tail boundary).
        if need <= limit {
            return (Some(need), true);
        }
        if limit == 0 {
            self.reqs[r as usize].load_spec = None;
            return (Some(0), false);
        }
        let ls = self.reqs[r as usize].load_spec.as_mut().expect("just recorded");
        ls.kvpool_cached = num_computed + limit;
        ls.tail_key = None;
        (Some(limit), true)
    }

    /// `update_state_after_alloc(req, blocks, num_external)`.
    pub(super) fn update_state_after_alloc(&mut self, q: RequestRef, num_external: u32, cx: &mut HookCtx) {
        let (r, req, name) = (q.id, q.state, &q.spec.name);
        let (ghost, ev) = (&mut *cx.ghost, &mut *cx.ev);
        let blocks = if num_external > 0 { req.table.clone() } else { Vec::new() };
        match self.unfinished.iter_mut().find(|(x, _)| *x == r) {
            Some(e) => e.1 = blocks, // a dict keeps an existing key's position
            None => self.unfinished.push((r, blocks)),
        }
        let Some(ls) = self.reqs[r as usize].load_spec.as_mut() else {
            return;
        };
        if num_external == 0 {
            ls.can_load = false;
            return;
        }
        if i64::from(num_external) != i64::from(ls.kvpool_cached) - i64::from(ls.vllm_cached) {
            // vLLM: `assert num_external_tokens == kvpool_cached_tokens - vllm_cached_tokens`.
            ghost.breach(Breach::ConnectorAssert);
            let (pool, local) = (ls.kvpool_cached, ls.vllm_cached);
            ev.emit(|| Event::Violation {
                property: "connector-assert",
                detail: format!(
                    "update_state_after_alloc({name}, num_external_tokens={num_external}) but its LoadSpec says kvpool {pool} - vllm {local} = {}: AssertionError in the scheduler, the engine dies",
                    pool - local
                ),
            });
            return;
        }
        ls.can_load = true;
        ghost.mark(Mark::HostHit);
    }

    /// `build_connector_meta(scheduler_output)`: forget finished and preempted requests, track
    /// new and running ones, issue save jobs (pinning their blocks) and pending load jobs.
    pub(super) fn build_connector_meta(&mut self, out: &SchedOut, reqs: &[ReqState], cx: &mut HookCtx) {
        let (c, pool, ev) = (&cx.c, &mut *cx.pool, &mut *cx.ev);
        let wl = c.wl;
        let cfg = c.mooncake.expect("Mooncake settings");
        let b = c.block_size;
        let is_consumer = cfg.kv_role == KvRole::Consumer;
        let can_process_cached = !is_consumer || cfg.save_decode_cache;
        for &r in out.finished.iter().chain(&out.preempted) {
            let q = &mut self.reqs[r as usize];
            q.load_spec = None;
            q.tracker = None;
            self.unfinished.retain(|(x, _)| *x != r);
        }
        let mut metas: Vec<Meta> = Vec::new();
        // New requests (and, under Model Runner V2, requests resumed after preemption): a
        // tracker over the full prefill range.
        for s in out.yield_order().filter(|s| s.full_table) {
            let q = &reqs[s.req as usize];
            let load = self.reqs[s.req as usize].load_spec.take();
            debug_assert!(
                self.unfinished.iter().any(|(x, _)| *x == s.req),
                "vLLM asserts it saw update_state_after_alloc"
            );
            let spec = wl.spec(s.req, q.turn);
            let mut t = Tracker { token_len: s.start + s.tokens, num_saved: 0, prefill_end: q.num_tokens(spec) };
            if let Some(m) = from_tracker(s.req, &mut t, load, is_consumer, b) {
                metas.push(m);
            }
            self.reqs[s.req as usize].tracker = Some(t);
        }
        // Running requests: a prefill chunk saves its new full blocks; decode only with
        // save_decode_cache; a consumer saves decode blocks only.
        if can_process_cached {
            for s in out.scheduled.iter().filter(|s| !s.full_table) {
                let Some(t) = self.reqs[s.req as usize].tracker.as_mut() else {
                    // 0.34 raises a KeyError here; 0.33 keeps a preempted request's tracker
                    // (reset). Under MRV2 a resumed request comes back as a new one, so no
                    // modelled path gets here.
                    continue;
                };
                let is_decode = s.start >= t.prefill_end;
                if is_decode && !cfg.save_decode_cache {
                    continue;
                }
                // vLLM grows token_len by the tokens it knows, `len(all_token_ids[token_len:
                // token_len + scheduled])` (MooncakeStoreScheduler.build_connector_meta): under
                // async scheduling a decode step's token is a placeholder not yet appended, so
                // the tracker lags the computed tokens (no-op when every token is known).
                let known = reqs[s.req as usize].num_tokens(wl.spec(s.req, reqs[s.req as usize].turn));
                t.token_len = (t.token_len + s.tokens).min(known.max(t.token_len));
                if is_consumer && !is_decode {
                    continue;
                }
                metas.extend(from_tracker(s.req, t, None, false, b));
            }
        }
        // Accepted loads of requests not scheduled this step (WAITING_FOR_REMOTE_KVS).
        let scheduled: Vec<ReqId> = out.scheduled.iter().map(|s| s.req).collect();
        let pending: Vec<ReqId> = self.unfinished.iter().map(|(r, _)| *r).filter(|r| !scheduled.contains(r)).collect();
        for r in pending {
            let Some(ls) = self.reqs[r as usize].load_spec.take() else { continue };
            if !ls.can_load {
                continue;
            }
            let mut t = Tracker { token_len: ls.kvpool_cached, num_saved: 0, prefill_end: 0 };
            metas.extend(from_tracker(r, &mut t, Some(ls), false, b));
            self.reqs[r as usize].tracker = Some(t);
        }
        for m in metas {
            let r = m.req;
            if let Some(ls) = m.load {
                self.issue_load(r, &ls, reqs, wl, b, ev);
            }
            if let Some((from, token_len)) = m.save {
                // _apply_current_save_block_ids + _reference_save_blocks.
                let table = reqs[r as usize].table.clone();
                let mut pinned: Vec<BlockId> = Vec::new();
                for &blk in table.iter().filter(|_| c.rules.mc_save_pins) {
                    if blk != NULL_BLOCK && !pinned.contains(&blk) {
                        pinned.push(blk);
                    }
                }
                pool.touch(&pinned, c.rules.touch_dequeues);
                let id = self.next_save;
                self.next_save += 1;
                let spec = wl.spec(r, reqs[r as usize].turn);
                let hashes: Vec<BlockHash> = spec.hashes.iter().take((token_len / b) as usize).copied().collect();
                ev.emit(|| Event::StoreJob {
                    job: id,
                    req: r,
                    keys: hashes[(from / b) as usize..].to_vec(),
                    blocks: table.clone(),
                    slots: Vec::new(),
                });
                let n = hashes.len().saturating_sub((from / b) as usize) as u64;
                ev.stat(|s| {
                    s.store_jobs += 1;
                    s.stored_chunks += n;
                });
                self.saves.push(SaveJob { id, req: r, token_len, blocks: table, hashes, pinned, phase: Phase::Built });
            }
        }
    }

    /// A load job for an accepted LoadSpec: the chunks from the block-aligned local hit to the
    /// pool hit, each keyed by the hash at its end (`ChunkedTokenDatabase.process_tokens`),
    /// into the blocks `update_state_after_alloc` got.
    fn issue_load(&mut self, r: ReqId, ls: &LoadSpec, reqs: &[ReqState], wl: &Workload, b: u32, ev: &mut Events) {
        let spec = wl.spec(r, reqs[r as usize].turn);
        let table = self.unfinished.iter().find(|(x, _)| *x == r).map(|(_, t)| t.clone()).unwrap_or_default();
        let token_len = ls.kvpool_cached;
        let mask = ls.vllm_cached / b * b;
        let mut keys = Vec::new();
        let mut blocks = Vec::new();
        for ci in cdiv(mask, b)..cdiv(token_len, b) {
            let end = ((ci + 1) * b).min(token_len);
            let boundary = if end == token_len { ls.tail_key.unwrap_or(end) } else { end };
            keys.push(spec.hashes[(boundary / b - 1) as usize]);
            blocks.push(table[ci as usize]);
        }
        let id = self.next_load;
        self.next_load += 1;
        ev.emit(|| Event::LoadJob {
            job: id,
            req: r,
            keys: keys.clone(),
            blocks: blocks.clone(),
            slots: Vec::new(),
            sync: false,
        });
        let n = keys.len() as u64;
        ev.stat(|s| {
            s.load_jobs += 1;
            s.loaded_chunks += n;
        });
        self.loads.push(LoadJob { id, req: r, keys, blocks, phase: Phase::Built, invalid_from: None });
    }

    /// `update_connector_output`: drop the pins of save jobs the worker finished, tail first.
    pub(super) fn update_connector_output(&mut self, completed: &[JobId], cx: &mut HookCtx) {
        let (pool, ghost, ev) = (&mut *cx.pool, &mut *cx.ghost, &mut *cx.ev);
        for &id in completed {
            let Some(pos) = self.saves.iter().position(|j| j.id == id) else {
                continue; // vLLM: a job that referenced nothing (or an unknown one) is skipped
            };
            let job = self.saves.remove(pos);
            pool.free_blocks(job.pinned.iter().rev().copied(), ghost);
            ev.emit(|| Event::JobCompleted { job: id });
        }
    }

    /// `has_pending_push_work`: save jobs still hold block references.
    pub fn has_pending_work(&self) -> bool {
        !self.saves.is_empty()
    }

    /// GPU blocks the save jobs reference (one entry per reference), for g1-accounting.
    pub fn gpu_pins(&self) -> Vec<BlockId> {
        self.saves.iter().flat_map(|j| j.pinned.iter().copied()).collect()
    }

    /// GPU blocks an unfinished load is still filling.
    pub fn loading_blocks(&self) -> Vec<BlockId> {
        self.loads
            .iter()
            .filter(|j| matches!(j.phase, Phase::Built | Phase::Submitted))
            .flat_map(|j| j.blocks.iter().copied())
            .collect()
    }

    /// Renumber save and load job ids densely (order kept). `outside`: save ids held in
    /// in-flight worker reports.
    pub fn canonicalize<'a>(&mut self, outside: impl Iterator<Item = &'a mut JobId>) {
        let dense = self.saves.iter().enumerate().all(|(i, j)| j.id == i as JobId)
            && self.next_save == self.saves.len() as JobId;
        if !dense {
            let map: BTreeMap<JobId, JobId> = self.saves.iter().enumerate().map(|(i, j)| (j.id, i as JobId)).collect();
            let m = |id: &mut JobId| *id = map.get(id).copied().unwrap_or(JobId::MAX);
            for j in &mut self.saves {
                m(&mut j.id);
            }
            for q in &mut self.reqs {
                if let Some(l) = q.ledger.as_mut() {
                    l.live.iter_mut().for_each(m);
                }
            }
            outside.for_each(m);
            self.next_save = self.saves.len() as JobId;
        }
        for (i, j) in self.loads.iter_mut().enumerate() {
            j.id = i as JobId;
        }
        self.next_load = self.loads.len() as JobId;
    }
}

/// `ReqMeta.from_request_tracker`: a save of the new full blocks (unless skipped), and the
/// LoadSpec if it may load (a meta never carries both).
fn from_tracker(r: ReqId, t: &mut Tracker, load: Option<LoadSpec>, skip_save: bool, b: u32) -> Option<Meta> {
    let chunk_boundary = cdiv(t.num_saved + 1, b) * b;
    let to_save = t.token_len / b * b;
    let can_load = load.is_some_and(|l| l.can_load);
    let skip = skip_save || to_save < chunk_boundary || can_load;
    if skip && load.is_none() {
        return None;
    }
    let from = t.num_saved;
    if !skip {
        t.num_saved = to_save;
    }
    Some(Meta { req: r, save: (!skip).then_some((from, to_save)), load: load.filter(|l| l.can_load) })
}
