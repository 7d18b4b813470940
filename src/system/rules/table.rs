//! The rules table: every switch, what it decides, and how to print its value (docs/rules.md).

use super::{Clamp, Cut, EmitStart, FinishWatermark, HostLru, Rules};

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
        name: "resumed_after_new",
        what: "MRV2 lists resumed requests after the new ones in scheduled_new_reqs",
        upstream: "Scheduler.schedule",
        value: |r| r.resumed_after_new.to_string(),
    },
    RuleRow {
        name: "reserve_for_async_loads",
        what: "async loads leave room for in-flight prefills",
        upstream: "Scheduler._inflight_prefill_reserved_blocks",
        value: |r| r.reserve_for_async_loads.to_string(),
    },
    RuleRow {
        name: "reserve_excludes_self",
        what: "an async load's reservation leaves out the request itself",
        upstream: "(proposed)",
        value: |r| r.reserve_excludes_self.to_string(),
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
        name: "arc_t1_fallback",
        what: "ARC evicts from T1 when T2 has no candidate (else the store is refused)",
        upstream: "ARCCachePolicy.evict (0.32)",
        value: |r| r.arc_t1_fallback.to_string(),
    },
    RuleRow {
        name: "arc_ghost_trim",
        what: "ARC trims B1/B2 to the capacity after an eviction",
        upstream: "ARCCachePolicy.evict",
        value: |r| r.arc_ghost_trim.to_string(),
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
        name: "mc_save_pins",
        what: "Mooncake save jobs reference their GPU blocks until done",
        upstream: "MooncakeStoreScheduler._reference_save_blocks",
        value: |r| r.mc_save_pins.to_string(),
    },
    RuleRow {
        name: "nixl_resave_partial",
        what: "NIXL host buffer re-saves the block straddling a chunk boundary",
        upstream: "#59102",
        value: |r| r.nixl_resave_partial.to_string(),
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
        name: "aux_clamp_in_core",
        what: "router replay: the load limit trims the connector's answer afterwards",
        upstream: "(mutation)",
        value: |r| r.aux_clamp_in_core.to_string(),
    },
    RuleRow {
        name: "aux_cap_trims",
        what: "router replay: cap_external_hit trims instead of refusing",
        upstream: "(mutation)",
        value: |r| r.aux_cap_trims.to_string(),
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
