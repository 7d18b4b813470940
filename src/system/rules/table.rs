//! The rules table: every switch, what it decides, the vLLM code or change behind it, and how
//! its value prints (docs/rules.md, `kvmc list --rules`, `Display for Rules`).
//!
//! One definition: [`rules_table!`] declares each switch once, with its doc, its type and its
//! row, and expands to both the [`Rules`] struct and [`RULE_ROWS`], so a switch without a row
//! (or a row without a switch) cannot compile. Add a switch here, then give it a value in
//! every profile (`super::vllm_033` and the profiles built on it).

use super::{Clamp, Cut, DecodeFloor, EmitStart, FinishWatermark, HostLru, RouterMerge};

/// One row of the rules table: a switch, what it decides, and its value per profile.
pub struct RuleRow {
    pub name: &'static str,
    pub what: &'static str,
    pub upstream: &'static str,
    pub value: fn(&Rules) -> String,
}

/// How a switch's value reads in the rules table.
pub trait RuleValue {
    fn show(&self) -> String;
}

impl RuleValue for bool {
    fn show(&self) -> String {
        self.to_string()
    }
}

impl RuleValue for FinishWatermark {
    fn show(&self) -> String {
        match self {
            FinishWatermark::NumTokens => "num_tokens".into(),
            FinishWatermark::PromptOrTokensMinusOne => "max(prompt, num_tokens-1)".into(),
        }
    }
}

impl RuleValue for HostLru {
    fn show(&self) -> String {
        match self {
            HostLru::ReleaseOrder => "release order + touch".into(),
            HostLru::InsertRank => "insert rank".into(),
            HostLru::RequestRank => "request rank".into(),
        }
    }
}

impl RuleValue for EmitStart {
    fn show(&self) -> String {
        match self {
            EmitStart::V031 => "max(s, ...)".into(),
            EmitStart::V033 => "max(min(s, prompt), ...)".into(),
        }
    }
}

impl RuleValue for Option<Clamp> {
    fn show(&self) -> String {
        match self {
            None => "none".into(),
            Some(Clamp::Floor) => "block_floor(s)".into(),
            Some(Clamp::Ceil) => "block_ceil(s)".into(),
        }
    }
}

impl RuleValue for Option<Cut> {
    fn show(&self) -> String {
        match self {
            None => "none".into(),
            Some(Cut::FromStart) => "from blk(s)".into(),
            Some(Cut::AfterStart) => "from blk(s)+1".into(),
        }
    }
}

impl RuleValue for DecodeFloor {
    fn show(&self) -> String {
        match self {
            DecodeFloor::None => "none".into(),
            DecodeFloor::Persist => "kept until finish".into(),
            DecodeFloor::ResetOnPreempt => "reset on preemption".into(),
        }
    }
}

impl RuleValue for RouterMerge {
    fn show(&self) -> String {
        match self {
            RouterMerge::ByCount => "v0.2.2: drop P.len rows by count".into(),
            RouterMerge::ByStart => "v0.2.3: overlap from D's start".into(),
            RouterMerge::Segments => "payload segments by position".into(),
        }
    }
}

