"""Tests of the NIXL producer parts of the recorder without vLLM: the scenario's
connector = "nixl" and [[consumer_read]] tables, and the fake worker's rules
(nixlprod.NixlFakeWorker: when the consumer reads, what it finds stale, what get_finished
reports).

    python3 tests/conformance/vllm/test_nixlprod.py
"""

from __future__ import annotations

import sys
import tempfile
import unittest
from pathlib import Path
from types import SimpleNamespace as NS

sys.path.insert(0, str(Path(__file__).resolve().parent))

import nixlprod  # noqa: E402
from scenario import ScenarioError, load_scenario  # noqa: E402

BASE = """
[engine]
block_size = 2
gpu_blocks = 4
max_num_batched_tokens = 3
max_num_seqs = 3
connector = "nixl"
{engine}
[[request]]
name = "A"
prompt = ["a:4"]
max_tokens = {max_tokens}
arrive = 1
{extra}
"""


def scenario(extra: str = "", engine: str = "", max_tokens: int = 1):
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(BASE.format(extra=extra, engine=engine, max_tokens=max_tokens))
    return load_scenario(f.name)


class Scenario(unittest.TestCase):
    def test_consumer_reads(self):
        sc = scenario('[[consumer_read]]\nrequest = "A"\nat_step = 4\n')
        self.assertEqual([(r.req, r.at_step) for r in sc.consumer_reads], [("A", 4)])
        sc = scenario('[[consumer_read]]\nrequest = "A"\ndelay = 3\n')
        self.assertEqual([(r.req, r.at_step, r.delay) for r in sc.consumer_reads], [("A", None, 3)])
        self.assertEqual(scenario().consumer_reads, [])

    def test_what_is_refused(self):
        for kw, want in [
            (dict(max_tokens=2), "max_tokens = 1"),
            (dict(engine="async_scheduling = true"), "synchronous scheduling only"),
            (dict(extra='[[consumer_read]]\nrequest = "B"\n'), "unknown request 'B'"),
            (dict(extra='[[consumer_read]]\nrequest = "A"\n[[consumer_read]]\nrequest = "A"\n'),
             "a second read"),
            (dict(extra='[[consumer_read]]\nrequest = "A"\nat_step = 3\ndelay = 1\n'), "not both"),
            (dict(extra='[[consumer_read]]\nrequest = "A"\nat_step = 1\n'), "at_step must be >= 2"),
            (dict(extra='[[consumer_read]]\nrequest = "A"\ndelay = 0\n'), "delay must be >= 1"),
            (dict(extra='[[consumer_read]]\nreq = "A"\n'), "unknown key"),
            (dict(extra='[[transfer_delay]]\nreq = "A"\nkind = "store"\ndelay = 2\n'), "no load or store jobs"),
        ]:
            with self.assertRaises(ScenarioError) as cm:
                scenario(**kw)
            self.assertIn(want, str(cm.exception), kw)

    def test_consumer_read_goes_with_nixl(self):
        text = BASE.format(extra='[[consumer_read]]\nrequest = "A"\n', engine="",
                           max_tokens=1).replace('"nixl"', '"none"')
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
            f.write(text)
        with self.assertRaises(ScenarioError) as cm:
            load_scenario(f.name)
        self.assertIn("goes with connector = 'nixl'", str(cm.exception))


class Generator(unittest.TestCase):
    def test_gen_scenarios_kind_nixl_draws_pd_prefill_requests_that_fit(self):
        import random

        from gen_nixl import gen_nixl

        scs = []
        with tempfile.TemporaryDirectory() as d:
            for i in range(200):
                p = Path(d) / f"n{i}.toml"
                p.write_text(gen_nixl(random.Random(f"13/{i}/nixl"), f"n{i}"))
                scs.append(load_scenario(p))
        for sc in scs:
            self.assertEqual(sc.connector, "nixl")
            self.assertFalse(sc.async_scheduling, sc.name)
            self.assertTrue(all(r.max_tokens == 1 for r in sc.requests), sc.name)
            # vLLM computes at most max_model_len - 1 tokens of a request: every prompt fits.
            for r in sc.requests:
                n = sum(int(seg.split(":")[1]) for seg in r.prompt)
                self.assertLess(n, sc.max_model_len, sc.name)
            for e in sc.events:   # an abort comes after its request arrived
                self.assertGreater(e.when.step, sc.request(e.req).when.step, sc.name)
        # Chunks that end mid-block, shared prefixes, late reads, aborts, whole-sequence
        # admission off: all drawn.
        self.assertTrue(any(s.max_num_batched_tokens < s.block_size for s in scs))
        self.assertTrue(any(len(r.prompt) > 1 for s in scs for r in s.requests))
        self.assertTrue(any(s.consumer_reads for s in scs) and any(s.events for s in scs))
        self.assertTrue(any(not s.scheduler_reserve_full_isl for s in scs))


class Rec:
    def __init__(self):
        self.lines = []

    def emit(self, ev, **kw):
        self.lines.append({"ev": ev, **kw})


def worker(extra: str = ""):
    rec = Rec()
    w = nixlprod.NixlFakeWorker(scenario(extra), NS(), rec)
    return w, rec


IDS = [10, 11, 12, 13]


def labels(n):
    """The KV labels of A's first n positions (its token prefixes)."""
    return [tuple(IDS[:p + 1]) for p in range(n)]


