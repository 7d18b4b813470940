"""Probe, not a recorder: drive vLLM 0.33's real MooncakeStoreScheduler without a Mooncake master.

    /work/venv-vllm-0.33.0/bin/python tests/conformance/vllm/mooncake_probe.py

The first step toward recording MooncakeStoreConnector for conformance (docs/conformance.md,
"MooncakeStoreConnector: how it could be recorded"). The scheduler's LookupKeyClient (a ZMQ
request socket to worker rank 0) is replaced by FakeLookupClient, which runs the real
MooncakeStoreWorker.lookup (on a bare worker object) against a set-backed fake store. The fake
worker turns ReqMeta load and save jobs into KVConnectorOutput: every load lands and every save
completes in its step (`kv_connector_worker_meta = MooncakeStoreWorkerMetadata(completed_saves)`).
One request whose first block another instance put in the pool; prints each step's jobs and the
pinned save blocks (`_pinned_saves`), to compare with `kvmc check` stories of the same scope.
"""
import os, sys, threading
from types import SimpleNamespace
sys.path.insert(0, os.path.dirname(__file__))
import engine as E  # tests/conformance/vllm/engine.py (its "mooncake" branch)

from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store import worker as W
from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.data import (
    MooncakeStoreWorkerMetadata, PoolKey)
from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.metrics import (
    MooncakeStoreConnectorStats)
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput

PREFIX = "fake"

class FakeStore:
    def __init__(self): self.keys = set()
    def batch_is_exist(self, keys): return [1 if k in self.keys else 0 for k in keys]

class FakeLookupClient:
    def __init__(self, sched, store):
        w = object.__new__(W.MooncakeStoreWorker)
        w._capacity_only = False
        w.coord = sched._store_coord
        w.hash_block_size = sched._hash_block_size
        w._kv_cache_groups = sched.kv_cache_config.kv_cache_groups
        w.token_dbs = [SimpleNamespace(block_size=g.kv_cache_spec.block_size)
                       for g in w._kv_cache_groups]
        w._lookup_key_prefixes = [(PREFIX,) for _ in w._kv_cache_groups]
        w.store = store
        w._kv_connector_stats_lock = threading.Lock()
        w.kv_connector_stats = MooncakeStoreConnectorStats()
        self.w = w
        self.calls = []
    def lookup(self, req_id, num_tokens, block_hashes, non_block=False):
        r = self.w.lookup(num_tokens, block_hashes)
        self.calls.append((req_id, num_tokens, r))
        return r
    def discard(self, req_id): pass
    def reset(self): return True

def key(h): return PoolKey.build_key_string(PREFIX, h.hex())

sc = SimpleNamespace(block_size=2, gpu_blocks=8, max_num_batched_tokens=8, max_num_seqs=8,
                     max_model_len=12, long_prefill_token_threshold=0,
                     load_failure_policy="recompute", connector="mooncake",
                     async_scheduling=False, enable_prefix_caching=True,
                     host_chunks=0, blocks_per_chunk=1)
eng = E.build_engine(sc)
sched = eng.scheduler
conn = sched.connector
ms = conn.connector_scheduler
store = FakeStore()
ms.client = FakeLookupClient(ms, store)

# another instance put A's first block
A = E.make_request(eng, "A", [11, 12, 13, 14, 15], max_tokens=1, eos=False)
store.keys.add(key(A.block_hashes[0]))
sched.add_request(A)

saves_done = {}
for step in range(1, 6):
    so = sched.schedule()
    meta = so.kv_connector_metadata
    jobs = [(m.req_id, m.can_save, m.store_job_id, m.token_len_chunk,
             None if m.load_spec is None else (m.load_spec.vllm_cached_tokens,
                                                m.load_spec.kvpool_cached_tokens))
            for m in meta.requests]
    print(f"step {step}: sched={dict(so.num_scheduled_tokens)} jobs={jobs} "
          f"pinned={ms._pinned_saves}")
    # fake worker: every load lands and every save completes in this step
    recv = {m.req_id for m in meta.requests if m.load_spec is not None and m.load_spec.can_load}
    completed = {}
    for m in meta.requests:
        if m.can_save:
            for i in range(m.token_len_chunk // 2):
                store.keys.add(key(m.block_hashes[i]))
            completed[m.store_job_id] = 1
    kv_out = KVConnectorOutput(finished_recving=recv or None,
        kv_connector_worker_meta=MooncakeStoreWorkerMetadata(completed) if completed else None)
    if so.total_num_scheduled_tokens == 0:
        mro = ModelRunnerOutput.with_kv_conn_output_only(kv_out)
    else:
        rids = list(so.num_scheduled_tokens)
        reqs = {r: sched.requests[r] for r in rids}
        toks = [[] if reqs[r].is_prefill_chunk else [7] for r in rids]
        extra = {"req_id_to_index": {r: i for i, r in enumerate(rids)}} \
            if "req_id_to_index" in ModelRunnerOutput.__dataclass_fields__ else {}
        mro = ModelRunnerOutput(req_ids=rids, sampled_token_ids=toks, kv_connector_output=kv_out, **extra)
    sched.update_from_output(so, mro)
    print(f"   after: status={A.status.name} computed={A.num_computed_tokens} "
          f"pinned={ms._pinned_saves} free={sched.kv_cache_manager.block_pool.get_num_free_blocks()}")
print("lookups:", ms.client.calls)
