//! Rule sets as data: every vLLM release (profile) and every known bug (variant) is a row of
//! switches read by the step functions. Nothing is forked per version.
//!
//! A *profile* is a released rule set (`vllm-0.33`, `vllm-main`). A *variant* flips one or
//! more switches on top of the model's profile: `pre-NNNNN` restores the behaviour before an
//! upstream fix, `mut-*` is a mutation no upstream code had (a negative control).

use std::fmt;

mod applies;
mod table;
mod variants;
pub use applies::{connector_name, switch_read_by, variant_applies_to};
pub use table::{RuleRow, RuleValue, Rules, RULE_ROWS};

/// P/D, prime-rl's decode emit floor (`_emit_floors`).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum DecodeFloor {
    /// No floor: a decode-side request emits from `routed_experts_prompt_start`.
    None,
    /// `setdefault(num_computed_tokens)` at the first schedule, popped only at finish.
    Persist,
    /// Popped on every `request_finished`, preemption included (set again at the resume).
    ResetOnPreempt,
}

/// P/D: the router's merge of P's and D's routed-expert rows.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum RouterMerge {
    /// v0.2.2: drop the first `P.len` decode rows by count.
    ByCount,
    /// v0.2.3: `overlap = P.start + P.len - D.start`, `0 <= overlap <= D.len`.
    ByStart,
    /// Payload segments: decode rows below the prefill's last position are dropped.
    Segments,
}
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
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
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

/// A released rule set.
pub struct Profile {
    pub name: &'static str,
    pub summary: &'static str,
    pub rules: fn() -> Rules,
}

/// A named switch set applied on top of a profile.
pub struct Variant {
    pub(crate) name: &'static str,
    pub(crate) summary: &'static str,
    /// The upstream change that fixed it, or "mutation".
    pub(crate) upstream: &'static str,
    pub(crate) apply: fn(&mut Rules),
}

fn vllm_033() -> Rules {
    Rules {
        touch_dequeues: true,
        cache_scheduled_only: true,
        delay_cache_async_loads: true,
        no_admission_after_preempt: true,
        preempt_checks_deferred_free: true,
        resumed_after_new: true,
        cache_aware_admission: false,
        parked_holds_slot: true,
        long_prefill_lone_exempt: true,
        session_requeue_kv_holding: true,
        scpu_pending_keeps_alive: true,
        session_rehash: true,
        session_max_tokens: true,
        running_cap_clamped: true,
        session_stop_drops_in_flight: true,
        stop_requeue_first: false,
        session_keeps_computed_only: false,
        evict_invalid_on_recompute: false,
        reserve_for_async_loads: true,
        reserve_excludes_self: false,
        free_stuck_kv_holder: false,
        failed_load_requeue: false,
        failed_load_request_level: false,
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
        preempt_oldest: false,
        cursor_monotonic: true,
        visit_finished: true,
        final_store_waits: false,
        sync_loads: true,
        scpu_reset_on_preempt: true,
        scpu_finish_flush: true,
        scpu_refresh_on_gpu_hit: false,
        scpu_refresh_local_hit: false,
        scpu_hash_at_prep: false,
        scpu_lookup_pins: true,
        scpu_scan_when_full: false,
        scpu_lazy_cursor: true,
        scpu_lazy_walk_idle: true,
        scpu_lazy_evict_first: false,
        scpu_drop_stale_pin: true,
        scpu_load_pins: true,
        scpu_store_pins_gpu: true,
        scpu_register_at_prep: false,
        scpu_release_head_first: true,
        scpu_cpu_kv_events: true,
        mc_save_pins: true,
        mc_store_032: true,
        aux_row_store: true,
        nixl_resave_partial: false,
        nixl_failed_recving: true,
        aux_emit: EmitStart::V033,
        aux_retain: true,
        aux_clamp: None,
        aux_clamp_exempts_resumed: false,
        aux_cut: None,
        aux_partial_skip: false,
        aux_store_grows: true,
        aux_store_evicts_live: false,
        aux_emit_last_token: false,
        nixl_consumer_full_prompt: true,
        aux_pd_bypass: false,
        aux_decode_floor: DecodeFloor::None,
        aux_decode_exempt: false,
        pd_start_end_anchored: false,
        pd_router_merge: RouterMerge::ByCount,
        aux_clamp_in_core: false,
        aux_cap_trims: false,
    }
}

