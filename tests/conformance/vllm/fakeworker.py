"""Fake worker: decides when each OffloadingConnector transfer job (``FakeWorker``) or
SimpleCPUOffloadConnector store / load event (``ScpuFakeWorker``, at the end of this file)
completes and builds the per-step ``ModelRunnerOutput`` / ``KVConnectorOutput`` that vLLM's
model runner would return.

Drives (builds) these vLLM 0.33 objects:
``vllm.v1.outputs.ModelRunnerOutput`` (and ``ModelRunnerOutput.with_kv_conn_output_only``
for steps without scheduled tokens), ``vllm.v1.outputs.KVConnectorOutput`` and
``...kv_connector.v1.offloading.common.OffloadingWorkerMetadata`` (``mark_completed``).
It reads ``OffloadingConnectorMetadata`` (``load_jobs``, ``store_jobs``,
``jobs_to_flush``) from the ``SchedulerOutput``.

Rules (README "Fake-worker rules"):
* a store job created in step k is due at k + store_delay (default 1, at least 1);
* an async load job created in step k is due at k + load_delay (default 1); a sync load
  is reported in the step that created it (vLLM waits for it before the forward);
* a job in ``jobs_to_flush`` is reported in that step, together with every pending
  store job submitted before it (store jobs are submitted in the step after their
  creation, a job flushed in its creation step at once; the real CPU worker's copy
  stream runs in submission order, so ``wait`` on the flushed job covers them);
* per direction (store, async load) jobs are reported in FIFO order: a due job waits
  for every earlier job of its direction (as ``CPUOffloadingWorker.get_finished``);
* every completed job goes into ``completed_jobs``; an async load also puts its request
  into ``finished_recving``; a failing load (scenario ``[[load_failure]]``) is still
  reported complete and its destination GPU blocks go into ``invalid_block_ids``;
* where the OffloadingConnector's worker reports failures per request (0.34+:
  ``OffloadingConnectorWorker.take_failed_recving`` exists), a failing load is reported as
  its real worker's ``get_finished`` does instead: the job is marked completed with
  ``success=False`` (``failed_jobs``), and an async load's request goes into
  ``finished_recving`` and ``failed_recving``, with no block ids; a failing sync load raises
  RuntimeError ("KV offload sync load job N failed"), as the real worker does (the engine
  stops).
"""

from __future__ import annotations

from dataclasses import dataclass

from scenario import Scenario, job_dst, job_src, sampled_token


@dataclass
class PendingJob:
    job_id: int
    req_id: str
    kind: str            # "store" | "load"
    sync: bool
    created: int         # step
    due: int             # step
    dst_blocks: list[int]
    invalid: list[int] | None = None   # set for a failing load
    failed: bool = False                # a failing load (the scenario's [[load_failure]])
    flushed_at_creation: bool = False


def request_level_failures() -> bool:
    """Does the installed vLLM's OffloadingConnector worker report a failed load per request
    (``failed_jobs`` / ``failed_recving``, 0.34+) rather than by ``invalid_block_ids``?"""
    try:
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.worker import (
            OffloadingConnectorWorker,
        )
    except ImportError:
        return False
    return hasattr(OffloadingConnectorWorker, "take_failed_recving")


