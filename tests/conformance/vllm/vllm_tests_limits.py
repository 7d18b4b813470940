"""What vllm_tests_plugin.py does not record: the "not modelled" checks on a scheduler a
vLLM unit test built (its configuration, ``config_limits``) and on each request it feeds
(``request_limits``), and ``Eng``, what observe.Recorder reads of an engine.

``config_limits`` also returns the log header fields of a modelled configuration
(docs/conformance.md, "vLLM's own tests").
"""

from __future__ import annotations


class Eng:
    """What observe.Recorder reads of engine.Engine, for a scheduler a test built.

    Its accessors repeat engine.Engine's on purpose: importing engine.py pins environment
    variables (the V2 model runner, int KV-event hashes) that would change the tests it runs.
    """

    def __init__(self, sched):
        self.scheduler = sched

    @property
    def connector(self):
        return self.scheduler.connector

    @property
    def manager(self):
        conn = self.scheduler.connector
        cs = getattr(conn, "connector_scheduler", None) if conn is not None else None
        return getattr(cs, "manager", None)

    @property
    def scpu(self):
        conn = self.scheduler.connector
        return getattr(conn, "scheduler_manager", None) if conn is not None else None

    @property
    def block_pool(self):
        return self.scheduler.kv_cache_manager.block_pool

    def req_to_blocks(self):
        (mgr,) = self.scheduler.kv_cache_manager.coordinator.single_type_managers
        return mgr.req_to_blocks


