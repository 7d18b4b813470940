"""The connector's worker side over fake copy engines: the real OffloadingConnectorWorker over
FakeOffloadingWorker, or the real SimpleCPUOffloadConnector worker handler over
FakeSimpleCPUBackend (with the SimpleCPU scheduler-side wrappers that name its stores and
lookups in the step dump). No KV tensors: a copy completes a fixed number of steps after it
was submitted, and each fake counts the jobs and chunks it was given."""

from __future__ import annotations

import os
import sys

import torch

from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (
    OffloadingConnector,
)

from .engine import OffloadingWorker, TransferResult


class FakeOffloadingWorker(OffloadingWorker):
    """Completes copies by step count. A store built in step k is submitted by
    OffloadingConnectorWorker at the start of step k+1 (its own deferral), so
    it is due `copy_steps - 1` steps after submission; a load is submitted in
    the step that built it, so it is due `copy_steps` steps after submission.
    wait() (flushes, sync loads) completes the jobs at once."""

    def __init__(self, copy_steps: int, store_copy_steps: int, state):
        self.copy_steps = copy_steps
        self.store_copy_steps = store_copy_steps  # 0: copy_steps
        self.state = state
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
        self.pending[job_id] = self.step + (self.store_copy_steps or self.copy_steps) - 1
        return True

    def submit_load(self, job_id, src_spec, dst_spec, expedited=False) -> bool:
        # The dump does not name the loading request ("?").
        self.state.EVS.append(f"L?:{len(src_spec.block_ids)}")
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
    """A copy's completion event: done from step `due` on (ReplayState.sc_step)."""

    def __init__(self, state, due):
        self.state = state
        self.due = due

    def query(self):
        return self.state.sc_step >= self.due

    def synchronize(self):
        pass

    def record(self, *a, **k):
        pass


class FakeSimpleCPUBackend:
    """Stands in for DmaCopyBackend: no tensors; an event launched in step k
    is complete from step k + copy_steps on (polled by get_finished)."""

    def __init__(self, copy_steps, state):
        self.copy_steps = copy_steps
        self.state = state
        self.store_jobs = self.store_chunks = self.load_jobs = self.load_chunks = 0
        self.sync_load_jobs = 0
        self.flushed_jobs = 0
        self.pending = {}

    def launch_copy(self, src_blocks, dst_blocks, is_store, event_idx,
                    events_list, wait_event=None):
        if is_store:
            self.store_jobs += 1
            self.store_chunks += len(src_blocks)
            self.state.EVS.append(f"S?->{len(src_blocks)}")
        else:
            self.load_jobs += 1
            self.load_chunks += len(src_blocks)
            self.state.EVS.append(f"L?:{len(src_blocks)}")
        events_list.append((event_idx, FakeEvent(self.state, self.state.sc_step + self.copy_steps)))


def worker_side(engine, state):
    """The worker-side connector and the fake under it: (wconn, fake_worker); wconn is None
    without a connector (the fake then only supplies zero counts)."""
    args = engine.args
    if args.connector == "offloading":
        wconn = OffloadingConnector(engine.vllm_config, KVConnectorRole.WORKER, engine.worker_kv_cfg)
        fake_worker = FakeOffloadingWorker(args.copy_steps, args.store_copy_steps, state)
        wconn.connector_worker.worker = fake_worker  # instead of register_kv_caches()
        _wmod = sys.modules[type(wconn.connector_worker).__module__]
        if hasattr(_wmod, "resolve_device_pointers"):
            # 0.34: the connector worker turns GPU block ids into device pointers through the
            # registered KV caches before submit_store / submit_load; there are none here.
            _wmod.resolve_device_pointers = lambda spec, kv_caches: spec
            if not hasattr(wconn.connector_worker, "_kv_caches"):
                wconn.connector_worker._kv_caches = None
        return wconn, fake_worker
    if args.connector == "simple-cpu":
        return _simple_cpu_worker_side(engine, state)
    return None, FakeSimpleCPUBackend(args.copy_steps, state)


def _simple_cpu_worker_side(engine, state):
    from vllm.distributed.kv_transfer.kv_connector.v1.simple_cpu_offload_connector import (
        SimpleCPUOffloadConnector,
    )
    args, sconn, BS, EVS = engine.args, engine.sconn, engine.bs, state.EVS
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

    def _sel(state_, block_ids_by_group):
        start = state_.num_stored_blocks[0]
        req = state_.request
        out = _orig_sel(state_, block_ids_by_group)
        if os.environ.get("SEL_DEBUG") and out[0]:
            ids = block_ids_by_group[0]
            conf = req.num_computed_tokens - req.num_output_placeholders
            from collections import Counter
            cls = Counter(_sm._classify_store_candidate(_sm._gpu_block_pool.blocks[b]).name
                          for b in ids[start:min(len(ids), conf // BS)])
            EVS.append(f"sel{int(req.request_id) + 1}[start={start},conf={conf},ids={len(ids)},adv={out[1][0]},{dict(cls)}]")
        if out[0]:
            EVS.append(f"{'f' if _IN_FIN[0] else 's'}{int(state_.request.request_id) + 1}->{len(out[0])}")
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
    wconn = SimpleCPUOffloadConnector(engine.vllm_config, KVConnectorRole.WORKER, engine.worker_kv_cfg)
    fake_worker = FakeSimpleCPUBackend(args.copy_steps, state)
    wh = wconn.worker_handler
    wh._backend = fake_worker           # instead of register_kv_caches()
    wh.num_cpu_blocks = args.cpu_blocks
    wh._store_compute_done = FakeEvent(state, 0)  # no torch.Event / CUDA stream
    torch.cuda.current_stream = lambda *a, **k: None
    return wconn, fake_worker