class FakeWorker:
    tagged = False   # transfer_done lines carry no "kind" (one job counter)

    def __init__(self, sc: Scenario):
        self.sc = sc
        self.pending: dict[int, PendingJob] = {}
        self._count: dict[tuple[str, str], int] = {}   # (req, kind) -> jobs seen
        self.used: set[int] = set()   # ids of the scenario's failures/overrides applied
        self.request_level = request_level_failures()

    def failed_line(self, pj: PendingJob) -> dict | None:
        """The fields of pj's ``transfer_failed`` line, or None if pj did not fail: the
        invalid blocks, or (request-level, 0.34+) the job alone."""
        if self.request_level:
            return {"job": pj.job_id} if pj.failed else None
        return {"job": pj.job_id, "invalid_blocks": pj.invalid} if pj.invalid else None

    def unused(self) -> list[str]:
        """Scenario failures/overrides that never matched a job (a scenario bug)."""
        out = [f"[[load_failure]] {f.req} #{f.nth}" for f in self.sc.load_failures
               if id(f) not in self.used]
        out += [f"[[transfer_delay]] {d.req} {d.kind} #{d.nth}"
                for d in self.sc.delay_overrides if id(d) not in self.used]
        return out

    # -- job registration -------------------------------------------------------------
    def _delay_for(self, req_id: str, kind: str, nth: int, default: int) -> int:
        for d in self.sc.delay_overrides:
            if d.req == req_id and d.kind == kind and d.nth == nth:
                self.used.add(id(d))
                return d.delay
        return default

    def _failure_for(self, req_id: str, nth: int):
        for f in self.sc.load_failures:
            if f.req == req_id and f.nth == nth:
                self.used.add(id(f))
                return f
        return None

    def register(self, step: int, meta) -> None:
        """Register the jobs of this step's OffloadingConnectorMetadata."""
        if meta is None:
            return
        for job_id in sorted(meta.load_jobs):
            job = meta.load_jobs[job_id]
            nth = self._count.get((job.req_id, "load"), 0) + 1
            self._count[(job.req_id, "load")] = nth
            dst = [int(b) for b in job_dst(job).block_ids]
            delay = 0 if getattr(job, "sync", False) else self._delay_for(job.req_id, "load", nth,
                                                       self.sc.load_delay)
            pj = PendingJob(job_id, job.req_id, "load", bool(getattr(job, "sync", False)), step,
                            step + delay, dst)
            fail = self._failure_for(job.req_id, nth)
            if fail is not None:
                pj.invalid = dst[fail.from_block:]
                pj.failed = True
            self.pending[job_id] = pj
        for job_id in sorted(meta.store_jobs):
            job = meta.store_jobs[job_id]
            nth = self._count.get((job.req_id, "store"), 0) + 1
            self._count[(job.req_id, "store")] = nth
            delay = self._delay_for(job.req_id, "store", nth, self.sc.store_delay)
            self.pending[job_id] = PendingJob(
                job_id, job.req_id, "store", False, step, step + max(delay, 1),
                [int(b) for b in job_src(job).block_ids])

    # -- completion -------------------------------------------------------------------
    @staticmethod
    def _submitted(pj: PendingJob) -> int:
        """Step in which the worker submits the job: stores are deferred to the next
        step (``prepare_store_kv``), unless flushed in their creation step."""
        if pj.kind == "store" and not pj.flushed_at_creation:
            return pj.created + 1
        return pj.created

    def complete(self, step: int, meta) -> list[PendingJob]:
        """Jobs reported in this step, in job-id order."""
        flushed = set(meta.jobs_to_flush or ()) if meta is not None else set()
        forced: set[int] = set()
        for jid in flushed:
            pj = self.pending.get(jid)
            if pj is None:
                continue
            if pj.created == step:
                pj.flushed_at_creation = True
            forced.add(jid)
        # wait(flushed) also covers every store submitted before it (one copy stream,
        # in submission order).
        if forced:
            horizon = max((self._submitted(self.pending[j]), j) for j in forced)
            for pj in self.pending.values():
                if pj.kind == "store" and (self._submitted(pj), pj.job_id) <= horizon:
                    forced.add(pj.job_id)
        done: list[PendingJob] = []
        for direction in ("store", "async-load"):
            queue = sorted(
                (pj for pj in self.pending.values()
                 if (pj.kind == "store") == (direction == "store") and not pj.sync),
                key=lambda pj: (self._submitted(pj), pj.job_id))
            blocked = False   # FIFO: a job that is not done holds back later ones
            for pj in queue:
                if pj.job_id in forced or (not blocked and pj.due <= step):
                    done.append(pj)
                else:
                    blocked = True
        done.extend(pj for pj in self.pending.values() if pj.sync and pj.due <= step)
        for pj in done:
            del self.pending[pj.job_id]
        return sorted(done, key=lambda pj: pj.job_id)

    # -- outputs ----------------------------------------------------------------------
    def kv_output(self, done: list[PendingJob], meta=None):
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
            OffloadingWorkerMetadata,
        )
        from vllm.v1.outputs import KVConnectorOutput

        wmeta = OffloadingWorkerMetadata()
        finished_recving: set[str] = set()
        invalid: set[int] = set()
        failed_recving: set[str] = set()
        for pj in done:
            if self.request_level and pj.failed:
                # OffloadingConnectorWorker.get_finished (0.34): the job is in failed_jobs;
                # a sync load's request already ran on the unloaded KV.
                wmeta.mark_completed(pj.job_id, success=False)
                if pj.sync:
                    raise RuntimeError(f"KV offload sync load job {pj.job_id} failed")
                failed_recving.add(pj.req_id)
                finished_recving.add(pj.req_id)
                continue
            wmeta.mark_completed(pj.job_id)
            if pj.kind == "load" and not pj.sync:
                finished_recving.add(pj.req_id)
            if pj.invalid:
                invalid.update(pj.invalid)
        extra = {"failed_recving": failed_recving} if failed_recving else {}
        return KVConnectorOutput(
            finished_sending=None,
            finished_recving=finished_recving or None,
            kv_connector_worker_meta=wmeta,
            invalid_block_ids=invalid,
            **extra,
        )

    def model_output(self, so, requests: dict, kv_out, eos_of: dict[str, int | None],
                     sample_name: dict[str, str] | None = None):
        """Build the ModelRunnerOutput for SchedulerOutput `so`. Returns (mro, sampled)
        where sampled is [(req_id, token)] in num_scheduled_tokens order. `eos_of` is the
        EOS position of each request's current input; `sample_name` renames a streaming
        session in its later inputs (``S@2``) for the token ids."""
        from vllm.v1.outputs import ModelRunnerOutput

        if so.total_num_scheduled_tokens == 0:
            if kv_out is None:
                from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT
                return EMPTY_MODEL_RUNNER_OUTPUT, []
            return ModelRunnerOutput.with_kv_conn_output_only(kv_out), []
        req_ids = list(so.num_scheduled_tokens)
        sampled_ids: list[list[int]] = []
        sampled: list[tuple[str, int]] = []
        for rid in req_ids:
            req = requests[rid]
            if req.is_prefill_chunk:
                sampled_ids.append([])
                continue
            name = (sample_name or {}).get(rid, rid)
            # Under async scheduling the tokens of batches still in flight are placeholders
            # (AsyncScheduler._update_after_schedule counted this batch's in
            # num_output_placeholders): the worker samples output token number
            # len(output_token_ids) + placeholders - 1. Synchronous: no placeholders.
            ahead = max(getattr(req, "num_output_placeholders", 0) - 1, 0)
            tok = sampled_token(name, len(req.output_token_ids) + ahead, eos_of.get(rid))
            sampled_ids.append([tok])
            sampled.append((rid, tok))
        extra = {}
        if "req_id_to_index" in ModelRunnerOutput.__dataclass_fields__:   # gone in 0.34
            extra["req_id_to_index"] = {rid: i for i, rid in enumerate(req_ids)}
        mro = ModelRunnerOutput(req_ids=req_ids, sampled_token_ids=sampled_ids,
                                kv_connector_output=kv_out, **extra)
        return mro, sampled


