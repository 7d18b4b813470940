"""Builds vLLM 0.33's real scheduler side for a scenario, on a CPU-only machine.

Drives, in the order of ``vllm.v1.engine.core.EngineCore._initialize_kv_caches`` and
``EngineCore.__init__`` (without an executor):

* config objects from ``vllm.config``: ``ModelConfig`` (offline tiny llama, see
  ``tiny-llama/config.json``), ``SchedulerConfig`` (``async_scheduling`` as the scenario says, default False),
  ``CacheConfig`` (prefix caching on, ``num_gpu_blocks_override``), ``KVTransferConfig``
  (``OffloadingConnector`` or ``SimpleCPUOffloadConnector`` with ``num_cpu_blocks``,
  ``kv_both``), ``KVEventsConfig`` (events on, "null"
  publisher; kvevents.py captures the batches), ``DeviceConfig("cpu")``, ``VllmConfig``;
* the KV-cache planning path: ``register_all_kvcache_specs``, a hand-written worker spec
  ``FullAttentionSpec`` (one layer), ``resolve_kv_cache_layout``,
  ``get_global_kv_cache_groups`` / ``get_kv_cache_configs`` (``v1.core.kv_cache_planning``),
  ``generate_scheduler_kv_cache_config``, ``update_kv_cache_capacity``,
  ``resolve_kv_cache_block_sizes``, ``resolve_cache_hit_alignment_tokens``;
* ``SchedulerConfig.get_scheduler_cls()`` -> ``vllm.v1.core.sched.scheduler.Scheduler``,
  which creates the ``OffloadingConnector`` (role SCHEDULER) through
  ``KVConnectorFactory``; the CPU tier is its ``CPUOffloadingManager`` with the
  ``LRUCachePolicy``; or the ``SimpleCPUOffloadConnector``, whose
  ``SimpleCPUOffloadScheduler`` (eager) keeps a CPU ``BlockPool`` (``Scheduler.__init__``
  binds it to the GPU block pool through ``bind_kv_cache_manager``); or the
  ``MooncakeStoreConnector`` (mcstore.py); or the ``NixlConnector`` as the P/D producer
  (``kv_producer``, ``kv_buffer_device = "cpu"``: its ``NixlPullConnectorScheduler`` in
  host-buffer mode; nixlprod.py), whose requests carry ``kv_transfer_params`` with
  ``do_remote_decode`` (``make_request``);
* the block hasher: ``get_hash_fn_by_name("sha256")``, ``init_none_hash``,
  ``get_request_block_hasher``;
* ``vllm.v1.request.Request`` objects with ``SamplingParams``.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
# Model Runner V2 is 0.33's default (it reports resumed requests as new requests with
# their full block table); pin it so a stray environment cannot change the schedule lines.
os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
# KV events (kvevents.py) carry block hashes as ints, vLLM's default; pin it too.
os.environ["VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES"] = "1"

import torch  # noqa: E402

from scenario import EOS_TOKEN_ID, Scenario, parse_connector_class  # noqa: E402

TINY_LLAMA_DIR = Path(__file__).resolve().parent / "tiny-llama"
LAYER_NAME = "model.layers.0.self_attn.attn"
NUM_KV_HEADS = 2
HEAD_SIZE = 16
DTYPE = torch.float16


@dataclass
class Engine:
    vllm_config: object
    scheduler: object
    hasher: object
    kv_bytes_per_token: int
    num_host_chunks: int            # what the CPU manager really got (0 without connector)
    mc_store: object = None         # Mooncake: mcstore.FakeStore (the pool)
    pd_producer: bool = False       # NIXL: every request is a P/D prefill (do_remote_decode)

    @property
    def batch_queue_size(self) -> int:
        """``EngineCore.batch_queue_size``: ``VllmConfig.max_concurrent_batches`` (2 under
        async scheduling with one pipeline stage, 1 without)."""
        return int(self.vllm_config.max_concurrent_batches)

    @property
    def connector(self):
        return self.scheduler.connector

    @property
    def manager(self):
        """The OffloadingConnector's CPUOffloadingManager (None without it)."""
        conn = self.scheduler.connector
        if conn is None or not hasattr(conn, "connector_scheduler"):
            return None
        return getattr(conn.connector_scheduler, "manager", None)  # MooncakeStore has none

    @property
    def scpu(self):
        """The SimpleCPUOffloadConnector's SimpleCPUOffloadScheduler (None without it)."""
        conn = self.scheduler.connector
        return getattr(conn, "scheduler_manager", None) if conn is not None else None

    @property
    def block_pool(self):
        return self.scheduler.kv_cache_manager.block_pool

    def req_to_blocks(self) -> dict:
        coord = self.scheduler.kv_cache_manager.coordinator
        (mgr,) = coord.single_type_managers
        return mgr.req_to_blocks


