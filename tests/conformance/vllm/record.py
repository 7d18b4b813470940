"""Record a conformance event log by running vLLM's real scheduler side (0.24 to 0.34).

    python record.py SCENARIO.toml -o LOG.jsonl

Next to each LOG.jsonl it writes LOG.kvevents (vLLM's published ``KVEventBatch``
payloads, msgpack, back to back) and LOG.kvevents.steps.json (the step of each batch);
see kvevents.py.

Drives ``vllm.v1.core.sched.scheduler.Scheduler`` in synchronous mode, mirroring
``vllm.v1.engine.core.EngineCore.step``: per step, ``has_requests()`` (idle step when
False), ``schedule()``, the fake worker's ``ModelRunnerOutput`` (fakeworker.py), then
``update_from_output()``. Arrivals go in through ``Scheduler.add_request``, aborts and
errors through ``Scheduler.finish_requests(..., FINISHED_ABORTED | FINISHED_ERROR)``,
a streaming session's further inputs and its end-of-session sentinel through
``Scheduler.add_request`` with the session's id (as ``AsyncLLM`` sends them), all before
the step's ``schedule()``. The connector's scheduler side is vLLM's and its worker a fake:
fakeworker.py (OffloadingConnector, SimpleCPUOffloadConnector), mcstore.py
(MooncakeStoreConnector), nixlprod.py (NixlConnector as the P/D producer in host-buffer mode;
the decode instance's reads, ``[[consumer_read]]``, are inputs before a step's ``schedule()``).
The log format is docs/conformance-format.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections import deque
from pathlib import Path



def hash_seed(value: str) -> str:
    """A PYTHONHASHSEED value: an integer in [0, 4294967295], or "random"."""
    if value == "random" or (value.isdigit() and int(value) <= 4294967295):
        return str(int(value)) if value != "random" else value
    raise argparse.ArgumentTypeError(f"{value!r}: an integer in [0, 4294967295] or 'random'")


def _seed_arg(argv: list[str]) -> str | None:
    """The --hash-seed value on the command line (default "0"); None if it is invalid
    (argparse then says why)."""
    seed = "0"
    for i, a in enumerate(argv):
        if a == "--hash-seed" and i + 1 < len(argv):
            seed = argv[i + 1]
        elif a.startswith("--hash-seed="):
            seed = a.split("=", 1)[1]
    try:
        return hash_seed(seed)
    except argparse.ArgumentTypeError:
        return None


# vLLM iterates some sets of request ids (e.g. finished_req_ids when it builds the
# finish-time store jobs); pin str hashing (--hash-seed, default 0) so two runs agree.
_SEED = _seed_arg(sys.argv[1:])
if _SEED is not None and os.environ.get("PYTHONHASHSEED") != _SEED:
    os.environ["PYTHONHASHSEED"] = _SEED
    os.execv(sys.executable, [sys.executable, *sys.argv])

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scenario import (EOS_TOKEN_ID, Scenario, ScenarioError, When,  # noqa: E402
                      build_prompt, load_scenario, parse_connector_class)
from kvevents import kvevents_paths  # noqa: E402


class Timeline:
    """Resolves scenario times (fixed steps, or relative to arrivals/finishes)."""

    def __init__(self, sc: Scenario):
        self.sc = sc
        self.arrived_at: dict[str, int] = {}
        self.pending_requests = list(sc.requests)
        self.pending_events = list(sc.events)
        # Streaming sessions: the inputs their clients have not sent yet, in order.
        self.pending_inputs = {r.name: list(r.inputs) for r in sc.requests if r.inputs}

    def due(self, when: When, step: int, finished_at: dict[str, int]) -> bool:
        if when.step is not None:
            return when.step == step
        if when.after is not None:
            f = finished_at.get(when.after)
            return f is not None and f + when.delay == step
        a = self.arrived_at.get(when.after_arrival)
        return a is not None and a + when.delay == step

    def overdue(self, when: When, step: int, finished_at: dict[str, int]) -> bool:
        if when.step is not None:
            return when.step < step
        if when.after is not None:
            f = finished_at.get(when.after)
            return f is not None and f + when.delay < step
        a = self.arrived_at.get(when.after_arrival)
        return a is not None and a + when.delay < step

    def input_due(self, inp, name: str, step: int, parked_at: dict[str, int]) -> bool:
        if inp.step is not None:
            return inp.step == step
        p = parked_at.get(name)
        return p is not None and p + inp.delay == step

    def input_overdue(self, inp, name: str, step: int, parked_at: dict[str, int]) -> bool:
        if inp.step is not None:
            return inp.step < step
        p = parked_at.get(name)
        return p is not None and p + inp.delay < step

    def idle(self) -> bool:
        return (not self.pending_requests and not self.pending_events
                and not any(self.pending_inputs.values()))


def run(sc: Scenario, out, debug: bool = False, kvevents: list | None = None,
        hash_seed: str = "0") -> dict:
    """Run one scenario, writing its log to `out`. If `kvevents` is a list, the
    KVEventCapture (kvevents.py) holding the published KV event batches is appended.
    If the run fails after the header, the log ends with a `partial` marker line
    (docs/conformance-format.md) and the exception propagates."""
    from engine import build_engine
    from fakeworker import FakeWorker, ScpuFakeWorker
    from kvevents import KVEventCapture
    from observe import Recorder

    t0 = time.monotonic()
    eng = build_engine(sc)
    t_build = time.monotonic() - t0
    rec = Recorder(eng, sc, out, debug=debug, hash_seed=hash_seed)
    cap = KVEventCapture(eng.scheduler, lambda: rec.step)
    if kvevents is not None:
        kvevents.append(cap)
    if sc.connector == "mooncake":
        from mcstore import McFakeWorker
        worker = McFakeWorker(sc, eng)
    elif sc.connector == "nixl":
        from nixlprod import NixlFakeWorker
        worker = NixlFakeWorker(sc, eng, rec)
    else:
        worker = ScpuFakeWorker(sc) if sc.connector == "simple-cpu" else FakeWorker(sc)
    rec.worker = worker
    rec.header()
    try:
        return _steps(sc, eng, rec, cap, worker, t0, t_build)
    except BaseException as e:
        # Keep what was recorded: every step before this one is complete in the log; this
        # step's lines (rec.buf) are dropped. The marker says where and why it stopped.
        rec.partial(f"{type(e).__name__}: {e}")
        raise


def _steps(sc, eng, rec, cap, worker, t0, t_build) -> dict:
    """The engine loop of run(): one EngineCore.step per iteration until the scenario ends."""
    from vllm.v1.request import RequestStatus

    from engine import make_request

    sched = eng.scheduler
    batch_queue: deque = deque()   # async scheduling: EngineCore.batch_queue
    tl = Timeline(sc)
    tokens_of: dict[str, list[int]] = {}
    step = 0
    while True:
        step += 1
        rec.step = step
        if step > sc.max_steps:
            raise RuntimeError(f"scenario {sc.name} did not finish in {sc.max_steps} steps")

        # Inputs, before schedule(): aborts/errors first, then arrivals (file order).
        for ev in list(tl.pending_events):
            if tl.overdue(ev.when, step, rec.finished_at):
                raise ScenarioError(f"{ev.kind} of {ev.req} missed its step")
            if tl.due(ev.when, step, rec.finished_at):
                tl.pending_events.remove(ev)
                rec.emit(ev.kind, req=ev.req)
                status = (RequestStatus.FINISHED_ABORTED if ev.kind == "abort"
                          else RequestStatus.FINISHED_ERROR)
                sched.finish_requests([ev.req], status)
        if sc.connector == "nixl":   # the decode instance's reads (nixlprod.py)
            worker.consumer_reads(step, rec.finished_at)
        progress = True
        while progress:   # 'after_arrival' with delay 0 can chain within one step
            progress = False
            for spec in list(tl.pending_requests):
                if tl.overdue(spec.when, step, rec.finished_at):
                    raise ScenarioError(f"arrival of {spec.name} missed its step")
                if not tl.due(spec.when, step, rec.finished_at):
                    continue
                tl.pending_requests.remove(spec)
                for r in rec.arrivals:   # refresh '@' sources (prompt + outputs)
                    tokens_of[r.request_id] = list(r.all_token_ids)
                prompt = build_prompt(spec, tokens_of)
                req = make_request(eng, spec.name, prompt, spec.max_tokens,
                                   eos=spec.eos_at is not None, resumable=spec.resumable)
                rec.arrivals.append(req)
                tl.arrived_at[spec.name] = step
                extra = {"resumable": True} if spec.resumable else {}
                if spec.resumable:
                    rec.turn_of[spec.name] = 1
                    rec.sent[spec.name] = []
                rec.emit("arrive", req=spec.name, prompt=prompt, max_tokens=spec.max_tokens,
                         eos_token_id=EOS_TOKEN_ID if spec.eos_at is not None else None,
                         **extra)
                sched.add_request(req)
                progress = True
        # Streaming sessions' next inputs / end-of-session sentinels (after arrivals), each
        # session's due ones in order (an input and the sentinel may come before one step).
        for name, pending in tl.pending_inputs.items():
            while pending and name in tl.arrived_at:
                inp = pending[0]
                if name in rec.finished_at:
                    raise ScenarioError(f"{name}: {inp.describe()} never sent (the session finished)")
                if tl.input_overdue(inp, name, step, rec.parked_at):
                    raise ScenarioError(f"{name}: {inp.describe()} missed its step")
                if not tl.input_due(inp, name, step, rec.parked_at):
                    break
                pending.pop(0)
                session = sched.requests.get(name)
                if session is None or session.is_finished():
                    raise ScenarioError(f"{name}: {inp.describe()} sent after the session finished")
                rec.sent[name].append(inp)
                if inp.end:
                    req = make_request(eng, name, [0], 1, eos=False, resumable=False)
                    rec.emit("stream_end", req=name)
                else:
                    for r in rec.arrivals:
                        tokens_of[r.request_id] = list(r.all_token_ids)
                    prompt = build_prompt(inp, tokens_of, name)
                    req = make_request(eng, name, prompt, inp.max_tokens,
                                       eos=inp.eos_at is not None, resumable=True)
                    rec.emit("stream_input", req=name, prompt=prompt, max_tokens=inp.max_tokens,
                             eos_token_id=EOS_TOKEN_ID if inp.eos_at is not None else None)
                queued = len(session.streaming_queue)
                sched.add_request(req)
                if len(session.streaming_queue) > queued:
                    rec.emit("stream_queued", req=name, queued=len(session.streaming_queue))

        if sc.async_scheduling:
            if batch_queue or sched.has_requests():   # EngineCore.has_work()
                _batch_queue_step(eng, rec, worker, batch_queue, step)
                continue
            if tl.idle():
                if rec.buf:
                    rec.snapshots()
                    rec.flush_step()
                _check_none_left(sched)
                break
            rec.snapshots()
            rec.flush_step()
            continue

        if not sched.has_requests():
            if tl.idle():
                if rec.buf:          # inputs that found nothing to act on
                    rec.snapshots()
                    rec.flush_step()
                _check_none_left(sched)
                break
            rec.snapshots()          # idle step: nothing to schedule yet
            rec.flush_step()
            continue

        so = sched.schedule()
        rec.schedule_line(so)
        meta = so.kv_connector_metadata
        kv_out = None
        if eng.connector is not None:
            worker.register(step, meta)
            done = worker.complete(step, meta)
            for pj in done:
                if (line := _failed_line(worker, pj)) is not None:
                    rec.emit("transfer_failed", **line)
                elif worker.tagged:
                    rec.emit("transfer_done", job=pj.job_id, kind=pj.kind)
                else:
                    rec.emit("transfer_done", job=pj.job_id)
            kv_out = worker.kv_output(done, meta)
        mro, sampled = worker.model_output(so, sched.requests, kv_out, rec.eos_of,
                                           rec.sample_name)
        for rid, tok in sampled:
            rec.emit("sampled", req=rid, token=tok)
        sched.update_from_output(so, mro)
        rec.snapshots()
        rec.flush_step()

    if batch_queue:
        raise RuntimeError(f"{len(batch_queue)} batch(es) still in flight at the end")
    if worker.unused():
        raise ScenarioError("never applied: " + ", ".join(worker.unused()))
    return {"steps": step - 1, "build_s": t_build, "total_s": time.monotonic() - t0,
            "kv_batches": len(cap.payloads), "kv_events": cap.num_events}


def _check_none_left(sched) -> None:
    """The engine went idle (``has_requests()`` false) with nothing more to send: every request
    must be finished (a parked session waits for its client). A request left waiting or running
    is vLLM's own: it counts no unfinished request, and an engine core would never serve it
    (vLLM 0.24's parks counter, finding 30)."""
    from vllm.v1.request import RequestStatus

    left = sorted(r.request_id for r in sched.requests.values()
                  if not r.is_finished() and r.status != RequestStatus.WAITING_FOR_STREAMING_REQ)
    if left:
        raise RuntimeError(f"the engine went idle with unfinished requests: {', '.join(left)}")


def _failed_line(worker, pj) -> dict | None:
    """The fields of a failed job's ``transfer_failed`` line (None: it did not fail)."""
    failed_line = getattr(worker, "failed_line", None)
    return failed_line(pj) if failed_line is not None else None


def _execute(eng, rec, worker, step: int, so):
    """The fake worker executes SchedulerOutput `so` in `step`: the transfers it reports
    (transfer_done / transfer_failed lines, written now) and its ModelRunnerOutput. Returns
    (mro, sampled)."""
    kv_out = None
    if eng.connector is not None:
        meta = so.kv_connector_metadata
        worker.register(step, meta)
        done = worker.complete(step, meta)
        for pj in done:
            if (line := _failed_line(worker, pj)) is not None:
                rec.emit("transfer_failed", **line)
            elif worker.tagged:
                rec.emit("transfer_done", job=pj.job_id, kind=pj.kind)
            else:
                rec.emit("transfer_done", job=pj.job_id)
        kv_out = worker.kv_output(done, meta)
    return worker.model_output(so, eng.scheduler.requests, kv_out, rec.eos_of,
                               rec.sample_name)


def _batch_queue_step(eng, rec, worker, batch_queue: deque, step: int) -> None:
    """One ``EngineCore.step_with_batch_queue`` (async scheduling, AsyncScheduler): if the
    scheduler has requests, schedule a batch and execute it (the fake worker's output is
    ready at once: its transfers are those reported in this step); the batch joins the
    queue, and unless the queue is full (``batch_queue_size``, 2) or nothing more can be
    scheduled, the step ends there. Otherwise the oldest batch's output is processed
    (``update_from_output``). ``sampled`` lines are the processed batch's tokens, written in
    the step that processes them, for requests not finished by then (``update_from_output``
    skips those)."""
    sched = eng.scheduler
    size = eng.batch_queue_size
    assert len(batch_queue) < size
    if sched.has_requests():
        so = sched.schedule()
        rec.schedule_line(so)
        mro, sampled = _execute(eng, rec, worker, step, so)
        model_executed = so.total_num_scheduled_tokens > 0
        batch_queue.appendleft((so, mro, sampled))
        if len(batch_queue) < size and (model_executed or sched.has_requests()):
            rec.snapshots()
            rec.flush_step()
            return
    so, mro, sampled = batch_queue.pop()
    for rid, tok in sampled:
        req = sched.requests.get(rid)
        if req is not None and not req.is_finished():
            rec.emit("sampled", req=rid, token=tok)
    sched.update_from_output(so, mro)
    rec.snapshots()
    rec.flush_step()


def unsupported(sc: Scenario) -> str | None:
    """Why the installed vLLM cannot run `sc` (a feature the release lacks), or None.
    Checked on vLLM's own code, not on its version number."""
    import inspect

    from vllm.v1.request import Request

    if any(r.resumable for r in sc.requests) and \
            "resumable" not in inspect.signature(Request.__init__).parameters:
        return "streaming-input sessions (Request(resumable=...)) are 0.32+"
    if sc.connector == "offloading" and sc.sync_load_budget_tokens:
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading import scheduler as osch

        if "sync_load_budget_bytes" not in inspect.getsource(osch):
            return "synchronous host loads (sync_load_budget_bytes) are 0.33+"
    if sc.connector == "offloading" and sc.load_failures and sc.sync_load_budget_tokens:
        from fakeworker import request_level_failures

        if request_level_failures():
            return ("a failed sync load raises RuntimeError in OffloadingConnectorWorker."
                    "get_finished (0.34+): the engine stops")
    if getattr(sc, "cache_aware_admission_window", 0):
        from vllm.config import SchedulerConfig

        if "cache_aware_admission_window" not in getattr(SchedulerConfig, "__dataclass_fields__", {}):
            return "cache-aware admission (SchedulerConfig.cache_aware_admission_window) is 0.34+"
    if sc.connector == "mooncake":
        try:
            from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store import scheduler
        except ImportError:
            return "no MooncakeStoreConnector (mooncake/store)"
        if "_pinned_saves" not in inspect.getsource(scheduler):
            return "this MooncakeStoreScheduler pins no save blocks (kvmc models 0.32+'s store)"
    if sc.connector == "nixl":
        try:
            from vllm.distributed.kv_transfer.kv_connector.v1.nixl import base_scheduler as nb
        except ImportError:
            return "no NixlConnector package (kv_connector/v1/nixl/)"
        if "_build_save_meta" not in inspect.getsource(nb):
            return "this NixlConnector builds no host-buffer saves in _build_save_meta"
    if sc.connector == "simple-cpu":
        try:
            from vllm.v1.simple_kv_offload.manager import SimpleCPUOffloadScheduler
        except ImportError:
            return "no SimpleCPUOffloadConnector"
        if not any(hasattr(SimpleCPUOffloadScheduler, f) for f in (
                "_select_eager_blocks_to_store", "_prepare_eager_store_specs")):
            return ("recorder limit, not a vLLM one: this SimpleCPU selects eager stores in "
                    "neither _select_eager_blocks_to_store (0.32+) nor "
                    "_prepare_eager_store_specs (0.24), which observe.py splits per request")
    return None


def write_skipped(out_dir: Path, skipped: dict[str, str], ran: set[str]) -> None:
    """out_dir/skipped.txt: one "NAME: reason" line per scenario this release cannot run
    (removed when there is none). The lines of scenarios not in this run (``ran``) are kept:
    recording one scenario does not forget why the others were skipped."""
    path = out_dir / "skipped.txt"
    if path.exists():
        for line in path.read_text().splitlines():
            name, sep, why = line.partition(": ")
            if sep and name not in ran:
                skipped.setdefault(name, why)
    if not skipped:
        path.unlink(missing_ok=True)
        return
    path.write_text("".join(f"{n}: {r}\n" for n, r in sorted(skipped.items())))


def partial_path(dest: Path) -> Path:
    """Where a failed run's log is kept: NAME.jsonl.partial beside NAME.jsonl (a committed
    fixture is never overwritten by a partial log)."""
    return dest.with_name(dest.name + ".partial")


def _vllm_version() -> str:
    import vllm

    return vllm.__version__


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description="Record conformance logs from vLLM's real scheduler side (0.24 to 0.34).")
    ap.add_argument("scenarios", nargs="+", metavar="SCENARIO.toml")
    ap.add_argument("-o", "--output", help="log file (one scenario)")
    ap.add_argument("--out-dir", help="directory for NAME.jsonl logs (any number of scenarios)")
    ap.add_argument("--hash-seed", type=hash_seed, default="0", metavar="N",
                    help="PYTHONHASHSEED for the run (an integer in [0, 4294967295] or "
                         "'random'; default 0, which the committed fixtures use); the process "
                         "re-executes itself with it")
    ap.add_argument("--vllm-skip", action="store_true",
                    help="skip scenarios that use a feature the installed vLLM lacks (the "
                         "reason is printed and, with --out-dir, listed in skipped.txt)")
    ap.add_argument("--connector-class", metavar="MODULE:CLASS",
                    help="build this KVConnectorBase_V1 implementation instead of vLLM's "
                         "built-in connector the scenario names (KVTransferConfig("
                         "kv_connector=CLASS, kv_connector_module_path=MODULE)); the scenario's "
                         "connector kind still picks the extra config and the fake worker. "
                         "tests/conformance/vllm is on sys.path (example_connector.forgetful:"
                         "ForgetfulOffloadingConnector); see observe_api.py for a connector "
                         "that is not a subclass of vLLM's two")
    ap.add_argument("-q", "--quiet", action="store_true")
    ap.add_argument("--debug", action="store_true",
                    help="print request state at every finish to stderr (not in the log)")
    args = ap.parse_args(argv)
    if (args.output is None) == (args.out_dir is None):
        ap.error("give exactly one of -o/--output and --out-dir")
    if args.output is not None and len(args.scenarios) != 1:
        ap.error("-o takes one scenario; use --out-dir for several")
    if os.environ.get("PYTHONHASHSEED") != args.hash_seed:
        ap.error(f"--hash-seed {args.hash_seed}: PYTHONHASHSEED is "
                 f"{os.environ.get('PYTHONHASHSEED')!r} (run record.py as a script)")
    if args.connector_class is not None:
        try:
            parse_connector_class(args.connector_class)
        except ValueError as e:
            ap.error(f"--connector-class {e}")
    if args.out_dir is not None:
        Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    status = 0
    t_start = time.monotonic()
    skipped: dict[str, str] = {}
    ran: set[str] = set()
    for path in args.scenarios:
        try:
            sc = load_scenario(path)
        except ScenarioError as e:
            print(f"{path}: {e}", file=sys.stderr)
            status = 2
            continue
        ran.add(sc.name)
        if args.connector_class is not None:
            if sc.connector == "none":
                print(f"{path}: --connector-class needs a scenario with a connector "
                      f"(this one has connector = 'none')", file=sys.stderr)
                status = 2
                continue
            sc.connector_class = args.connector_class
        if args.vllm_skip and (why := unsupported(sc)) is not None:
            skipped[sc.name] = why
            print(f"{sc.name}: skipped on vLLM {_vllm_version()}: {why}", file=sys.stderr)
            continue
        dest = Path(args.output) if args.output else Path(args.out_dir) / f"{sc.name}.jsonl"
        tmp = dest.with_suffix(".tmp")
        partial = partial_path(dest)
        caps: list = []
        try:
            with open(tmp, "w") as out:
                stats = run(sc, out, debug=args.debug, kvevents=caps, hash_seed=args.hash_seed)
        except Exception as e:
            # The log up to the failing step is kept, marked partial (its last line), under
            # NAME.jsonl.partial; no KV event files are written for it.
            kept = ""
            if tmp.exists() and tmp.stat().st_size > 0:
                tmp.replace(partial)
                kept = f" (partial log kept: {partial})"
            else:
                tmp.unlink(missing_ok=True)
            print(f"{path}: {type(e).__name__}: {e}{kept}", file=sys.stderr)
            if not isinstance(e, (ScenarioError, RuntimeError)):
                traceback.print_exc()
            status = 2 if isinstance(e, ScenarioError) else 1
            continue
        ev_path, steps_path = kvevents_paths(dest)
        ev_tmp = ev_path.with_name(ev_path.name + ".tmp")
        steps_tmp = steps_path.with_name(steps_path.name + ".tmp")
        caps[0].write(ev_tmp, steps_tmp)
        tmp.replace(dest)
        ev_tmp.replace(ev_path)
        steps_tmp.replace(steps_path)
        partial.unlink(missing_ok=True)   # an earlier failed run's leftover
        if not args.quiet:
            print(f"{sc.name}: {stats['steps']} steps, build {stats['build_s']:.2f} s, "
                  f"run {stats['total_s']:.2f} s -> {dest}; {stats['kv_batches']} KV event "
                  f"batches ({stats['kv_events']} events) -> {ev_path.name}", file=sys.stderr)
    if args.vllm_skip and args.out_dir is not None:
        write_skipped(Path(args.out_dir), skipped, ran)
    if not args.quiet and status == 0:
        print(f"total {time.monotonic() - t_start:.1f} s (vLLM import included)", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
