"""Tests of record.py that need no vLLM (the standard library only): a run that fails keeps
its log up to the failing step, marked partial, and --hash-seed is checked.

    python3 tests/conformance/vllm/test_record.py      # (cargo test runs it too)

vLLM's objects are replaced by stand-ins (``engine``, ``fakeworker``, the KV event capture);
the log writer (observe.Recorder) and record.py's own run() and main() are the real ones.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
import types
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
os.environ["PYTHONHASHSEED"] = "0"      # record.py re-executes itself otherwise
sys.path.insert(0, str(HERE))

# Stand-ins for the modules that import vLLM.
_engine = types.ModuleType("engine")
_engine.build_engine = lambda sc: types.SimpleNamespace(
    scheduler=types.SimpleNamespace(_free_request=None, _handle_stopped_request=None,
                                    _update_request_as_session=None),
    connector=None, scpu=None)
_engine.make_request = None
sys.modules["engine"] = _engine
_fakeworker = types.ModuleType("fakeworker")
_fakeworker.FakeWorker = _fakeworker.ScpuFakeWorker = lambda sc: object()
sys.modules["fakeworker"] = _fakeworker

import kvevents  # noqa: E402
import observe  # noqa: E402
import record  # noqa: E402


class _Capture:
    payloads: list = []
    num_events = 0

    def __init__(self, scheduler, step_of):
        pass

    def write(self, ev_path, steps_path):
        Path(ev_path).write_bytes(b"")
        Path(steps_path).write_text("[]\n")


kvevents.KVEventCapture = _Capture
observe._version = lambda: "0.33.0"
SCENARIO = HERE.parent / "scenarios" / "main.toml"


def _failing_steps(exc):
    """An engine loop that completes step 1, buffers a line of step 2, then raises `exc`."""
    def steps(sc, eng, rec, cap, worker, t0, t_build):
        rec.step = 1
        rec.emit("abort", req="R1")
        rec.flush_step()
        rec.step = 2
        rec.emit("abort", req="R2")      # never written: step 2 did not complete
        raise exc
    return steps


def _good_steps(sc, eng, rec, cap, worker, t0, t_build):
    rec.step = 1
    rec.emit("abort", req="R1")
    rec.flush_step()
    return {"steps": 1, "build_s": 0.0, "total_s": 0.0, "kv_batches": 0, "kv_events": 0}


class PartialLogs(unittest.TestCase):
    def setUp(self):
        self._orig = record._steps

    def tearDown(self):
        record._steps = self._orig

    def test_run_ends_a_failed_log_with_the_partial_marker(self):
        record._steps = _failing_steps(RuntimeError("boom"))
        sc = record.load_scenario(SCENARIO)
        out = io.StringIO()
        with self.assertRaises(RuntimeError):
            record.run(sc, out)
        lines = [json.loads(x) for x in out.getvalue().splitlines()]
        self.assertEqual(lines[0]["ev"], "header")
        self.assertNotIn("hash_seed", lines[0])
        self.assertEqual(lines[1], {"ev": "abort", "step": 1, "req": "R1"})
        self.assertEqual(lines[2], {"ev": "partial", "step": 2, "error": "RuntimeError: boom"})
        self.assertEqual(len(lines), 3, "the failing step's lines are not written")

    def test_main_keeps_the_partial_log_beside_the_fixture(self):
        for exc, status in [(RuntimeError("boom"), 1), (KeyError("x"), 1)]:
            record._steps = _failing_steps(exc)
            with tempfile.TemporaryDirectory() as d:
                good = Path(d) / "main.jsonl"
                good.write_text("committed\n")
                err = io.StringIO()
                with contextlib.redirect_stderr(err):
                    got = record.main([str(SCENARIO), "--out-dir", d, "-q"])
                self.assertEqual(got, status)
                self.assertEqual(good.read_text(), "committed\n", "the fixture is kept")
                partial = Path(d) / "main.jsonl.partial"
                last = json.loads(partial.read_text().splitlines()[-1])
                self.assertEqual((last["ev"], last["step"]), ("partial", 2))
                self.assertIn(f"partial log kept: {partial}", err.getvalue())
                self.assertFalse((Path(d) / "main.tmp").exists())
                self.assertFalse((Path(d) / "main.kvevents").exists())

    def test_a_good_run_removes_an_earlier_partial_log(self):
        record._steps = _good_steps
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "main.jsonl.partial").write_text("old\n")
            self.assertEqual(record.main([str(SCENARIO), "--out-dir", d, "-q"]), 0)
            self.assertFalse((Path(d) / "main.jsonl.partial").exists())
            self.assertTrue((Path(d) / "main.jsonl").exists())

    def test_a_scenario_error_before_the_run_leaves_nothing(self):
        with tempfile.TemporaryDirectory() as d:
            bad = Path(d) / "bad.toml"
            bad.write_text("[engine]\nblock_size = 0\n")
            with contextlib.redirect_stderr(io.StringIO()):
                self.assertEqual(record.main([str(bad), "--out-dir", d, "-q"]), 2)
            self.assertEqual(sorted(p.name for p in Path(d).iterdir()), ["bad.toml"])


class Skipped(unittest.TestCase):
    def test_recording_some_scenarios_keeps_the_others_reasons(self):
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            (d / "skipped.txt").write_text("a: no async\nb: no sessions\n")
            record.write_skipped(d, {"c": "no arc"}, {"b", "c"})
            self.assertEqual((d / "skipped.txt").read_text(), "a: no async\nc: no arc\n")
            record.write_skipped(d, {}, {"a", "c"})
            self.assertFalse((d / "skipped.txt").exists())


class HashSeed(unittest.TestCase):
    def test_values(self):
        self.assertEqual(record.hash_seed("3"), "3")
        self.assertEqual(record.hash_seed("007"), "7")
        self.assertEqual(record.hash_seed("4294967295"), "4294967295")
        self.assertEqual(record.hash_seed("random"), "random")
        for bad in ["x", "-1", "4294967296", "", "1.5"]:
            with self.assertRaises(Exception, msg=bad):
                record.hash_seed(bad)

    def test_command_line(self):
        self.assertEqual(record._seed_arg(["a.toml"]), "0")
        self.assertEqual(record._seed_arg(["a.toml", "--hash-seed", "5"]), "5")
        self.assertEqual(record._seed_arg(["--hash-seed=random", "a.toml"]), "random")
        self.assertIsNone(record._seed_arg(["--hash-seed", "nope"]))
        with contextlib.redirect_stderr(io.StringIO()) as err, self.assertRaises(SystemExit) as e:
            record.main([str(SCENARIO), "-o", "/dev/null", "--hash-seed", "nope"])
        self.assertEqual(e.exception.code, 2)
        self.assertIn("--hash-seed", err.getvalue())

    def test_the_header_names_a_seed_other_than_0(self):
        record_steps = record._steps
        record._steps = _good_steps
        try:
            sc = record.load_scenario(SCENARIO)
            out = io.StringIO()
            record.run(sc, out, hash_seed="3")
            self.assertEqual(json.loads(out.getvalue().splitlines()[0])["hash_seed"], 3)
        finally:
            record._steps = record_steps


class BatchQueue(unittest.TestCase):
    """record._batch_queue_step mirrors EngineCore.step_with_batch_queue (no vLLM needed)."""

    def _run(self, steps: int, requests: int, ready=lambda n: True):
        calls: list[tuple] = []
        sched = types.SimpleNamespace(requests={})

        def has_requests():
            return sched.left > 0

        def schedule():
            n = len([c for c in calls if c[0] == "schedule"])
            tokens = 1 if ready(n) else 0
            calls.append(("schedule", n, tokens))
            return types.SimpleNamespace(total_num_scheduled_tokens=tokens, n=n)

        def update_from_output(so, mro):
            calls.append(("update", so.n))
            if so.total_num_scheduled_tokens:
                sched.left -= 1

        sched.left = requests
        sched.has_requests = has_requests
        sched.schedule = schedule
        sched.update_from_output = update_from_output
        eng = types.SimpleNamespace(scheduler=sched, connector=None, batch_queue_size=2)
        rec = types.SimpleNamespace(emit=lambda *a, **k: None, schedule_line=lambda so: None,
                                    snapshots=lambda: None, eos_of={}, sample_name={},
                                    flush_step=lambda: calls.append(("end",)))
        worker = types.SimpleNamespace(model_output=lambda so, *a: (None, []))
        queue = record.deque()
        for step in range(1, steps + 1):
            if queue or sched.has_requests():
                record._batch_queue_step(eng, rec, worker, queue, step)
        return calls, queue

    def test_the_second_batch_is_scheduled_before_the_first_is_processed(self):
        calls, queue = self._run(steps=4, requests=10)
        self.assertEqual(calls, [("schedule", 0, 1), ("end",),
                                 ("schedule", 1, 1), ("update", 0), ("end",),
                                 ("schedule", 2, 1), ("update", 1), ("end",),
                                 ("schedule", 3, 1), ("update", 2), ("end",)])
        self.assertEqual(len(queue), 1)

    def test_an_empty_batch_with_nothing_more_to_schedule_processes_the_oldest(self):
        # Batch 1 schedules no tokens: with requests left the step still ends (the
        # scheduler "has requests"), as vLLM's `model_executed or has_requests()`.
        calls, _ = self._run(steps=3, requests=10, ready=lambda n: n != 0)
        self.assertEqual(calls[:2], [("schedule", 0, 0), ("end",)])
        # With no request left, the queue drains one batch per step without scheduling.
        calls, queue = self._run(steps=4, requests=1)
        self.assertEqual(calls, [("schedule", 0, 1), ("end",),
                                 ("schedule", 1, 1), ("update", 0), ("end",),
                                 ("update", 1), ("end",)])
        self.assertEqual(len(queue), 0)


if __name__ == "__main__":
    unittest.main()
