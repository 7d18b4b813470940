//! Rule sets as data: every vLLM release (profile) and every known bug (variant) is a row of
//! switches read by the step functions. Nothing is forked per version.
//!
//! A *profile* is a released rule set (`vllm-0.33`, `vllm-main`). A *variant* flips one or
//! more switches on top of the model's profile: `pre-NNNNN` restores the behaviour before an
//! upstream fix, `mut-*` is a mutation no upstream code had (a negative control).

use std::fmt;

mod table;
mod variants;
pub use table::{RuleRow, RULE_ROWS};
pub use variants::VARIANTS;

/// The store watermark of a finished request (OffloadingConnectorScheduler._build_store_jobs).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum FinishWatermark {
    /// `num_tokens`: includes the final sampled token whose KV was never written (#54193).
    NumTokens,
    /// `max(num_prompt_tokens, num_tokens - 1)` (#54288, 0.32 and later).
    PromptOrTokensMinusOne,
}

/// The host tier's eviction order (OffloadingConnector's CPU manager, `cpu/policies/lru.py`).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum HostLru {
    /// 0.24: an ordered list of evictable keys; a key joins the MRU end when it becomes
    /// evictable (store or last load completes), and the connector's `touch` moves a request's
    /// evictable keys to the MRU end (head last, so the head ends most recent).
    ReleaseOrder,
    /// 0.32: a global rank drawn at insert (head before tail of a store); a request's keys are
    /// re-ranked tail first when it finishes.
    InsertRank,
    /// 0.33: one provisional rank per request, keys ranked (request rank, -position) at insert
    /// and on reuse; re-ranked tail first at finish.
    RequestRank,
}

/// Router replay: where a request's rows start (`AuxOutputSchedulerConnector`, R3).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum EmitStart {
    /// ≈0.31: `max(s, 0 if no output else num_tokens - 1)`.
    V031,
    /// 0.33: `max(min(s, num_prompt_tokens), ...)`.
    V033,
}

/// prime-rl's load clamp: external loads stop at this multiple of the block size below `s`.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Clamp {
    /// `block_floor(s)` (the fix).
    Floor,
    /// `block_ceil(s)` (a plausible bug: loads the block holding `s`).
    Ceil,
}

/// prime-rl's loaded-block cut: where the scan for the first loaded hit block starts.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Cut {
    /// From `blk(s)` (the fix).
    FromStart,
    /// From `blk(s) + 1` (off by one).
    AfterStart,
}

