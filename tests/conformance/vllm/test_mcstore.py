"""Tests of the Mooncake parts of the recorder without vLLM: the scenario's [mooncake] table and
the fake worker's rules (mcstore.McFakeWorker: when jobs finish, what a save puts).

    python3 tests/conformance/vllm/test_mcstore.py
"""

from __future__ import annotations

import sys
import tempfile
import unittest
from pathlib import Path
from types import SimpleNamespace as NS

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mcstore  # noqa: E402
from scenario import ScenarioError, load_scenario  # noqa: E402

BASE = """
[engine]
block_size = 2
gpu_blocks = 8
max_num_batched_tokens = 4
connector = "mooncake"
{extra}
[[request]]
name = "A"
prompt = ["P:4", "A:1"]
max_tokens = 1
arrive = 1
"""


def scenario(extra: str):
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(BASE.format(extra=extra))
    return load_scenario(f.name)


class Scenario(unittest.TestCase):
    def test_preload_and_store_delay_0(self):
        sc = scenario('[mooncake]\npreload = ["P:4", ["Q:2", "R:2"]]\n[worker]\nstore_delay = 0\n')
        self.assertEqual(sc.mooncake_preload, [["P:4"], ["Q:2", "R:2"]])
        self.assertEqual(sc.store_delay, 0)
        self.assertFalse(sc.mooncake_save_decode_cache)

    def test_save_decode_cache(self):
        self.assertTrue(scenario('[mooncake]\nsave_decode_cache = true\n').mooncake_save_decode_cache)
        with self.assertRaises(ScenarioError) as cm:
            scenario('[mooncake]\nsave_decode_cache = 1\n')
        self.assertIn("save_decode_cache", str(cm.exception))

    def test_what_is_refused(self):
        for extra, want in [
            ('[mooncake]\npreload = ["@A"]\n', "no '@' segments"),
            ('[mooncake]\nsize = 3\n', "unknown key"),
            ('[offload]\nhost_chunks = 2\n', "[offload] goes with connector = 'offloading'"),
        ]:
            with self.assertRaises(ScenarioError) as cm:
                scenario(extra)
            self.assertIn(want, str(cm.exception))
        text = BASE.format(extra="").replace('connector = "mooncake"',
                                             'connector = "mooncake"\nasync_scheduling = true')
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
            f.write(text)
        # Recorded under async scheduling too (AsyncScheduler + step_with_batch_queue).
        self.assertTrue(load_scenario(f.name).async_scheduling)


class Store:
    def __init__(self):
        self.puts: list = []

    def put(self, h):
        if h in self.puts:
            return False
        self.puts.append(h)
        return True


def save(req, job, token_len, blocks, start=0):
    return NS(req_id=req, can_save=True, store_job_id=job, token_len_chunk=token_len,
              token_ids_start=start, block_ids=(blocks,), block_hashes=[f"{req}{i}" for i in range(8)],
              load_spec=None)


class Worker(unittest.TestCase):
    def worker(self, store_delay: int):
        sc = NS(block_size=2, store_delay=store_delay, load_delay=1, load_failures=[],
                delay_overrides=[])
        w = mcstore.McFakeWorker(sc, NS(mc_store=Store()))
        return w, w.eng.mc_store

    def test_saves_run_in_order_from_the_saved_offset(self):
        w, store = self.worker(0)
        w.register(1, NS(requests=[save("A", 0, 4, [1, 2])], preempted_req_ids=set()))
        self.assertEqual([p.job_id for p in w.complete(1, NS(preempted_req_ids=set()))], [0])
        self.assertEqual(store.puts, ["A0", "A1"])
        w.register(2, NS(requests=[save("A", 1, 6, [1, 2, 3], start=4)], preempted_req_ids=set()))
        w.complete(2, NS(preempted_req_ids=set()))
        self.assertEqual(store.puts, ["A0", "A1", "A2"])

    def test_a_preemption_retires_the_ledger_and_a_later_save_puts_nothing(self):
        w, store = self.worker(2)
        w.register(1, NS(requests=[save("B", 0, 4, [4, 5])], preempted_req_ids=set()))
        self.assertEqual(w.complete(2, NS(preempted_req_ids={"B"})), [])
        done = w.complete(3, NS(preempted_req_ids=set()))
        self.assertEqual([(p.kind, p.job_id) for p in done], [("store", 0)])
        self.assertEqual(store.puts, [])
        # The next generation saves from block 0.
        w.register(4, NS(requests=[save("B", 1, 4, [6, 7])], preempted_req_ids=set()))
        w.complete(6, NS(preempted_req_ids=set()))
        self.assertEqual(store.puts, ["B0", "B1"])


if __name__ == "__main__":
    unittest.main()
