"""``SelfReportingOffloadingConnector``: vLLM's OffloadingConnector, unchanged, that reports its
own decisions through the recorder's observation interface (observe_api.py: ``kvmc_observe``
/ ``kvmc_host``) as a team's connector would, instead of being observed by observe.py's
hooks (a connector with ``kvmc_observe`` is observed through it only).

It exists to test the interface end to end: recorded on the testgen scenarios, its logs must
equal the hook-based recordings of vLLM's OffloadingConnector line for line (the header's
``connector_class`` aside), so the interface carries every connector line the hooks write.

    python record.py ../testgen/preempt-store-t01.toml -o /tmp/p.jsonl \\
        --connector-class example_connector.self_reporting:SelfReportingOffloadingConnector

The reporting code is the connector's own: it wraps its own CPU manager's ``prepare_load`` /
``prepare_store`` (where the keys, host slots and victims are decided) and overrides its
``update_state_after_alloc`` (load jobs) and ``build_connector_meta`` (store jobs, their ids,
``jobs_to_flush``). vLLM 0.33 (``TransferJob.src_spec`` / ``dst_spec``, the LRU policy's
``chunks`` / ``_ranks`` / ``_evictable``).
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (
    OffloadingConnector,
)


class SelfReportingOffloadingConnector(OffloadingConnector):
    _kvmc = None   # observe_api.ConnectorObserver while recorded

    def kvmc_observe(self, observer) -> None:
        self._kvmc = observer
        observer.offload_keys = True   # the manager's keys carry the KV-cache group id
        self._kvmc_loads: list = []    # (keys, host slots) per prepare_load, this allocation
        self._kvmc_stores: list = []   # evict / refused / store decisions, this step, in order
        mgr = self.connector_scheduler.manager
        prepare_load, prepare_store = mgr.prepare_load, mgr.prepare_store

        def load(keys, req_context, *a, **kw):
            keys = list(keys)
            spec = prepare_load(keys, req_context, *a, **kw)
            self._kvmc_loads.append((keys, [int(c) for c in spec.block_ids]))
            return spec

        def store(keys, req_context, *a, **kw):
            keys = list(keys)
            out = prepare_store(keys, req_context, *a, **kw)
            if out is None:
                self._kvmc_stores.append(("refused", self._kvmc_req(req_context), keys))
                return out
            if out.evicted_keys:
                self._kvmc_stores.append(("evict", list(out.evicted_keys)))
            if out.keys_to_store:
                self._kvmc_stores.append(("store", id(out.store_spec), list(out.keys_to_store)))
            return out

        mgr.prepare_load, mgr.prepare_store = load, store

    def _kvmc_req(self, req_context) -> str | None:
        for rid, st in self.connector_scheduler._req_status.items():
            if st.req_context is req_context:
                return rid
        return None

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        cs = self.connector_scheduler
        before = set(cs._current_batch_load_jobs)
        self._kvmc_loads = []
        res = super().update_state_after_alloc(request, blocks, num_external_tokens)
        if self._kvmc is not None:
            for jid in sorted(set(cs._current_batch_load_jobs) - before):
                job = cs._current_batch_load_jobs[jid]
                keys, slots = self._kvmc_loads.pop(0)
                self._kvmc.load(jid, job.req_id, keys, job.dst_spec.block_ids, slots,
                                sync=bool(getattr(job, "sync", False)))
        return res

    def build_connector_meta(self, scheduler_output):
        self._kvmc_stores = []
        meta = super().build_connector_meta(scheduler_output)
        if self._kvmc is None:
            return meta
        job_of = {id(job.dst_spec): jid for jid, job in meta.store_jobs.items()}
        for decision in self._kvmc_stores:
            if decision[0] == "evict":
                self._kvmc.evict(decision[1])
            elif decision[0] == "refused":
                self._kvmc.store_refused(decision[1], decision[2])
            else:
                jid = job_of.pop(decision[1])
                job = meta.store_jobs[jid]
                self._kvmc.store(jid, job.req_id, decision[2], job.src_spec.block_ids,
                                 job.dst_spec.block_ids)
        assert not job_of, "a store job without prepare_store"
        self._kvmc.flush(meta.jobs_to_flush)
        return meta

    def kvmc_host(self):
        pol = self.connector_scheduler.manager._policy
        entries = [(k, c.chunk_id, c.ref_cnt) for k, c in pol.chunks.items()]
        order = sorted(pol._evictable, key=lambda k: (pol._ranks[k], k))
        return entries, order
