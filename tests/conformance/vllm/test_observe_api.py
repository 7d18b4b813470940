"""Tests of the recorder's connector interface that need no vLLM (the standard library only):
``record.py --connector-class`` parsing, and a connector observed through observe_api.py
(``kvmc_observe`` / ``kvmc_host``) writing its lines, labelled, into the recorder's steps.

    python3 tests/conformance/vllm/test_observe_api.py      # (cargo test runs it too)

The end-to-end check on vLLM itself is example_connector/self_reporting.py (its logs equal the
hook-based recordings; docs/conformance.md).
"""

from __future__ import annotations

import io
import json
import os
import sys
import types
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
os.environ["PYTHONHASHSEED"] = "0"      # record.py re-executes itself otherwise
sys.path.insert(0, str(HERE))

import observe  # noqa: E402
from scenario import parse_connector_class  # noqa: E402

observe._version = lambda: "0.33.0"


class _Conn:
    """A connector that is neither of vLLM's two: it reports through the interface."""

    def __init__(self):
        self.observer = None
        self.host = ([], [])

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        return 4, True

    def kvmc_observe(self, observer):
        self.observer = observer

    def kvmc_host(self):
        return self.host


def _engine(conn):
    pool = types.SimpleNamespace(
        free_block_queue=types.SimpleNamespace(get_all_free_blocks=lambda: []),
        cached_block_hash_to_block=types.SimpleNamespace(_cache={}))
    return types.SimpleNamespace(
        scheduler=types.SimpleNamespace(_free_request=None, _handle_stopped_request=None,
                                        _update_request_as_session=None),
        connector=conn, scpu=None, manager=None, block_pool=pool)


def _recorder(conn):
    sc = types.SimpleNamespace(requests=[], name="t", connector="offloading",
                               connector_class="team.kv:TeamConnector", block_size=2,
                               gpu_blocks=5, max_num_batched_tokens=4, max_num_seqs=4,
                               max_model_len=8, long_prefill_token_threshold=0,
                               load_failure_policy="recompute", host_chunks=4,
                               blocks_per_chunk=1, offload_prompt_only=True,
                               eviction_policy="lru", sync_load_budget_tokens=0)
    out = io.StringIO()
    rec = observe.Recorder(_engine(conn), sc, out)
    return rec, out


class ConnectorClass(unittest.TestCase):
    def test_module_colon_class(self):
        self.assertEqual(parse_connector_class("a.b_c:D"), ("a.b_c", "D"))
        for bad in ("a.b", "a.b:", ":D", "a..b:D", "a.b:D.E", "a-b:D"):
            with self.assertRaises(ValueError, msg=bad):
                parse_connector_class(bad)

    def test_record_refuses_a_bad_class_path(self):
        import contextlib

        import record

        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as cm:
            record.main([str(HERE.parent / "scenarios" / "main.toml"), "-o", os.devnull,
                         "--connector-class", "nocolon"])
        self.assertEqual(cm.exception.code, 2)
        self.assertIn("MODULE:CLASS", err.getvalue())


class Interface(unittest.TestCase):
    def test_the_connectors_own_lines_are_labelled_in_their_step(self):
        conn = _Conn()
        rec, out = _recorder(conn)
        self.assertIsNotNone(conn.observer, "kvmc_observe was called")
        rec.header()
        req = types.SimpleNamespace(request_id="A", block_hashes=[b"h0", b"h1"])
        rec.arrivals.append(req)
        rec.step = 1
        self.assertEqual(conn.get_num_new_matched_tokens(req, 0), (4, True))
        ob = conn.observer
        ob.load(3, "A", [b"h0", b"h1"], [1, 2], [0, 1], sync=False)
        ob.evict([b"h1"])
        ob.store(4, "A", [b"h0"], [1], [2])
        ob.store_refused("A", [b"h1"])
        ob.flush([4])
        ob.flush([])                     # nothing to flush: no line
        conn.host = ([(b"h1", 1, 0), (b"h0", 0, 1)], [b"h1", b"zz"])
        rec.snapshots()
        rec.flush_step()
        lines = [json.loads(x) for x in out.getvalue().splitlines()]
        self.assertEqual(lines[0]["connector_class"], "team.kv:TeamConnector")
        self.assertEqual([x["ev"] for x in lines[1:]],
                         ["lookup", "load", "evict", "store", "store_refused", "flush", "g1",
                          "host"])
        self.assertEqual(lines[1], {"ev": "lookup", "step": 1, "req": "A", "local": 0,
                                    "external": 4, "async": True})
        self.assertEqual(lines[2], {"ev": "load", "step": 1, "job": 3, "req": "A",
                                    "keys": ["A.0", "A.1"], "blocks": [1, 2], "slots": [0, 1],
                                    "sync": False})
        self.assertEqual(lines[3], {"ev": "evict", "step": 1, "medium": "CPU", "keys": ["A.1"]})
        self.assertEqual(lines[4]["keys"], ["A.0"])
        self.assertEqual(lines[6]["jobs"], [4])
        self.assertEqual(lines[8]["entries"], [{"key": "A.0", "slot": 0, "ref": 1},
                                               {"key": "A.1", "slot": 1, "ref": 0}])
        self.assertEqual(lines[8]["order"][0], "A.1")
        self.assertTrue(lines[8]["order"][1].startswith("?"), "an unknown key is not a label")

    def test_offload_keys_drop_the_group_id(self):
        conn = _Conn()
        rec, out = _recorder(conn)
        rec.arrivals.append(types.SimpleNamespace(request_id="A", block_hashes=[b"h0"]))
        rec.step = 1
        conn.observer.offload_keys = True
        conn.observer.store(0, "A", [b"h0\0\0\0\0"], [1], [0])
        rec.flush_step()
        self.assertEqual(json.loads(out.getvalue())["keys"], ["A.0"])

    def test_a_connector_without_the_interface_is_refused_by_name(self):
        conn = types.SimpleNamespace(get_num_new_matched_tokens=lambda r, n: (0, False))
        with self.assertRaises(RuntimeError) as cm:
            _recorder(conn)
        self.assertIn("kvmc_observe", str(cm.exception))
        self.assertIn("observe_api.py", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