/// Every switch on which profiles and variants differ.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Rules {
    /// `BlockPool.touch` removes a ref-0 hit block from the free queue.
    pub touch_dequeues: bool,
    /// `allocate_slots` caches only up to the scheduled end (`min(total + new, num_tokens)`),
    /// not every full block whose hash is known.
    pub cache_scheduled_only: bool,
    /// `allocate_slots(delay_cache_blocks=True)` for async loads.
    pub delay_cache_async_loads: bool,
    /// No admission from `waiting` in a step that preempted (Scheduler.schedule).
    pub no_admission_after_preempt: bool,
    /// Model Runner V2: `SchedulerOutput.scheduled_new_reqs` lists the requests resumed after a
    /// preemption after the brand-new ones (`scheduled_new_reqs.extend(scheduled_resumed_reqs)`
    /// in `Scheduler.schedule`, 0.24 to 0.33); false: one list in admission order (0.34).
    /// Connectors read the same order (`yield_req_data`).
    pub resumed_after_new: bool,
    /// Not in vLLM: under `recompute`, also evict the invalid blocks' hashes (a fix for GP S10).
    pub evict_invalid_on_recompute: bool,
    /// An async load is admitted only if it leaves the blocks in-flight prefills still need
    /// (`reserved_blocks = _inflight_prefill_reserved_blocks()`).
    pub reserve_for_async_loads: bool,
    /// The reservation leaves out the request being admitted (not in vLLM: a request whose
    /// async load failed from its first block stays in `_inflight_prefills` and reserves its
    /// own remaining blocks when it is admitted again).
    pub reserve_excludes_self: bool,
    /// A full block table delivered as new-request data replaces the connector's mirror
    /// (`yield_req_data`'s `is_full_table`, #60810). Before 0.33 the flag meant "preempted"
    /// and was false for new-request entries, so a resumed streaming session's full table was
    /// appended to the mirror.
    pub full_table_resets_mirror: bool,
    /// `get_num_new_matched_tokens` resets the store cursor to 0 (#63010).
    pub cursor_reset_on_lookup: bool,
    /// `get_num_new_matched_tokens` returns None while the request has transfers in flight (#46014).
    pub inflight_lookup_guard: bool,
    /// A write-pending key (HIT_PENDING) counts and defers the lookup (None); when false the
    /// scan stops at it like a miss, keeping the hits before it.
    pub pending_lookup_defers: bool,
    /// `build_connector_meta` flushes the stores of preempted requests (#29870).
    pub flush_preempted_stores: bool,
    /// Store watermark for finished requests other than aborted ones.
    pub finish_watermark: FinishWatermark,
    /// FINISHED_ERROR uses `num_computed_tokens` as its watermark, like ABORTED (#63937).
    pub error_watermark_computed: bool,
    /// Advance the store cursor when `prepare_store` returns None (#27697's bug).
    pub cursor_advance_on_store_failure: bool,
    /// Process a completed job twice (a worker reporting it twice is not ignored).
    pub double_complete: bool,
    /// The host tier's eviction order.
    pub host_lru: HostLru,
    /// ARC's `evict` falls back to T1 when T2 has no candidate (0.32+; 0.24 returns None).
    pub arc_t1_fallback: bool,
    /// ARC trims its ghost lists to the capacity after an eviction (false: a mutation).
    pub arc_ghost_trim: bool,
    /// Not in vLLM: prepare_store evicts from the most recently used end (a negative control
    /// for eviction-order).
    pub evict_mru: bool,
    /// The store cursor only moves forward (`max`, 0.32+); 0.24 assigns the watermark's chunk.
    pub cursor_monotonic: bool,
    /// `_build_store_jobs` also visits requests finished since the last step (0.32+).
    pub visit_finished: bool,
    /// Host hits within the budget load synchronously, before the forward pass (0.33).
    pub sync_loads: bool,
    // --- SimpleCPUOffloadConnector (`v1/simple_kv_offload/manager.py`) ---
    /// `build_connector_meta` resets the mirror and store cursor of every request in
    /// `preempted_req_ids` (0.32+; 0.24 reset only on MRV1's resumed flag).
    pub scpu_reset_on_preempt: bool,
    /// `request_finished_all_groups` queues a finish-time store of the confirmed blocks above
    /// the cursor (`_queue_finished_eager_store`, 0.32+; 0.24 had none).
    pub scpu_finish_flush: bool,
    /// An eager scan that finds a block already cached in the CPU pool (a GPU-side hit) moves
    /// that CPU block to the MRU end of the free queue (#62444; 0.33 skips it unchanged).
    pub scpu_refresh_on_gpu_hit: bool,
    /// A store registers the hash stamped on the CPU block at prep (0.24) instead of the GPU
    /// block's hash read at completion (0.32+).
    pub scpu_hash_at_prep: bool,
    /// `get_num_new_matched_tokens` pins the CPU hit blocks until `update_state_after_alloc`.
    pub scpu_lookup_pins: bool,
    /// A lookup first drops the pin left by an earlier lookup of the same request.
    pub scpu_drop_stale_pin: bool,
    /// `update_state_after_alloc` pins the CPU blocks it loads until the load completes.
    pub scpu_load_pins: bool,
    /// Stores pin (touch) their GPU source blocks until the store completes.
    pub scpu_store_pins_gpu: bool,
    /// Mutation: a store registers its CPU block under the hash at prep, before the copy lands.
    pub scpu_register_at_prep: bool,
    /// A completed store frees its CPU blocks in transfer order, head (prefix) first.
    pub scpu_release_head_first: bool,
    /// Router replay: the emit-start rule.
    pub aux_emit: EmitStart,
    /// Router replay, 0.33: the scheduler retains rows of GPU-cached blocks, caps local hits at
    /// `max_cache_hit` and refuses external hits whose rows are not retained.
    pub aux_retain: bool,
    /// Router replay, prime-rl: the load clamp.
    pub aux_clamp: Option<Clamp>,
    /// The clamp exempts requests resumed after preemption (the PR text says so; the code at
    /// prime-rl 8052d448 does not).
    pub aux_clamp_exempts_resumed: bool,
    /// Router replay, prime-rl: the loaded-block cut of local prefix hits.
    pub aux_cut: Option<Cut>,
    /// Router replay, prime-rl: a first capture that starts mid-block is not buffered
    /// (`skip_remote_prefill_partial_block`).
    pub aux_partial_skip: bool,
    /// MooncakeStoreConnector: a save job references (touches) the request's blocks until
    /// the worker reports it (`_reference_save_blocks`).
    pub mc_save_pins: bool,
    /// NixlConnector, host-buffer mode: a step's save set also holds the block that straddles
    /// the request's chunked-prefill boundary (partly written by the previous step, completed
    /// by this one), also when the step allocates no new block (#59102, open upstream: false in
    /// every profile, `fix-59102`). Without it only the step's newly allocated block ids are
    /// copied to the host buffer.
    pub nixl_resave_partial: bool,
    /// Variant: the row store evicts referenced rows too.
    pub aux_store_evicts_live: bool,
    /// Mutation: the worker also emits the row of the last sampled token.
    pub aux_emit_last_token: bool,
    /// Mutation: prime-rl's load limit trims the connector's answer in the scheduler, after
    /// `get_num_new_matched_tokens` returned, instead of inside it (the Mooncake wrapper, C3,
    /// rewrites the connector's LoadSpec; a trim from outside leaves it stale).
    pub aux_clamp_in_core: bool,
    /// Mutation: 0.33's `cap_external_hit` trims the external hit to the retained prefix
    /// instead of refusing it (all or nothing).
    pub aux_cap_trims: bool,
}

