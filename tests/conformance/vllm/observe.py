"""Observation of vLLM's scheduler side: wrappers on bound methods of live instances,
per-step snapshots, hash labels, and the JSONL writer (docs/conformance-format.md).

Wraps (instance attributes shadowing the class methods; nothing in vLLM is patched):
* ``OffloadingConnector.get_num_new_matched_tokens`` -> ``lookup`` lines;
* ``OffloadingConnector.update_state_after_alloc`` (+ the scheduler side's
  ``_current_batch_load_jobs``) and ``CPUOffloadingManager.prepare_load`` -> ``load``;
* ``OffloadingConnector.build_connector_meta`` (``OffloadingConnectorMetadata``
  ``store_jobs`` / ``jobs_to_flush``) and ``CPUOffloadingManager.prepare_store`` ->
  ``store``, ``store_refused``, ``evict``, ``flush``;
* a connector with ``kvmc_observe`` (any other ``KVConnectorBase_V1``, loaded by
  ``record.py --connector-class``): its own calls of observe_api.ConnectorObserver ->
  ``load``, ``store``, ``store_refused``, ``evict``, ``flush``; ``kvmc_host()`` -> ``host``;
* ``Scheduler._free_request`` -> ``finish``;
* ``Scheduler._handle_stopped_request`` (a resumable request's input stopped) ->
  ``turn_end``; ``Scheduler._update_request_as_session`` (a session takes its next
  input) -> ``turn_start``;
* SimpleCPU (``_install_scpu``): ``SimpleCPUOffloadConnector.get_num_new_matched_tokens``
  -> ``lookup`` with ``pins`` (``_pending_cpu_hits``); ``SimpleCPUOffloadScheduler.
  build_connector_meta`` (with ``_select_eager_blocks_to_store`` and
  ``_queue_finished_eager_store`` to split the store event per request; on 0.24
  ``_prepare_eager_store_specs`` and its per-request ``get_new_blocks`` calls) -> ``store``,
  ``load``; the CPU ``BlockPool``'s ``get_new_blocks`` / ``_maybe_evict_cached_block`` ->
  ``evict``; ``update_connector_output`` -> ``load_completed``; ``_process_store_event``
  -> ``store_completed``; end of step: ``cpu`` (free queue, cached map, ref counts,
  ``_pending_cpu_hits``).
* MooncakeStoreConnector and NixlConnector (the P/D producer): their own modules' ``install``
  and ``snapshot`` (mcstore.py, nixlprod.py; ``_OWN_MODULE``).
Reads read-only: ``BlockPool.free_block_queue.get_all_free_blocks()``,
``BlockPool.cached_block_hash_to_block._cache``, ``LRUCachePolicy.chunks`` / ``_ranks`` /
``_evictable`` (eviction order = ascending (rank, key) among evictable keys, which is the
order ``LRUCachePolicy.evict`` pops its heap in).
"""

from __future__ import annotations

import importlib
import json
import sys

from scenario import job_dst, job_src

_REASONS = {
    "FINISHED_STOPPED": "stop",
    "FINISHED_LENGTH_CAPPED": "length",
    "FINISHED_ABORTED": "abort",
    "FINISHED_IGNORED": "length",
    "FINISHED_ERROR": "error",
    "FINISHED_REPETITION": "repetition",
}