def _round_up(x: int, align: int) -> int:
    return (x + align - 1) // align * align


def _kv_spec(block_size: int):
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    return FullAttentionSpec(block_size=block_size, num_kv_heads=NUM_KV_HEADS,
                             head_size=HEAD_SIZE, dtype=DTYPE)


def _chunk_alignment() -> int:
    """What CPUOffloadingSpec rounds a chunk's bytes up to: mmap.PAGESIZE (0.32+, the shared
    offload region), 1 in 0.24."""
    from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

    return int(getattr(CPUOffloadingSpec, "BLOCK_SIZE_ALIGNMENT", mmap.PAGESIZE))


def connector_by_name(sc: Scenario, builtin: str) -> dict:
    """The ``KVTransferConfig`` fields that name the connector: vLLM's built-in ``builtin``
    (its ``KVConnectorFactory`` registry), or, with ``sc.connector_class`` = ``MODULE:CLASS``
    (``record.py --connector-class``), that class, which ``KVConnectorFactory.
    get_connector_class`` imports from ``kv_connector_module_path`` (the module path takes
    priority over the registry). The scenario's ``connector`` still picks the extra config
    (``[offload]`` or ``[simple_cpu]``) and the fake worker."""
    value = getattr(sc, "connector_class", None)
    if not value:
        return {"kv_connector": builtin}
    module, cls = parse_connector_class(value)
    return {"kv_connector": cls, "kv_connector_module_path": module}


def _cache_aware_admission(sc: Scenario) -> dict:
    """SchedulerConfig's cache-aware admission fields (vLLM 0.34+), only when the scenario sets
    the window: older releases have no such fields."""
    window = int(getattr(sc, "cache_aware_admission_window", 0))
    if not window:
        return {}
    return {"cache_aware_admission_window": window,
            "cache_aware_admission_threshold": float(sc.cache_aware_admission_threshold)}


