//! Every named variant: one upstream fix undone (`pre-NNNNN`, `no-*`), one fix applied early
//! (`fix-*`), or a mutation no upstream code had (`mut-*`, a negative control).

use super::{Clamp, Cut, DecodeFloor, FinishWatermark, RouterMerge, Variant};

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
        summary: "an error finish stores only computed tokens (what vllm-0.34 and vllm-main do)",
        upstream: "vllm #63937",
                apply: |r| r.error_watermark_computed = true,
    },
    Variant {
        name: "fix-59102",
        summary: "NIXL host-buffer mode re-saves the block straddling a chunked-prefill boundary (#59102, open upstream)",
        upstream: "vllm #59102",
        apply: |r| r.nixl_resave_partial = true,
    },
    Variant {
        name: "fix-final-store",
        summary: "not in vLLM: a finished request keeps its blocks until its last store is accepted and copied; a store refused for lack of room is offered again at every later step while a transfer in flight can still make room",
        upstream: "none (proposed fix for final-store-kept)",
        apply: |r| r.final_store_waits = true,
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
        name: "mut-preempt-oldest",
        summary: "preemption takes the oldest running request instead of the newest (FCFS inverted)",
        upstream: "mutation",
        apply: |r| r.preempt_oldest = true,
    },
    Variant {
        name: "mut-no-load-reservation",
        summary: "an async load may take the blocks an in-flight prefill still needs",
        upstream: "mutation",
        apply: |r| r.reserve_for_async_loads = false,
    },
    Variant {
        name: "fix-self-reservation",
        summary: "an async load's reservation leaves out the request being admitted (a request whose async load failed from its first block no longer reserves its own blocks)",
        upstream: "(proposed)",
        apply: |r| r.reserve_excludes_self = true,
    },
    Variant {
        name: "fix-session-hold",
        summary: "when nothing runs and the head of kv_holding_waiting cannot allocate, its blocks are freed as in a preemption (finding 33: sessions holding G1 between inputs deadlock)",
        upstream: "(proposed)",
        apply: |r| r.free_stuck_kv_holder = true,
    },
    Variant {
        name: "fix-load-retry",
        summary: "a request whose async load failed from its first block leaves _inflight_prefills and the KV-holding queue when promoted (the requests behind it are promoted first)",
        upstream: "(proposed)",
        apply: |r| r.failed_load_requeue = true,
    },
    Variant {
        name: "mut-mc-no-save-pin",
        summary: "Mooncake save jobs do not reference their GPU blocks (a finished or preempted request's blocks are reused before the put reads them)",
        upstream: "mutation",
        apply: |r| r.mc_save_pins = false,
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
        name: "mut-clamp-after-lookup",
        summary: "prime-rl's load limit trims the connector's answer in the scheduler (as for the OffloadingConnector) instead of rewriting Mooncake's LoadSpec",
        upstream: "mutation",
        apply: |r| r.aux_clamp_in_core = true,
    },
    Variant {
        name: "mut-cap-trims",
        summary: "0.33's cap_external_hit trims an external hit to the retained prefix instead of refusing it",
        upstream: "mutation",
        apply: |r| r.aux_cap_trims = true,
    },
    Variant {
        name: "mut-evict-mru",
        summary: "prepare_store evicts the most recently used evictable keys instead of the least",
        upstream: "mutation",
        apply: |r| r.evict_mru = true,
    },
        Variant {
        name: "no-arc-t1-fallback",
        summary: "ARC's evict without the final T1 fallback (0.24's): when int(target) exceeds |T1| and T2 has no candidate, the store is refused",
        upstream: "ARCCachePolicy.evict (0.32 added the fallback)",
        apply: |r| r.arc_t1_fallback = false,
    },
    Variant {
        name: "fix-scpu-lazy-idle",
        summary: "SimpleCPU's lazy walk runs only in a step that schedules a request, so stores in flight drain and an engine with no request left goes idle (finding 26)",
        upstream: "kvmc finding 26 (no upstream fix)",
        apply: |r| r.scpu_lazy_walk_idle = false,
    },
    Variant {
        name: "fix-arc-t1-fallback",
        summary: "ARC's evict with 0.32's final T1 fallback (on vllm-0.24)",
        upstream: "ARCCachePolicy.evict (0.32)",
        apply: |r| r.arc_t1_fallback = true,
    },
    Variant {
        name: "preempt-checks-deferred-free",
        summary: "0.32's preemption on vllm-0.24: under async scheduling with a connector, preemption stops at a victim whose blocks can only be freed after the step in flight",
        upstream: "vLLM 0.32 (Scheduler.schedule, _request_blocks_can_be_freed)",
        apply: |r| r.preempt_checks_deferred_free = true,
    },
    Variant {
        name: "mut-arc-no-ghost-trim",
        summary: "ARC never trims its ghost lists B1/B2 to the capacity",
        upstream: "mutation",
        apply: |r| r.arc_ghost_trim = false,
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
        summary: "SimpleCPU moves a CPU block found already cached by the eager scan to the MRU end (the fix proposed in #62444; 0.34 refreshes at admission instead)",
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
    Variant {
        name: "no-decode-floor",
        summary: "P/D: the decode instance emits from routed_experts_prompt_start, not from its first forward (no _emit_floors)",
        upstream: "prime-rl router replay x P/D",
        apply: |r| r.aux_decode_floor = DecodeFloor::None,
    },
    Variant {
        name: "floor-no-skip",
        summary: "P/D: the decode floor without skip_remote_prefill_partial_block (the first capture starts mid-block)",
        upstream: "prime-rl router replay x P/D",
        apply: |r| r.aux_partial_skip = false,
    },
    Variant {
        name: "floor-reset-on-preempt",
        summary: "P/D: the decode floor is popped on preemption too and set again at the resume",
        upstream: "mutation (prime-rl pops it only when the request is finished)",
        apply: |r| {
            if r.aux_decode_floor != DecodeFloor::None {
                r.aux_decode_floor = DecodeFloor::ResetOnPreempt
            }
        },
    },
    Variant {
        name: "decode-not-exempt",
        summary: "P/D: the load clamp and the loaded-block cut also apply to decode-side requests",
        upstream: "mutation",
        apply: |r| r.aux_decode_exempt = false,
    },
    Variant {
        name: "start-from-params",
        summary: "P/D: /generate answers start = routed_experts_prompt_start (prime-rl HEAD) instead of the end-anchored start",
        upstream: "prime-rl HEAD 559b4477 serving_tokens",
        apply: |r| r.pd_start_end_anchored = false,
    },
    Variant {
        name: "router-v0.2.2",
        summary: "P/D: the router drops P.len decode rows by count (router v0.2.2)",
        upstream: "PrimeIntellect-ai/router v0.2.2",
        apply: |r| r.pd_router_merge = RouterMerge::ByCount,
    },
    Variant {
        name: "router-segments",
        summary: "P/D: the router merges payload segments by position (the newest router)",
        upstream: "PrimeIntellect-ai/router routed_experts_merge.rs (payload segments)",
        apply: |r| r.pd_router_merge = RouterMerge::Segments,
    },
    Variant {
        name: "nixl-hit-prompt-minus-one",
        summary: "P/D: the decoder's NIXL hit is the prompt less one token (the older rule) instead of the whole prompt",
        upstream: "NixlConnectorScheduler.get_num_new_matched_tokens (before the whole-prompt count)",
        apply: |r| r.nixl_consumer_full_prompt = false,
    },
];
