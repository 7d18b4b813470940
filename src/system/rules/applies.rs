//! Which models read which switch of the rules table, so that a `--variant` that changes only
//! switches a model never reads is refused instead of running the profile unchanged (every
//! driver asks this before it runs a variant).

use super::{resolve, RULE_ROWS};
use crate::system::{ConnectorKind, EngineConfig, EvictionPolicy};

/// The model-file name of `cfg`'s connector.
pub fn connector_name(cfg: &EngineConfig) -> &'static str {
    match cfg.connector_kind() {
        ConnectorKind::None => "none",
        ConnectorKind::Offloading => "offloading",
        ConnectorKind::SimpleCpu => "simple-cpu",
        ConnectorKind::Mooncake => "mooncake",
        ConnectorKind::Nixl => "nixl",
    }
}

/// Which models read a switch of the rules table, by the switch's name (a test keeps every
/// row of `RULE_ROWS` classified). A variant that changes only switches this model never
/// reads runs the profile unchanged: that is refused rather than passed.
/// `load_failure`: the model injects load failures (a checker scope's `[faults]`; replay never).
pub fn switch_read_by(row: &str, cfg: &EngineConfig, load_failure: bool) -> Option<bool> {
    let kind = cfg.connector_kind();
    let off = cfg.offload();
    Some(match row {
        "touch_dequeues"
        | "cache_scheduled_only"
        | "no_admission_after_preempt"
        | "resumed_after_new"
        | "parked_holds_slot"
        | "session_requeue_kv_holding"
        | "session_rehash"
        | "preempt_oldest"
        | "free_stuck_kv_holder" => true,
        // Asynchronous loads: every connector that loads into G1.
        "delay_cache_async_loads" | "reserve_for_async_loads" | "reserve_excludes_self" => {
            matches!(kind, ConnectorKind::Offloading | ConnectorKind::SimpleCpu | ConnectorKind::Mooncake)
        }
        "failed_load_requeue" => {
            load_failure
                && matches!(kind, ConnectorKind::Offloading | ConnectorKind::SimpleCpu | ConnectorKind::Mooncake)
        }
        // The OffloadingConnector's worker reports its failed async loads per request.
        "failed_load_request_level" => load_failure && kind == ConnectorKind::Offloading,
        "evict_invalid_on_recompute" => {
            load_failure && cfg.load_failure_policy == crate::system::LoadFailurePolicy::Recompute
        }
        // Deferred frees exist only with async scheduling and a connector.
        "preempt_checks_deferred_free" => cfg.defer_block_free(),
        "long_prefill_lone_exempt" => cfg.long_prefill_token_threshold > 0,
        // Read where vLLM's has_requests gates a step (every engine step, and conform).
        "scpu_pending_keeps_alive" => kind == ConnectorKind::SimpleCpu,
        "cache_aware_admission" => cfg.cache_aware_admission_window > 0 && cfg.enable_prefix_caching,
        "sync_loads" => off.is_some_and(|o| o.sync_load_budget_tokens > 0),
        "arc_t1_fallback" | "arc_ghost_trim" => off.is_some_and(|o| o.eviction_policy == EvictionPolicy::Arc),
        "double_complete" | "full_table_resets_mirror" => {
            matches!(kind, ConnectorKind::Offloading | ConnectorKind::SimpleCpu)
        }
        // Only a step in flight at a session's stop (async scheduling) has output to drop.
        "session_stop_drops_in_flight" => cfg.async_scheduling,
        // A request stopped while not running, or one with a stale second queue entry, needs
        // an output in flight past a preemption or a stop: async scheduling.
        "stop_requeue_first" | "session_keeps_computed_only" => cfg.async_scheduling,
        // Read where a session's later inputs are built: a checker scope's
        // (`Workload::with_first_max_tokens`) and a log's (`scope_of`).
        "session_max_tokens" => true,
        // Only a session that outgrows max_model_len (a log's scope) meets the cap.
        "running_cap_clamped" => true,
        "mc_save_pins" => kind == ConnectorKind::Mooncake,
        "mc_store_032" => cfg.mooncake().is_some(),
        "aux_row_store" => cfg.router_replay.is_some(),
        "nixl_resave_partial" => kind == ConnectorKind::Nixl,
        "nixl_failed_recving" => kind == ConnectorKind::Nixl && cfg.is_pd_decode(),
        // P/D pairs: a NIXL producer with router replay runs a decode instance and a router.
        "nixl_consumer_full_prompt" | "aux_decode_floor" | "aux_decode_exempt" | "aux_pd_bypass" => {
            kind == ConnectorKind::Nixl && cfg.router_replay.is_some()
        }
        r if r.starts_with("pd_") => kind == ConnectorKind::Nixl && cfg.router_replay.is_some(),
        r if r.starts_with("aux_") => cfg.router_replay.is_some(),
        "scpu_lazy_cursor" | "scpu_lazy_walk_idle" | "scpu_lazy_evict_first" => {
            cfg.simple_cpu().is_some_and(|s| s.lazy)
        }
        r if r.starts_with("scpu_") => kind == ConnectorKind::SimpleCpu,
        "cursor_reset_on_lookup"
        | "inflight_lookup_guard"
        | "pending_lookup_defers"
        | "flush_preempted_stores"
        | "finish_watermark"
        | "error_watermark_computed"
        | "cursor_advance_on_store_failure"
        | "host_lru"
        | "cursor_monotonic"
        | "visit_finished"
        | "evict_mru"
        | "final_store_waits" => off.is_some(),
        _ => return None,
    })
}

/// Does `variant` change anything a model named `name` with engine `cfg` (`load_failure`: it injects
/// load failures) reads under `profile`? `Err` says why not. For checker scopes and replay models alike.
pub fn variant_applies_to(
    name: &str,
    cfg: &EngineConfig,
    load_failure: bool,
    profile: &str,
    variant: &str,
) -> std::result::Result<(), String> {
    let base = resolve(profile, None)?;
    let with = resolve(profile, Some(variant))?;
    if base == with {
        return Err(format!(
            "variant '{variant}' changes nothing under profile {profile} (it already has those rules)"
        ));
    }
    let changed: Vec<&str> =
        RULE_ROWS.iter().filter(|r| (r.value)(&base) != (r.value)(&with)).map(|r| r.name).collect();
    // A switch missing from the table cannot be classified: assume it is read.
    if changed.is_empty() || changed.iter().any(|r| switch_read_by(r, cfg, load_failure) != Some(false)) {
        return Ok(());
    }
    Err(format!(
        "variant '{variant}' changes only {}, which model '{name}' (connector = \"{}\"{}) never reads: it would run profile {profile} unchanged",
        changed.join(", "),
        connector_name(cfg),
        if cfg.router_replay.is_some() { ", [router_replay]" } else { "" }
    ))
}
