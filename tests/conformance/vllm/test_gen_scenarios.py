"""Tests of gen_scenarios.py (the standard library only, no vLLM):

    python3 tests/conformance/vllm/test_gen_scenarios.py      # (cargo test runs it too)

The random scenarios must be valid (scenario.py loads them), reproducible from their seed, varied
(every connector, async scheduling, sessions, faults), and keep every request within the pool.
"""

from __future__ import annotations

import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gen_scenarios  # noqa: E402
from scenario import load_scenario  # noqa: E402


def _longest(sc) -> dict[str, int]:
    """Each request's most tokens (prompt, outputs, a session's further inputs)."""
    most: dict[str, int] = {}
    for r in sc.requests:
        n = 0
        for seg in r.prompt:
            name, _, count = seg.lstrip("@").partition(":")
            if seg.startswith("@"):
                n += min(int(count), most[name]) if count else most[name]
            else:
                n += int(count)
        n += r.max_tokens
        for t in r.inputs:
            n += sum(int(s.partition(":")[2]) for s in t.prompt) + t.max_tokens
        most[r.name] = n
    return most


class GenScenarios(unittest.TestCase):
    def generate(self, seed: int, count: int, kind: str = "any") -> list[Path]:
        d = Path(tempfile.mkdtemp())
        gen_scenarios.main(["--seed", str(seed), "--count", str(count), "--out-dir", str(d),
                            "--kind", kind])
        return sorted(d.glob("*.toml"))

    def test_the_same_seed_gives_the_same_files(self):
        a = [p.read_text() for p in self.generate(7, 12)]
        b = [p.read_text() for p in self.generate(7, 12)]
        c = [p.read_text() for p in self.generate(8, 12)]
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)

    def test_every_scenario_loads_and_fits_its_pool(self):
        for p in self.generate(3, 200):
            sc = load_scenario(p)
            self.assertTrue(2 <= len(sc.requests) <= 6, p.name)
            self.assertEqual(sc.max_model_len, (sc.gpu_blocks - 1) * sc.block_size, p.name)
            for name, n in _longest(sc).items():
                self.assertLessEqual(n, sc.max_model_len, f"{p.name}: {name}")

    def test_the_draws_cover_every_feature(self):
        scs = [load_scenario(p) for p in self.generate(5, 300)]
        self.assertEqual({s.connector for s in scs}, {"offloading", "simple-cpu", "none"})
        self.assertTrue(any(s.async_scheduling for s in scs))
        self.assertTrue(any(s.long_prefill_token_threshold for s in scs))
        self.assertTrue(any(s.cache_aware_admission_window for s in scs))
        self.assertTrue(any(s.sync_load_budget_tokens for s in scs))
        self.assertEqual({s.eviction_policy for s in scs if s.connector == "offloading"}, {"lru", "arc"})
        self.assertEqual({s.lazy_offload for s in scs if s.connector == "simple-cpu"}, {False, True})
        self.assertTrue(any(r.inputs for s in scs for r in s.requests), "sessions")
        self.assertTrue(any(sum(1 for r in s.requests if r.inputs) >= 2 for s in scs), "two sessions")
        self.assertTrue(any(t.step is not None for s in scs for r in s.requests for t in r.inputs),
                        "an input sent at a fixed step (queued if the session still runs)")
        self.assertEqual({s.block_size for s in scs}, {4, 8, 16})
        self.assertTrue(any(s.load_failures for s in scs))
        self.assertTrue(any(s.delay_overrides for s in scs))
        self.assertEqual({e.kind for s in scs for e in s.events}, {"abort", "error"})
        self.assertTrue(any(seg.startswith("@") for s in scs for r in s.requests for seg in r.prompt))
        self.assertEqual({s.load_failure_policy for s in scs if s.connector == "offloading"},
                         {"fail", "recompute"})

    def test_whole_sequence_admission_off_is_drawn_for_a_share_with_every_connector(self):
        # scheduler_reserve_full_isl = false: about 12% of `any`, with every connector, a pool
        # tight against one request and a batch budget below the longest prompt (where it
        # changes an admission), every request still within max_model_len and the pool.
        scs = [load_scenario(p) for p in self.generate(5, 300)]
        off = [s for s in scs if not s.scheduler_reserve_full_isl]
        self.assertTrue(0.06 * len(scs) <= len(off) <= 0.2 * len(scs), len(off))
        self.assertEqual({s.connector for s in off}, {"offloading", "simple-cpu", "none"})
        for s in off:
            one = (6 * s.block_size + 3 * s.block_size + 3 * s.block_size) // s.block_size + 1
            self.assertLessEqual(s.gpu_blocks, one + 3, s.name)
            self.assertLessEqual(s.max_num_batched_tokens, 4 * s.block_size, s.name)
            self.assertEqual(s.max_model_len, (s.gpu_blocks - 1) * s.block_size, s.name)
            for name, n in _longest(s).items():
                self.assertLessEqual(n, s.max_model_len, f"{s.name}: {name}")
        for kind in ("mooncake", "stress"):
            self.assertTrue(any(not load_scenario(p).scheduler_reserve_full_isl
                                for p in self.generate(6, 100, kind)), kind)

    def test_the_new_draw_leaves_the_rest_of_a_seed_as_it_was(self):
        # Drawn from its own stream: a scenario without it is the one its seed gave before
        # (text for text), and one with it differs only in the [engine] keys it sets.
        keys = ("scheduler_reserve_full_isl", "gpu_blocks", "max_model_len", "max_num_batched_tokens")
        for p in self.generate(9, 120):
            sc = load_scenario(p)
            name = p.stem
            seed, i = name.split("-")[1:]
            rng = gen_scenarios.random.Random(f"{seed}/{i}/any")
            orig = gen_scenarios.random.Random
            try:
                # The generator with the stream of this draw never firing.
                class NoIsl(orig):
                    def __init__(self, x=None):
                        super().__init__(x)
                        self.isl = isinstance(x, str) and x.endswith("/reserve-full-isl")

                    def random(self):
                        return 1.0 if self.isl else super().random()

                gen_scenarios.random.Random = NoIsl
                before = gen_scenarios.gen(rng, name, "any")
            finally:
                gen_scenarios.random.Random = orig
            now = p.read_text()
            if sc.scheduler_reserve_full_isl:
                self.assertEqual(now, before, name)
            else:
                drop = lambda t: [ln for ln in t.splitlines() if ln.split(" = ")[0] not in keys]
                self.assertEqual(drop(now), drop(before), name)

    def test_stress_draws_larger_tighter_workloads_that_still_fit(self):
        scs = []
        for p in self.generate(4, 200, "stress"):
            sc = load_scenario(p)
            scs.append(sc)
            self.assertTrue(4 <= len(sc.requests) <= 8, p.name)
            for name, n in _longest(sc).items():
                self.assertLessEqual(n, sc.max_model_len, f"{p.name}: {name}")
        self.assertEqual({s.connector for s in scs}, {"offloading", "simple-cpu", "none"})
        self.assertTrue(any(len(r.inputs) == 4 for s in scs for r in s.requests), "3 inputs and the end")
        self.assertTrue(any(f.nth == 2 for s in scs for f in s.load_failures), "a second load fails")

    def test_long_draws_prompts_of_more_than_8_blocks_that_still_fit(self):
        longest = 0
        for p in self.generate(5, 100, "long"):
            sc = load_scenario(p)
            for name, n in _longest(sc).items():
                self.assertLessEqual(n, sc.max_model_len, f"{p.name}: {name}")
            longest = max(longest, max(_longest(sc).values()) // sc.block_size)
        self.assertGreater(longest, 12, "some request spans more than 12 blocks")

    def test_kind_restricts_the_connector(self):
        for kind in ("offloading", "simple-cpu", "none", "mooncake"):
            self.assertEqual({load_scenario(p).connector for p in self.generate(2, 20, kind)}, {kind})

    def test_faults_are_drawn_where_the_recorder_can_apply_them(self):
        # The recorder applies aborts and errors before the step's arrivals, so one in the step
        # its request arrives would miss it; a load failure on a request whose prompt shares
        # nothing could never apply.
        for p in self.generate(11, 200, "offloading"):
            sc = load_scenario(p)
            for e in sc.events:
                self.assertEqual(e.when.after_arrival, e.req, p.name)
                self.assertGreaterEqual(e.when.delay, 1, p.name)
            sharing = {r.name for r in sc.requests if len(r.prompt) > 1}
            for f in sc.load_failures:
                self.assertIn(f.req, sharing, p.name)

    def test_mooncake_draws_what_the_store_is_recorded_with(self):
        scs = [load_scenario(p) for p in self.generate(12, 200, "mooncake")]
        for sc in scs:
            self.assertFalse(any(r.inputs for r in sc.requests), sc.name)
            for name, n in _longest(sc).items():
                self.assertLessEqual(n, sc.max_model_len, f"{sc.name}: {name}")
            # A load can fail only where a request starts with the preloaded prefix.
            starts = {r.name for r in sc.requests if r.prompt[0].startswith("SYS")}
            for f in sc.load_failures:
                self.assertTrue(sc.mooncake_preload and f.req in starts, sc.name)
            self.assertTrue(all(d.kind == "store" for d in sc.delay_overrides), sc.name)
        self.assertTrue(any(s.mooncake_preload for s in scs) and any(not s.mooncake_preload for s in scs))
        self.assertTrue(any(s.load_failures for s in scs) and any(s.delay_overrides for s in scs))
        self.assertIn(0, {s.store_delay for s in scs})
        # Async scheduling and save_decode_cache sometimes, together too.
        self.assertTrue(any(s.async_scheduling for s in scs) and any(not s.async_scheduling for s in scs))
        self.assertTrue(any(s.mooncake_save_decode_cache for s in scs))
        self.assertTrue(any(not s.mooncake_save_decode_cache for s in scs))
        self.assertTrue(any(s.mooncake_save_decode_cache and s.async_scheduling for s in scs))


if __name__ == "__main__":
    unittest.main()
