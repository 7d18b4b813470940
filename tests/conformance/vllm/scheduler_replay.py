#!/usr/bin/env python3
"""Replay a Mooncake trace through vLLM's real scheduler side (0.24, 0.32, 0.33, 0.34).

Real: vllm.v1.core.sched.scheduler.Scheduler (synchronous), its KVCacheManager
(prefix caching, chunked prefill), the OffloadingConnector scheduler side with
the CPUOffloadingSpec's CPUOffloadingManager (LRU), and the OffloadingConnector
*worker* side (OffloadingConnectorWorker: store deferral, flushes on
preemption, sync/async loads, completion metadata).

Faked: the model (no forward pass; sampled tokens are a deterministic function
of row and position) and the OffloadingWorker under the connector worker (no
KV tensors; a copy completes a fixed number of steps after submission). Pinned: str
hashing (--hash-seed, default 0; the script re-executes itself with PYTHONHASHSEED), and
the order in which build_connector_meta walks Scheduler.finished_req_ids, a Python set
whose order decides which finished request's host-tier LRU re-rank is fresher
(--finished-order finish, the default: the order the requests finished, kvmc replay's
order; --finished-order set: the set's own, from the hash seed).

Run (from a venv with vllm 0.24.0, 0.32.0, 0.33.0 or 0.34.0; API differences between
releases are detected on vLLM's own code, not on its version number):
    python tests/conformance/vllm/scheduler_replay.py [--limit N] [--json-out F]
and compare with
    kvmc replay ../shared/traces/conversation_trace.jsonl --model models/replay-mooncake.toml
(docs/replay.md, "Against vLLM 0.33"; for 0.24, 0.32 and 0.34 add --profile vllm-0.24,
vllm-0.32 or vllm-0.34: "Against vLLM 0.24, 0.32 and 0.34"). --copy-steps 1 here is kvmc's
store_steps = 0 and load_steps = 0 (its defaults); --copy-steps 2 is store_steps = 1 and
load_steps = 1; --store-copy-steps 2 is kvmc's store_steps = 1. The JSON also counts
g1_evictions, host_evictions and store_refusals (kvmc's names). Other flags: --connector simple-cpu --cpu-blocks N,
--blocks-per-chunk, --no-prefix-caching, --offload-decode, --sessions (the mooncake-delta
dialect), --per-request FILE.tsv, --dump-steps FILE (one line per step, to find the first
step where two runs part).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
# Model Runner V2 (0.33's default; it reports resumed requests as new requests with their
# full block table). 0.24 and 0.32 fall back to V1 on a machine without Triton; pin V2 as
# engine.py does, so every release schedules as on a GPU machine.
os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
# The project root is three levels up; the shared traces sit next to it (../shared/traces).
TRACE = os.path.normpath(os.path.join(HERE, "..", "..", "..", "..", "shared", "traces", "conversation_trace.jsonl"))


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--trace", default=TRACE)
    p.add_argument("--limit", type=int, default=0, help="first N rows (0: all)")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--gpu-blocks", type=int, default=8192)
    p.add_argument("--host-chunks", type=int, default=65536)
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--max-model-len", type=int, default=0,
                   help="0: (gpu_blocks - 1) * block_size, as kvmc")
    p.add_argument("--trace-block-size", type=int, default=512)
    p.add_argument("--copy-steps", type=int, default=1,
                   help="a store/load built in step k is reported done by the "
                        "worker at the end of step k + copy-steps")
    p.add_argument("--progress-every", type=int, default=500)
    # flags for other configurations
    p.add_argument("--blocks-per-chunk", type=int, default=1)
    p.add_argument("--sessions", action="store_true",
                   help="mooncake-delta: session_id/delay rows, later turns = prev prompt + answer + new input")
    p.add_argument("--store-copy-steps", type=int, default=0,
                   help="offloading: a store built in step k is reported done at the end of step "
                        "k + this (default: --copy-steps). 2 = kvmc store_steps 1")
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--connector", default="offloading", choices=["offloading", "simple-cpu", "none"])
    p.add_argument("--cpu-blocks", type=int, default=0, help="simple-cpu: num_cpu_blocks")
    p.add_argument("--lazy", action="store_true", help="simple-cpu: lazy_offload")
    p.add_argument("--offload-decode", action="store_true", help="offloading: offload_prompt_only=False")
    p.add_argument("--dump-steps", default="", help="per-step state dump file")
    p.add_argument("--json-out", default="")
    p.add_argument("--hash-seed", default="0",
                   help="PYTHONHASHSEED for the run (default 0; 'random': leave it unpinned)")
    p.add_argument("--finished-order", default="finish", choices=["finish", "set"],
                   help="finish: walk finished_req_ids in finish order (kvmc replay's order); "
                        "set: vLLM's Python set (order from the hash seed)")
    p.add_argument("--per-request", default="",
                   help="write one TSV row per request (kvmc --per-request columns)")
    return p.parse_args()


args = parse_args()
# vLLM iterates sets of request ids whose order reaches decisions (finished_req_ids: the
# order of the finish-time stores and of the host LRU's finish re-ranks); a str's hash
# depends on PYTHONHASHSEED, so pin it (as record.py does) and two runs agree.
if args.hash_seed != "random" and os.environ.get("PYTHONHASHSEED") != args.hash_seed:
    os.environ["PYTHONHASHSEED"] = args.hash_seed
    os.execv(sys.executable, [sys.executable, *sys.argv])
T0_WALL = time.perf_counter()
T0_CPU = time.process_time()

import torch  # noqa: E402

from vllm.config import (  # noqa: E402
    CacheConfig,
    DeviceConfig,
    KVTransferConfig,
    ModelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (  # noqa: E402
    OffloadingConnector,
)
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core import kv_cache_utils as _kcu  # noqa: E402
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    get_request_block_hasher,
    init_none_hash,
    resolve_kv_cache_block_sizes,
)
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheTensor,
)
try:  # 0.32+: one OffloadingWorker per medium, submit_store / submit_load
    from vllm.v1.kv_offload.base import OffloadingWorker, TransferResult  # noqa: E402
    WORKER_API = "submit"
except ImportError:  # 0.24: OffloadingWorker routes transfer_async(job_id, (src, dst)) by medium
    from vllm.v1.kv_offload.worker.worker import OffloadingWorker, TransferResult  # noqa: E402
    WORKER_API = "transfer_async"
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

import logging  # noqa: E402
logging.getLogger("vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler").setLevel(logging.ERROR)
T_IMPORT = time.perf_counter() - T0_WALL

# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------
BS = args.block_size
NUM_GPU_BLOCKS = args.gpu_blocks
MAX_MODEL_LEN = args.max_model_len or (NUM_GPU_BLOCKS - 1) * BS
LAYERS = ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"]
KV_SPEC = FullAttentionSpec(
    block_size=BS, num_kv_heads=2, head_size=64, dtype=torch.bfloat16
)
PAGE = KV_SPEC.page_size_bytes  # per layer per block
BYTES_PER_BLOCK = PAGE * len(LAYERS)
PAGESIZE = os.sysconf("SC_PAGE_SIZE")
BPC = args.blocks_per_chunk
try:  # what CPUOffloadingSpec rounds a chunk up to: the page (0.32+), 1 (0.24)
    from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec as _CPUSpec  # noqa: E402
    PAGESIZE = int(getattr(_CPUSpec, "BLOCK_SIZE_ALIGNMENT", PAGESIZE))
except ImportError:
    pass
ALIGNED = -(-(BYTES_PER_BLOCK * BPC) // PAGESIZE) * PAGESIZE
CPU_BYTES = args.host_chunks * ALIGNED  # -> exactly host_chunks chunks of BPC blocks

model_config = ModelConfig(
    model=os.path.join(HERE, "scheduler-replay-model"),
    skip_tokenizer_init=True,
    max_model_len=MAX_MODEL_LEN,
    dtype="bfloat16",
    seed=0,
)
scheduler_config = SchedulerConfig(
    max_num_seqs=args.max_num_seqs,
    max_num_batched_tokens=args.max_num_batched_tokens,
    max_model_len=MAX_MODEL_LEN,
    enable_chunked_prefill=True,
    is_encoder_decoder=False,
    async_scheduling=False,
)
cache_config = CacheConfig(
    block_size=BS, enable_prefix_caching=not args.no_prefix_caching, cache_dtype="auto"
)
if args.connector == "offloading":
    _extra = {"cpu_bytes_to_use": CPU_BYTES}
    if BPC != 1:
        _extra["blocks_per_chunk"] = BPC
        if WORKER_API == "transfer_async":
            # 0.24's OffloadingSpec reads the chunk size in tokens ("block_size"); 0.32
            # added "blocks_per_chunk" (engine.py does the same).
            _extra["block_size"] = BPC * BS
    if args.offload_decode:
        _extra["offload_prompt_only"] = False
    kv_transfer_config = KVTransferConfig(
        kv_connector="OffloadingConnector",
        kv_role="kv_both",
        kv_connector_extra_config=_extra,
    )
elif args.connector == "simple-cpu":
    import inspect  # noqa: E402
    from vllm.distributed.kv_transfer.kv_connector.v1 import (  # noqa: E402
        simple_cpu_offload_connector as _scpu_mod,
    )
    if "num_cpu_blocks" in inspect.getsource(_scpu_mod):
        # 0.33+: num_cpu_blocks sizes the CPU pool; the byte budget only has to cover it.
        _cpu_bytes = 1 << 40
    else:
        # 0.24, 0.32: the pool is num_gpu_blocks * cpu_bytes // GPU KV bytes
        # (SimpleCPUOffloadScheduler._derive_cpu_config); 1 TiB would be 67M blocks.
        _cpu_bytes = args.cpu_blocks * BYTES_PER_BLOCK
    _extra = {"num_cpu_blocks": args.cpu_blocks, "cpu_bytes_to_use": _cpu_bytes,
              "lazy_offload": args.lazy}
    kv_transfer_config = KVTransferConfig(
        kv_connector="SimpleCPUOffloadConnector",
        kv_role="kv_both",
        kv_connector_extra_config=_extra,
    )
else:
    kv_transfer_config = None
def _make_vllm_config():
    return VllmConfig(
        model_config=model_config,
        scheduler_config=scheduler_config,
        cache_config=cache_config,
        kv_transfer_config=kv_transfer_config,
        device_config=DeviceConfig(device="cpu"),
    )


try:
    vllm_config = _make_vllm_config()
except ValueError as e:
    # 0.32's VllmConfig refuses Model Runner V2 without Triton (0.33 only warns on a CPU
    # platform); the scheduler side does not use Triton. Validate under V1, then pin V2
    # again before anything reads use_v2_model_runner (as engine.py does).
    if "requires Triton" not in str(e) or os.environ["VLLM_USE_V2_MODEL_RUNNER"] != "1":
        raise
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"
    try:
        vllm_config = _make_vllm_config()
    finally:
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
vllm_config.cache_config.num_gpu_blocks = NUM_GPU_BLOCKS


def make_kv_cache_tensor() -> KVCacheTensor:
    import dataclasses
    fields = {f.name for f in dataclasses.fields(KVCacheTensor)}
    if "layers" in fields:  # 0.32+
        return KVCacheTensor(
            size=NUM_GPU_BLOCKS * BYTES_PER_BLOCK,
            layers=list(LAYERS),
            layer_stride=PAGE * NUM_GPU_BLOCKS,
            block_stride=PAGE,
        )
    # 0.24: one tensor shared by the layers, unpacked (CPUOffloadingSpec sums the sizes)
    return KVCacheTensor(size=NUM_GPU_BLOCKS * BYTES_PER_BLOCK, shared_by=list(LAYERS))


def make_kv_cache_config() -> KVCacheConfig:
    return KVCacheConfig(
        num_blocks=NUM_GPU_BLOCKS,
        kv_cache_tensors=[make_kv_cache_tensor()],
        kv_cache_groups=[KVCacheGroupSpec(list(LAYERS), KV_SPEC)],
    )


sched_kv_cfg = make_kv_cache_config()
worker_kv_cfg = make_kv_cache_config()
sched_bs, hash_bs = resolve_kv_cache_block_sizes(sched_kv_cfg, vllm_config)
if hasattr(_kcu, "resolve_cache_hit_alignment_tokens"):  # 0.32+ (0.24 has no alignment)
    align = _kcu.resolve_cache_hit_alignment_tokens(sched_kv_cfg, vllm_config, sched_bs, hash_bs)
    for c in (sched_kv_cfg, worker_kv_cfg):
        c.hash_block_size = hash_bs
        c.cache_hit_alignment_tokens = align

scheduler = Scheduler(
    vllm_config=vllm_config,
    kv_cache_config=sched_kv_cfg,
    structured_output_manager=StructuredOutputManager(vllm_config),
    block_size=sched_bs,
    hash_block_size=hash_bs,
    log_stats=False,
)
sconn = scheduler.connector


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


def fresh_finished_set():
    if args.finished_order == "finish":
        scheduler.finished_req_ids = FinishOrder()


fresh_finished_set()
import vllm as _vllm  # noqa: E402
print(f"[replay] vllm {_vllm.__version__} use_v2_model_runner="
      f"{getattr(vllm_config, 'use_v2_model_runner', None)} worker_api={WORKER_API}",
      file=sys.stderr)
if args.connector == "offloading":
    assert isinstance(sconn, OffloadingConnector)
    cpu_manager = sconn.connector_scheduler.manager if hasattr(
        sconn.connector_scheduler, "manager") else None
    if cpu_manager is not None:  # 0.24 counts blocks (_num_blocks), 0.32+ chunks
        _got = getattr(cpu_manager, "_num_chunks", None) or getattr(cpu_manager, "_num_blocks", None)
        if _got is not None and _got != args.host_chunks:
            raise SystemExit(f"CPU tier got {_got} chunks, asked for {args.host_chunks}")


# --------------------------------------------------------------------------
# Fake OffloadingWorker under the real OffloadingConnectorWorker
# --------------------------------------------------------------------------
class FakeOffloadingWorker(OffloadingWorker):
    """Completes copies by step count. A store built in step k is submitted by
    OffloadingConnectorWorker at the start of step k+1 (its own deferral), so
    it is due `copy_steps - 1` steps after submission; a load is submitted in
    the step that built it, so it is due `copy_steps` steps after submission.
    wait() (flushes, sync loads) completes the jobs at once."""

    def __init__(self, copy_steps: int):
        self.copy_steps = copy_steps
        self.step = 0
        self.pending: dict[int, int] = {}  # job_id -> due step
        self.done_now: list[int] = []
        self.store_jobs = 0
        self.store_chunks = 0
        self.load_jobs = 0
        self.load_chunks = 0
        self.sync_load_jobs = 0
        self.flushed_jobs = 0

    def transfer_async(self, job_id, spec) -> bool:
        """0.24: one entry point; the direction is the source's medium."""
        src_spec, dst_spec = spec
        if src_spec.medium() == "GPU":
            return self.submit_store(job_id, src_spec, dst_spec)
        return self.submit_load(job_id, src_spec, dst_spec)

    def submit_store(self, job_id, src_spec, dst_spec) -> bool:
        # 0.34 passes DevicePointers as src_spec (resolve_device_pointers is patched
        # out below); the CPU-side dst_spec names the chunks either way.
        self.store_jobs += 1
        self.store_chunks += len(dst_spec.block_ids)
        self.pending[job_id] = self.step + (args.store_copy_steps or self.copy_steps) - 1
        return True

    def submit_load(self, job_id, src_spec, dst_spec, expedited=False) -> bool:
        try:
            EVS.append(f"L{int(wconn.connector_worker._jobs[job_id].req_id) + 1 if False else '?'}:{len(src_spec.block_ids)}")
        except Exception:
            EVS.append(f"L?:{len(src_spec.block_ids)}")
        self.load_jobs += 1
        self.load_chunks += len(src_spec.block_ids)
        if expedited:
            self.sync_load_jobs += 1
        self.pending[job_id] = self.step + self.copy_steps
        return True

    def wait(self, job_ids) -> None:
        for j in job_ids:
            if self.pending.pop(j, None) is not None:
                self.done_now.append(j)
                self.flushed_jobs += 1

    def get_finished(self) -> list[TransferResult]:
        due = [j for j, d in self.pending.items() if d <= self.step]
        for j in due:
            del self.pending[j]
        out = [TransferResult(job_id=j, success=True) for j in self.done_now + due]
        self.done_now = []
        return out