# Connectors whose lines and snapshot a module of their own writes (install, snapshot).
_OWN_MODULE = {"mooncake": "mcstore", "nixl": "nixlprod"}


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
    def __init__(self, eng, sc, out, debug: bool = False, hash_seed: str = "0"):
        self.debug = debug
        self.hash_seed = hash_seed
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
        self.api = None   # observe_api.ConnectorObserver for a connector with kvmc_observe
        self._install()

    # -- emission ---------------------------------------------------------------------
    def emit(self, ev: str, **fields) -> None:
        self.buf.append({"ev": ev, "step": self.step, **fields})

    def header(self) -> None:
        sc = self.sc
        hdr = {
            "ev": "header", "format": 1, "implementation": "vllm", "version": _version(),
            "scenario": sc.name, "connector": sc.connector,
            "async_scheduling": bool(getattr(sc, "async_scheduling", False)),
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
        if sc.connector == "mooncake":
            hdr["mooncake"] = self.eng.mc_header    # mcstore.attach
        if sc.connector == "simple-cpu":
            hdr["cpu_blocks"] = sc.cpu_blocks
            if sc.lazy_offload:
                hdr["lazy_offload"] = True
        for key in ("enable_prefix_caching", "scheduler_reserve_full_isl"):   # absent: true (vLLM's default)
            if not getattr(sc, key, True):
                hdr[key] = False
        if getattr(sc, "connector_class", None):   # absent: vLLM's built-in connector
            hdr["connector_class"] = sc.connector_class
        if getattr(sc, "cache_aware_admission_window", 0):   # absent: 0 (off)
            hdr["cache_aware_admission_window"] = sc.cache_aware_admission_window
            hdr["cache_aware_admission_threshold"] = sc.cache_aware_admission_threshold
        if self.hash_seed != "0":   # absent: 0, the fixtures' seed
            hdr["hash_seed"] = int(self.hash_seed) if self.hash_seed.isdigit() else self.hash_seed
        self.out.write(dumps(hdr) + "\n")

    def partial(self, error: str) -> None:
        """The run stopped in this step: drop the step's unwritten lines and end the log with
        the marker `{"ev":"partial","step":N,"error":...}` (the log is partial)."""
        self.buf = []
        self.out.write(dumps({"ev": "partial", "step": self.step, "error": error}) + "\n")
        self.out.flush()

    def _labels(self) -> dict[bytes, str]:
        """Arrival order; a session's inputs in order: "S.i" for its first input's block
        hashes, "S@k.i" for those of input k that no earlier one has."""
        # Mooncake: a preloaded block is named after its sequence ("poolN.i"), also where a
        # request produces it (the pool's snapshot names it before any request arrives).
        labels: dict[bytes, str] = dict(getattr(self.eng, "mc_labels", {}))
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
        scpu = self.eng.scpu

        orig_lookup = conn.get_num_new_matched_tokens

        def lookup(request, num_computed_tokens, *a, **kw):
            ext, is_async = orig_lookup(request, num_computed_tokens, *a, **kw)
            extra = {}
            if scpu is not None:
                # The CPU blocks this call pinned (_pending_cpu_hits; the stale pin of an
                # earlier call was dropped first).
                extra["pins"] = _pins(scpu._pending_cpu_hits.get(request.request_id))
            self.emit("lookup", req=request.request_id, local=num_computed_tokens,
                      external=ext, **{"async": bool(is_async)}, **extra)
            return ext, is_async

        conn.get_num_new_matched_tokens = lookup
        if callable(getattr(conn, "kvmc_observe", None)):
            # Another connector, observed through observe_api.py (its kvmc_observe / kvmc_host).
            from observe_api import ConnectorObserver

            self.api = ConnectorObserver(self)
            conn.kvmc_observe(self.api)
            return
        if scpu is not None:
            self._install_scpu(scpu)
            return
        if self.sc.connector in _OWN_MODULE:   # mcstore.py, nixlprod.py
            return importlib.import_module(_OWN_MODULE[self.sc.connector]).install(self)
        if self.eng.manager is None:
            raise RuntimeError(
                f"connector {type(conn).__module__}:{type(conn).__name__} is not vLLM's "
                f"OffloadingConnector or SimpleCPUOffloadConnector (or a subclass): it must "
                f"implement kvmc_observe / kvmc_host (tests/conformance/vllm/observe_api.py)")
        cs = conn.connector_scheduler
        mgr = self.eng.manager

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
                assert slots == [int(c) for c in job_src(job).block_ids]
                self.emit("load", job=jid, req=job.req_id, keys=[key_hash(k) for k in keys],
                          blocks=[int(b) for b in job_dst(job).block_ids], slots=slots,
                          sync=bool(getattr(job, "sync", False)))   # no sync loads before 0.33
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
                keys = self._store_keys.pop(id(job_dst(job)))
                lines[id(job_dst(job))] = {
                    "ev": "store", "step": self.step, "job": jid, "req": job.req_id,
                    "keys": [key_hash(k) for k in keys],
                    "blocks": [int(b) for b in job_src(job).block_ids],
                    "slots": [int(c) for c in job_dst(job).block_ids]}
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

    def _install_scpu(self, mgr) -> None:
        """SimpleCPUOffloadScheduler (eager, or lazy: one store line with req "-"): load and store lines from the step's
        SimpleCPUOffloadMetadata, split per request; CPU evictions; the completions
        update_connector_output processes."""
        cpu_pool = mgr.cpu_block_pool
        gpu_pool = self.eng.block_pool
        self.store_event_reqs: list[str] = []
        in_build = [False]
        eager: list[tuple[str, list[int]]] = []
        prepping = [False]                   # inside 0.24's _prepare_eager_store_specs
        prep_sizes: list[int] = []           # its get_new_blocks calls, one per request
        finish_req: dict[int, str] = {}      # id(TransferMeta) of a finish-time store -> req
        evicted: list[H] = []

        orig_evict = cpu_pool._maybe_evict_cached_block

        def maybe_evict(block):
            h = block.block_hash
            res = orig_evict(block)
            if res:
                evicted.append(key_hash(h))
            return res

        cpu_pool._maybe_evict_cached_block = maybe_evict

        orig_new = cpu_pool.get_new_blocks

        def get_new_blocks(n):
            if prepping[0]:
                prep_sizes.append(n)
            evicted.clear()
            res = orig_new(n)
            if evicted:
                self.emit("evict", medium="CPU", keys=list(evicted))
            evicted.clear()
            return res

        cpu_pool.get_new_blocks = get_new_blocks

        if hasattr(mgr, "_select_eager_blocks_to_store"):
            orig_select = mgr._select_eager_blocks_to_store

            def select(state, block_ids_by_group):
                res = orig_select(state, block_ids_by_group)
                if in_build[0]:
                    eager.append((state.request.request_id, list(res[0])))
                return res

            mgr._select_eager_blocks_to_store = select
        else:
            # 0.24: _prepare_eager_store_specs selects inline, request by request in
            # yield_req_data order; each request that stores a block takes its CPU blocks
            # with one cpu_block_pool.get_new_blocks(n) call, then its req_id and its n GPU
            # block ids are appended to the returned lists. Split the merged list by those
            # calls' sizes.
            orig_prep = mgr._prepare_eager_store_specs

            def prepare_eager(scheduler_output):
                prep_sizes.clear()
                prepping[0] = True
                try:
                    gpu, cpu, rids = orig_prep(scheduler_output)
                finally:
                    prepping[0] = False
                assert len(rids) == len(prep_sizes) and sum(prep_sizes) == len(gpu), \
                    "eager store split"
                if in_build[0]:
                    i = 0
                    for rid, n in zip(rids, prep_sizes):
                        eager.append((rid, list(gpu[i:i + n])))
                        i += n
                return gpu, cpu, rids

            mgr._prepare_eager_store_specs = prepare_eager

        if hasattr(mgr, "_queue_finished_eager_store"):   # 0.24 has no finish-time store
            orig_queue = mgr._queue_finished_eager_store

            def queue_finished(request, block_ids):
                n = len(mgr._pending_finished_stores)
                res = orig_queue(request, block_ids)
                for t in mgr._pending_finished_stores[n:]:
                    finish_req[id(t)] = request.request_id
                return res

            mgr._queue_finished_eager_store = queue_finished

        orig_build = mgr.build_connector_meta

        def build_connector_meta(scheduler_output, *a, **kw):
            eager.clear()
            queued = list(getattr(mgr, "_pending_finished_stores", ()))
            in_build[0] = True
            try:
                meta = orig_build(scheduler_output, *a, **kw)
            finally:
                in_build[0] = False
            # The store event: eager parts in yield_req_data order, then the finish-time
            # transfers queued since the last step (_pending_finished_stores order).
            parts = [(rid, g) for rid, g in eager if g]
            parts += [(finish_req.pop(id(t)), list(t.gpu_block_ids)) for t in queued]
            if getattr(mgr, "_lazy_mode", False) and not parts and meta.store_gpu_blocks:
                # Lazy mode: one store of the blocks near eviction, owned by no request.
                parts = [("-", [int(b) for b in meta.store_gpu_blocks])]
            i = 0
            for rid, g in parts:
                assert list(meta.store_gpu_blocks[i:i + len(g)]) == g, "store event split"
                cpu = [int(c) for c in meta.store_cpu_blocks[i:i + len(g)]]
                self.emit("store", job=meta.store_event, req=rid,
                          keys=[key_hash(gpu_pool.blocks[b].block_hash) for b in g],
                          blocks=[int(b) for b in g], slots=cpu)
                i += len(g)
            assert i == len(meta.store_gpu_blocks), "store event blocks without a part"
            self.store_event_reqs = [rid for rid, _ in parts]
            if getattr(self, "worker", None) is not None:
                self.worker.store_reqs = self.store_event_reqs
            if meta.load_event >= 0:
                for rid in meta.load_event_to_reqs[meta.load_event]:
                    t = mgr._reqs_to_load[rid].transfer_meta
                    self.emit("load", job=meta.load_event, req=rid,
                              keys=[key_hash(cpu_pool.blocks[c].block_hash)
                                    for c in t.cpu_block_ids],
                              blocks=[int(b) for b in t.gpu_block_ids],
                              slots=[int(c) for c in t.cpu_block_ids], sync=False)
            return meta

        mgr.build_connector_meta = build_connector_meta

        orig_update = mgr.update_connector_output

        def update_connector_output(connector_output, *a, **kw):
            # Load completions are processed first (then store events, _process_store_event).
            for rid in sorted(connector_output.finished_recving or ()):
                st = mgr._reqs_to_load.get(rid) or mgr._abandoned_reqs_to_load.get(rid)
                if st is not None:
                    self.emit("load_completed", req=rid, job=st.load_event)
            return orig_update(connector_output, *a, **kw)

        mgr.update_connector_output = update_connector_output

        orig_process = mgr._process_store_event

        def process_store_event(event_idx, *a, **kw):
            t = mgr._store_event_to_blocks.get(event_idx)
            res = orig_process(event_idx, *a, **kw)
            if t is not None:
                self.emit("store_completed", job=event_idx,
                          keys=[key_hash(cpu_pool.blocks[c].block_hash)
                                for c in t.cpu_block_ids],
                          slots=[int(c) for c in t.cpu_block_ids])
            return res

        mgr._process_store_event = process_store_event

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
                  # 0.34 lists every resumed request in scheduled_new_reqs (no field).
                  resumed=sorted(getattr(cached, "resumed_req_ids", ())),
                  preempted=sorted(so.preempted_req_ids or ()),
                  finished=sorted(so.finished_req_ids or ()),
                  tables=tables)

    def _cpu_snapshot(self, mgr, labels) -> None:
        """SimpleCPU's CPU BlockPool at the end of the step: the free queue (head = next
        to hand out), the cached map, the referenced blocks' ref counts, and the lookup
        pins still held (_pending_cpu_hits)."""
        pool = mgr.cpu_block_pool
        free = [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]
        cached: dict[str, list[int]] = {}
        for key, ids in _cached_ids(pool):
            raw = bytes(key)[:-4]
            lab = labels.get(raw, "?" + raw.hex()[:16])
            cached.setdefault(lab, []).extend(ids)
        cached = {k: cached[k] for k in sorted(cached, key=self.label_order)}
        refs = {str(b.block_id): b.ref_cnt for b in pool.blocks
                if not b.is_null and b.ref_cnt > 0}
        order = {r.request_id: i for i, r in enumerate(self.arrivals)}
        pins = {rid: _pins(p) for rid, p in sorted(
            mgr._pending_cpu_hits.items(), key=lambda kv: order.get(kv[0], len(order)))}
        self.emit("cpu", free=free, cached=cached, refs=refs, pins=pins)

    def snapshots(self) -> None:
        pool = self.eng.block_pool
        free = [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]
        labels = self._labels()
        cached: dict[str, list[int]] = {}
        for key, ids in _cached_ids(pool):
            raw = bytes(key)[:-4]
            lab = labels.get(raw, "?" + raw.hex()[:16])
            cached.setdefault(lab, []).extend(ids)
        cached = {k: cached[k] for k in sorted(cached, key=self.label_order)}
        self.emit("g1", free=free, cached=cached)
        if self.api is not None:
            self.api.host_line(self.eng.connector)
            return
        scpu = self.eng.scpu
        if scpu is not None:
            self._cpu_snapshot(scpu, labels)
            return
        if self.sc.connector in _OWN_MODULE:
            return importlib.import_module(_OWN_MODULE[self.sc.connector]).snapshot(self)
        mgr = self.eng.manager
        if mgr is None:
            return
        pol = mgr._policy
        if hasattr(pol, "t1"):
            # ARC (eviction_policy = "arc"): T1 and T2 map keys to their status (block_id in
            # 0.24, chunk_id later), LRU -> MRU. kvmc's eviction order is the ready keys of T1
            # and then of T2; the lists themselves and target_t1_size follow in `arc`.
            def slot(c):
                return c.block_id if hasattr(c, "block_id") else c.chunk_id
            both = list(pol.t1.items()) + list(pol.t2.items())
            entries = sorted(((k, slot(c), c.ref_cnt) for k, c in both), key=lambda e: e[1])
            self.emit("host",
                      entries=[{"key": key_hash(k), "slot": s, "ref": ref} for k, s, ref in entries],
                      order=[key_hash(k) for k, c in both if c.ref_cnt == 0],
                      arc={"t1": [key_hash(k) for k in pol.t1], "t2": [key_hash(k) for k in pol.t2],
                           "b1": [key_hash(k) for k in pol.b1], "b2": [key_hash(k) for k in pol.b2],
                           "target": float(pol.target_t1_size)})
            return
        if hasattr(pol, "evictable_blocks"):
            # 0.24: BlockStatus per key (block_id), evictable keys in an OrderedDict whose
            # order is LRUCachePolicy.evict's.
            entries = [(k, c.block_id, c.ref_cnt) for k, c in pol.blocks.items()]
            evictable = list(pol.evictable_blocks)
        else:
            entries = [(k, c.chunk_id, c.ref_cnt) for k, c in pol.chunks.items()]
            evictable = sorted(pol._evictable, key=lambda k: (pol._ranks[k], k))
        entries.sort(key=lambda e: e[1])
        self.emit("host",
                  entries=[{"key": key_hash(k), "slot": slot, "ref": ref}
                           for k, slot, ref in entries],
                  order=[key_hash(k) for k in evictable])


def _cached_ids(pool):
    """(key, [block ids]) for every key of a BlockPool's prefix-cache map, in the map's
    order. 0.24 to 0.33 store a KVCacheBlock, or a dict {block_id: KVCacheBlock} for a key
    several blocks hold; 0.34 stores a block id, and the ids of such keys in ``_dup_ids``
    (insertion order, the same order)."""
    m = pool.cached_block_hash_to_block
    dups = getattr(m, "_dup_ids", None)
    for key, val in m._cache.items():
        if dups is not None:
            yield key, [int(b) for b in dups[key]] if key in dups else [int(val)]
        elif hasattr(val, "block_id"):
            yield key, [val.block_id]
        else:
            yield key, [int(b) for b in val]


def _pins(pending) -> list[int]:
    """The non-null CPU blocks of a _pending_cpu_hits entry (or [])."""
    if pending is None:
        return []
    return [b.block_id for grp in pending[0] for b in grp if not b.is_null]


def _version() -> str:
    import vllm

    return vllm.__version__