/// A released rule set.
pub struct Profile {
    pub name: &'static str,
    pub summary: &'static str,
    pub rules: fn() -> Rules,
}

/// A named switch set applied on top of a profile.
pub struct Variant {
    pub name: &'static str,
    pub summary: &'static str,
    /// The upstream change that fixed it, or "mutation".
    pub upstream: &'static str,
    pub apply: fn(&mut Rules),
}

fn vllm_033() -> Rules {
    Rules {
        touch_dequeues: true,
        cache_scheduled_only: true,
        delay_cache_async_loads: true,
        no_admission_after_preempt: true,
        resumed_after_new: true,
        evict_invalid_on_recompute: false,
        reserve_for_async_loads: true,
        reserve_excludes_self: false,
        full_table_resets_mirror: true,
        cursor_reset_on_lookup: true,
        inflight_lookup_guard: true,
        pending_lookup_defers: true,
        flush_preempted_stores: true,
        finish_watermark: FinishWatermark::PromptOrTokensMinusOne,
        error_watermark_computed: false,
        cursor_advance_on_store_failure: false,
        double_complete: false,
        host_lru: HostLru::RequestRank,
        arc_t1_fallback: true,
        arc_ghost_trim: true,
        evict_mru: false,
        cursor_monotonic: true,
        visit_finished: true,
        sync_loads: true,
        scpu_reset_on_preempt: true,
        scpu_finish_flush: true,
        scpu_refresh_on_gpu_hit: false,
        scpu_hash_at_prep: false,
        scpu_lookup_pins: true,
        scpu_drop_stale_pin: true,
        scpu_load_pins: true,
        scpu_store_pins_gpu: true,
        scpu_register_at_prep: false,
        scpu_release_head_first: true,
        mc_save_pins: true,
        nixl_resave_partial: false,
        aux_emit: EmitStart::V033,
        aux_retain: true,
        aux_clamp: None,
        aux_clamp_exempts_resumed: false,
        aux_cut: None,
        aux_partial_skip: false,
        aux_store_evicts_live: false,
        aux_emit_last_token: false,
        aux_clamp_in_core: false,
        aux_cap_trims: false,
    }
}

fn vllm_main() -> Rules {
    Rules { error_watermark_computed: true, scpu_refresh_on_gpu_hit: true, ..vllm_033() }
}

