"""A pytest plugin that records a conformance log from every ``Scheduler`` vLLM's own unit
tests build (tests/v1/core, tests/v1/kv_connector/unit, ...; scripts/record-vllm-tests.sh).

Load it with ``-p vllm_tests_plugin`` (this directory on ``PYTHONPATH``) and set
``KVMC_VLLM_TESTS_OUT`` to an output directory. Nothing in vLLM or in its tests is patched
but one constructor: ``Scheduler.__init__`` is wrapped so that, after it returns, the new
instance gets observe.py's ``Recorder`` (the same wrappers on bound methods as record.py)
plus wrappers on ``add_request``, ``finish_requests``, ``schedule`` and
``update_from_output`` that write the inputs a test feeds (arrivals, aborts, errors, the
sampled tokens and transfer completions of its ``ModelRunnerOutput``) into the log.

A step is one ``schedule()`` and the ``update_from_output()`` that follows; inputs between
them belong to the next step. A test's last ``schedule()`` without an update is closed by the
plugin (``TestRecorder.close_step``). A (test, scheduler) pair yields ``OUT/TEST.sN.jsonl`` when the
test passed, the scheduler was stepped at least once and nothing kvmc does not model was
seen; otherwise the first reason is counted in ``OUT/summary.json`` (see
vllm_tests_limits.py and the ``flag`` calls). Every test's outcome is counted there too: collected, passed,
failed, skipped by pytest, and "did not run" (needs a GPU, Triton or a model download).
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))

from vllm_tests_limits import Eng, config_limits, request_limits  # noqa: E402

_OUT = Path(os.environ.get("KVMC_VLLM_TESTS_OUT", "/tmp/kvmc-vllm-tests"))
_current: dict = {"test": None, "scheds": []}
_summary = {"collected": 0, "outcomes": Counter(), "did_not_run": Counter(),
            "schedulers": 0, "logs": 0, "not_modelled": Counter(), "no_step": 0,
            "tests_with_log": 0, "logs_of": {}, "recorder_errors": Counter(),
            "failures": {}, "logs_window": 0,
            "logs_last_schedule_unrecorded": 0, "steps_closed": 0,
            "close_step_errors": Counter(), "logs_reserve_full_isl_off": 0}
# Logs of schedulers with 0.34's cache_aware_admission_window > 0 (kept apart: see _finish).
_WINDOW = "cache-aware-window"

# Failure text that means the test could not run here (no GPU, no Triton, no hub access).
_DID_NOT_RUN = [
    ("gpu", re.compile(r"CUDA|cuda|NVIDIA|nvml|Torch not compiled|no accelerator", re.I)),
    ("model download", re.compile(r"OfflineModeIsEnabled|LocalEntryNotFound|HFValidationError|"
                                  r"huggingface|outgoing traffic has been disabled|"
                                  r"Can.t load tokenizer|does not appear to have a file|"
                                  r"Invalid repository ID or local directory", re.I)),
    ("triton", re.compile(r"triton", re.I)),
]


class TestRecorder:
    """One scheduler of one test: the log lines, or the reason there is none."""

    def __init__(self, sched):
        from observe import Recorder

        self.sched = sched
        self.why, self.hdr = config_limits(sched)
        self.steps = 0
        self.in_step = False       # schedule() returned, update_from_output() not yet called
        self.depth = 0             # inside one of the scheduler's public methods
        self.out = io.StringIO()
        self.rec = None
        if self.why is not None:
            return
        # What observe.Recorder reads of a scenario (record.py passes a Scenario).
        sc = SimpleNamespace(name="", requests=[], connector=self.hdr["connector"])
        eng = Eng(sched)
        objs = [o for o in (sched, sched.connector, eng.manager, eng.scpu,
                            getattr(eng.scpu, "cpu_block_pool", None)) if o is not None]
        before = [set(vars(o)) for o in objs]
        self.rec = Recorder(eng, sc, self.out)
        # observe.py's wrappers, taken off again once a reason is found (they assume a
        # recorded run, e.g. a streaming session's inputs, and must not fail a test).
        self._observers = [(o, set(vars(o)) - b) for o, b in zip(objs, before)]
        self.rec.step = 1
        self._wrap()

    def flag(self, why: str) -> None:
        if self.why is None:
            self.why = why
            for obj, names in getattr(self, "_observers", ()):
                for n in names:
                    vars(obj).pop(n, None)

    def _public(self, name, before=None, after=None):
        orig = getattr(self.sched, name)

        def guarded(hook, *a, **kw):
            # The recorder must never change a test's outcome: its own error is a reason.
            try:
                hook(*a, **kw)
            except Exception as e:
                self.flag(f"recorder error in {name}: {type(e).__name__}")
                _summary["recorder_errors"][f"{name}: {type(e).__name__}: {e}"[:200]] += 1

        def wrapper(*a, **kw):
            if self.depth == 0 and before is not None and self.why is None:
                guarded(before, *a, **kw)
            self.depth += 1
            try:
                res = orig(*a, **kw)
            finally:
                self.depth -= 1
            if self.depth == 0 and after is not None and self.why is None:
                guarded(after, res, *a, **kw)
            return res

        setattr(self.sched, name, wrapper)

    def _wrap(self) -> None:
        from vllm.v1.request import RequestStatus

        rec = self.rec

        def add_request(req, *a, **kw):
            if self.in_step:
                self.flag("add_request between schedule() and update_from_output()")
            why = request_limits(req)
            if why is not None:
                return self.flag(why)
            if req.request_id in self.sched.requests:
                return self.flag("request id reused")
            rec.arrivals.append(req)
            sp = req.sampling_params
            rec.emit("arrive", req=req.request_id, prompt=list(req.prompt_token_ids),
                     max_tokens=sp.max_tokens,
                     eos_token_id=None if sp.ignore_eos else sp.eos_token_id)

        def finish_requests(request_ids, status, *a, **kw):
            if self.in_step:
                self.flag("finish_requests between schedule() and update_from_output()")
            kind = {RequestStatus.FINISHED_ABORTED: "abort",
                    RequestStatus.FINISHED_ERROR: "error"}.get(status)
            if kind is None:
                return self.flag(f"finish_requests with {status}")
            ids = [request_ids] if isinstance(request_ids, str) else list(request_ids or ())
            for rid in ids:
                if rid in self.sched.requests:
                    rec.emit(kind, req=rid)

        def schedule(*a, **kw):
            if self.in_step:
                self.flag("schedule() twice without update_from_output()")
            if a or kw:
                self.flag("schedule() with arguments")
            if not self.sched.has_requests():   # EngineCore.step schedules only then
                self.flag("schedule() with no requests")
            # Set by a test after construction: connectors kvmc does not model.
            for attr in ("aux_output_connector", "ec_connector"):
                if getattr(self.sched, attr, None) is not None:
                    self.flag(f"{attr} set")

        def scheduled(so, *a, **kw):
            self.in_step = True
            self.last_so = so
            # The V1 model runner (0.24's default) changes one thing in the scheduler:
            # Scheduler.schedule sends a resumed (preempted) request as cached
            # (scheduled_cached_reqs.resumed_req_ids) instead of new, and connectors see it
            # so; kvmc models V2 (the recorder pins it). A step without a resumed request is
            # the same under both (prev_step_scheduled_req_ids only fills all_token_ids).
            cached = getattr(so, "scheduled_cached_reqs", None)
            if getattr(self.sched, "use_v2_model_runner", True) is False and \
                    getattr(cached, "resumed_req_ids", None):
                self.flag("V1 model runner (a resumed request sent as cached)")
            rec.schedule_line(so)

        def update(so, mro, *a, **kw):
            if not self.in_step:
                return self.flag("update_from_output() without schedule()")
            self._inputs(so, mro)

        def updated(res, so, mro, *a, **kw):
            self.in_step = False
            rec.snapshots()
            rec.flush_step()
            self.steps += 1
            rec.step += 1

        self._public("add_request", add_request)
        self._public("finish_requests", finish_requests)
        self._public("schedule", schedule, scheduled)
        self._public("update_from_output", update, updated)
        for name in ("reset_prefix_cache", "reset_connector_cache", "update_draft_token_ids",
                     "set_pause_state"):
            if hasattr(self.sched, name):
                self._public(name, lambda *a, _n=name, **kw: self.flag(f"{_n}()"))
        # The KV cache manager's and block pool's mutators called from outside the
        # scheduler's public methods: the test pokes internals no engine calls this way.
        kcm = self.sched.kv_cache_manager
        for obj, names in ((kcm, ("allocate_slots", "free", "get_computed_blocks",
                                  "cache_blocks", "evict_blocks")),
                           (kcm.block_pool, ("get_new_blocks", "free_blocks", "touch",
                                             "cache_full_blocks", "evict_blocks"))):
            for name in names:
                if hasattr(obj, name):
                    self._internal(obj, name)

    def _internal(self, obj, name):
        orig = getattr(obj, name)

        def wrapper(*a, **kw):
            if self.depth == 0:
                self.flag(f"test calls {type(obj).__name__}.{name} directly")
            return orig(*a, **kw)

        setattr(obj, name, wrapper)

    def _inputs(self, so, mro) -> None:
        """transfer_done / transfer_failed and sampled lines of update_from_output's input."""
        rec = self.rec
        kvo = getattr(mro, "kv_connector_output", None)
        conn = self.hdr.get("connector")
        if kvo is not None:
            if getattr(kvo, "failed_recving", None) and conn != "offloading":
                self.flag("failed_recving (per-request load failure report) without the "
                          "OffloadingConnector")
            if kvo.finished_sending:
                self.flag("finished_sending reported (not how these connectors report)")
            wm = kvo.kv_connector_worker_meta
            invalid = sorted(kvo.invalid_block_ids or ())
            if conn == "offloading":
                done = sorted((getattr(wm, "completed_jobs", None) or {}).keys())
                # 0.34: a failed job is in failed_jobs (its request in failed_recving):
                # a request-level transfer_failed, without invalid_blocks.
                failed = set(getattr(wm, "failed_jobs", None) or ())
                if failed and invalid:
                    self.flag("failed_jobs together with invalid_block_ids")
                if getattr(kvo, "failed_recving", None) and not failed:
                    self.flag("failed_recving without failed_jobs")
                if invalid and len(done) != 1:
                    self.flag("invalid_block_ids not attributable to one job")
                for j in done:
                    if j in failed:
                        rec.emit("transfer_failed", job=j)
                    elif invalid:
                        rec.emit("transfer_failed", job=j, invalid_blocks=invalid)
                    else:
                        rec.emit("transfer_done", job=j)
            elif conn == "simple-cpu":
                if invalid:
                    self.flag("invalid_block_ids with SimpleCPU")
                scpu = Eng(self.sched).scpu
                loads = sorted({scpu._reqs_to_load[r].load_event
                                for r in (kvo.finished_recving or ())
                                if r in scpu._reqs_to_load})
                for j in loads:
                    rec.emit("transfer_done", job=j, kind="load")
                for j in sorted((getattr(wm, "completed_store_events", None) or {}).keys()):
                    rec.emit("transfer_done", job=j, kind="store")
            elif invalid or kvo.finished_recving or wm is not None:
                self.flag("connector output without a connector")
        idx = {rid: i for i, rid in enumerate(mro.req_ids or ())}
        for rid in so.num_scheduled_tokens:
            req = self.sched.requests.get(rid)
            i = idx.get(rid)
            toks = list(mro.sampled_token_ids[i]) if i is not None and \
                i < len(mro.sampled_token_ids) else []
            if len(toks) > 1:
                self.flag("several tokens sampled in one step")
            if req is None:
                continue
            for t in toks:
                rec.emit("sampled", req=rid, token=int(t))

    def close_step(self) -> bool:
        """The test ended after a ``schedule()`` it did not follow with
        ``update_from_output()``, whose decisions would otherwise be lost (most short tests
        end so). Close that step as an engine would: ``update_from_output`` with the output a
        model runner returns for that batch, one token for each request whose prefill the
        batch completes or that decodes (``num_computed_tokens`` has reached ``num_tokens``;
        none for a partial prefill), no transfer reports. The token is 0 (1 when the
        request's EOS is 0): the recorder's choice, not the test's. Runs after the test's
        outcome is decided; an error leaves the log without that step."""
        from dataclasses import fields

        from vllm.v1.outputs import ModelRunnerOutput

        so = self.last_so
        ids = list(so.num_scheduled_tokens)
        toks = []
        for rid in ids:
            req = self.sched.requests.get(rid)
            if req is None or req.num_computed_tokens < req.num_tokens:
                toks.append([])
            else:
                toks.append([1 if req.sampling_params.eos_token_id == 0 else 0])
        kw = {"req_ids": ids, "sampled_token_ids": toks}
        if "req_id_to_index" in {f.name for f in fields(ModelRunnerOutput)}:   # 0.33
            kw["req_id_to_index"] = {r: i for i, r in enumerate(ids)}
        try:
            self.sched.update_from_output(so, ModelRunnerOutput(**kw))
        except Exception as e:
            _summary["close_step_errors"][f"{type(e).__name__}: {e}"[:200]] += 1
            return False
        return self.why is None and not self.in_step

    def log(self, name: str) -> str:
        hdr = {"ev": "header", "format": 1, "implementation": "vllm",
               "version": _version(), "scenario": name, "async_scheduling": False, **self.hdr}
        return json.dumps(hdr, separators=(",", ":")) + "\n" + self.out.getvalue()


