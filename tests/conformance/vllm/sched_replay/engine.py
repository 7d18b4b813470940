"""vLLM's scheduler side as the command line configures it: the VllmConfig (model, scheduler,
cache, KV connector: OffloadingConnector with a CPU tier of exactly --host-chunks chunks,
SimpleCPUOffloadConnector, or none), the KV cache configs of the scheduler and the worker,
the real Scheduler with its connector's scheduler side, and finished_req_ids pinned to
finish order (--finished-order). Importing this module imports torch and vLLM; which
OffloadingWorker API the installed release has (WORKER_API) is found here too."""

from __future__ import annotations

import os
import sys

import torch

from vllm.config import (
    CacheConfig,
    DeviceConfig,
    KVTransferConfig,
    ModelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (
    OffloadingConnector,
)
from vllm.v1.core import kv_cache_utils as _kcu
from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheTensor,
)
try:  # 0.32+: one OffloadingWorker per medium, submit_store / submit_load
    from vllm.v1.kv_offload.base import OffloadingWorker, TransferResult  # noqa: F401
    WORKER_API = "submit"
except ImportError:  # 0.24: OffloadingWorker routes transfer_async(job_id, (src, dst)) by medium
    from vllm.v1.kv_offload.worker.worker import OffloadingWorker, TransferResult  # noqa: F401
    WORKER_API = "transfer_async"
from vllm.v1.structured_output import StructuredOutputManager

# tests/conformance/vllm, where the script and its model directory are.
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS = ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"]


class FinishOrder(set):
    """Scheduler.finished_req_ids iterated in the order the requests finished: the order
    kvmc replay walks it (src/system/choice.rs, FinishedReqIds), and one a Python set of
    these ids has under some hash seed. Every other set operation is the set's own."""

    def __init__(self):
        super().__init__()
        self.order: dict[str, None] = {}

    def add(self, x):
        super().add(x)
        self.order[x] = None

    def __iter__(self):
        return iter([x for x in self.order if x in self])