class FakeEvent:
    def __init__(self, due):
        self.due = due

    def query(self):
        return SC_STEP[0] >= self.due

    def synchronize(self):
        pass

    def record(self, *a, **k):
        pass


SC_STEP = [0]


class FakeSimpleCPUBackend:
    """Stands in for DmaCopyBackend: no tensors; an event launched in step k
    is complete from step k + copy_steps on (polled by get_finished)."""

    def __init__(self, copy_steps):
        self.copy_steps = copy_steps
        self.store_jobs = self.store_chunks = self.load_jobs = self.load_chunks = 0
        self.sync_load_jobs = 0
        self.flushed_jobs = 0
        self.pending = {}

    def launch_copy(self, src_blocks, dst_blocks, is_store, event_idx,
                    events_list, wait_event=None):
        if is_store:
            self.store_jobs += 1
            self.store_chunks += len(src_blocks)
            EVS.append(f"S?->{len(src_blocks)}")
        else:
            self.load_jobs += 1
            self.load_chunks += len(src_blocks)
            EVS.append(f"L?:{len(src_blocks)}")
        events_list.append((event_idx, FakeEvent(SC_STEP[0] + self.copy_steps)))


if args.connector == "offloading":
    wconn = OffloadingConnector(vllm_config, KVConnectorRole.WORKER, worker_kv_cfg)
    fake_worker = FakeOffloadingWorker(args.copy_steps)
    wconn.connector_worker.worker = fake_worker  # instead of register_kv_caches()
    _wmod = sys.modules[type(wconn.connector_worker).__module__]
    if hasattr(_wmod, "resolve_device_pointers"):
        # 0.34: the connector worker turns GPU block ids into device pointers through the
        # registered KV caches before submit_store / submit_load; there are none here.
        _wmod.resolve_device_pointers = lambda spec, kv_caches: spec
        if not hasattr(wconn.connector_worker, "_kv_caches"):
            wconn.connector_worker._kv_caches = None