def _version() -> str:
    import vllm

    return vllm.__version__


def _attach(sched) -> None:
    _summary["schedulers"] += 1
    try:
        tr = TestRecorder(sched)
    except Exception as e:   # a configuration the recorder cannot read: counted, not fatal
        tr = SimpleNamespace(why=f"recorder error: {type(e).__name__}: {e}", steps=0)
    _current["scheds"].append(tr)


def _allow_cpu_platform_without_triton() -> bool:
    """0.34's ``CpuPlatform.check_and_update_config`` refuses an x86 CPU without Triton,
    which every test's ``VllmConfig`` runs into here. The scheduler side uses no Triton: the
    flag it reads (``vllm.triton_utils.HAS_TRITON``) is set to True, and said in the summary.
    Returns whether it was needed."""
    import inspect

    import vllm.triton_utils as tu
    from vllm.platforms.cpu import CpuPlatform

    src = inspect.getsource(CpuPlatform.check_and_update_config)
    if "HAS_TRITON" not in src or tu.HAS_TRITON:
        return False
    tu.HAS_TRITON = True
    return True


def _cpu_platform_when_unresolved() -> bool:
    """0.24 resolves its platform from the build ("cpu" in vLLM's version) and ignores
    ``VLLM_TARGET_DEVICE``: with the CUDA wheel on a machine without a GPU it is
    ``UnspecifiedPlatform`` (device type ""), and every test's ``VllmConfig`` raises "Failed
    to infer device type". That platform object (modules hold it since import) is made the
    CPU platform, as 0.32+ choose under ``VLLM_TARGET_DEVICE=cpu``. Returns whether it was
    needed."""
    import vllm.platforms as vp

    plat = vp.current_platform
    if plat.device_type or os.environ.get("VLLM_TARGET_DEVICE") != "cpu":
        return False
    from vllm.platforms.cpu import CpuPlatform

    plat.__class__ = CpuPlatform
    return True