/// `doc; name: type => "what it decides", "vLLM code or change";` for every switch, in the
/// table's order: defines [`Rules`] (one field per switch) and [`RULE_ROWS`] (one row each).
macro_rules! rules_table {
    ($($(#[doc = $doc:literal])* $name:ident: $ty:ty => $what:literal, $upstream:literal;)*) => {
        /// Every switch on which profiles and variants differ (the rows of [`RULE_ROWS`]).
        #[derive(Clone, PartialEq, Eq, Hash, Debug)]
        pub struct Rules {
            $($(#[doc = $doc])* pub $name: $ty,)*
        }

        pub const RULE_ROWS: &[RuleRow] = &[
            $(RuleRow {
                name: stringify!($name),
                what: $what,
                upstream: $upstream,
                value: |r| RuleValue::show(&r.$name),
            },)*
        ];
    };
}

rules_table! {
    /// `BlockPool.touch` removes a ref-0 hit block from the free queue.
    touch_dequeues: bool => "prefix hit removes a free block from the free queue", "BlockPool.touch";
    /// `allocate_slots` caches only up to the scheduled end (`min(total + new, num_tokens)`),
    /// not every full block whose hash is known.
    cache_scheduled_only: bool => "blocks are cached only up to the scheduled end", "KVCacheManager.allocate_slots";
    /// `allocate_slots(delay_cache_blocks=True)` for async loads.
    delay_cache_async_loads: bool
        => "async-load blocks are cached only when the load lands", "allocate_slots(delay_cache_blocks)";
    /// No admission from `waiting` in a step that preempted (Scheduler.schedule).
    no_admission_after_preempt: bool => "no admission in a step that preempted", "Scheduler.schedule";
    /// With deferred block frees (async scheduling with a connector), preemption stops at a
    /// victim whose blocks cannot be freed yet (`_request_blocks_can_be_freed`, 0.32+): its
    /// free would only be deferred, so it would not help the allocation. false (0.24): the
    /// victim is preempted anyway (its blocks join `deferred_frees`), and the next victim is
    /// tried, down to the request being scheduled.
    preempt_checks_deferred_free: bool
        => "preemption stops at a victim whose blocks can only be freed later", "Scheduler.schedule (_request_blocks_can_be_freed)";
    /// Model Runner V2: `SchedulerOutput.scheduled_new_reqs` lists the requests resumed after a
    /// preemption after the brand-new ones (`scheduled_new_reqs.extend(scheduled_resumed_reqs)`
    /// in `Scheduler.schedule`, 0.24 to 0.33); false: one list in admission order (0.34).
    /// Connectors read the same order (`yield_req_data`).
    resumed_after_new: bool
        => "MRV2 lists resumed requests after the new ones in scheduled_new_reqs", "Scheduler.schedule";
    /// A streaming session parked for its next input (`WAITING_FOR_STREAMING_REQ`) holds a
    /// model-runner slot: admission stops at `len(running) + num_waiting_for_streaming_input`
    /// >= `max_num_seqs` (`Scheduler.schedule`, 0.32+); false: only `len(running)` counts (0.24).
    parked_holds_slot: bool
        => "a parked streaming session counts against max_num_seqs", "Scheduler.schedule (num_waiting_for_streaming_input)";
    /// SimpleCPU's in-flight stores keep the engine stepping with no request left
    /// (`SimpleCPUOffloadConnector.has_pending_push_work`, 0.32+); false (0.24): the connector
    /// has no such hook, so an engine with only stores in flight idles until the next input
    /// (finding 27: with none, those stores are never processed).
    scpu_pending_keeps_alive: bool
        => "SimpleCPU's in-flight stores keep the engine stepping", "SimpleCPUOffloadConnector.has_pending_push_work";
    /// A streaming session that continues after a stopped turn is enqueued by whether it holds
    /// blocks: `kv_holding_waiting`, drained first (`_enqueue_waiting_request`, 0.32+), and so
    /// is a request a `schedule()` pass skips. false (0.24): a parked session goes to
    /// `skipped_waiting` (also served first), one that took its queued input to the tail of
    /// `waiting`; every request a pass skips is prepended to `skipped_waiting`
    /// (`step_skipped_waiting`), whether it holds blocks or not (finding 31).
    session_requeue_kv_holding: bool
        => "a continuing streaming session (and a skipped request that holds blocks) waits in kv_holding_waiting", "_enqueue_waiting_request; Scheduler.schedule (step_skipped_waiting)";
    /// `long_prefill_token_threshold` caps a request's chunk only when more than one request is
    /// eligible (running or waiting): a lone request has nobody to starve (`Scheduler.schedule`,
    /// 0.32+); false (0.24): the cap always applies.
    long_prefill_lone_exempt: bool
        => "a lone request is not held to long_prefill_token_threshold", "Scheduler.schedule (num_eligible_reqs)";
    /// A streaming session taking its next input drops its block hashes from
    /// `num_computed_tokens // block_size` on and recomputes them over the new tokens (0.32+);
    /// false (0.24): the hashes stay, so the block holding the dropped sampled token keeps a key
    /// naming that token, and later keys chain from it.
    session_rehash: bool
        => "a streaming session's next input rehashes the block of its dropped token", "Scheduler._update_request_as_session (del session.block_hashes[num_computed_tokens // block_size:])";
    /// A streaming session's next input brings its own `max_tokens` (0.32+); false (0.24): the
    /// session keeps its first input's `max_tokens` for every input.
    session_max_tokens: bool
        => "a streaming session's next input sets its max_tokens", "Scheduler._update_request_as_session (session.max_tokens = update.max_tokens)";
    /// A streaming session whose turn stops drops its in-flight work (0.32+: the output
    /// placeholders leave `num_computed_tokens`, the in-flight output is stale and dropped);
    /// false (0.24): neither. Under async scheduling the in-flight position then stays computed
    /// (the next input keeps every sampled token), the in-flight output is appended to the
    /// session when it arrives (the parked turn's, cut off again by the next input, or the next
    /// input's first output token), and a stopped waiting request leaves `waiting` only, not
    /// the queue of blocked requests (`skipped_waiting`) that holds a parked session.
    session_stop_drops_in_flight: bool
        => "a stopped streaming session drops its in-flight output", "Scheduler._handle_stopped_request (drop_stale_output)";
    /// 0.24 and 0.32's `_update_request_as_session` keeps `_all_token_ids[:num_computed_tokens]`
    /// (and the prompt whole): a session whose `num_computed_tokens` is below every token but
    /// its last sampled one (preempted while its last output was in flight) loses its history
    /// (finding 34; flagged, session-history): its next input holds the new tokens alone while
    /// `num_prompt_tokens` counts the old prompt too (layout `Lost`). 0.33 keeps
    /// `num_tokens - 1`: false.
    session_keeps_computed_only: bool
        => "a session's next input keeps only its computed tokens", "Scheduler._update_request_as_session (keep_end = num_tokens - 1, 0.33)";
    /// 0.24 and 0.32's `update_from_output`: `_handle_stopped_request` enqueues a continuing
    /// session inside the output loop, and only then do stopped requests leave their queues by
    /// their status before the stop: a request stopped while RUNNING leaves `running` (a stale
    /// second entry in a waiting queue stays, finding 28's), one stopped while not running
    /// (a preempted session whose in-flight output ended its input) leaves the waiting queues
    /// with its fresh entry, so it is in no queue and never scheduled again. 0.33 removes
    /// first and then enqueues the continuing ones (`continuing_reqs`): false.
    stop_requeue_first: bool
        => "stopped requests leave their queues after a continuing session was enqueued", "Scheduler.update_from_output (continuing_reqs, 0.33)";
    /// `SchedulerConfig.cache_aware_admission_window` exists (0.34+): with the window on, prefix
    /// caching on and the KV cache at least `cache_aware_admission_threshold` used, the plain
    /// waiting requests (status WAITING, nothing computed) among the first N of `waiting` are
    /// reordered deepest G1 prefix hit first, arrival order breaking ties
    /// (`Scheduler._reorder_waiting_by_cached_prefix`); false: the knob does not exist.
    cache_aware_admission: bool
        => "the waiting window is reordered toward cached prefixes (cache_aware_admission_window)", "Scheduler._reorder_waiting_by_cached_prefix (0.34)";
    /// An async load is admitted only if it leaves the blocks in-flight prefills still need
    /// (`reserved_blocks = _inflight_prefill_reserved_blocks()`).
    reserve_for_async_loads: bool
        => "async loads leave room for in-flight prefills", "Scheduler._inflight_prefill_reserved_blocks";
    /// Not in vLLM (finding 33): when nothing runs and the head of the KV-holding queue cannot
    /// allocate, the scheduler frees that request's blocks as a preemption would (its KV is
    /// recomputed) and goes on with the queue, so sessions that hold G1 between their inputs
    /// cannot deadlock.
    free_stuck_kv_holder: bool => "a KV-holding waiting request that cannot allocate while nothing runs is preempted", "(proposed)";
    /// The reservation leaves out the request being admitted (not in vLLM: a request whose
    /// async load failed from its first block stays in `_inflight_prefills` and reserves its
    /// own remaining blocks when it is admitted again).
    reserve_excludes_self: bool => "an async load's reservation leaves out the request itself", "(proposed)";
    /// Not in vLLM: a request whose async load failed from its first block (back to 0 computed
    /// tokens, no blocks) leaves `_inflight_prefills` and the KV-holding queue when it is
    /// promoted, so the requests behind it in `kv_holding_waiting` are promoted first (findings
    /// 20 and 23d: otherwise it can stay at the queue's head forever).
    failed_load_requeue: bool
        => "a request reset by a failed load leaves _inflight_prefills and kv_holding_waiting", "(proposed)";
    /// OffloadingConnector, a failed async load is request-level (0.34+): the worker marks the
    /// job in `failed_jobs` and reports its request in `finished_recving` and `failed_recving`,
    /// no block ids (`OffloadingConnectorWorker.get_finished`, `take_failed_recving`). The core
    /// (`Scheduler._handle_failed_recving`) takes it only while `WAITING_FOR_REMOTE_KVS`:
    /// `recompute` rewinds it to 0 computed tokens (the promotion frees its blocks), `fail`
    /// finishes it with an error; the connector marks the request `load_failed` and every later
    /// lookup of it returns 0 (`update_connector_output`, `get_num_new_matched_tokens`).
    /// false: the load is reported complete with its unwritten blocks in `invalid_block_ids`
    /// (`_handle_invalid_blocks` keeps the valid prefix). Failed sync loads are not covered.
    failed_load_request_level: bool
        => "a failed async load is reported per request (failed_recving), and the request never loads again", "OffloadingConnectorWorker.get_finished, Scheduler._handle_failed_recving (0.34)";
    /// Not in vLLM: under `recompute`, also evict the invalid blocks' hashes (a fix for GP S10).
    evict_invalid_on_recompute: bool => "recompute policy evicts invalid blocks' hashes", "(proposed)";
    /// `get_num_new_matched_tokens` resets the store cursor to 0 (#63010).
    cursor_reset_on_lookup: bool => "store cursor reset to 0 at lookup", "#63010";
    /// `get_num_new_matched_tokens` returns None while the request has transfers in flight (#46014).
    inflight_lookup_guard: bool => "lookup waits while transfers are in flight", "#46014";
    /// A write-pending key (HIT_PENDING) counts and defers the lookup (None); when false the
    /// scan stops at it like a miss, keeping the hits before it.
    pending_lookup_defers: bool => "a write-pending key defers the lookup (HIT_PENDING)", "LookupResult.HIT_PENDING";
    /// `build_connector_meta` flushes the stores of preempted requests (#29870).
    flush_preempted_stores: bool => "preempted requests' stores are flushed", "#29870";
    /// Store watermark for finished requests other than aborted ones.
    finish_watermark: FinishWatermark => "store watermark of a finished request", "#54288";
    /// FINISHED_ERROR's watermark is clamped to `num_computed_tokens` (#63937; 0.34 clamps every
    /// non-abort finish to min(num_computed_tokens, max(num_prompt_tokens, num_tokens - 1))).
    error_watermark_computed: bool => "error finish stores only computed tokens", "#63937";
    /// Advance the store cursor when `prepare_store` returns None (#27697's bug).
    cursor_advance_on_store_failure: bool => "cursor advances when prepare_store fails", "#27697";
    /// Process a completed job twice (a worker reporting it twice is not ignored).
    double_complete: bool => "a job completion is processed twice", "(mutation)";
    /// A full block table delivered as new-request data replaces the connector's mirror
    /// (`yield_req_data`'s `is_full_table`, #60810). Before 0.33 the flag meant "preempted"
    /// and was false for new-request entries, so a resumed streaming session's full table was
    /// appended to the mirror.
    full_table_resets_mirror: bool => "a new-request full table replaces the connector's mirror", "#60810";
    /// The host tier's eviction order.
    host_lru: HostLru => "host-tier eviction order", "#51787, #61050";
    /// ARC's `evict` falls back to T1 when T2 has no candidate (0.32+; 0.24 returns None).
    arc_t1_fallback: bool
        => "ARC evicts from T1 when T2 has no candidate (else the store is refused)", "ARCCachePolicy.evict (0.32)";
    /// ARC trims its ghost lists to the capacity after an eviction (false: a mutation).
    arc_ghost_trim: bool => "ARC trims B1/B2 to the capacity after an eviction", "ARCCachePolicy.evict";
    /// The store cursor only moves forward (`max`, 0.32+); 0.24 assigns the watermark's chunk.
    cursor_monotonic: bool => "store cursor only moves forward", "OffloadingConnectorScheduler.advance_stored_idx";
    /// `_build_store_jobs` also visits requests finished since the last step (0.32+).
    visit_finished: bool => "finished requests get a last store", "_build_store_jobs(finished_req_ids)";
    /// Not in vLLM: a finished request whose last store has chunks to offer keeps its GPU
    /// blocks (`delay_free_blocks`) until that store is accepted and copied; a refusal for lack
    /// of room is offered again at every later step while a transfer in flight can still make
    /// room (a fix for the lost final store, final-store-kept).
    final_store_waits: bool
        => "a refused last store keeps the finished request's blocks and is offered again", "(proposed)";
    /// Host hits within the budget load synchronously, before the forward pass (0.33).
    sync_loads: bool => "host hits within the budget load synchronously", "_reserve_sync_load";
    /// MooncakeStoreConnector: a save job references (touches) the request's blocks until
    /// the worker reports it (`_reference_save_blocks`).
    mc_save_pins: bool
        => "Mooncake save jobs reference their GPU blocks until done", "MooncakeStoreScheduler._reference_save_blocks";
    /// MooncakeStoreConnector is the 0.32+ store kvmc models (save jobs of the core's current
    /// table, pinned until done). 0.24's store is different and not modelled (no
    /// `_reference_save_blocks`: a finished request delays its free until `finished_sending`,
    /// a preempted one frees at once; the sending thread counts jobs per request id; a running
    /// request is saved only in steps that allocate it blocks): a Mooncake scope is refused.
    mc_store_032: bool
        => "MooncakeStoreConnector is the 0.32+ store (0.24's is not modelled: refused)", "MooncakeStoreScheduler (0.32)";
    /// NixlConnector, host-buffer mode: a step's save set also holds the block that straddles
    /// the request's chunked-prefill boundary (partly written by the previous step, completed
    /// by this one), also when the step allocates no new block (#59102, open upstream: false in
    /// every profile, `fix-59102`). Without it only the step's newly allocated block ids are
    /// copied to the host buffer.
    nixl_resave_partial: bool => "NIXL host buffer re-saves the block straddling a chunk boundary", "#59102";
    /// NixlConnector: a failed READ is reported per request too (`failed_recving` of
    /// `get_transfer_results`, 0.32+), so the scheduler's `_handle_failed_recving` resets it to
    /// 0 computed tokens; 0.24's worker reports only the read's blocks as invalid.
    nixl_failed_recving: bool
        => "a failed NIXL read is reported per request (failed_recving)", "NixlConnectorWorker.get_transfer_results";
    /// Router replay: routed-expert rows go through the AuxOutput connector's row store
    /// (0.32+), which kvmc models. 0.24 keeps them in a buffer indexed by GPU KV slot
    /// (`RoutedExpertsManager`) and refuses them with any KV connector: a router-replay scope
    /// is refused under it.
    aux_row_store: bool
        => "router replay: rows go through the AuxOutput row store (0.24's slot buffer is not modelled: refused)", "AuxOutputSchedulerConnector (0.32)";
    /// Router replay: the emit-start rule.
    aux_emit: EmitStart => "router replay: emit start", "AuxOutputSchedulerConnector";
    /// Router replay, 0.33: the scheduler retains rows of GPU-cached blocks, caps local hits at
    /// `max_cache_hit` and refuses external hits whose rows are not retained.
    aux_retain: bool => "router replay: rows retained, external hits gated", "max_cache_hit / cap_external_hit";
    /// Router replay, prime-rl: the load clamp.
    aux_clamp: Option<Clamp>
        => "router replay: external loads clamped below start", "prime-rl _routed_experts_load_limit";
    /// The clamp exempts requests resumed after preemption (the PR text says so; the code at
    /// prime-rl 8052d448 does not).
    aux_clamp_exempts_resumed: bool
        => "router replay: the load clamp exempts requests resumed after preemption", "prime-rl PR text (not its code)";
    /// Router replay, prime-rl: the loaded-block cut of local prefix hits.
    aux_cut: Option<Cut> => "router replay: local hits cut at the first loaded block", "prime-rl _first_loaded_block";
    /// Router replay, prime-rl: a first capture that starts mid-block is not buffered
    /// (`skip_remote_prefill_partial_block`).
    aux_partial_skip: bool
        => "router replay: mid-block first capture not buffered", "prime-rl skip_remote_prefill_partial_block";
    /// P/D, the NIXL consumer's remote hit: the whole prompt less the local hit, the last
    /// prompt token recomputed after the load (0.33 `get_num_new_matched_tokens`, then
    /// `_update_waiting_for_remote_kv`); false: the prompt less one token (older releases).
    nixl_consumer_full_prompt: bool
        => "P/D: the decoder's remote hit is the whole prompt (else prompt - 1)", "NixlConnectorScheduler.get_num_new_matched_tokens";
    /// P/D, prime-rl: vLLM's refusal of routed experts with NixlConnector is bypassed
    /// (`monkey_patch_routed_experts_with_pd_connectors`); false: the model is refused as vLLM
    /// refuses it (`_verify_aux_output_compatibility`).
    aux_pd_bypass: bool
        => "router replay with NixlConnector allowed", "prime-rl monkey_patch_routed_experts_with_pd_connectors";
    /// P/D, prime-rl: the decode emit floor (`_emit_floors`): a decode-side request emits from
    /// its first forward, read before the step advances it.
    aux_decode_floor: DecodeFloor => "P/D: decode-side emit floor", "prime-rl _emit_floors";
    /// P/D, prime-rl: decode-side requests are exempt from the load clamp and the cut (D7).
    aux_decode_exempt: bool => "P/D: no clamp and no cut for decode-side requests", "prime-rl _is_pd_decode_request";
    /// P/D, prime-rl `/generate`: the response start is end-anchored
    /// (`len(prompt) + len(completion) - 1 - len(rows)`); false: `routed_experts_prompt_start`.
    pd_start_end_anchored: bool => "P/D: response start end-anchored (else the sampling start)", "prime-rl serving_tokens";
    /// P/D: how the router merges P's and D's rows.
    pd_router_merge: RouterMerge => "P/D: the router's row merge", "PrimeIntellect-ai/router routed_experts_merge.rs";
    /// Router replay: a row store whose objects over its slots are all referenced grows its
    /// arena (0.33+). vLLM 0.31 and 0.32's `BlockObjectStore._evict_to_fit` raises
    /// `BlockObjectStoreError("cannot retain the requested batch")` instead: the engine dies.
    aux_store_grows: bool
        => "router replay: a row store with every object referenced grows (else BlockObjectStoreError)", "BlockObjectStore._evict_to_fit";
    /// Variant: the row store evicts referenced rows too.
    aux_store_evicts_live: bool => "row store evicts referenced rows", "(variant)";
    /// Mutation: the worker also emits the row of the last sampled token.
    aux_emit_last_token: bool => "router replay: the worker also emits the last sampled token's row", "(mutation)";
    /// Mutation: prime-rl's load limit trims the connector's answer in the scheduler, after
    /// `get_num_new_matched_tokens` returned, instead of inside it (the Mooncake wrapper, C3,
    /// rewrites the connector's LoadSpec; a trim from outside leaves it stale).
    aux_clamp_in_core: bool => "router replay: the load limit trims the connector's answer afterwards", "(mutation)";
    /// Mutation: 0.33's `cap_external_hit` trims the external hit to the retained prefix
    /// instead of refusing it (all or nothing).
    aux_cap_trims: bool => "router replay: cap_external_hit trims instead of refusing", "(mutation)";
    /// Not in vLLM: prepare_store evicts from the most recently used end (a negative control
    /// for eviction-order).
    evict_mru: bool => "evict the most recently used key", "(mutation)";
    /// Not in vLLM: a running request that cannot allocate preempts the oldest running request
    /// instead of the newest (`Scheduler.schedule` pops `self.running`'s last under FCFS):
    /// the newest wins, so two requests can restart each other forever (a negative control
    /// for requests-finish's cycle search).
    preempt_oldest: bool => "preemption takes the oldest running request", "(mutation)";
    /// `build_connector_meta` resets the mirror and store cursor of every request in
    /// `preempted_req_ids` (0.32+; 0.24 reset only on MRV1's resumed flag).
    scpu_reset_on_preempt: bool
        => "SimpleCPU resets a preempted request's mirror and cursor", "preempted_req_ids (0.32)";
    /// `request_finished_all_groups` queues a finish-time store of the confirmed blocks above
    /// the cursor (`_queue_finished_eager_store`, 0.32+; 0.24 had none).
    scpu_finish_flush: bool
        => "SimpleCPU stores confirmed blocks when a request finishes", "_queue_finished_eager_store (0.32)";
    /// An eager scan that finds a block already cached in the CPU pool (a GPU-side hit) moves
    /// that CPU block to the MRU end of the free queue (#62444; 0.33 skips it unchanged).
    scpu_refresh_on_gpu_hit: bool => "SimpleCPU refreshes a CPU block found already cached", "#62444";
    /// `update_state_after_alloc` moves the CPU copies of the request's GPU prefix hit (the
    /// longest CPU-cached prefix of the `num_computed_tokens` its lookup saw) to the MRU end of
    /// the CPU free queue, tail released first (0.34's fix of #62444; the eager scan still skips
    /// an already cached block unchanged).
    scpu_refresh_local_hit: bool
        => "SimpleCPU refreshes the CPU copies of a GPU prefix hit at admission", "update_state_after_alloc (0.34)";
    /// A store registers the hash stamped on the CPU block at prep (0.24) instead of the GPU
    /// block's hash read at completion (0.32+).
    scpu_hash_at_prep: bool => "SimpleCPU registers the hash stamped at store prep", "_process_store_completion (0.32)";
    /// With the CPU pool full, the eager scan still walks a request's confirmed blocks from its
    /// cursor, moving the cursor past those already cached or in flight, up to the first one it
    /// would store (`_prepare_eager_store_specs`, 0.24); false (0.32+): a full pool stops the
    /// scan before it starts (`_select_eager_blocks_to_store`) and the cursor stays.
    scpu_scan_when_full: bool
        => "SimpleCPU's eager scan advances its cursor when the CPU pool is full", "_prepare_eager_store_specs (0.24)";
    /// Lazy mode (`lazy_offload`): each step's walk of the G1 free queue resumes after the
    /// block it last visited (`_cursor`; restarted from the head once that block leaves the
    /// queue), 0.24 to 0.33; false (0.34): every walk starts at the head of the queue.
    scpu_lazy_cursor: bool
        => "SimpleCPU's lazy walk resumes at its cursor", "_prepare_lazy_store_specs (0.24-0.33)";
    /// Lazy mode: a completed store returns its GPU source blocks to the head of the G1 free
    /// queue (`free_blocks(evict_first=True)`: the CPU pool holds them), 0.34; false (0.24 to
    /// 0.33): to the tail, as any cached block.
    /// Lazy mode: the walk runs in every `build_connector_meta`, a step that schedules no
    /// request too, so with the CPU pool smaller than the hashed blocks it covers, a store is
    /// always in flight and `has_pending_push_work` keeps an engine with no request stepping
    /// (finding 26); false (variant fix-scpu-lazy-idle): only in a step that schedules tokens.
    scpu_lazy_walk_idle: bool
        => "SimpleCPU's lazy walk runs in a step that schedules no request", "_prepare_lazy_store_specs (finding 26)";
    scpu_lazy_evict_first: bool
        => "SimpleCPU's lazy stores return their GPU blocks to the eviction end", "_process_store_completion (0.34)";
    /// `get_num_new_matched_tokens` pins the CPU hit blocks until `update_state_after_alloc`.
    scpu_lookup_pins: bool => "SimpleCPU lookup pins its hit blocks", "get_num_new_matched_tokens";
    /// A lookup first drops the pin left by an earlier lookup of the same request.
    scpu_drop_stale_pin: bool => "SimpleCPU lookup drops the request's earlier pin", "get_num_new_matched_tokens";
    /// `update_state_after_alloc` pins the CPU blocks it loads until the load completes.
    scpu_load_pins: bool => "SimpleCPU pins the CPU blocks of a load", "update_state_after_alloc";
    /// Stores pin (touch) their GPU source blocks until the store completes.
    scpu_store_pins_gpu: bool => "SimpleCPU stores pin their GPU source blocks", "_prepare_eager_store_specs (touch)";
    /// Mutation: a store registers its CPU block under the hash at prep, before the copy lands.
    scpu_register_at_prep: bool => "SimpleCPU registers a CPU block before its copy lands", "(mutation)";
    /// A completed store frees its CPU blocks in transfer order, head (prefix) first.
    scpu_release_head_first: bool => "SimpleCPU frees a transfer's CPU blocks head first", "_process_store_completion";
    /// The CPU pool's KV events are published as medium CPU, stores and evictions (0.32+).
    /// 0.24's CPU `BlockPool` publishes only its evictions (`_maybe_evict_cached_block`),
    /// labelled medium GPU: a CPU store is silent (`_process_store_completion` inserts the hash
    /// without `cache_full_blocks`). Read by `conform --kv-events` only.
    scpu_cpu_kv_events: bool
        => "SimpleCPU's CPU pool publishes its KV events as medium CPU", "BlockPool(medium) (0.32)";
}
