//! Rule sets as data: every vLLM release (profile) and every known bug (variant) is a row of
//! switches read by the step functions. Nothing is forked per version.
//!
//! A *profile* is a released rule set (`vllm-0.33`, `vllm-main`). A *variant* flips one or
//! more switches on top of the model's profile: `pre-NNNNN` restores the behaviour before an
//! upstream fix, `mut-*` is a mutation no upstream code had (a negative control).

use std::fmt;

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
    /// Not in vLLM: under `recompute`, also evict the invalid blocks' hashes (a fix for GP S10).
    pub evict_invalid_on_recompute: bool,
    /// An async load is admitted only if it leaves the blocks in-flight prefills still need
    /// (`reserved_blocks = _inflight_prefill_reserved_blocks()`).
    pub reserve_for_async_loads: bool,
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
    /// Variant: the row store evicts referenced rows too.
    pub aux_store_evicts_live: bool,
    /// Mutation: the worker also emits the row of the last sampled token.
    pub aux_emit_last_token: bool,
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
        evict_invalid_on_recompute: false,
        reserve_for_async_loads: true,
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
        aux_emit: EmitStart::V033,
        aux_retain: true,
        aux_clamp: None,
        aux_clamp_exempts_resumed: false,
        aux_cut: None,
        aux_partial_skip: false,
        aux_store_evicts_live: false,
        aux_emit_last_token: false,
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
        summary: "vLLM 0.33.0 as released: #60810 and #63010 fixed; request-rank LRU (#61050); #63937 still present",
        rules: vllm_033,
    },
        Profile {
        name: "vllm-main",
        summary: "0.33 plus the fixes merged since: #63937 (error-finish store watermark), #62444 (SimpleCPU refresh on GPU hit)",
        rules: vllm_main,
    },
    Profile {
        name: "prime-rl",
        summary: "router replay with KV offload as prime-rl patches vLLM ≈0.31: load clamp at block_floor(start), loaded-block cut, partial-block skip (engine rules of 0.32)",
        rules: prime_rl,
    },
];