def pytest_configure(config):
    _summary["cpu_platform_forced"] = int(_cpu_platform_when_unresolved())
    from vllm.v1.core.sched.scheduler import Scheduler

    _summary["has_triton_forced"] = int(_allow_cpu_platform_without_triton())
    _OUT.mkdir(parents=True, exist_ok=True)
    orig = Scheduler.__init__

    def init(self, *a, **kw):
        orig(self, *a, **kw)
        _attach(self)

    Scheduler.__init__ = init


def pytest_collection_modifyitems(session, config, items):
    _summary["collected"] += len(items)
    per_file = _summary.setdefault("collected_of", {})
    for item in items:
        f = item.nodeid.split("::", 1)[0]
        per_file[f] = per_file.get(f, 0) + 1
    # vLLM's conftest runs cleanup_dist_env_and_memory() after every test unless it is
    # marked skip_global_cleanup (its own note: "~10x speedup for non-GPU unit tests"). On
    # the CPU platform the only costly part is a full gc.collect() over the torch/vLLM heap,
    # about 2 s a test here and most of the run; pytest_runtest_teardown below keeps the
    # rest (the envs cache reset and the distributed-state teardown).
    import pytest

    for item in items:
        item.add_marker(pytest.mark.skip_global_cleanup)


def pytest_runtest_teardown(item, nextitem):
    import vllm.envs as envs
    from vllm.distributed.parallel_state import (destroy_distributed_environment,
                                                 destroy_model_parallel)

    envs.disable_envs_cache()
    destroy_model_parallel()
    destroy_distributed_environment()