def build_engine(sc: Scenario) -> Engine:
    from vllm.config import (CacheConfig, DeviceConfig, KVEventsConfig, KVTransferConfig,
                             ModelConfig, SchedulerConfig, VllmConfig)

    spec = _kv_spec(sc.block_size)
    page_bytes = spec.page_size_bytes                 # K and V of one block, one layer
    kv_bytes_per_token = page_bytes // sc.block_size
    chunk_bytes = _round_up(page_bytes * sc.blocks_per_chunk, _chunk_alignment())

    model_config = ModelConfig(model=str(TINY_LLAMA_DIR), skip_tokenizer_init=True,
                               dtype="float16", max_model_len=sc.max_model_len, seed=0)
    scheduler_config = SchedulerConfig(
        max_num_seqs=sc.max_num_seqs,
        max_num_batched_tokens=sc.max_num_batched_tokens,
        max_model_len=sc.max_model_len,
        enable_chunked_prefill=True,
        is_encoder_decoder=False,
        long_prefill_token_threshold=sc.long_prefill_token_threshold,
        async_scheduling=bool(getattr(sc, "async_scheduling", False)),
        scheduler_reserve_full_isl=bool(getattr(sc, "scheduler_reserve_full_isl", True)),
        **_cache_aware_admission(sc),
    )
    cache_config = CacheConfig(block_size=sc.block_size,
                               enable_prefix_caching=bool(getattr(sc, "enable_prefix_caching", True)),
                               num_gpu_blocks_override=sc.gpu_blocks)
    kv_transfer_config = None
    if sc.connector == "offloading":
        extra = {
            "cpu_bytes_to_use": sc.host_chunks * chunk_bytes,
            "eviction_policy": sc.eviction_policy,
            "offload_prompt_only": sc.offload_prompt_only,
            "blocks_per_chunk": sc.blocks_per_chunk,
        }
        if sc.blocks_per_chunk > 1 and _vllm_version().startswith("0.24."):
            # 0.24's OffloadingSpec reads the chunk size in tokens ("block_size"), not in
            # GPU blocks: 0.32 added "blocks_per_chunk".
            extra["block_size"] = sc.blocks_per_chunk * sc.block_size
        if sc.sync_load_budget_tokens:
            extra["sync_load_budget_bytes"] = sc.sync_load_budget_tokens * kv_bytes_per_token
        kv_transfer_config = KVTransferConfig(
            kv_role="kv_both", kv_connector_extra_config=extra,
            kv_load_failure_policy=sc.load_failure_policy,
            **connector_by_name(sc, "OffloadingConnector"))
    elif sc.connector == "simple-cpu":
        # num_cpu_blocks sizes the CPU BlockPool exactly (null block 0 included); it must not
        # exceed the local capacity num_gpu_blocks * cpu_bytes // gpu_total_bytes
        # (SimpleCPUOffloadScheduler._derive_cpu_config), i.e. cpu_bytes // page_bytes here.
        extra = {"num_cpu_blocks": sc.cpu_blocks, "cpu_bytes_to_use": sc.cpu_blocks * page_bytes,
                 "lazy_offload": sc.lazy_offload}
        kv_transfer_config = KVTransferConfig(
            kv_role="kv_both", kv_connector_extra_config=extra,
            kv_load_failure_policy=sc.load_failure_policy,
            **connector_by_name(sc, "SimpleCPUOffloadConnector"))
    elif sc.connector == "mooncake":
        # MooncakeStoreConnector's scheduler side only: mcstore.attach replaces its lookup
        # client (no Mooncake master; the port is never opened).
        kv_transfer_config = KVTransferConfig(
            kv_role="kv_both", kv_connector="MooncakeStoreConnector",
            kv_connector_extra_config={"load_async": True, "lookup_rpc_port": 4242,
                                       "save_decode_cache": sc.mooncake_save_decode_cache},
            kv_load_failure_policy=sc.load_failure_policy)
    elif sc.connector == "nixl":
        # NixlConnector's scheduler side as the P/D producer (prefill instance) in host-buffer
        # mode (nixlprod.py): kv_producer, one rank, KV copied to a host buffer. No worker is
        # built, so neither the nixl package nor a handshake listener is needed.
        kv_transfer_config = KVTransferConfig(
            kv_role="kv_producer", kv_buffer_device="cpu",
            kv_load_failure_policy=sc.load_failure_policy,
            **connector_by_name(sc, "NixlConnector"))
    elif getattr(sc, "connector_class", None):
        raise ValueError(f"--connector-class {sc.connector_class}: scenario {sc.name} has "
                         f"connector = 'none'")
    def make_config():
        return VllmConfig(model_config=model_config, scheduler_config=scheduler_config,
                          cache_config=cache_config,
                          kv_transfer_config=kv_transfer_config,
                          kv_events_config=KVEventsConfig(enable_kv_cache_events=True,
                                                          publisher="null"),
                          device_config=DeviceConfig("cpu"))

    try:
        vllm_config = make_config()
    except ValueError as e:
        # 0.32's VllmConfig refuses Model Runner V2 without Triton (0.33 only warns on a CPU
        # platform); the scheduler side does not use Triton. Validate under V1, then pin V2
        # again before anything reads use_v2_model_runner (Scheduler.__init__, connectors).
        if "requires Triton" not in str(e):
            raise
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"
        try:
            vllm_config = make_config()
        finally:
            os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    assert getattr(vllm_config, "use_v2_model_runner", True)   # 0.34 has only V2
    want_async = bool(getattr(sc, "async_scheduling", False))
    assert vllm_config.scheduler_config.async_scheduling is want_async

    kv_cache_config, block_size, hash_block_size = _plan_kv_cache(vllm_config, spec)

    from vllm.v1.structured_output import StructuredOutputManager

    sched_cls = vllm_config.scheduler_config.get_scheduler_cls()
    scheduler = sched_cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        include_finished_set=False,
        log_stats=True,
        block_size=block_size,
        hash_block_size=hash_block_size,
    )
    want_cls = "AsyncScheduler" if want_async else "Scheduler"
    if type(scheduler).__name__ != want_cls:
        raise RuntimeError(f"expected vLLM's {want_cls}, got {type(scheduler)}")
    if getattr(sc, "connector_class", None):
        module, cls = parse_connector_class(sc.connector_class)
        got = type(scheduler.connector)
        if (got.__module__, got.__name__) != (module, cls):
            raise RuntimeError(f"asked for connector {sc.connector_class}, vLLM built "
                               f"{got.__module__}:{got.__name__}")

    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

    hash_fn = get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    if hasattr(vllm_config, "num_hash_lookahead_tokens"):   # 0.33+
        hasher = get_request_block_hasher(hash_block_size, hash_fn,
                                          vllm_config.num_hash_lookahead_tokens)
    else:
        hasher = get_request_block_hasher(hash_block_size, hash_fn)

    eng = Engine(vllm_config, scheduler, hasher, kv_bytes_per_token, 0)
    if sc.connector == "nixl":
        import nixlprod
        nixlprod.check(eng)
        eng.pd_producer = True
    if eng.manager is not None:
        mgr = eng.manager   # 0.24 counts blocks (_num_blocks), 0.32+ chunks
        eng.num_host_chunks = getattr(mgr, "_num_chunks", None) or mgr._num_blocks
        if eng.num_host_chunks != sc.host_chunks:
            raise RuntimeError(f"CPU tier got {eng.num_host_chunks} chunks, "
                               f"scenario asked for {sc.host_chunks}")
    if sc.connector == "mooncake" and hasattr(sc, "mooncake_preload"):
        import mcstore
        mcstore.attach(eng, sc, make_request)
    if eng.scpu is not None:
        got = eng.scpu.cpu_block_pool.num_gpu_blocks
        if got != sc.cpu_blocks or eng.scpu._lazy_mode != sc.lazy_offload:
            raise RuntimeError(f"SimpleCPU got {got} CPU blocks (lazy={eng.scpu._lazy_mode}), "
                               f"scenario asked for {sc.cpu_blocks} (lazy={sc.lazy_offload})")
    return eng