class ScpuFakeWorker:
    """The fake worker for the SimpleCPUOffloadConnector (``SimpleCPUOffloadWorker``): no
    memory is copied; only when each event is reported is decided.

    Reads ``SimpleCPUOffloadMetadata`` (``load_event``, ``load_event_to_reqs``,
    ``store_event``, ``need_flush``) and builds ``KVConnectorOutput`` with
    ``finished_recving`` (the requests of each completed load event, looked up in the
    step's ``load_event_to_reqs`` as ``SimpleCPUOffloadWorker.get_finished`` does) and
    ``SimpleCPUOffloadWorkerMetadata(completed_store_events={event: 1})`` (one worker).

    Rules (README "Fake-worker rules"): both events of step k are launched in step k
    (loads in ``start_load_kv``, stores in ``wait_for_save``); a store event is due at
    k + store_delay, a load event at k + load_delay (``[[transfer_delay]]`` overrides
    apply to the nth event holding a part of that request); each stream reports in
    launch order (``_poll_stream_events`` keeps a high-water mark); ``need_flush``
    (``handle_preemptions`` -> ``_flush_and_sync_all``, before this step's launches)
    completes every event launched in an earlier step.
    """

    tagged = True    # transfer_done lines name the stream ("kind")

    def __init__(self, sc: Scenario):
        self.sc = sc
        self.pending: dict[tuple[str, int], PendingJob] = {}
        self._count: dict[tuple[str, str], int] = {}
        self.used: set[int] = set()
        self.store_reqs: list[str] = []    # set by the recorder: requests of the store event

    def unused(self) -> list[str]:
        return [f"[[transfer_delay]] {d.req} {d.kind} #{d.nth}"
                for d in self.sc.delay_overrides if id(d) not in self.used]

    def _delay(self, reqs: list[str], kind: str, default: int) -> int:
        delay = default
        for rid in dict.fromkeys(reqs):
            nth = self._count.get((rid, kind), 0) + 1
            self._count[(rid, kind)] = nth
            for d in self.sc.delay_overrides:
                if d.req == rid and d.kind == kind and d.nth == nth:
                    self.used.add(id(d))
                    delay = d.delay
        return delay

    def register(self, step: int, meta) -> None:
        if meta.load_event >= 0:
            reqs = list(meta.load_event_to_reqs.get(meta.load_event, []))
            delay = self._delay(reqs, "load", self.sc.load_delay)
            self.pending[("load", meta.load_event)] = PendingJob(
                meta.load_event, ",".join(reqs), "load", False, step, step + delay,
                list(meta.load_gpu_blocks))
        if meta.store_event >= 0:
            delay = self._delay(self.store_reqs, "store", self.sc.store_delay)
            self.pending[("store", meta.store_event)] = PendingJob(
                meta.store_event, ",".join(self.store_reqs), "store", False, step,
                step + delay, list(meta.store_gpu_blocks))

    def complete(self, step: int, meta) -> list[PendingJob]:
        """Events reported in this step: loads first, then stores, each by event id."""
        done: list[PendingJob] = []
        for kind in ("load", "store"):
            queue = sorted((pj for (k, _), pj in self.pending.items() if k == kind),
                           key=lambda pj: pj.job_id)
            blocked = False
            for pj in queue:
                flushed = meta.need_flush and pj.created < step
                if flushed or (not blocked and pj.due <= step):
                    done.append(pj)
                else:
                    blocked = True
        for pj in done:
            del self.pending[(pj.kind, pj.job_id)]
        return done

    def kv_output(self, done: list[PendingJob], meta):
        from vllm.v1.outputs import KVConnectorOutput
        from vllm.v1.simple_kv_offload.metadata import SimpleCPUOffloadWorkerMetadata

        finished_recving: set[str] = set()
        stores: dict[int, int] = {}
        for pj in done:
            if pj.kind == "load":
                finished_recving.update(meta.load_event_to_reqs.get(pj.job_id) or ())
            else:
                stores[pj.job_id] = 1
        return KVConnectorOutput(
            finished_sending=None,
            finished_recving=finished_recving or None,
            kv_connector_worker_meta=(SimpleCPUOffloadWorkerMetadata(completed_store_events=stores)
                                      if stores else None),
            invalid_block_ids=set(),
        )

    model_output = FakeWorker.model_output