class Worker(unittest.TestCase):
    def test_a_half_written_copy_is_stale(self):
        w, rec = worker()
        lab = labels(4)
        w.host = {1: lab[0:2], 2: [lab[2], None]}   # block 2 copied after position 2 only
        w.held["A"] = ([1, 2], 4, IDS + [99])
        w.consumer_reads(3, {"A": 2})
        self.assertEqual(rec.lines, [{"ev": "consumer_read", "req": "A", "blocks": [1, 2],
                                      "tokens": 4, "stale": [2]}])
        self.assertEqual(w.notifs, ["A"])

    def test_a_whole_copy_is_not_stale_and_tokens_bound_the_read(self):
        w, rec = worker()
        lab = labels(3)
        # 3 tokens: block 2's second position is not sent (its stale content is never read).
        w.host = {1: lab[0:2], 2: [lab[2], ("other",)]}
        w.held["A"] = ([1, 2], 3, IDS[:3] + [99])
        w.consumer_reads(3, {"A": 2})
        self.assertEqual(rec.lines[0]["stale"], [])

    def test_when_reads_happen(self):
        w, rec = worker('[[consumer_read]]\nrequest = "A"\ndelay = 2\n')
        w.held["A"] = ([1], 2, IDS[:2])
        w.host = {1: labels(2)}
        w.consumer_reads(3, {"A": 2})
        self.assertEqual(rec.lines, [], "due at step 4")
        w.consumer_reads(4, {"A": 2})
        self.assertEqual(len(rec.lines), 1)
        w.consumer_reads(5, {"A": 2})
        self.assertEqual(len(rec.lines), 1, "read once")
        self.assertEqual(w.unused(), [])
        # A request aborted (no kv_transfer_params to read with) is not read by default...
        w, rec = worker()
        w.consumer_reads(3, {"A": 2})
        self.assertEqual(rec.lines, [])
        self.assertEqual(w.unused(), [])
        # ... and a scripted read of it is a scenario error.
        w, rec = worker('[[consumer_read]]\nrequest = "A"\n')
        with self.assertRaises(ScenarioError) as cm:
            w.consumer_reads(3, {"A": 2})
        self.assertIn("holds no blocks", str(cm.exception))
        w, rec = worker('[[consumer_read]]\nrequest = "A"\nat_step = 3\n')
        with self.assertRaises(ScenarioError) as cm:
            w.consumer_reads(4, {})
        self.assertIn("had not finished", str(cm.exception))
        self.assertEqual(w.unused(), ["consumer read of A (step 3)"])

    def test_get_finished_reports_a_read_request_once(self):
        w, rec = worker()
        meta = NS(reqs_in_batch={"A"}, reqs_not_processed=set(), reqs_to_send={"A": 1.0},
                  reqs_to_save={})
        w.register(2, meta)
        self.assertEqual((w.to_process, w.to_send), ({"A"}, {"A"}))
        w.notifs = ["A"]
        w.so = None
        self.assertEqual(w.complete(3, NS(reqs_to_save={})), [])
        self.assertEqual(w.finished_sending, ["A"])
        self.assertEqual(rec.lines, [{"ev": "finished_sending", "req": "A"}])
        self.assertEqual((w.to_process, w.to_send), (set(), set()))
        w.complete(4, NS(reqs_to_save={}))
        self.assertEqual(w.finished_sending, [])
        # An aborted request leaves _reqs_to_process; a notification for it is refused.
        w.register(5, NS(reqs_in_batch={"B"}, reqs_not_processed={"B"}, reqs_to_send={}))
        w.notifs = ["B"]
        with self.assertRaises(RuntimeError):
            w.complete(6, NS(reqs_to_save={}))

    def test_a_block_started_at_its_first_position_keeps_nothing_from_before(self):
        # C wrote 3 positions of block 4, was preempted, and is re-admitted into block 4: its
        # first chunk writes positions 0 and 1; position 2's old KV is not the copy's.
        w, rec = worker()
        w.b = 4   # a block of 4 positions
        ids = [20, 21, 22, 23]
        req = NS(all_token_ids=ids, num_computed_tokens=2)
        w.eng = NS(scheduler=NS(requests={"C": req}),
                   req_to_blocks=lambda: {"C": [NS(block_id=4)]})
        w.gpu[4] = [tuple(ids[:1]), tuple(ids[:2]), tuple(ids[:3]), None]
        w.so = NS(num_scheduled_tokens={"C": 2}, total_num_scheduled_tokens=2)
        w.complete(12, NS(reqs_to_save={"C": NS(local_block_ids=([4],))}))
        self.assertEqual(rec.lines, [{"ev": "nixl_save", "req": "C", "blocks": [4], "filled": [2]}])
        self.assertEqual(w.host[4], [(20,), (20, 21), None, None])
        # A chunk that continues a block keeps what the request wrote before.
        req.num_computed_tokens = 3
        w.so = NS(num_scheduled_tokens={"C": 1}, total_num_scheduled_tokens=1)
        w.complete(13, NS(reqs_to_save={}))
        self.assertEqual(w.gpu[4], [(20,), (20, 21), (20, 21, 22), None])

    def test_block_ids_of_one_group(self):
        self.assertEqual(nixlprod._blocks(([3, 4],)), [3, 4])
        self.assertEqual(nixlprod._blocks([3, 4]), [3, 4])
        self.assertEqual(nixlprod._blocks(()), [])


if __name__ == "__main__":
    unittest.main()
