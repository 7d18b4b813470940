"""MooncakeStoreConnector (``connector = "mooncake"``): the store, lookup client, fake worker and
observation the recorder needs to drive vLLM's real ``MooncakeStoreScheduler`` without a
Mooncake master (docs/conformance.md, "MooncakeStoreConnector").

* ``FakeStore``: the pool, a set of key strings (``PoolKey.build_key_string``), with
  ``batch_is_exist``, the one store call a lookup makes. ``[mooncake] preload`` puts the full
  blocks of some token sequences into it before the first step (another instance's puts).
* ``FakeLookupClient`` replaces the scheduler's ``LookupKeyClient`` (a ZMQ socket to worker rank
  0): it runs the real ``MooncakeStoreWorker.lookup`` on a bare worker object against the fake
  store, so vLLM's own block alignment and last-token rule apply.
* ``McFakeWorker`` decides when each load and save job finishes and builds the
  ``KVConnectorOutput``: rules in its docstring.
* ``install`` wraps ``MooncakeStoreConnector.build_connector_meta`` (``load`` and ``store``
  lines); ``snapshot`` writes the end-of-step ``mooncake`` line (pool keys, ``_pinned_saves``).

Not a module named ``mooncake``: that is the Mooncake client package's name.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

from fakeworker import FakeWorker, PendingJob

PREFIX = "kvmc"


class FakeStore:
    def __init__(self):
        self.keys: set[str] = set()
        self.raw: dict[str, bytes] = {}   # key string -> block hash (labels)

    def put(self, h) -> bool:
        k = pool_key(h)
        if k in self.keys:
            return False
        self.keys.add(k)
        self.raw[k] = bytes(h)
        return True

    def batch_is_exist(self, keys):
        return [1 if k in self.keys else 0 for k in keys]


def pool_key(h) -> str:
    try:   # 0.34 moved it to layout.py
        from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.layout import PoolKey
    except ImportError:
        from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.data import PoolKey

    return PoolKey.build_key_string(PREFIX, bytes(h).hex())


class FakeLookupClient:
    """``LookupKeyClient`` without the socket: ``MooncakeStoreWorker.lookup`` on a bare worker."""

    def __init__(self, sched, store: FakeStore):
        from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store import worker as W
        from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.metrics import (
            MooncakeStoreConnectorStats)

        w = object.__new__(W.MooncakeStoreWorker)
        w._capacity_only = False
        w.coord = sched._store_coord
        w.hash_block_size = sched._hash_block_size
        w._kv_cache_groups = sched.kv_cache_config.kv_cache_groups
        # 0.34: a store chunk per block (kvmc models no smaller chunks), no selective lease.
        w.token_dbs = [SimpleNamespace(block_size=g.kv_cache_spec.block_size,
                                       chunk_size=g.kv_cache_spec.block_size)
                       for g in w._kv_cache_groups]
        w._selective_lease = None
        w._lookup_key_prefixes = [(PREFIX,) for _ in w._kv_cache_groups]
        w.store = store
        w._kv_connector_stats_lock = threading.Lock()
        w.kv_connector_stats = MooncakeStoreConnectorStats()
        self.w = w

    def lookup(self, req_id, num_tokens, block_hashes, non_block=False, **kw):
        return self.w.lookup(num_tokens, block_hashes)

    def prefetch(self, *a, **kw):   # 0.34: a hint; the fake store has nothing to warm
        return None

    def discard(self, req_id):
        pass

    def reset(self):
        return True

    def close(self):
        pass


def attach(eng, sc, make_request) -> None:
    """Replace the lookup client and fill the pool with ``[mooncake] preload``."""
    from scenario import build_prompt

    ms = eng.connector.connector_scheduler
    store = FakeStore()
    ms.client = FakeLookupClient(ms, store)
    eng.mc_store = store
    eng.mc_preload = []
    eng.mc_labels = {}
    for i, segs in enumerate(sc.mooncake_preload):
        toks = build_prompt(SimpleNamespace(prompt=segs, name=f"pool{i + 1}"), {})
        req = make_request(eng, f"pool{i + 1}", toks, 1, eos=False)
        eng.mc_preload.append(toks)
        for j, h in enumerate(req.block_hashes):
            store.put(h)
            eng.mc_labels.setdefault(bytes(h), f"pool{i + 1}.{j}")
    # The log header's "mooncake" object (save_decode_cache only when on: older logs match).
    eng.mc_header = {"preload": eng.mc_preload}
    if getattr(sc, "mooncake_save_decode_cache", False):
        eng.mc_header["save_decode_cache"] = True


class McFakeWorker:
    """The MooncakeStoreWorker's threads, faked: no KV moves, only when each job finishes.

    Rules (README "Fake-worker rules"): a load job (a ``ReqMeta`` whose ``load_spec.can_load``)
    of step k is due at k + load_delay, a save job (``can_save``, ``store_job_id``) at
    k + store_delay (0 allowed: both are queued in step k, ``start_load_kv`` / ``wait_for_save``);
    each thread runs its jobs in order (a job that is not due holds back later ones). A save
    job puts, as ``KVCacheStoreSendingThread._handle_request`` does, the full blocks from the
    request's saved offset to ``token_len_chunk`` the pool lacks, if the job is still live
    (``stored_requests``): a preemption retires the request's ledger and offset
    (``_close_ended_store_requests``, after this step's jobs). A load job lands in
    ``finished_recving``; a ``[[load_failure]]`` also reports its destination blocks from
    ``from_block`` on in ``invalid_block_ids``. Finished saves go into
    ``MooncakeStoreWorkerMetadata.completed_saves`` (one rank).
    """

    tagged = True    # transfer_done lines name the thread ("kind"): separate job counters

    def __init__(self, sc, eng):
        self.sc = sc
        self.eng = eng
        self.b = sc.block_size
        self.pending: dict[tuple[str, int], PendingJob] = {}
        self.jobs: dict[tuple[str, int], object] = {}      # -> ReqMeta
        self._count: dict[tuple[str, str], int] = {}
        self.used: set[int] = set()
        self.live: dict[str, set[int]] = {}
        self.saved: dict[str, int] = {}
        self.load_ids: dict[int, int] = {}    # id(ReqMeta) -> load job id (set by install)

    def unused(self) -> list[str]:
        out = [f"[[load_failure]] {f.req} #{f.nth}" for f in self.sc.load_failures
               if id(f) not in self.used]
        return out + [f"[[transfer_delay]] {d.req} {d.kind} #{d.nth}"
                      for d in self.sc.delay_overrides if id(d) not in self.used]

    def _nth(self, req: str, kind: str) -> int:
        n = self._count[(req, kind)] = self._count.get((req, kind), 0) + 1
        return n

    def _delay(self, req: str, kind: str, nth: int, default: int) -> int:
        for d in self.sc.delay_overrides:
            if d.req == req and d.kind == kind and d.nth == nth:
                self.used.add(id(d))
                return d.delay
        return default

    def register(self, step: int, meta) -> None:
        for m in meta.requests:
            if m.load_spec is not None and m.load_spec.can_load:
                jid = self.load_ids[id(m)]
                nth = self._nth(m.req_id, "load")
                pj = PendingJob(jid, m.req_id, "load", False, step,
                                step + self._delay(m.req_id, "load", nth, self.sc.load_delay),
                                load_blocks(m, self.b))
                for f in self.sc.load_failures:
                    if f.req == m.req_id and f.nth == nth:
                        self.used.add(id(f))
                        pj.invalid = pj.dst_blocks[f.from_block:]
                        pj.failed = True
                self.pending[("load", jid)] = pj
                self.jobs[("load", jid)] = m
            if m.can_save:
                jid = m.store_job_id
                nth = self._nth(m.req_id, "store")
                self.pending[("store", jid)] = PendingJob(
                    jid, m.req_id, "store", False, step,
                    step + self._delay(m.req_id, "store", nth, self.sc.store_delay),
                    list(m.block_ids[0]))
                self.jobs[("store", jid)] = m
                self.live.setdefault(m.req_id, set()).add(jid)

    def complete(self, step: int, meta) -> list[PendingJob]:
        done: list[PendingJob] = []
        for kind in ("load", "store"):
            blocked = False
            for pj in sorted((p for (k, _), p in self.pending.items() if k == kind),
                             key=lambda p: p.job_id):
                if blocked or pj.due > step:
                    blocked = True
                    continue
                done.append(pj)
        for pj in done:
            del self.pending[(pj.kind, pj.job_id)]
            m = self.jobs.pop((pj.kind, pj.job_id))
            if pj.kind == "store":
                self._put(m)
        for rid in meta.preempted_req_ids or ():
            self.live.pop(rid, None)
            self.saved.pop(rid, None)
        return done

    def _put(self, m) -> None:
        live = self.live.get(m.req_id, set())
        if m.store_job_id in live:
            b = self.b
            for i in range(self.saved.get(m.req_id, 0) // b, m.token_len_chunk // b):
                if i < len(m.block_ids[0]) and m.block_ids[0][i] != 0:
                    self.eng.mc_store.put(m.block_hashes[i])
            self.saved[m.req_id] = m.token_len_chunk
        live.discard(m.store_job_id)

    def failed_line(self, pj: PendingJob) -> dict | None:
        return {"job": pj.job_id, "invalid_blocks": pj.invalid} if pj.failed else None

    def kv_output(self, done: list[PendingJob], meta=None):
        from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.data import (
            MooncakeStoreWorkerMetadata)
        from vllm.v1.outputs import KVConnectorOutput

        recving = {pj.req_id for pj in done if pj.kind == "load"}
        invalid = {b for pj in done if pj.invalid for b in pj.invalid}
        saves = {pj.job_id: 1 for pj in done if pj.kind == "store"}
        return KVConnectorOutput(
            finished_sending=None, finished_recving=recving or None,
            kv_connector_worker_meta=MooncakeStoreWorkerMetadata(saves) if saves else None,
            invalid_block_ids=invalid)

    model_output = FakeWorker.model_output


def load_blocks(m, b: int) -> list[int]:
    """A load job's GPU destinations: the blocks from the block-aligned local hit to the pool
    hit (``KVCacheStoreRecvingThread`` via ``ChunkedTokenDatabase.process_tokens``)."""
    ls = m.load_spec
    start = ls.vllm_cached_tokens // b
    end = -(-ls.kvpool_cached_tokens // b)
    return [int(x) for x in m.block_ids[0][start:end]]


def load_keys(m, b: int) -> list:
    """Each loaded block's key: the hash of the block ending at its chunk end."""
    from observe import H

    ls = m.load_spec
    out = []
    for ci in range(ls.vllm_cached_tokens // b, -(-ls.kvpool_cached_tokens // b)):
        end = min((ci + 1) * b, ls.kvpool_cached_tokens)
        out.append(H(bytes(m.block_hashes[(end // b) - 1])))
    return out


def install(rec) -> None:
    """Wrap ``MooncakeStoreConnector.build_connector_meta``: a ``load`` line per load job and a
    ``store`` line per save job, in ``meta.requests`` order."""
    from observe import H

    conn = rec.eng.connector
    b = rec.sc.block_size
    orig_build = conn.build_connector_meta
    counter = [0]

    def build_connector_meta(scheduler_output, *a, **kw):
        meta = orig_build(scheduler_output, *a, **kw)
        for m in meta.requests:
            if m.load_spec is not None and m.load_spec.can_load:
                jid = counter[0]
                counter[0] += 1
                rec.worker.load_ids[id(m)] = jid
                rec.emit("load", job=jid, req=m.req_id, keys=load_keys(m, b),
                         blocks=load_blocks(m, b), slots=[], sync=False)
            if m.can_save:
                hashes = m.block_hashes[m.token_ids_start // b: m.token_len_chunk // b]
                rec.emit("store", job=m.store_job_id, req=m.req_id,
                         keys=[H(bytes(h)) for h in hashes],
                         blocks=[int(x) for x in m.block_ids[0]], slots=[])
        return meta

    conn.build_connector_meta = build_connector_meta


def snapshot(rec) -> None:
    """End of step: the pool's keys and the save jobs' block references (``_pinned_saves``)."""
    ms = rec.eng.connector.connector_scheduler
    labels = rec._labels()
    pool = [labels.get(raw, "?" + raw.hex()[:16]) for raw in rec.eng.mc_store.raw.values()]
    rec.emit("mooncake", pool=sorted(pool, key=rec.label_order),
             pinned={str(j): [int(x) for x in ids] for j, (ids, _) in sorted(ms._pinned_saves.items())})