class Engine:
    """The configuration and the scheduler side of one run (the worker side: workers.py).

    bs, num_gpu_blocks, max_model_len, page (bytes per layer per block), bytes_per_block;
    vllm_config, sched_kv_cfg, worker_kv_cfg, hash_bs; scheduler and sconn (its connector)."""

    def __init__(self, args):
        self.args = args
        self.bs = BS = args.block_size
        self.num_gpu_blocks = NUM_GPU_BLOCKS = args.gpu_blocks
        self.max_model_len = MAX_MODEL_LEN = args.max_model_len or (NUM_GPU_BLOCKS - 1) * BS
        self.kv_spec = FullAttentionSpec(
            block_size=BS, num_kv_heads=2, head_size=64, dtype=torch.bfloat16
        )
        self.page = self.kv_spec.page_size_bytes  # per layer per block
        self.bytes_per_block = BYTES_PER_BLOCK = self.page * len(LAYERS)
        PAGESIZE = os.sysconf("SC_PAGE_SIZE")
        BPC = args.blocks_per_chunk
        try:  # what CPUOffloadingSpec rounds a chunk up to: the page (0.32+), 1 (0.24)
            from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec as _CPUSpec
            PAGESIZE = int(getattr(_CPUSpec, "BLOCK_SIZE_ALIGNMENT", PAGESIZE))
        except ImportError:
            pass
        ALIGNED = -(-(BYTES_PER_BLOCK * BPC) // PAGESIZE) * PAGESIZE
        CPU_BYTES = args.host_chunks * ALIGNED  # -> exactly host_chunks chunks of BPC blocks

        self.model_config = ModelConfig(
            model=os.path.join(HERE, "scheduler-replay-model"),
            skip_tokenizer_init=True,
            max_model_len=MAX_MODEL_LEN,
            dtype="bfloat16",
            seed=0,
        )
        self.scheduler_config = SchedulerConfig(
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            max_model_len=MAX_MODEL_LEN,
            enable_chunked_prefill=True,
            is_encoder_decoder=False,
            async_scheduling=False,
        )
        self.cache_config = CacheConfig(
            block_size=BS, enable_prefix_caching=not args.no_prefix_caching, cache_dtype="auto"
        )
        self.kv_transfer_config = self._kv_transfer_config(CPU_BYTES)
        self.vllm_config = self._validated_vllm_config()
        self.vllm_config.cache_config.num_gpu_blocks = NUM_GPU_BLOCKS

        self.sched_kv_cfg = self.make_kv_cache_config()
        self.worker_kv_cfg = self.make_kv_cache_config()
        sched_bs, hash_bs = resolve_kv_cache_block_sizes(self.sched_kv_cfg, self.vllm_config)
        self.hash_bs = hash_bs
        if hasattr(_kcu, "resolve_cache_hit_alignment_tokens"):  # 0.32+ (0.24 has no alignment)
            align = _kcu.resolve_cache_hit_alignment_tokens(
                self.sched_kv_cfg, self.vllm_config, sched_bs, hash_bs)
            for c in (self.sched_kv_cfg, self.worker_kv_cfg):
                c.hash_block_size = hash_bs
                c.cache_hit_alignment_tokens = align

        self.scheduler = Scheduler(
            vllm_config=self.vllm_config,
            kv_cache_config=self.sched_kv_cfg,
            structured_output_manager=StructuredOutputManager(self.vllm_config),
            block_size=sched_bs,
            hash_block_size=hash_bs,
            log_stats=False,
        )
        self.sconn = self.scheduler.connector
        self.fresh_finished_set()
        import vllm as _vllm
        print(f"[replay] vllm {_vllm.__version__} use_v2_model_runner="
              f"{getattr(self.vllm_config, 'use_v2_model_runner', None)} worker_api={WORKER_API}",
              file=sys.stderr)
        if args.connector == "offloading":
            self._check_cpu_tier()

    def _kv_transfer_config(self, cpu_bytes):
        args = self.args
        BS, BPC = self.bs, args.blocks_per_chunk
        if args.connector == "offloading":
            _extra = {"cpu_bytes_to_use": cpu_bytes}
            if BPC != 1:
                _extra["blocks_per_chunk"] = BPC
                if WORKER_API == "transfer_async":
                    # 0.24's OffloadingSpec reads the chunk size in tokens ("block_size"); 0.32
                    # added "blocks_per_chunk" (engine.py does the same).
                    _extra["block_size"] = BPC * BS
            if args.offload_decode:
                _extra["offload_prompt_only"] = False
            return KVTransferConfig(
                kv_connector="OffloadingConnector",
                kv_role="kv_both",
                kv_connector_extra_config=_extra,
            )
        if args.connector == "simple-cpu":
            import inspect
            from vllm.distributed.kv_transfer.kv_connector.v1 import (
                simple_cpu_offload_connector as _scpu_mod,
            )
            if "num_cpu_blocks" in inspect.getsource(_scpu_mod):
                # 0.33+: num_cpu_blocks sizes the CPU pool; the byte budget only has to cover it.
                _cpu_bytes = 1 << 40
            else:
                # 0.24, 0.32: the pool is num_gpu_blocks * cpu_bytes // GPU KV bytes
                # (SimpleCPUOffloadScheduler._derive_cpu_config); 1 TiB would be 67M blocks.
                _cpu_bytes = args.cpu_blocks * self.bytes_per_block
            _extra = {"num_cpu_blocks": args.cpu_blocks, "cpu_bytes_to_use": _cpu_bytes,
                      "lazy_offload": args.lazy}
            return KVTransferConfig(
                kv_connector="SimpleCPUOffloadConnector",
                kv_role="kv_both",
                kv_connector_extra_config=_extra,
            )
        return None

    def _make_vllm_config(self):
        return VllmConfig(
            model_config=self.model_config,
            scheduler_config=self.scheduler_config,
            cache_config=self.cache_config,
            kv_transfer_config=self.kv_transfer_config,
            device_config=DeviceConfig(device="cpu"),
        )

    def _validated_vllm_config(self):
        try:
            return self._make_vllm_config()
        except ValueError as e:
            # 0.32's VllmConfig refuses Model Runner V2 without Triton (0.33 only warns on a
            # CPU platform); the scheduler side does not use Triton. Validate under V1, then
            # pin V2 again before anything reads use_v2_model_runner (as engine.py does).
            if "requires Triton" not in str(e) or os.environ["VLLM_USE_V2_MODEL_RUNNER"] != "1":
                raise
            os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"
            try:
                return self._make_vllm_config()
            finally:
                os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"

    def make_kv_cache_tensor(self) -> KVCacheTensor:
        import dataclasses
        fields = {f.name for f in dataclasses.fields(KVCacheTensor)}
        if "layers" in fields:  # 0.32+
            return KVCacheTensor(
                size=self.num_gpu_blocks * self.bytes_per_block,
                layers=list(LAYERS),
                layer_stride=self.page * self.num_gpu_blocks,
                block_stride=self.page,
            )
        # 0.24: one tensor shared by the layers, unpacked (CPUOffloadingSpec sums the sizes)
        return KVCacheTensor(size=self.num_gpu_blocks * self.bytes_per_block, shared_by=list(LAYERS))

    def make_kv_cache_config(self) -> KVCacheConfig:
        return KVCacheConfig(
            num_blocks=self.num_gpu_blocks,
            kv_cache_tensors=[self.make_kv_cache_tensor()],
            kv_cache_groups=[KVCacheGroupSpec(list(LAYERS), self.kv_spec)],
        )

    def fresh_finished_set(self):
        if self.args.finished_order == "finish":
            self.scheduler.finished_req_ids = FinishOrder()

    def _check_cpu_tier(self):
        args, sconn = self.args, self.sconn
        assert isinstance(sconn, OffloadingConnector)
        cpu_manager = sconn.connector_scheduler.manager if hasattr(
            sconn.connector_scheduler, "manager") else None
        if cpu_manager is not None:  # 0.24 counts blocks (_num_blocks), 0.32+ chunks
            _got = getattr(cpu_manager, "_num_chunks", None) or getattr(cpu_manager, "_num_blocks", None)
            if _got is not None and _got != args.host_chunks:
                raise SystemExit(f"CPU tier got {_got} chunks, asked for {args.host_chunks}")
