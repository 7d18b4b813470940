"""Observation of vLLM's scheduler side: wrappers on bound methods of live instances,
per-step snapshots, hash labels, and the JSONL writer (docs/conformance-format.md).

Wraps (instance attributes shadowing the class methods; nothing in vLLM is patched):
* ``OffloadingConnector.get_num_new_matched_tokens`` -> ``lookup`` lines;
* ``OffloadingConnector.update_state_after_alloc`` (+ the scheduler side's
  ``_current_batch_load_jobs``) and ``CPUOffloadingManager.prepare_load`` -> ``load``;
* ``OffloadingConnector.build_connector_meta`` (``OffloadingConnectorMetadata``
  ``store_jobs`` / ``jobs_to_flush``) and ``CPUOffloadingManager.prepare_store`` ->
  ``store``, ``store_refused``, ``evict``, ``flush``;
* ``Scheduler._free_request`` -> ``finish``;
* ``Scheduler._handle_stopped_request`` (a resumable request's input stopped) ->
  ``turn_end``; ``Scheduler._update_request_as_session`` (a session takes its next
  input) -> ``turn_start``.
Reads read-only: ``BlockPool.free_block_queue.get_all_free_blocks()``,
``BlockPool.cached_block_hash_to_block._cache``, ``LRUCachePolicy.chunks`` / ``_ranks`` /
``_evictable`` (eviction order = ascending (rank, key) among evictable keys, which is the
order ``LRUCachePolicy.evict`` pops its heap in).
"""

from __future__ import annotations

import json
import sys

_REASONS = {
    "FINISHED_STOPPED": "stop",
    "FINISHED_LENGTH_CAPPED": "length",
    "FINISHED_ABORTED": "abort",
    "FINISHED_IGNORED": "length",
    "FINISHED_ERROR": "error",
    "FINISHED_REPETITION": "repetition",
}