elif args.connector == "simple-cpu":
    from vllm.distributed.kv_transfer.kv_connector.v1.simple_cpu_offload_connector import (  # noqa: E402
        SimpleCPUOffloadConnector,
    )
    assert isinstance(sconn, SimpleCPUOffloadConnector), type(sconn)
    print(f"[simple-cpu] scheduler num_cpu_blocks="
          f"{sconn.scheduler_manager.num_cpu_blocks} free="
          f"{sconn.scheduler_manager.cpu_block_pool.get_num_free_blocks()}",
          file=sys.stderr)
    _sm = sconn.scheduler_manager
    if _sm.num_cpu_blocks != args.cpu_blocks:
        raise SystemExit(f"SimpleCPU got {_sm.num_cpu_blocks} CPU blocks, asked for {args.cpu_blocks}")
    _IN_FIN = [False]
    # 0.24 has no _select_eager_blocks_to_store / _queue_finished_eager_store (its eager
    # stores are built in _prepare_eager_store_specs; no finish-time store): dump without
    # the store events there.
    _orig_sel = getattr(_sm, "_select_eager_blocks_to_store", None)

    def _sel(state, block_ids_by_group):
        start = state.num_stored_blocks[0]
        req = state.request
        out = _orig_sel(state, block_ids_by_group)
        if os.environ.get("SEL_DEBUG") and out[0]:
            ids = block_ids_by_group[0]
            conf = req.num_computed_tokens - req.num_output_placeholders
            from collections import Counter
            cls = Counter(_sm._classify_store_candidate(_sm._gpu_block_pool.blocks[b]).name
                          for b in ids[start:min(len(ids), conf // BS)])
            EVS.append(f"sel{int(req.request_id) + 1}[start={start},conf={conf},ids={len(ids)},adv={out[1][0]},{dict(cls)}]")
        if out[0]:
            EVS.append(f"{'f' if _IN_FIN[0] else 's'}{int(state.request.request_id) + 1}->{len(out[0])}")
        return out
    if _orig_sel is not None:
        _sm._select_eager_blocks_to_store = _sel
    _orig_qf = getattr(_sm, "_queue_finished_eager_store", None)

    def _qf(request, block_ids):
        _IN_FIN[0] = True
        try:
            return _orig_qf(request, block_ids)
        finally:
            _IN_FIN[0] = False
    if _orig_qf is not None:
        _sm._queue_finished_eager_store = _qf
    _orig_gnm2 = _sm.get_num_new_matched_tokens

    def _gnm2(request, num_computed_tokens):
        res = _orig_gnm2(request, num_computed_tokens)
        if res[0] is None or res[0] > 0:
            EVS.append(f"Q{int(request.request_id) + 1}:{num_computed_tokens}+{'None' if res[0] is None else f'Some({res[0]})'}")
        return res
    _sm.get_num_new_matched_tokens = _gnm2
    wconn = SimpleCPUOffloadConnector(vllm_config, KVConnectorRole.WORKER, worker_kv_cfg)
    fake_worker = FakeSimpleCPUBackend(args.copy_steps)
    wh = wconn.worker_handler
    wh._backend = fake_worker           # instead of register_kv_caches()
    wh.num_cpu_blocks = args.cpu_blocks
    wh._store_compute_done = FakeEvent(0)  # no torch.Event / CUDA stream
    torch.cuda.current_stream = lambda *a, **k: None
else:
    wconn = None
    fake_worker = FakeSimpleCPUBackend(args.copy_steps)

# --------------------------------------------------------------------------
# Instrumentation (wrappers that only observe)
# --------------------------------------------------------------------------
C = dict(
    g1_hit_first=0, host_first=0, g1_hit_again=0, host_again=0,
    admissions_with_hits=0, preemptions=0,
    prefill_first=0, decode_first=0, recomputed=0,
    scheduled_tokens=0, nonempty_steps=0,
)
hw: dict[str, int] = {}          # req -> highest position reached
PR: dict[str, list] = {}         # per request: [arrival_ms, finish_ms, g1, restored,
                                 #   computed, recomputed, preemptions]
model_ms = 0.0                   # kvmc's model time: 60 ms prefill step, 20 ms decode
first_alloc_done: set[str] = set()

_orig_alloc = scheduler.kv_cache_manager.allocate_slots


def _alloc(request, num_new_tokens, *a, **kw):
    before = request.num_computed_tokens
    res = _orig_alloc(request, num_new_tokens, *a, **kw)
    if res is not None and before == 0 and "num_new_computed_tokens" in kw:
        loc = kw.get("num_new_computed_tokens", 0)
        ext = kw.get("num_external_computed_tokens", 0)
        rid = request.request_id
        if rid not in first_alloc_done:
            first_alloc_done.add(rid)
            C["g1_hit_first"] += loc
            C["host_first"] += ext
            if rid in PR:
                PR[rid][2] += loc
                PR[rid][3] += ext
            hw[rid] = loc + ext
        else:
            C["g1_hit_again"] += loc
            C["host_again"] += ext
    return res


scheduler.kv_cache_manager.allocate_slots = _alloc

DEBUG_PREEMPT = bool(os.environ.get("REPLAY_DEBUG_PREEMPT"))
steps = 0
_orig_preempt = scheduler._preempt_request


STEP_PREEMPTED: list = []
REQS: dict = {}
EVS: list = []
HEV = [0]
DUMP_ON = bool(args.dump_steps)

# Evictions (kvmc's g1_evictions / host_evictions: blocks or chunks that lost their hash)
# and refused stores (kvmc's store_refusals), counted on every run.
EVICT = dict(g1=0, host=0, refused=0)


def _count_evictions(pool, key):
    orig = pool._maybe_evict_cached_block

    def wrapped(block):
        hit = orig(block)
        if hit:
            EVICT[key] += 1
        return hit
    pool._maybe_evict_cached_block = wrapped


_count_evictions(scheduler.kv_cache_manager.block_pool, "g1")
if args.connector == "simple-cpu":
    _count_evictions(sconn.scheduler_manager.cpu_block_pool, "host")

if args.connector == "offloading":
    _cs = sconn.connector_scheduler
    _mgr = _cs.manager
    _orig_ps = _mgr.prepare_store

    def _ps(keys, req_context, *a, **kw):
        keys = list(keys)
        out = _orig_ps(keys, req_context, *a, **kw)
        r = int(req_context.req_id) + 1
        if out is None:
            EVICT["refused"] += 1
            if DUMP_ON:
                EVS.append(f"S{r}:{len(keys)}->None")
        else:
            HEV[0] += len(out.evicted_keys)
            EVICT["host"] += len(out.evicted_keys)
            if out.keys_to_store and DUMP_ON:
                EVS.append(f"S{r}->{len(out.keys_to_store)}")
        return out
    _mgr.prepare_store = _ps

if args.connector == "offloading" and args.dump_steps:
    _orig_gnm = _cs.get_num_new_matched_tokens

    def _gnm(request, num_computed_tokens, *a, **kw):
        res = _orig_gnm(request, num_computed_tokens, *a, **kw)
        ext = res[0]
        if ext is None or ext > 0:
            EVS.append(f"Q{int(request.request_id) + 1}:{num_computed_tokens}+{'None' if ext is None else f'Some({ext})'}")
        return res
    _cs.get_num_new_matched_tokens = _gnm


def _preempt(request, *a, **kw):
    C["preemptions"] += 1
    STEP_PREEMPTED.append(int(request.request_id) + 1)
    if DEBUG_PREEMPT:
        print(f"[preempt] step {steps + 1} victim {int(request.request_id) + 1} "
              f"computed {request.num_computed_tokens} free "
              f"{scheduler.kv_cache_manager.block_pool.get_num_free_blocks()} "
              f"running {len(scheduler.running)}", file=sys.stderr)
    if request.request_id in PR:
        PR[request.request_id][6] += 1
    return _orig_preempt(request, *a, **kw)


scheduler._preempt_request = _preempt

# --------------------------------------------------------------------------
# Trace -> requests
# --------------------------------------------------------------------------
hash_fn = get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
init_none_hash(hash_fn)
if hasattr(vllm_config, "num_hash_lookahead_tokens"):  # 0.33+
    block_hasher = get_request_block_hasher(
        hash_bs, hash_fn, vllm_config.num_hash_lookahead_tokens
    )
else:
    block_hasher = get_request_block_hasher(hash_bs, hash_fn)

rows = []
SESS_PREV: dict[int, int] = {}
SESS_NEXT: dict[int, int] = {}
SESS_DELAY: dict[int, float] = {}
_last_of_session: dict = {}
with open(args.trace) as f:
    for line in f:
        r = json.loads(line)
        i = len(rows)
        rows.append((r["input_length"], r["output_length"], r["hash_ids"]))
        if args.sessions and r.get("session_id") is not None:
            sid = r["session_id"]
            if sid in _last_of_session:
                p_ = _last_of_session[sid]
                SESS_PREV[i] = p_
                SESS_NEXT[p_] = i
                SESS_DELAY[i] = float(r.get("delay", 0.0))
            _last_of_session[sid] = i
        if args.limit and len(rows) >= args.limit:
            break
PROMPTS: dict[int, list] = {}

intern: dict[int, int] = {}
TBS = args.trace_block_size


def make_request(i: int) -> Request:
    inp, out, hids = rows[i]
    toks: list[int] = []
    for h in hids:
        t = intern.setdefault(h, len(intern))
        toks.extend([t] * TBS)
    del toks[inp:]
    assert len(toks) == inp, (i, len(toks), inp)
    if i in SESS_PREV:
        p_ = SESS_PREV[i]
        toks = PROMPTS.pop(p_) + list(REQS[str(p_)].output_token_ids) + toks
    if len(toks) >= MAX_MODEL_LEN:
        # vLLM's input processor refuses a prompt of max_model_len tokens or more (the
        # client gets an error; kvmc counts it as rejected), and a session's later turns
        # build on it.
        n, j = 1, i
        while j in SESS_NEXT:
            j = SESS_NEXT[j]
            n += 1
        REJECTED[0] += n
        return None
    if i in SESS_NEXT:
        PROMPTS[i] = list(toks)
    # A prompt that fits but whose answer would not stops at max_model_len
    # (Scheduler's check_stop), as kvmc caps it.
    # Each request's sampled tokens get their own range of ids above the prompt tokens'.
    OUT_BASE[str(i)] = NEXT_OUT[0]
    NEXT_OUT[0] += len(toks) + out + 1
    sp = SamplingParams(max_tokens=out, ignore_eos=True, temperature=0.0)
    return Request(
        request_id=str(i),
        prompt_token_ids=toks,
        sampling_params=sp,
        pooling_params=None,
        block_hasher=block_hasher,
    )


REJECTED = [0]
OUT_BASE: dict[str, int] = {}
NEXT_OUT = [0]


def sampled_token(rid: str, pos: int) -> int:
    """Distinct for every (request, position) and from every prompt token (interned trace
    blocks, dense from 0). Below 2**31: 0.34 keeps a request's tokens in a TokenBuffer of
    C ints (OverflowError past it); 1e9 + rid * 1e5 + pos, the earlier scheme, passed it
    at row 11,475 of the conversation trace, and collided for positions past 100,000."""
    t = 1_000_000_000 + OUT_BASE[rid] + pos
    assert t < 2**31, "the trace has too many tokens for 31-bit sampled ids"
    return t


# --------------------------------------------------------------------------
# Engine loop (EngineCore.step + GPUModelRunner's connector lifecycle)
# --------------------------------------------------------------------------
N = len(rows)
next_row = 0
live: set[str] = set()
finished = 0
prompt_tokens = 0
output_tokens = 0
steps = 0
t_start = time.perf_counter()
from vllm.v1.request import RequestStatus  # noqa: E402
PROBE_ROW = os.environ.get("PROBE_ROW")  # 1-based request id (str(i) is 0-based)


def CPUFREE():
    if args.connector == "simple-cpu":
        out = [f"cpufree={sconn.scheduler_manager.cpu_block_pool.get_num_free_blocks()}"]
        if PROBE_ROW is not None and str(int(PROBE_ROW) - 1) in REQS:
            from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id
            pool = sconn.scheduler_manager.cpu_block_pool
            hs = REQS[str(int(PROBE_ROW) - 1)].block_hashes
            present = [i for i, h in enumerate(hs)
                       if pool.cached_block_hash_to_block.get_one_block(make_block_hash_with_group_id(h, 0)) is not None]
            split = int(os.environ.get("PROBE_SPLIT", "1000000000"))
            out.append(f"probe={sum(1 for i in present if i < 32)}/{len(present)}/{sum(1 for i in present if i < split)}/{len(hs)}")
        return out
    return []


import dataclasses as _dc  # noqa: E402
_MRO_HAS_INDEX = "req_id_to_index" in {f.name for f in _dc.fields(ModelRunnerOutput)}


def MRO_INDEX(req_ids):
    """ModelRunnerOutput.req_id_to_index, which 0.34 dropped."""
    return {"req_id_to_index": {rid: k for k, rid in enumerate(req_ids)}} if _MRO_HAS_INDEX else {}


STATUS_CH = {"WAITING": "W", "WAITING_FOR_REMOTE_KVS": "R", "RUNNING": "U", "PREEMPTED": "X"}
DUMP = open(args.dump_steps, "w") if args.dump_steps else None
next_progress = args.progress_every

import heapq  # noqa: E402
ELIGIBLE = [i for i in range(N) if i not in SESS_PREV]
heapq.heapify(ELIGIBLE)
TIMED: list = []
while True:
    while TIMED and TIMED[0][0] <= model_ms + 1e-9:
        heapq.heappush(ELIGIBLE, heapq.heappop(TIMED)[1])
    while len(live) < args.concurrency and ELIGIBLE:
        next_row = heapq.heappop(ELIGIBLE)
        req = make_request(next_row)
        if req is None:
            continue
        prompt_tokens += req.num_prompt_tokens
        if args.per_request:
            PR[req.request_id] = [model_ms, 0.0, 0, 0, 0, 0, 0]
        scheduler.add_request(req)
        REQS[req.request_id] = req
        live.add(req.request_id)
    if not scheduler.has_requests():
        if TIMED and not ELIGIBLE:
            model_ms = max(model_ms, TIMED[0][0])
            continue
        if not ELIGIBLE:
            break
        continue

    STEP_PREEMPTED.clear()
    so = scheduler.schedule()
    fresh_finished_set()  # schedule() handed its set to `so` and started a plain one
    steps += 1
    fake_worker.step = steps
    SC_STEP[0] = steps

    # --- worker side (GPUModelRunner.execute_model + KV connector mixin) ---
    md = so.kv_connector_metadata
    if wconn is None:
        kv_out = None
    else:
        sync_loads = getattr(so, "has_sync_kv_loads", False)  # 0.24: no sync loads
        wconn.handle_preemptions(md)
        wconn.bind_connector_metadata(md)
        if sync_loads:
            wconn.start_load_kv(None)
        # (forward pass would run here)
        if not sync_loads:
            wconn.start_load_kv(None)
        if hasattr(wconn, "finish_forward"):  # 0.34
            wconn.finish_forward()
        wconn.wait_for_save()
        if hasattr(wconn, "get_transfer_results"):  # 0.34: failed_recving too
            tr = wconn.get_transfer_results(so.finished_req_ids)
            fin_send, fin_recv = tr.finished_sending, tr.finished_recving
            extra_out = {"failed_recving": set(tr.failed_recving or ())}
        else:
            fin_send, fin_recv = wconn.get_finished(so.finished_req_ids)
            extra_out = {}
        kv_out = KVConnectorOutput(
            finished_sending=set(fin_send or ()),
            finished_recving=set(fin_recv or ()),
            kv_connector_worker_meta=wconn.build_connector_worker_meta(),
            **extra_out,
        )
        wconn.clear_connector_metadata()

    nst = so.num_scheduled_tokens
    PF0, DF0 = C["prefill_first"], C["decode_first"]
    if so.total_num_scheduled_tokens == 0:
        if kv_out is None:
            mro = ModelRunnerOutput(req_ids=[], sampled_token_ids=[], **MRO_INDEX([]))
        else:
            mro = ModelRunnerOutput.with_kv_conn_output_only(kv_out)
    else:
        C["nonempty_steps"] += 1
        req_ids = list(nst.keys())
        sampled = []
        any_prefill = False
        for rid in req_ids:
            n = nst[rid]
            r = scheduler.requests[rid]
            end = r.num_computed_tokens  # already advanced by schedule()
            start = end - n
            h = hw.get(rid, 0)
            new = max(0, end - max(start, h))
            C["recomputed"] += n - new
            if n == 1 and start >= r.num_prompt_tokens:
                C["decode_first"] += new
            else:
                C["prefill_first"] += new
                any_prefill = True
                if rid in PR:
                    PR[rid][4] += new
            if rid in PR:
                PR[rid][5] += n - new
            if end > h:
                hw[rid] = end
            C["scheduled_tokens"] += n
            # The runner discards the sample of a partial prefill chunk.
            sampled.append([sampled_token(rid, end)] if end >= r.num_tokens else [])
        model_ms += 60.0 if any_prefill else 20.0
        mro = ModelRunnerOutput(
            req_ids=req_ids,
            **MRO_INDEX(req_ids),
            sampled_token_ids=sampled,
            kv_connector_output=kv_out,
        )

    outs = scheduler.update_from_output(so, mro)
    if DUMP is not None:
        parts = []
        for rid in sorted(live, key=int):
            r = REQS[rid]
            st = r.status
            c = STATUS_CH.get(st.name, "F" if RequestStatus.is_finished(st) else "?")
            parts.append(f"{int(rid) + 1}:{c}:{r.num_computed_tokens}:{r.num_output_tokens}")
        sched_str = ",".join(f"{int(k) + 1}={v}" for k, v in sorted(nst.items(), key=lambda kv: int(kv[0])))
        DUMP.write(
            f"{steps} free={scheduler.kv_cache_manager.block_pool.get_num_free_blocks()} "
            f"st={fake_worker.store_jobs}/{fake_worker.store_chunks} "
            f"ld={fake_worker.load_jobs}/{fake_worker.load_chunks} pre={C['preemptions']} ms={model_ms:.0f} "
            f"newpf={C['prefill_first'] - PF0} | "
            + " ".join(parts) + f" || ev {' '.join(EVS + CPUFREE())} hev={HEV[0]} || sched {sched_str} preempted {STEP_PREEMPTED}\n")
        EVS.clear()
        HEV[0] = 0
    for eco in outs.values():
        for o in eco.outputs:
            output_tokens += len(o.new_token_ids)
            if o.finish_reason is not None and o.request_id in live:
                live.discard(o.request_id)
                hw.pop(o.request_id, None)
                if o.request_id in PR:
                    PR[o.request_id][1] = model_ms
                if int(o.request_id) in SESS_NEXT:
                    nx = SESS_NEXT[int(o.request_id)]
                    heapq.heappush(TIMED, (model_ms + SESS_DELAY.get(nx, 0.0), nx))
                finished += 1
                if finished >= next_progress:
                    el = time.perf_counter() - t_start
                    print(
                        f"[progress] finished {finished}/{N} steps {steps} "
                        f"elapsed {el:.1f}s",
                        file=sys.stderr, flush=True,
                    )
                    next_progress += args.progress_every

wall = time.perf_counter() - T0_WALL
cpu = time.process_time() - T0_CPU
loop_wall = time.perf_counter() - t_start

try:
    import resource
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
except Exception:
    peak_rss_mib = float("nan")

res = dict(
    rows=N,
    finished=finished,
    rejected=REJECTED[0],
    engine_steps=steps,
    nonempty_steps=C["nonempty_steps"],
    prompt_tokens=prompt_tokens,
    output_tokens=output_tokens,
    g1_hit_tokens_first=C["g1_hit_first"],
    host_restored_tokens_first=C["host_first"],
    prefill_computed_first=C["prefill_first"],
    decode_first=C["decode_first"],
    recomputed=C["recomputed"],
    g1_hit_tokens_after_preemption=C["g1_hit_again"],
    host_restored_tokens_after_preemption=C["host_again"],
    scheduled_tokens=C["scheduled_tokens"],
    preemptions=C["preemptions"],
    g1_evictions=EVICT["g1"],
    host_evictions=EVICT["host"],
    store_refusals=EVICT["refused"],
    store_jobs=fake_worker.store_jobs,
    store_chunks=fake_worker.store_chunks,
    load_jobs=fake_worker.load_jobs,
    load_chunks=fake_worker.load_chunks,
    sync_load_jobs=fake_worker.sync_load_jobs,
    flushed_jobs=fake_worker.flushed_jobs,
    pending_copies_at_end=len(fake_worker.pending),
    copy_steps=args.copy_steps,
    hash_seed=os.environ.get("PYTHONHASHSEED", "random"),
    finished_order=args.finished_order,
    import_s=round(T_IMPORT, 2),
    loop_wall_s=round(loop_wall, 2),
    wall_s=round(wall, 2),
    cpu_s=round(cpu, 2),
    peak_rss_mib=round(peak_rss_mib, 1),
)
print(json.dumps(res, indent=1))
if args.per_request:
    with open(args.per_request, "w") as f:
        f.write("line\tarrival_ms\tfinish_ms\tg1_hit\trestored\tcomputed\trecomp\tpreempt\n")
        for rid in sorted(PR, key=int):
            a, fin, g, h, c, rc, pe = PR[rid]
            f.write(f"{int(rid) + 1}\t{a:.1f}\t{fin:.1f}\t{g}\t{h}\t{c}\t{rc}\t{pe}\n")
if args.json_out:
    with open(args.json_out, "w") as f:
        json.dump(res, f, indent=1)
