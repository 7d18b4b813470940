//! The scheduler side of router replay: vLLM's `AuxOutputSchedulerConnector` (0.33: emit
//! starts, block-hash keys, terminal events, and the row retention and hit gating that keep
//! every GPU-cached or loadable block's rows in the store) and prime-rl's patches to the 0.31
//! scheduler (`_routed_experts_load_limit` — the load clamp —, `_track_externally_loaded_blocks`
//! and `_first_loaded_block` — the loaded-block cut; on a P/D decode instance `_emit_floors`,
//! the decode emit floor, and `_is_pd_decode_request`'s exemptions from the clamp and the cut).

use super::{AuxState, WorkerReq};
use crate::system::gpu_pool::GpuPool;
use crate::system::request::ReqState;
use crate::system::rules::{Clamp, Cut, DecodeFloor, EmitStart, Rules};
use crate::system::types::{cdiv, BlockHash, BlockId, ReqId};
use crate::system::workload::RequestSpec;

/// `AuxOutputConnectorMetadata` for one step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuxMeta {
    /// Emit start per scheduled request.
    pub(crate) requests: Vec<(ReqId, u32)>,
    /// Newly keyed block hashes per request.
    pub(crate) hashes: Vec<(ReqId, Vec<BlockHash>)>,
    /// Terminal events (finished or preempted since the last metadata).
    pub(crate) finished: Vec<ReqId>,
    pub(crate) retained: Vec<BlockHash>,
    pub(crate) released: Vec<BlockHash>,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct AuxSched {
    /// `_sent_hash_counts`.
    sent: Vec<Option<u32>>,
    /// `_finished_requests`: terminal events with their last new hashes.
    finished: Vec<(ReqId, Vec<BlockHash>)>,
    /// 0.33 `_kv_cached`: blocks whose rows the scheduler retains, least recently used first.
    pub(crate) kv_cached: Vec<BlockHash>,
    /// 0.33 `_loading`: blocks a request is loading (never released meanwhile).
    loading: Vec<(ReqId, Vec<BlockHash>)>,
    capacity: u32,
    retained: Vec<BlockHash>,
    released: Vec<BlockHash>,
    /// prime-rl `_emit_floors` (P/D decode side): per request, `num_computed_tokens` when it
    /// was first scheduled.
    floors: Vec<Option<u32>>,
}

/// `emit start` (R3): the first position whose row the client still needs.
pub fn emit_start(rules: &Rules, spec: &RequestSpec, q: &ReqState) -> u32 {
    let s = match rules.aux_emit {
        EmitStart::V031 => spec.rows_start,
        EmitStart::V033 => spec.rows_start.min(spec.prompt_len),
    };
    let nt = q.num_tokens(spec);
    s.max(if q.num_output == 0 { 0 } else { nt - 1 })
}

/// prime-rl `_routed_experts_load_limit`: how many tokens past the local hit `nc` an external
/// load may reach (None: unbounded).
pub fn load_limit(rules: &Rules, spec: &RequestSpec, q: &ReqState, nc: u32, b: u32, decode: bool) -> Option<u32> {
    let clamp = rules.aux_clamp?;
    if decode && rules.aux_decode_exempt {
        return None; // `_is_pd_decode_request`: D never reads prompt rows (D7)
    }
    if rules.aux_clamp_exempts_resumed && q.num_output > 0 {
        return None;
    }
    let s = spec.rows_start;
    let bound = match clamp {
        Clamp::Floor => s / b * b,
        Clamp::Ceil => s.div_ceil(b) * b,
    };
    Some(bound.saturating_sub(nc))
}

/// prime-rl's cut (`_first_loaded_block`): the number of local-hit blocks to keep.
#[allow(clippy::too_many_arguments)]
pub fn cut_hits(
    rules: &Rules,
    spec: &RequestSpec,
    q: &ReqState,
    hits: &[BlockId],
    pool: &GpuPool,
    b: u32,
    decode: bool,
) -> usize {
    let Some(cut) = rules.aux_cut else { return hits.len() };
    if q.num_output > 0 || (decode && rules.aux_decode_exempt) {
        return hits.len(); // resumed and decode-side requests are exempt
    }
    let from = (spec.rows_start / b) as usize + usize::from(cut == Cut::AfterStart);
    (from..hits.len()).find(|&i| pool.loaded(hits[i])).unwrap_or(hits.len())
}