/// 0.32.0: no cursor reset at restart (#63010), `yield_req_data` without the full-table
/// flag (#60810), the insert-rank LRU, no sync loads.
fn vllm_032() -> Rules {
    Rules {
        cursor_reset_on_lookup: false,
        full_table_resets_mirror: false,
        host_lru: HostLru::InsertRank,
        sync_loads: false,
        aux_emit: EmitStart::V031,
        aux_retain: false,
        ..vllm_033()
    }
}

/// prime-rl's patched engine (router replay with KV offload): vLLM ≈0.31's AuxOutput rows
/// (no retention, the 0.31 emit start) plus the load clamp at `block_floor(s)`, the
/// loaded-block cut and the partial-block skip; the engine rules of the closest release kvmc
/// models (0.32).
fn prime_rl() -> Rules {
    Rules { aux_clamp: Some(Clamp::Floor), aux_cut: Some(Cut::FromStart), aux_partial_skip: true, ..vllm_032() }
}

/// 0.24.0's connector and host tier on the 0.32/0.33 core scheduler: release-order LRU with
/// the connector's touches, a cursor that follows the watermark (not monotonic), no visit of
/// finished requests (no finish-time store).
/// SimpleCPU 0.24: no finish-time store, the hash stamped at store prep, no reset on
/// `preempted_req_ids` (only on MRV1's resumed flag).
fn vllm_024() -> Rules {
    Rules {
        host_lru: HostLru::ReleaseOrder,
        arc_t1_fallback: false,
        cursor_monotonic: false,
        visit_finished: false,
        scpu_finish_flush: false,
        scpu_hash_at_prep: true,
        scpu_reset_on_preempt: false,
        ..vllm_032()
    }
}

pub const PROFILES: &[Profile] = &[
    Profile {
        name: "vllm-0.24",
        summary: "0.24.0's OffloadingConnector and CPU manager (release-order LRU with touches, no finish-time store, no cursor reset, #60810) and SimpleCPU (no finish-time store, hash stamped at prep, no reset on preemption) on the 0.32+ core scheduler",
        rules: vllm_024,
    },
    Profile {
        name: "vllm-0.32",
        summary: "0.32.0: insert-rank LRU (#51787), no cursor reset on restart (#63010), full tables appended on streaming resume (#60810), no sync loads",
        rules: vllm_032,
    },
    Profile {
        name: "vllm-0.33",
                summary: "vLLM 0.33.0 as released: #60810 and #63010 fixed; request-rank LRU (#61050); #63937 and #59102 (NIXL host buffer) still present",
        rules: vllm_033,
    },
    Profile {
        name: "vllm-main",
                summary: "0.33 plus the fixes merged since: #63937 (error-finish store watermark), #62444 (SimpleCPU refresh on GPU hit); #59102 (NIXL host buffer) is still open",
        rules: vllm_main,
    },
    Profile {
        name: "prime-rl",
        summary: "router replay with KV offload as prime-rl patches vLLM ≈0.31: load clamp at block_floor(start), loaded-block cut, partial-block skip (engine rules of 0.32)",
        rules: prime_rl,
    },
];

pub fn profile(name: &str) -> Option<&'static Profile> {
    PROFILES.iter().find(|p| p.name == name)
}

pub fn variant(name: &str) -> Option<&'static Variant> {
    VARIANTS.iter().find(|v| v.name == name)
}

/// The rules of `profile` with `variant` applied (None = the profile as released).
pub fn resolve(profile_name: &str, variant_name: Option<&str>) -> Result<Rules, String> {
    let p = profile(profile_name).ok_or_else(|| {
        format!(
            "unknown profile '{profile_name}' (known: {})",
            PROFILES.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
        )
    })?;
    let mut rules = (p.rules)();
    if let Some(v) = variant_name {
        let v = variant(v).ok_or_else(|| {
            format!("unknown variant '{v}' (known: {})", VARIANTS.iter().map(|v| v.name).collect::<Vec<_>>().join(", "))
        })?;
        (v.apply)(&mut rules);
    }
    Ok(rules)
}

impl fmt::Display for Rules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for row in RULE_ROWS {
            writeln!(f, "{:32} {}", row.name, (row.value)(self))?;
        }
        Ok(())
    }
}