def _plan_kv_cache(vllm_config, spec):
    """The planning path of ``EngineCore._initialize_kv_caches`` for one worker. Steps a
    release does not have are skipped: 0.24 has no KV-cache layout resolution, no
    ``update_kv_cache_capacity`` (``get_kv_cache_capacity``) and no cache-hit alignment;
    0.24 and 0.32 plan in ``kv_cache_utils`` without pre-resolved groups."""
    from vllm.v1.core import kv_cache_utils as kcu
    from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs

    register_all_kvcache_specs(vllm_config)
    kv_cache_specs = [{LAYER_NAME: spec}]
    try:
        from vllm.v1.attention.backends.utils import resolve_kv_cache_layout
    except ImportError:   # 0.24
        pass
    else:
        resolve_kv_cache_layout(vllm_config, [["LBNHC", "LBHNC"]],  # one worker
                                [s for specs in kv_cache_specs for s in specs.values()])
    try:   # 0.33+: planning split out of kv_cache_utils, groups resolved first
        from vllm.v1.core.kv_cache_planning import (get_global_kv_cache_groups,
                                                    get_kv_cache_configs)
    except ImportError:   # 0.24, 0.32
        configs = kcu.get_kv_cache_configs(vllm_config, kv_cache_specs, [1 << 30])
    else:
        groups = get_global_kv_cache_groups(vllm_config, kv_cache_specs)
        configs = get_kv_cache_configs(vllm_config, kv_cache_specs, [1 << 30], groups)
    if hasattr(vllm_config.cache_config, "kv_cache_layout"):
        for cfg in configs:
            cfg.kv_cache_layout = vllm_config.cache_config.kv_cache_layout
    sched_cfg = kcu.generate_scheduler_kv_cache_config(configs)
    vllm_config.cache_config.num_gpu_blocks = sched_cfg.num_blocks
    vllm_config.cache_config.block_size = min(
        g.kv_cache_spec.block_size for g in sched_cfg.kv_cache_groups)
    if hasattr(kcu, "update_kv_cache_capacity"):
        kcu.update_kv_cache_capacity(vllm_config, sched_cfg)
    else:   # 0.24
        tokens, concurrency = kcu.get_kv_cache_capacity(vllm_config, sched_cfg)
        vllm_config.cache_config.kv_cache_size_tokens = tokens
        vllm_config.cache_config.kv_cache_max_concurrency = concurrency
    vllm_config.validate_block_size()
    block_size, hash_block_size = kcu.resolve_kv_cache_block_sizes(sched_cfg, vllm_config)
    if hasattr(kcu, "resolve_cache_hit_alignment_tokens"):
        align = kcu.resolve_cache_hit_alignment_tokens(sched_cfg, vllm_config, block_size,
                                                       hash_block_size)
        for cfg in (*configs, sched_cfg):
            cfg.hash_block_size = hash_block_size
            cfg.cache_hit_alignment_tokens = align
    return sched_cfg, block_size, hash_block_size


def make_request(eng: Engine, name: str, prompt: list[int], max_tokens: int,
                 eos: bool, resumable: bool = False):
    """A ``Request`` as ``EngineCore.preprocess_add_request`` builds it. A streaming-input
    session's inputs are all ``resumable`` requests with the session's id
    (``AsyncLLM._add_streaming_input_request``); its end-of-session sentinel is a
    non-resumable one (prompt ``[0]``), which ``StreamingUpdate.from_request`` turns
    into None."""
    from vllm import SamplingParams
    from vllm.v1.request import Request

    params = SamplingParams(max_tokens=max_tokens, ignore_eos=not eos)
    # What the input processor does: eos_token_id is only kept without ignore_eos.
    params.update_from_generation_config({}, EOS_TOKEN_ID)
    if eng.pd_producer:
        # What a P/D proxy sends the prefill instance (vLLM's toy proxy's request to P).
        params.extra_args = {"kv_transfer_params": {
            "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
            "remote_block_ids": None, "remote_host": None, "remote_port": None}}
    extra = {"resumable": True} if resumable else {}   # 0.24 has no streaming sessions
    return Request(name, list(prompt), params, pooling_params=None,
                   block_hasher=eng.hasher, **extra)


def _vllm_version() -> str:
    import vllm

    return vllm.__version__