pub const VARIANTS: &[Variant] = &[
    Variant {
        name: "pre-60810",
        summary: "a resumed streaming session's full block table is appended to the connector's mirror",
        upstream: "vllm #60810",
        apply: |r| r.full_table_resets_mirror = false,
    },
    Variant {
        name: "pre-63010",
        summary: "the store cursor is not reset when a request restarts from token 0",
        upstream: "vllm #63010",
        apply: |r| r.cursor_reset_on_lookup = false,
    },
    Variant {
        name: "pre-29870",
        summary: "stores of a preempted request are not flushed before its blocks are reused",
        upstream: "vllm #29870",
        apply: |r| r.flush_preempted_stores = false,
    },
    Variant {
        name: "pre-46014",
        summary: "lookup proceeds while the request has transfers in flight, and stops at (rather than waits for) write-pending keys",
        upstream: "vllm #46014",
        apply: |r| {
            r.inflight_lookup_guard = false;
            r.pending_lookup_defers = false;
        },
    },
    Variant {
        name: "mut-no-inflight-guard",
        summary: "only the #46014 guard removed; 0.33's lookup still defers on write-pending keys",
        upstream: "mutation",
        apply: |r| r.inflight_lookup_guard = false,
    },
    Variant {
        name: "mut-pending-stops-lookup",
        summary: "only the lookup change: a write-pending key stops the scan instead of deferring",
        upstream: "mutation",
        apply: |r| r.pending_lookup_defers = false,
    },
    Variant {
        name: "pre-54193",
        summary:
            "a finished request's store watermark is num_tokens (includes the unwritten last token)",
        upstream: "vllm #54288 (issue #54193)",
        apply: |r| r.finish_watermark = FinishWatermark::NumTokens,
    },
    Variant {
        name: "pre-27697",
        summary: "the store cursor advances even when prepare_store returns None",
        upstream: "vllm #27697",
        apply: |r| r.cursor_advance_on_store_failure = true,
    },
    Variant {
        name: "fix-63937",
        summary: "an error finish stores only computed tokens (what vllm-main does)",
        upstream: "vllm #63937",
        apply: |r| r.error_watermark_computed = true,
    },
    Variant {
        name: "fix-s10",
        summary:
            "not in vLLM: the recompute load-failure policy also evicts invalid blocks' hashes",
        upstream: "none (proposed fix for GP S10)",
        apply: |r| r.evict_invalid_on_recompute = true,
    },
    Variant {
        name: "mut-no-touch-dequeue",
        summary: "a prefix hit on a free block does not remove it from the free queue",
        upstream: "mutation",
        apply: |r| r.touch_dequeues = false,
    },
    Variant {
        name: "mut-cache-unscheduled",
        summary: "allocate_slots caches every full block whose hash is known, scheduled or not",
        upstream: "mutation",
        apply: |r| r.cache_scheduled_only = false,
    },
    Variant {
        name: "mut-no-delay-cache-async-load",
        summary: "blocks of an async load are cached at admission, before the load lands",
        upstream: "mutation",
        apply: |r| r.delay_cache_async_loads = false,
    },
    Variant {
        name: "mut-admit-after-preempt",
        summary: "waiting requests are admitted in a step that preempted",
        upstream: "mutation",
        apply: |r| r.no_admission_after_preempt = false,
    },
    Variant {
        name: "mut-no-load-reservation",
        summary: "an async load may take the blocks an in-flight prefill still needs",
        upstream: "mutation",
        apply: |r| r.reserve_for_async_loads = false,
    },
            Variant {
        name: "no-load-clamp",
        summary: "router replay without the load clamp and without the cut (vLLM 0.31 with the offload guard removed)",
        upstream: "prime-rl router replay x KV offload",
        apply: |r| {
            r.aux_clamp = None;
            r.aux_cut = None;
        },
    },
    Variant {
        name: "clamp-only",
        summary: "the load clamp without the loaded-block cut (the PR's negative control)",
        upstream: "prime-rl router replay x KV offload",
        apply: |r| r.aux_cut = None,
    },
    Variant {
        name: "cut-only",
        summary: "the loaded-block cut without the load clamp",
        upstream: "prime-rl router replay x KV offload",
        apply: |r| r.aux_clamp = None,
    },
    Variant {
        name: "ceil-clamp",
        summary: "the clamp rounds start up to a block boundary (loads the block holding start)",
        upstream: "mutation",
        apply: |r| {
            if r.aux_clamp.is_some() {
                r.aux_clamp = Some(Clamp::Ceil)
            }
        },
    },
    Variant {
        name: "cut-off-by-one",
        summary: "the cut scans from blk(start) + 1",
        upstream: "mutation",
        apply: |r| {
            if r.aux_cut.is_some() {
                r.aux_cut = Some(Cut::AfterStart)
            }
        },
    },
    Variant {
        name: "store-evicts-live-rows",
        summary: "the row store evicts rows that live requests reference (the A-store assumption broken)",
        upstream: "RE V13",
        apply: |r| r.aux_store_evicts_live = true,
    },
    Variant {
        name: "mut-emit-last-token",
        summary: "the worker emits a row for the last sampled token too",
        upstream: "mutation",
        apply: |r| r.aux_emit_last_token = true,
    },
    Variant {
        name: "mut-evict-mru",
        summary: "prepare_store evicts the most recently used evictable keys instead of the least",
        upstream: "mutation",
        apply: |r| r.evict_mru = true,
    },
    Variant {
        name: "mut-double-complete",
        summary: "a job completion is processed twice",
        upstream: "mutation",
        apply: |r| r.double_complete = true,
    },
    Variant {
        name: "pre-preempt-reset",
        summary: "SimpleCPU keeps a preempted request's store cursor (0.24 under Model Runner V2): blocks below it are never offered again after the restart",
        upstream: "vLLM 0.32 (reset on preempted_req_ids)",
        apply: |r| r.scpu_reset_on_preempt = false,
    },
    Variant {
        name: "pre-finish-flush",
        summary: "SimpleCPU without the finish-time store (0.24): a finishing request's last confirmed blocks are never stored",
        upstream: "vLLM 0.32 (_queue_finished_eager_store)",
        apply: |r| r.scpu_finish_flush = false,
    },
    Variant {
        name: "pre-hash-at-completion",
        summary: "SimpleCPU registers the hash stamped on the CPU block at store prep (0.24), not the GPU block's at completion",
        upstream: "vLLM 0.32 (_process_store_completion)",
        apply: |r| r.scpu_hash_at_prep = true,
    },
    Variant {
        name: "fix-62444",
        summary: "SimpleCPU moves a CPU block found already cached by the eager scan to the MRU end (what vllm-main does)",
        upstream: "vllm #62444",
        apply: |r| r.scpu_refresh_on_gpu_hit = true,
    },
    Variant {
        name: "pre-62444",
        summary: "SimpleCPU leaves the FIFO position of a CPU block found already cached unchanged (0.33)",
        upstream: "vllm #62444",
        apply: |r| r.scpu_refresh_on_gpu_hit = false,
    },
    Variant {
        name: "mut-scpu-lookup-no-pin",
        summary: "SimpleCPU's lookup does not pin its CPU hit blocks until update_state_after_alloc",
        upstream: "mutation",
        apply: |r| r.scpu_lookup_pins = false,
    },
    Variant {
        name: "mut-scpu-pin-leak",
        summary: "a repeated SimpleCPU lookup replaces the earlier pin without releasing it",
        upstream: "mutation",
        apply: |r| r.scpu_drop_stale_pin = false,
    },
    Variant {
        name: "mut-scpu-load-no-pin",
        summary: "SimpleCPU does not pin the CPU blocks of an in-flight load",
        upstream: "mutation",
        apply: |r| r.scpu_load_pins = false,
    },
    Variant {
        name: "mut-scpu-no-gpu-pin",
        summary: "SimpleCPU stores do not pin their GPU source blocks (a finished request's blocks are reused at once)",
        upstream: "mutation",
        apply: |r| r.scpu_store_pins_gpu = false,
    },
    Variant {
        name: "mut-scpu-register-at-prep",
        summary: "a SimpleCPU store registers its CPU block under the hash at prep, before the copy lands",
        upstream: "mutation",
        apply: |r| r.scpu_register_at_prep = true,
    },
    Variant {
        name: "mut-scpu-release-tail-first",
        summary: "a completed SimpleCPU store frees its CPU blocks tail first (as the GPU manager frees a table)",
        upstream: "mutation",
        apply: |r| r.scpu_release_head_first = false,
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

/// One row of the rules table: a switch, what it decides, and its value per profile.
pub struct RuleRow {
    pub name: &'static str,
    pub what: &'static str,
    pub upstream: &'static str,
    pub value: fn(&Rules) -> String,
}

pub const RULE_ROWS: &[RuleRow] = &[
    RuleRow {
        name: "touch_dequeues",
        what: "prefix hit removes a free block from the free queue",
        upstream: "BlockPool.touch",
        value: |r| r.touch_dequeues.to_string(),
    },
    RuleRow {
        name: "cache_scheduled_only",
        what: "blocks are cached only up to the scheduled end",
        upstream: "KVCacheManager.allocate_slots",
        value: |r| r.cache_scheduled_only.to_string(),
    },
    RuleRow {
        name: "delay_cache_async_loads",
        what: "async-load blocks are cached only when the load lands",
        upstream: "allocate_slots(delay_cache_blocks)",
        value: |r| r.delay_cache_async_loads.to_string(),
    },
    RuleRow {
        name: "no_admission_after_preempt",
        what: "no admission in a step that preempted",
        upstream: "Scheduler.schedule",
        value: |r| r.no_admission_after_preempt.to_string(),
    },
    RuleRow {
        name: "reserve_for_async_loads",
        what: "async loads leave room for in-flight prefills",
        upstream: "Scheduler._inflight_prefill_reserved_blocks",
        value: |r| r.reserve_for_async_loads.to_string(),
    },
    RuleRow {
        name: "evict_invalid_on_recompute",
        what: "recompute policy evicts invalid blocks' hashes",
        upstream: "(proposed)",
        value: |r| r.evict_invalid_on_recompute.to_string(),
    },
    RuleRow {
        name: "cursor_reset_on_lookup",
        what: "store cursor reset to 0 at lookup",
        upstream: "#63010",
        value: |r| r.cursor_reset_on_lookup.to_string(),
    },
    RuleRow {
        name: "inflight_lookup_guard",
        what: "lookup waits while transfers are in flight",
        upstream: "#46014",
        value: |r| r.inflight_lookup_guard.to_string(),
    },
    RuleRow {
        name: "pending_lookup_defers",
        what: "a write-pending key defers the lookup (HIT_PENDING)",
        upstream: "LookupResult.HIT_PENDING",
        value: |r| r.pending_lookup_defers.to_string(),
    },
    RuleRow {
        name: "flush_preempted_stores",
        what: "preempted requests' stores are flushed",
        upstream: "#29870",
        value: |r| r.flush_preempted_stores.to_string(),
    },
    RuleRow {
        name: "finish_watermark",
        what: "store watermark of a finished request",
        upstream: "#54288",
        value: |r| match r.finish_watermark {
            FinishWatermark::NumTokens => "num_tokens".into(),
            FinishWatermark::PromptOrTokensMinusOne => "max(prompt, num_tokens-1)".into(),
        },
    },
    RuleRow {
        name: "error_watermark_computed",
        what: "error finish stores only computed tokens",
        upstream: "#63937",
        value: |r| r.error_watermark_computed.to_string(),
    },
    RuleRow {
        name: "cursor_advance_on_store_failure",
        what: "cursor advances when prepare_store fails",
        upstream: "#27697",
        value: |r| r.cursor_advance_on_store_failure.to_string(),
    },
    RuleRow {
        name: "double_complete",
        what: "a job completion is processed twice",
        upstream: "(mutation)",
        value: |r| r.double_complete.to_string(),
    },
    RuleRow {
        name: "full_table_resets_mirror",
        what: "a new-request full table replaces the connector's mirror",
        upstream: "#60810",
        value: |r| r.full_table_resets_mirror.to_string(),
    },
    RuleRow {
        name: "host_lru",
        what: "host-tier eviction order",
        upstream: "#51787, #61050",
        value: |r| match r.host_lru {
            HostLru::ReleaseOrder => "release order + touch".into(),
            HostLru::InsertRank => "insert rank".into(),
            HostLru::RequestRank => "request rank".into(),
        },
    },
    RuleRow {
        name: "cursor_monotonic",
        what: "store cursor only moves forward",
        upstream: "OffloadingConnectorScheduler.advance_stored_idx",
        value: |r| r.cursor_monotonic.to_string(),
    },
    RuleRow {
        name: "visit_finished",
        what: "finished requests get a last store",
        upstream: "_build_store_jobs(finished_req_ids)",
        value: |r| r.visit_finished.to_string(),
    },
    RuleRow {
        name: "sync_loads",
        what: "host hits within the budget load synchronously",
        upstream: "_reserve_sync_load",
        value: |r| r.sync_loads.to_string(),
    },
    RuleRow {
        name: "aux_emit",
        what: "router replay: emit start",
        upstream: "AuxOutputSchedulerConnector",
        value: |r| match r.aux_emit {
            EmitStart::V031 => "max(s, ...)".into(),
            EmitStart::V033 => "max(min(s, prompt), ...)".into(),
        },
    },
    RuleRow {
        name: "aux_retain",
        what: "router replay: rows retained, external hits gated",
        upstream: "max_cache_hit / cap_external_hit",
        value: |r| r.aux_retain.to_string(),
    },
    RuleRow {
        name: "aux_clamp",
        what: "router replay: external loads clamped below start",
        upstream: "prime-rl _routed_experts_load_limit",
        value: |r| match r.aux_clamp {
            None => "none".into(),
            Some(Clamp::Floor) => "block_floor(s)".into(),
            Some(Clamp::Ceil) => "block_ceil(s)".into(),
        },
    },
    RuleRow {
        name: "aux_cut",
        what: "router replay: local hits cut at the first loaded block",
        upstream: "prime-rl _first_loaded_block",
        value: |r| match r.aux_cut {
            None => "none".into(),
            Some(Cut::FromStart) => "from blk(s)".into(),
            Some(Cut::AfterStart) => "from blk(s)+1".into(),
        },
    },
    RuleRow {
        name: "aux_partial_skip",
        what: "router replay: mid-block first capture not buffered",
        upstream: "prime-rl skip_remote_prefill_partial_block",
        value: |r| r.aux_partial_skip.to_string(),
    },
    RuleRow {
        name: "aux_store_evicts_live",
        what: "row store evicts referenced rows",
        upstream: "(variant)",
        value: |r| r.aux_store_evicts_live.to_string(),
    },
    RuleRow {
        name: "evict_mru",
        what: "evict the most recently used key",
        upstream: "(mutation)",
        value: |r| r.evict_mru.to_string(),
    },
    RuleRow {
        name: "scpu_reset_on_preempt",
        what: "SimpleCPU resets a preempted request's mirror and cursor",
        upstream: "preempted_req_ids (0.32)",
        value: |r| r.scpu_reset_on_preempt.to_string(),
    },
    RuleRow {
        name: "scpu_finish_flush",
        what: "SimpleCPU stores confirmed blocks when a request finishes",
        upstream: "_queue_finished_eager_store (0.32)",
        value: |r| r.scpu_finish_flush.to_string(),
    },
    RuleRow {
        name: "scpu_refresh_on_gpu_hit",
        what: "SimpleCPU refreshes a CPU block found already cached",
        upstream: "#62444",
        value: |r| r.scpu_refresh_on_gpu_hit.to_string(),
    },
    RuleRow {
        name: "scpu_hash_at_prep",
        what: "SimpleCPU registers the hash stamped at store prep",
        upstream: "_process_store_completion (0.32)",
        value: |r| r.scpu_hash_at_prep.to_string(),
    },
    RuleRow {
        name: "scpu_lookup_pins",
        what: "SimpleCPU lookup pins its hit blocks",
        upstream: "get_num_new_matched_tokens",
        value: |r| r.scpu_lookup_pins.to_string(),
    },
    RuleRow {
        name: "scpu_drop_stale_pin",
        what: "SimpleCPU lookup drops the request's earlier pin",
        upstream: "get_num_new_matched_tokens",
        value: |r| r.scpu_drop_stale_pin.to_string(),
    },
    RuleRow {
        name: "scpu_load_pins",
        what: "SimpleCPU pins the CPU blocks of a load",
        upstream: "update_state_after_alloc",
        value: |r| r.scpu_load_pins.to_string(),
    },
    RuleRow {
        name: "scpu_store_pins_gpu",
        what: "SimpleCPU stores pin their GPU source blocks",
        upstream: "_prepare_eager_store_specs (touch)",
        value: |r| r.scpu_store_pins_gpu.to_string(),
    },
    RuleRow {
        name: "scpu_register_at_prep",
        what: "SimpleCPU registers a CPU block before its copy lands",
        upstream: "(mutation)",
        value: |r| r.scpu_register_at_prep.to_string(),
    },
    RuleRow {
        name: "scpu_release_head_first",
        what: "SimpleCPU frees a transfer's CPU blocks head first",
        upstream: "_process_store_completion",
        value: |r| r.scpu_release_head_first.to_string(),
    },
];

impl fmt::Display for Rules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for row in RULE_ROWS {
            writeln!(f, "{:32} {}", row.name, (row.value)(self))?;
        }
        Ok(())
    }
}