/// prime-rl `_track_externally_loaded_blocks`: mark the blocks an external load fills.
pub fn mark_loaded(pool: &mut GpuPool, q: &ReqState, local: u32, ext: u32, b: u32) {
    for i in (local / b)..cdiv(local + ext, b) {
        if let Some(&blk) = q.table.get(i as usize) {
            pool.set_loaded(blk);
        }
    }
}

crate::system::collections::pack::pack_fields!(AuxSched {
    sent,
    finished,
    kv_cached,
    loading,
    capacity,
    retained,
    released,
    floors
});

/// A decoder's starting value (every field is then decoded).
impl Default for AuxSched {
    fn default() -> Self {
        AuxSched::new(0, 0)
    }
}

impl AuxSched {
    pub fn new(num_reqs: usize, capacity: u32) -> Self {
        AuxSched {
            sent: vec![None; num_reqs],
            finished: Vec::new(),
            kv_cached: Vec::new(),
            loading: Vec::new(),
            capacity,
            retained: Vec::new(),
            released: Vec::new(),
            floors: vec![None; num_reqs],
        }
    }

    /// Trace replay: one more request slot.
    pub fn add_slot(&mut self) {
        self.sent.push(None);
        self.floors.push(None);
    }

    /// Trace replay: no hashes sent for `r`'s request, no terminal event or load of it
    /// waiting for the next metadata.
    pub fn slot_idle(&self, r: ReqId) -> bool {
        self.sent[r as usize].is_none()
            && self.floors[r as usize].is_none()
            && self.finished.iter().all(|(x, _)| *x != r)
            && self.loading.iter().all(|(x, _)| *x != r)
    }

    /// `_take_new_hashes`.
    fn take_new_hashes(&mut self, r: ReqId, hashes: &[BlockHash], num_tokens: u32, b: u32) -> Vec<BlockHash> {
        let sent = self.sent[r as usize].unwrap_or(0);
        let keyed = (hashes.len() as u32).min(num_tokens / b);
        if keyed <= sent {
            return Vec::new();
        }
        self.sent[r as usize] = Some(keyed);
        hashes[sent as usize..keyed as usize].to_vec()
    }

    /// The decode floor of `r` (P/D decode side), if set.
    pub fn floor(&self, r: ReqId) -> Option<u32> {
        self.floors[r as usize]
    }