/// 0.34.0: 0.33 plus #63937 (the finish-time store stops at `num_computed_tokens`,
/// `_build_store_jobs`) and #62444 fixed its own way (SimpleCPU refreshes the CPU copies of a
/// GPU prefix hit in `update_state_after_alloc`, not in the eager scan); `Scheduler.schedule`
/// lists a resumed request among the new ones in admission order (no `scheduled_resumed_reqs`).
/// New in 0.34: `cache_aware_admission_window` (`_reorder_waiting_by_cached_prefix`); a failed
/// async OffloadingConnector load is reported per request (`failed_recving`,
/// `_handle_failed_recving`) and the request never loads from the host tier again.
fn vllm_034() -> Rules {
    Rules {
        resumed_after_new: false,
        error_watermark_computed: true,
        scpu_refresh_local_hit: true,
        cache_aware_admission: true,
        failed_load_request_level: true,
        scpu_lazy_cursor: false,
        scpu_lazy_evict_first: true,
        ..vllm_033()
    }
}

/// vLLM main: 0.34.0's rules (no change merged after 0.34.0 is modelled yet). It used to be 0.33
/// plus #63937 and an eager-scan refresh for #62444; 0.34.0 shipped #63937, fixed #62444 at
/// admission instead (`scpu_refresh_local_hit`) and lists resumed requests in admission order.
fn vllm_main() -> Rules {
    vllm_034()
}

/// 0.32.0: no cursor reset at restart (#63010), `yield_req_data` without the full-table
/// flag (#60810), the insert-rank LRU, no sync loads; router replay's 0.31 emit start, no
/// retention, and a row store that fails rather than grow when every object is referenced.
fn vllm_032() -> Rules {
    Rules {
        cursor_reset_on_lookup: false,
        full_table_resets_mirror: false,
        host_lru: HostLru::InsertRank,
        sync_loads: false,
        aux_emit: EmitStart::V031,
        aux_retain: false,
        aux_store_grows: false,
        stop_requeue_first: true,
        session_keeps_computed_only: true,
        ..vllm_033()
    }
}

/// prime-rl's patched engine (router replay with KV offload): vLLM ≈0.31's AuxOutput rows
/// (no retention, the 0.31 emit start; a store that grows, as the domain notes say) plus the load clamp at `block_floor(s)`, the
/// loaded-block cut and the partial-block skip; the engine rules of the closest release kvmc
/// models (0.32).
fn prime_rl() -> Rules {
    Rules {
        aux_clamp: Some(Clamp::Floor),
        aux_cut: Some(Cut::FromStart),
        aux_partial_skip: true,
        aux_pd_bypass: true,
        aux_decode_floor: DecodeFloor::Persist,
        aux_decode_exempt: true,
        pd_start_end_anchored: true,
        pd_router_merge: RouterMerge::ByStart,
        // The domain notes' store (objects referenced by live requests are never evicted, the
        // store grows), as the scopes that test prime-rl's fix assume. vLLM 0.31.0 and 0.32.0
        // as published fail instead (`aux_store_grows` false); the vLLM build prime-rl's fix
        // ran on could not be read (docs/findings.md, 32).
        aux_store_grows: true,
        ..vllm_032()
    }
}