class H:
    """A block hash or offload key (group id stripped); written as a label."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes):
        self.raw = bytes(raw)


def key_hash(key: bytes) -> H:
    """Offload key / BlockHashWithGroupId -> block hash (drop the 4-byte group id)."""
    return H(bytes(key)[:-4])


def dumps(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))


class Recorder:
    def __init__(self, eng, sc, out, debug: bool = False):
        self.debug = debug
        self.eng = eng
        self.sc = sc
        self.out = out
        self.step = 0
        self.buf: list[dict] = []
        self.arrivals: list = []            # Request objects in arrival order
        self.finished_at: dict[str, int] = {}
        self._store_keys: dict[int, list[bytes]] = {}   # id(store_spec) -> keys
        self._load_calls: list[tuple[list[bytes], list[int]]] = []
        # Streaming-input sessions. turn_of: the input (1-based) a session is serving;
        # turn_hashes: its block_hashes at the end of each earlier input (labels);
        # parked_at: step in which it parked (WAITING_FOR_STREAMING_REQ), until resumed;
        # sent: the inputs (StreamInputSpec) the client has sent. eos_of / sample_name:
        # what the fake model runner samples for a request's current input.
        self.turn_of: dict[str, int] = {}
        self.turn_hashes: dict[str, list[list[bytes]]] = {}
        self.parked_at: dict[str, int] = {}
        self.sent: dict[str, list] = {}
        self.eos_of: dict[str, int | None] = {r.name: r.eos_at for r in sc.requests}
        self.sample_name: dict[str, str] = {}
        self._install()

    # -- emission ---------------------------------------------------------------------
    def emit(self, ev: str, **fields) -> None:
        self.buf.append({"ev": ev, "step": self.step, **fields})

    def header(self) -> None:
        sc = self.sc
        hdr = {
            "ev": "header", "format": 1, "implementation": "vllm", "version": _version(),
            "scenario": sc.name, "connector": sc.connector, "async_scheduling": False,
            "block_size": sc.block_size, "num_gpu_blocks": sc.gpu_blocks,
            "max_num_batched_tokens": sc.max_num_batched_tokens,
            "max_num_seqs": sc.max_num_seqs, "max_model_len": sc.max_model_len,
            "long_prefill_token_threshold": sc.long_prefill_token_threshold,
            "load_failure_policy": sc.load_failure_policy,
            "host_chunks": sc.host_chunks if sc.connector == "offloading" else 0,
            "blocks_per_chunk": sc.blocks_per_chunk,
            "offload_prompt_only": sc.offload_prompt_only,
            "eviction_policy": sc.eviction_policy,
            "sync_load_budget_tokens": sc.sync_load_budget_tokens,
        }
        self.out.write(dumps(hdr) + "\n")

    def _labels(self) -> dict[bytes, str]:
        """Arrival order; a session's inputs in order: "S.i" for its first input's block
        hashes, "S@k.i" for those of input k that no earlier one has."""
        labels: dict[bytes, str] = {}
        for req in self.arrivals:
            rid = req.request_id
            for t, hashes in enumerate([*self.turn_hashes.get(rid, []), req.block_hashes]):
                for i, h in enumerate(hashes):
                    labels.setdefault(bytes(h), f"{rid}.{i}" if t == 0 else f"{rid}@{t + 1}.{i}")
        return labels

    def flush_step(self) -> None:
        labels = self._labels()

        def res(x):
            if isinstance(x, H):
                return labels.get(x.raw, "?" + x.raw.hex()[:16])
            if isinstance(x, list):
                return [res(v) for v in x]
            if isinstance(x, dict):
                return {(res(k) if isinstance(k, H) else k): res(v) for k, v in x.items()}
            return x

        for ev in self.buf:
            assert ev["ev"] != "_store", "prepare_store outside build_connector_meta"
            self.out.write(dumps(res(ev)) + "\n")
        self.buf = []

    def label_order(self, label: str) -> tuple:
        """Sort key for labels: arrival index of the request, then block index."""
        name, _, idx = label.rpartition(".")
        order = {r.request_id: i for i, r in enumerate(self.arrivals)}
        try:
            return (order.get(name, len(order)), int(idx), label)
        except ValueError:
            return (len(order) + 1, 0, label)

    # -- wrappers ---------------------------------------------------------------------
    def _req_of_ctx(self, ctx) -> str | None:
        cs = self.eng.connector.connector_scheduler
        for rid, st in cs._req_status.items():
            if st.req_context is ctx:
                return rid
        return None

    def _install(self) -> None:
        sched = self.eng.scheduler
        orig_free = sched._free_request

        def free_request(request, *a, **kw):
            self.emit("finish", req=request.request_id,
                      reason=_REASONS.get(request.status.name, request.status.name.lower()))
            self.finished_at[request.request_id] = self.step
            self.parked_at.pop(request.request_id, None)
            if self.debug:
                print(f"[debug] step {self.step}: finish {request.request_id} "
                      f"{request.status.name} num_computed_tokens="
                      f"{request.num_computed_tokens} num_tokens={request.num_tokens} "
                      f"num_prompt_tokens={request.num_prompt_tokens}", file=sys.stderr)
            return orig_free(request, *a, **kw)

        sched._free_request = free_request

        orig_stopped = sched._handle_stopped_request

        def handle_stopped_request(request, *a, **kw):
            rid = request.request_id
            if request.resumable:
                self.emit("turn_end", req=rid, turn=self.turn_of[rid],
                          reason=_REASONS.get(request.status.name, request.status.name.lower()))
            finished = orig_stopped(request, *a, **kw)
            if not finished and request.status.name == "WAITING_FOR_STREAMING_REQ":
                self.parked_at[rid] = self.step
            return finished

        sched._handle_stopped_request = handle_stopped_request

        orig_session = sched._update_request_as_session

        def update_request_as_session(session, update, *a, **kw):
            rid = session.request_id
            self.turn_hashes.setdefault(rid, []).append(list(session.block_hashes))
            res = orig_session(session, update, *a, **kw)
            turn = self.turn_of[rid] = self.turn_of[rid] + 1
            self.parked_at.pop(rid, None)
            spec = self.sent[rid][turn - 2]
            assert not spec.end and spec.index == turn
            self.eos_of[rid] = spec.eos_at
            self.sample_name[rid] = f"{rid}@{turn}"
            self.emit("turn_start", req=rid, turn=turn,
                      num_computed=session.num_computed_tokens,
                      num_prompt_tokens=session.num_prompt_tokens)
            return res

        sched._update_request_as_session = update_request_as_session

        conn = self.eng.connector
        if conn is None:
            return
        cs = conn.connector_scheduler
        mgr = self.eng.manager

        orig_lookup = conn.get_num_new_matched_tokens

        def lookup(request, num_computed_tokens, *a, **kw):
            ext, is_async = orig_lookup(request, num_computed_tokens, *a, **kw)
            self.emit("lookup", req=request.request_id, local=num_computed_tokens,
                      external=ext, **{"async": bool(is_async)})
            return ext, is_async

        conn.get_num_new_matched_tokens = lookup

        orig_prepare_load = mgr.prepare_load

        def prepare_load(keys, req_context, *a, **kw):
            keys = list(keys)
            spec = orig_prepare_load(keys, req_context, *a, **kw)
            self._load_calls.append((keys, [int(c) for c in spec.block_ids]))
            return spec

        mgr.prepare_load = prepare_load

        orig_alloc = conn.update_state_after_alloc

        def update_state_after_alloc(request, blocks, num_external_tokens, *a, **kw):
            before = set(cs._current_batch_load_jobs)
            self._load_calls.clear()
            res = orig_alloc(request, blocks, num_external_tokens, *a, **kw)
            for jid in sorted(set(cs._current_batch_load_jobs) - before):
                job = cs._current_batch_load_jobs[jid]
                keys, slots = self._load_calls.pop(0)
                assert slots == [int(c) for c in job.src_spec.block_ids]
                self.emit("load", job=jid, req=job.req_id, keys=[key_hash(k) for k in keys],
                          blocks=[int(b) for b in job.dst_spec.block_ids], slots=slots,
                          sync=bool(job.sync))
            return res

        conn.update_state_after_alloc = update_state_after_alloc

        orig_prepare_store = mgr.prepare_store

        def prepare_store(keys, req_context, *a, **kw):
            keys = list(keys)
            out = orig_prepare_store(keys, req_context, *a, **kw)
            if out is None:
                self.emit("store_refused", req=self._req_of_ctx(req_context),
                          keys=[key_hash(k) for k in keys])
                return out
            if out.evicted_keys:
                self.emit("evict", medium="CPU", keys=[key_hash(k) for k in out.evicted_keys])
            if out.keys_to_store:
                # The job id is known only when build_connector_meta returns: leave a
                # placeholder so the store line lands right after its evict line.
                self._store_keys[id(out.store_spec)] = list(out.keys_to_store)
                self.buf.append({"ev": "_store", "spec": id(out.store_spec)})
            return out

        mgr.prepare_store = prepare_store

        orig_build = conn.build_connector_meta

        def build_connector_meta(scheduler_output, *a, **kw):
            self._store_keys.clear()
            meta = orig_build(scheduler_output, *a, **kw)
            lines = {}
            for jid in sorted(meta.store_jobs):
                job = meta.store_jobs[jid]
                keys = self._store_keys.pop(id(job.dst_spec))
                lines[id(job.dst_spec)] = {
                    "ev": "store", "step": self.step, "job": jid, "req": job.req_id,
                    "keys": [key_hash(k) for k in keys],
                    "blocks": [int(b) for b in job.src_spec.block_ids],
                    "slots": [int(c) for c in job.dst_spec.block_ids]}
            buf = []
            for ev in self.buf:
                if ev["ev"] == "_store":
                    buf.append(lines.pop(ev["spec"]))
                else:
                    buf.append(ev)
            assert not lines and not self._store_keys, "store job without prepare_store"
            self.buf = buf
            if meta.jobs_to_flush:
                self.emit("flush", jobs=sorted(meta.jobs_to_flush))
            self._store_keys.clear()
            return meta

        conn.build_connector_meta = build_connector_meta

    # -- snapshots --------------------------------------------------------------------
    def schedule_line(self, so) -> None:
        tables = {}
        order = {r.request_id: i for i, r in enumerate(self.arrivals)}
        r2b = self.eng.req_to_blocks()
        for rid in sorted(r2b, key=lambda r: order.get(r, len(order))):
            blocks = r2b[rid]
            if blocks:
                tables[rid] = [b.block_id for b in blocks]
        cached = so.scheduled_cached_reqs
        self.emit("schedule",
                  scheduled=[[rid, n] for rid, n in so.num_scheduled_tokens.items()],
                  new=[r.req_id for r in so.scheduled_new_reqs],
                  resumed=sorted(cached.resumed_req_ids),
                  preempted=sorted(so.preempted_req_ids or ()),
                  finished=sorted(so.finished_req_ids or ()),
                  tables=tables)

    def snapshots(self) -> None:
        pool = self.eng.block_pool
        free = [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]
        labels = self._labels()
        cached: dict[str, list[int]] = {}
        for key, val in pool.cached_block_hash_to_block._cache.items():
            raw = bytes(key)[:-4]
            lab = labels.get(raw, "?" + raw.hex()[:16])
            ids = [val.block_id] if hasattr(val, "block_id") else [int(b) for b in val]
            cached.setdefault(lab, []).extend(ids)
        cached = {k: cached[k] for k in sorted(cached, key=self.label_order)}
        self.emit("g1", free=free, cached=cached)
        mgr = self.eng.manager
        if mgr is None:
            return
        pol = mgr._policy
        entries = sorted(pol.chunks.items(), key=lambda kv: kv[1].chunk_id)
        evictable = sorted(pol._evictable, key=lambda k: (pol._ranks[k], k))
        self.emit("host",
                  entries=[{"key": key_hash(k), "slot": c.chunk_id, "ref": c.ref_cnt}
                           for k, c in entries],
                  order=[key_hash(k) for k in evictable])


def _version() -> str:
    import vllm

    return vllm.__version__