    /// `build_connector_meta` for the scheduled requests `(r, tokens, spec, state)`; on a P/D
    /// decode instance (`decode`) prime-rl's wrapper raises each emit start to the request's
    /// floor, `setdefault(num_computed_tokens)` read before the step advances it.
    pub fn build_meta<'a>(
        &mut self,
        scheduled: impl Iterator<Item = (ReqId, u32, &'a RequestSpec, &'a ReqState)>,
        rules: &Rules,
        b: u32,
        decode: bool,
    ) -> AuxMeta {
        let mut m = AuxMeta::default();
        for (r, tokens, spec, q) in scheduled {
            if self.sent[r as usize].is_none() {
                self.sent[r as usize] = Some(0);
            }
            let new = self.take_new_hashes(r, q.block_hashes(spec, b), q.num_computed + tokens, b);
            if !new.is_empty() {
                m.hashes.push((r, new));
            }
            self.loading.retain(|(x, _)| *x != r);
            let mut e = emit_start(rules, spec, q);
            if decode && rules.aux_decode_floor != DecodeFloor::None {
                e = e.max(*self.floors[r as usize].get_or_insert(q.num_computed));
            }
            m.requests.push((r, e));
        }
        for (r, hashes) in std::mem::take(&mut self.finished) {
            m.finished.push(r);
            if !hashes.is_empty() {
                m.hashes.push((r, hashes));
            }
        }
        m.retained = std::mem::take(&mut self.retained);
        m.released = std::mem::take(&mut self.released);
        m
    }

    /// 0.33 `max_cache_hit`: how far a hit may reach with every block's rows retained here.
    pub fn max_cache_hit(&mut self, hashes: &[BlockHash], num_tokens: u32, pool: &GpuPool, b: u32) -> u32 {
        let mut n = 0;
        for h in hashes {
            if let Some(i) = self.kv_cached.iter().position(|x| x == h) {
                let k = self.kv_cached.remove(i);
                self.kv_cached.push(k);
            } else if pool.get_one_block(*h).is_none() {
                break;
            }
            n += 1;
        }
        (n * b).min(num_tokens.saturating_sub(1))
    }

    /// 0.33 `cap_external_hit`: all or nothing (`trims`: the mutation that keeps the
    /// external hit's block-aligned part within `max_cache_hit` instead).
    #[allow(clippy::too_many_arguments)]
    pub fn cap_external_hit(
        &mut self,
        hashes: &[BlockHash],
        num_tokens: u32,
        local: u32,
        ext: u32,
        pool: &GpuPool,
        b: u32,
        trims: bool,
    ) -> u32 {
        let hit = local + ext;
        let max = self.max_cache_hit(hashes, num_tokens, pool, b);
        if hit.is_multiple_of(b) && hit <= max {
            ext
        } else if trims {
            (max / b * b).saturating_sub(local).min(ext)
        } else {
            0
        }
    }

    /// 0.33 `request_loading`.
    pub fn request_loading(&mut self, r: ReqId, hashes: &[BlockHash], num_tokens: u32, b: u32) {
        let n = ((num_tokens / b) as usize).min(hashes.len());
        self.loading.retain(|(x, _)| *x != r);
        self.loading.push((r, hashes[..n].to_vec()));
    }

    /// `request_finished` (finish and preemption): 0.33 retains the rows of the request's
    /// still GPU-cached blocks; the worker gets a terminal event with the last new hashes.
    #[allow(clippy::too_many_arguments)]
    pub fn request_finished(
        &mut self,
        r: ReqId,
        spec: &RequestSpec,
        q: &ReqState,
        pool: &GpuPool,
        retain: bool,
        b: u32,
        floor_reset: bool,
    ) {
        self.loading.retain(|(x, _)| *x != r);
        // prime-rl pops the decode floor only when the request is finished (the variant
        // floor-reset-on-preemption pops it on every call).
        if q.status.is_finished() || floor_reset {
            self.floors[r as usize] = None;
        }
        let hashes = q.block_hashes(spec, b);
        if retain {
            for h in hashes.iter().take((q.num_computed / b) as usize) {
                if !self.kv_cached.contains(h) && pool.get_one_block(*h).is_some() {
                    self.kv_cached.push(*h);
                    self.retained.push(*h);
                }
            }
            self.release_unheld(pool);
        }
        if self.sent[r as usize].is_none() {
            return;
        }
        let new = self.take_new_hashes(r, hashes, q.num_computed, b);
        self.finished.push((r, new));
        self.sent[r as usize] = None;
    }

    /// 0.33 `_release_unheld`.
    fn release_unheld(&mut self, pool: &GpuPool) {
        let excess = self.kv_cached.len().saturating_sub(self.capacity as usize);
        if excess == 0 {
            return;
        }
        let loading: Vec<BlockHash> = self.loading.iter().flat_map(|(_, hs)| hs.iter().copied()).collect();
        let victims: Vec<BlockHash> = self
            .kv_cached
            .iter()
            .filter(|h| !loading.contains(h) && pool.get_one_block(**h).is_none())
            .take(excess)
            .copied()
            .collect();
        for h in victims {
            self.kv_cached.retain(|x| *x != h);
            self.released.push(h);
        }
    }
}

/// The worker's `begin_step`: new keys (retained), terminal events (keys released, state torn
/// down), scheduler retains and releases, and publication of blocks that just got their key.
/// Err: the store could not make room (0.31/0.32), the engine dies.
pub fn begin_step(aux: &mut AuxState, meta: &AuxMeta, b: u32) -> Result<(), super::StoreFull> {
    let mut retain = meta.retained.clone();
    let mut release = meta.released.clone();
    for &(r, e) in &meta.requests {
        aux.workers[r as usize].get_or_insert_with(|| WorkerReq { emit_cursor: e, ..Default::default() });
    }
    let mut publish = Vec::new();
    for (r, hashes) in &meta.hashes {
        let st = aux.workers[*r as usize].as_mut().expect("keys for a known request");
        st.keys.extend_from_slice(hashes);
        retain.extend_from_slice(hashes);
        let keyed_end = st.keys.len() as u32 * b;
        let (ready, wait): (Vec<u32>, Vec<u32>) = st.pending.iter().partition(|&&s| s < keyed_end);
        st.pending = wait;
        publish.extend(ready.into_iter().map(|s| st.keys[(s / b) as usize]));
    }
    for &r in &meta.finished {
        if let Some(st) = aux.workers[r as usize].take() {
            release.extend(st.keys.iter().rev().copied());
        }
    }
    aux.row_store.put(&publish, &retain, &release).map(|_| ())
}