def config_limits(sched) -> tuple[str | None, dict]:
    """(why kvmc does not model this scheduler's configuration or None, header fields)."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    vc = sched.vllm_config
    sc, cc = vc.scheduler_config, vc.cache_config
    kcc = sched.kv_cache_config
    if type(sched).__name__ != "Scheduler":
        name = type(sched).__name__
        return f"scheduler class {name}" + (" (async scheduling)" if "Async" in name else ""), {}
    groups = kcc.kv_cache_groups
    if len(groups) != 1:
        return f"{len(groups)} KV cache groups (hybrid)", {}
    spec = groups[0].kv_cache_spec
    if type(spec) is not FullAttentionSpec:
        return f"KV cache spec {type(spec).__name__}", {}
    if getattr(spec, "sliding_window", None) or getattr(spec, "attention_chunk_size", None):
        return "sliding window / chunked local attention", {}
    checks = [
        (vc.speculative_config is not None, "spec decode"),
        (getattr(vc, "lora_config", None) is not None, "LoRA"),
        (getattr(vc, "ec_transfer_config", None) is not None, "encoder cache connector"),
        (vc.model_config.is_encoder_decoder, "encoder-decoder model"),
        (getattr(sc, "policy", "fcfs") != "fcfs", "priority scheduling"),
        (not sc.enable_chunked_prefill, "chunked prefill off"),
        (getattr(sc, "max_num_active_seqs", None) is not None, "max_num_active_seqs"),
        (getattr(sc, "long_prefill_token_threshold_adaptive", False),
         "long_prefill_token_threshold_adaptive"),
        (getattr(sc, "watermark", 0.0) > 0.0, "scheduler watermark"),
        (getattr(sc, "prefill_schedule_interval", 1) != 1, "prefill_schedule_interval"),
        (vc.parallel_config.pipeline_parallel_size > 1, "pipeline parallel"),
        (sched.block_size > 64, f"block size {sched.block_size} (kvmc: 1..=64)"),
        (getattr(sched.kv_cache_manager, "hash_block_size", sched.block_size)
         not in (None, sched.block_size), "hash block size != block size"),
        (kcc.num_blocks > 1_000_000, "more than 1,000,000 GPU blocks"),
        (sched.max_num_scheduled_tokens != sc.max_num_batched_tokens,
         "max_num_scheduled_tokens != max_num_batched_tokens"),
        (getattr(sched, "dcp_world_size", 1) > 1 or getattr(sched, "pcp_world_size", 1) > 1,
         "context parallel"),
    ]
    for bad, why in checks:
        if bad:
            return why, {}
    conn = sched.connector
    kvt = vc.kv_transfer_config
    hdr = {"connector": "none", "host_chunks": 0, "blocks_per_chunk": 1,
           "offload_prompt_only": True, "eviction_policy": "lru",
           "sync_load_budget_tokens": 0, "load_failure_policy": "fail"}
    if conn is not None:
        name = type(conn).__name__
        extra = dict(kvt.kv_connector_extra_config or {})
        hdr["load_failure_policy"] = getattr(kvt, "kv_load_failure_policy", "fail")
        if name == "OffloadingConnector":
            eng = Eng(sched)
            mgr = eng.manager
            if mgr is None or type(mgr).__name__ != "CPUOffloadingManager":
                return f"offloading manager {type(mgr).__name__}", {}
            pol = type(mgr._policy).__name__
            if pol != "LRUCachePolicy":
                return f"eviction policy {pol}", {}
            cs = conn.connector_scheduler
            if extra.get("sync_load_budget_bytes"):
                return "sync_load_budget_bytes", {}
            hdr.update(connector="offloading",
                       host_chunks=getattr(mgr, "_num_chunks", None) or mgr._num_blocks,
                       blocks_per_chunk=int(extra.get("blocks_per_chunk", 1)),
                       offload_prompt_only=bool(extra.get("offload_prompt_only", True)))
            if getattr(cs, "blocks_per_chunk", hdr["blocks_per_chunk"]) != hdr["blocks_per_chunk"]:
                return "blocks_per_chunk not read from the extra config", {}
        elif name == "SimpleCPUOffloadConnector":
            scpu = Eng(sched).scpu
            if scpu is None or scpu._lazy_mode:
                return "SimpleCPU lazy mode", {}
            hdr.update(connector="simple-cpu",
                       cpu_blocks=scpu.cpu_block_pool.num_gpu_blocks)
        else:
            return f"connector {name}", {}
    hdr.update(block_size=sched.block_size, num_gpu_blocks=kcc.num_blocks,
               max_num_batched_tokens=sc.max_num_batched_tokens,
               max_num_seqs=sc.max_num_seqs, max_model_len=sched.max_model_len,
               long_prefill_token_threshold=sc.long_prefill_token_threshold,
               enable_prefix_caching=bool(cc.enable_prefix_caching))
    # 0.34's cache-aware admission: written to the header (the 0.34 profile's rule reads it)
    # and the log goes to OUT/cache-aware-window/, counted apart from the others.
    # Whole-sequence admission (SchedulerConfig.scheduler_reserve_full_isl): the header
    # field, absent = true (vLLM's default), as observe.py writes it; the model honours it.
    if not getattr(sc, "scheduler_reserve_full_isl", True):
        hdr["scheduler_reserve_full_isl"] = False
    window = getattr(sc, "cache_aware_admission_window", 0) or 0
    if window > 0:
        hdr.update(cache_aware_admission_window=int(window),
                   cache_aware_admission_threshold=float(sc.cache_aware_admission_threshold))
    return None, hdr


def request_limits(req) -> str | None:
    """Why kvmc does not model this request (or None)."""
    sp = req.sampling_params
    rid = req.request_id
    if not isinstance(rid, str) or "." in rid or "@" in rid:
        return "request id with '.' or '@' (log labels)"
    checks = [
        (sp is None, "pooling request"),
        (bool(getattr(req, "mm_features", None)), "multimodal / encoder inputs"),
        (getattr(req, "lora_request", None) is not None, "LoRA request"),
        (getattr(req, "structured_output_request", None) is not None, "structured output"),
        (getattr(req, "priority", 0) != 0, "request priority"),
        (getattr(req, "resumable", False), "streaming-input session"),
        (bool(getattr(req, "kv_transfer_params", None)), "kv_transfer_params (P/D)"),
        (sp is not None and sp.prompt_logprobs is not None, "prompt logprobs"),
        (sp is not None and bool(sp.stop_token_ids), "stop_token_ids"),
        (sp is not None and bool(sp.stop), "stop strings"),
        (sp is not None and (sp.min_tokens or 0) > 0, "min_tokens"),
        (sp is not None and sp.max_tokens is None, "max_tokens None"),
        (getattr(req, "prompt_embeds", None) is not None, "prompt embeds"),
        (req.num_prompt_tokens == 0, "empty prompt"),
    ]
    for bad, why in checks:
        if bad:
            return why
    return None