def _safe(nodeid: str) -> str:
    name = nodeid.split("tests/", 1)[-1].replace(".py::", "--")
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:150]


def pytest_runtest_setup(item):
    _current["test"] = item.nodeid
    _current["scheds"] = []


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        outcome = report.outcome
        if outcome == "failed":
            text = str(report.longrepr)
            for label, pat in _DID_NOT_RUN:
                if pat.search(text):
                    _summary["did_not_run"][label] += 1
                    outcome = "did not run"
                    break
        _summary["outcomes"][outcome] += 1
        _current["outcome"] = outcome
        if report.outcome == "failed":
            crash = getattr(report.longrepr, "reprcrash", None)
            msg = crash.message if crash is not None else str(report.longrepr)[-300:]
            _summary["failures"][report.nodeid] = f"[{outcome}] " + msg.splitlines()[0][:240] \
                if msg else outcome
        _finish(report.nodeid, report.outcome == "passed" and report.when == "call")
        _write_summary()


def _finish(nodeid: str, passed: bool) -> None:
    wrote = 0
    scheds = []            # per scheduler: "log NAME", "no step" or the reason
    for i, tr in enumerate(_current["scheds"]):
        closed = passed and tr.why is None and tr.in_step and tr.close_step()
        if closed:
            _summary["steps_closed"] += 1
        if tr.why is not None:
            why = re.sub(r"(?<![A-Za-z])\d+", "N", tr.why)   # "V1 model runner" stays
            _summary["not_modelled"][why] += 1
        elif tr.steps == 0:
            _summary["no_step"] += 1
            why = "no step" + (": schedule() not followed by update_from_output()"
                               if tr.in_step else ": never scheduled")
        elif not passed:
            why = "test did not pass"
            _summary["not_modelled"][why] += 1
        else:
            name = f"{_safe(nodeid)}.s{i}"
            # Counted: such logs were refused ("not modelled") before the header had the field.
            _summary["logs_reserve_full_isl_off"] += tr.hdr.get("scheduler_reserve_full_isl") is False
            if tr.in_step:   # the test's last schedule() has no update: not in the log
                _summary["logs_last_schedule_unrecorded"] += 1
            if tr.hdr.get("cache_aware_admission_window"):
                (_OUT / _WINDOW).mkdir(exist_ok=True)
                (_OUT / _WINDOW / f"{name}.jsonl").write_text(tr.log(name))
                _summary["logs_window"] += 1
                scheds.append(f"log {_WINDOW}/{name}"
                              + (" (last schedule() unrecorded)" if tr.in_step else "")
                              + (" (last step closed)" if closed else ""))
                continue
            (_OUT / f"{name}.jsonl").write_text(tr.log(name))
            _summary["logs"] += 1
            _summary["logs_of"][name] = nodeid
            wrote += 1
            why = f"log {name}" + (" (last schedule() unrecorded)" if tr.in_step else "") \
                + (" (last step closed)" if closed else "")
        scheds.append(why)
    if wrote:
        _summary["tests_with_log"] += 1
    _current["scheds"] = []
    # One line per test (OUT/tests.jsonl): the per-file figures of docs/conformance.md.
    with open(_OUT / "tests.jsonl", "a") as f:
        f.write(json.dumps({"test": nodeid, "outcome": _current.get("outcome"),
                            "schedulers": scheds}) + "\n")


def _write_summary() -> None:
    """OUT/summary.json, rewritten after every test (a run cut short keeps its counts)."""
    s = {k: (dict(v) if isinstance(v, Counter) else v) for k, v in _summary.items()}
    tmp = _OUT / "summary.json.tmp"
    tmp.write_text(json.dumps(s, indent=1, sort_keys=True) + "\n")
    tmp.replace(_OUT / "summary.json")


def pytest_sessionfinish(session, exitstatus):
    _write_summary()