/// 0.24.0's connector and host tier on the 0.32/0.33 core scheduler: release-order LRU with
/// the connector's touches, a cursor that follows the watermark (not monotonic), no visit of
/// finished requests (no finish-time store).
/// SimpleCPU 0.24: no finish-time store, the hash stamped at store prep, an eager scan that
/// moves its cursor even with the CPU pool full, no reset on
/// `preempted_req_ids` (only on MRV1's resumed flag), the CPU pool's KV events only its
/// evictions, published as medium GPU. Its `Scheduler.schedule` stops admitting
/// at `len(self.running) == max_num_running_reqs`: a parked streaming session holds no slot.
/// Its `_update_request_as_session` neither truncates the session's block hashes nor takes the
/// next input's `max_tokens`, and its `_handle_stopped_request` leaves a session's in-flight
/// output counted and deliverable. Its `Scheduler.schedule` preempts without asking
/// `_request_blocks_can_be_freed`: under async scheduling a victim whose free is deferred is
/// preempted all the same, and the next one after it. It caps every chunk at
/// `long_prefill_token_threshold`, even a lone request's. Its SimpleCPU has no
/// `has_pending_push_work`: stores in flight do not keep an idle engine stepping. A session
/// that takes its queued input when a turn stops waits at the tail of `waiting`. Its NIXL
/// worker reports a failed read's blocks as invalid, not the request as failed.
fn vllm_024() -> Rules {
    Rules {
        parked_holds_slot: false,
        long_prefill_lone_exempt: false,
        session_requeue_kv_holding: false,
        scpu_pending_keeps_alive: false,
        preempt_checks_deferred_free: false,
        session_rehash: false,
        session_max_tokens: false,
        running_cap_clamped: false,
        session_stop_drops_in_flight: false,
        host_lru: HostLru::ReleaseOrder,
        arc_t1_fallback: false,
        cursor_monotonic: false,
        visit_finished: false,
        scpu_finish_flush: false,
        scpu_hash_at_prep: true,
        scpu_reset_on_preempt: false,
        scpu_cpu_kv_events: false,
        scpu_scan_when_full: true,
        nixl_failed_recving: false,
        mc_store_032: false,
        aux_row_store: false,
        ..vllm_032()
    }
}

pub const PROFILES: &[Profile] = &[
    Profile {
        name: "vllm-0.24",
        summary: "0.24.0's OffloadingConnector and CPU manager (release-order LRU with touches, no finish-time store, no cursor reset, #60810) and SimpleCPU (no finish-time store, hash stamped at prep, no reset on preemption) on the 0.32+ core scheduler without its parked-slot and session rules or its deferred-free check before a preemption",
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
        name: "vllm-0.34",
        summary: "vLLM 0.34.0 as released: #63937 and #62444 fixed, resumed requests listed in admission order, cache-aware admission window, a failed async load handled per request (recomputed or failed, never reloaded from the CPU tier); #59102 (NIXL host buffer) and the async-load self-reservation hang still present",
        rules: vllm_034,
    },
    Profile {
        name: "vllm-main",
        summary: "vLLM main, rebased on 0.34.0 (no later change modelled): #63937 and #62444 fixed, resumed requests in admission order, cache-aware admission window, request-level failed async loads; #59102 (NIXL host buffer) is still open",
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
            "unknown profile '{profile_name}'{}; known: {}",
            crate::suggest::did_you_mean(profile_name, PROFILES.iter().map(|p| p.name)),
            PROFILES.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
        )
    })?;
    let mut rules = (p.rules)();
    if let Some(v) = variant_name {
        let v = variant(v).ok_or_else(|| {
            // Not all names: `kvmc list` shows them with what each changes.
            format!(
                "unknown variant '{v}'{}; `kvmc list` shows the {} variants",
                crate::suggest::did_you_mean(v, VARIANTS.iter().map(|v| v.name)),
                VARIANTS.len()
            )
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

crate::system::collections::pack::pack_unit_enum!(HostLru { ReleaseOrder, InsertRank, RequestRank });
