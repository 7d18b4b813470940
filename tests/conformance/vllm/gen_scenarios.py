"""Random conformance scenarios: workloads nobody wrote, for recording on real vLLM.

    python gen_scenarios.py --seed S --count N --out-dir DIR [--kind K]

Writes DIR/fuzz-S-I.toml for I in 0..N-1, each a valid scenario (scenario.py's format,
checked by loading it back). The same seed gives the same files. No vLLM import.

What is drawn (per scenario): the connector (OffloadingConnector, SimpleCPU, none), block
size 4, 8 or 16, a GPU pool from tight (preemptions, prefix-cache evictions) to roomy, a batch
token budget (chunked prefill), `max_num_seqs` from 1, a long-prefill threshold, async
scheduling, cache-aware admission (0.34+), whole-sequence admission off
(`scheduler_reserve_full_isl = false`, 12% of scenarios, with a tight pool and a small batch
budget), the
load-failure policy; for the OffloadingConnector
a host tier from 2 chunks (evictions, refused stores) up, 1, 2 or 4 blocks per chunk,
prompt-only stores or not, synchronous loads within a token budget (0.33+), store and load
delays; 2 to 6 requests whose prompts are built from a small alphabet of shared segments (a
shared system prompt, another request's prompt or its output via `@NAME`, a prompt ending
mid-block), arrivals at fixed steps or after another request arrives or finishes, EOS at
random positions, aborts and errors, failed loads (with the OffloadingConnector), slow
transfers, and streaming-input sessions (each request with probability 0.12), whose inputs
come once the session parks or at fixed steps (queued while it still runs). Every request
fits `max_model_len` and the pool (`kvmc` models a request that can never fit as vLLM does,
but such scenarios only test the rejection path).

`--kind` restricts the connector: offloading, simple-cpu, none, mooncake or any (default; it
never draws mooncake, so earlier seeds keep their scenarios); `long` draws as `any` with
prompts of up to 16 blocks, batches of up to 32 blocks and a host tier of up to 20 chunks a
request. `mooncake`: the MooncakeStoreConnector, async scheduling a quarter of the time (since
the store is recorded so: a seed's earlier mooncake scenarios with that draw were synchronous,
the others are unchanged), `save_decode_cache` 30% of the time (its own random stream), no
sessions, the
shared system prompt preloaded into the pool (probability 0.7), save delays from 0, failed
loads and slow saves. `stress` draws
any connector with 4 to 8 requests, a pool from one request's worth to two blocks more, async
scheduling half the time, sessions with probability 0.3 (up to 3 inputs), more aborts, errors and
failed loads (a load's first or second). `nixl` (never drawn by `any`): NixlConnector as the
P/D producer in host-buffer mode (gen_nixl.py says what it draws).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_nixl import gen_nixl  # noqa: E402
from scenario import load_scenario  # noqa: E402

NAMES = ["A", "B", "C", "D", "E", "F", "G", "H"]


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(v)


def _table(lines: list[str], header: str, d: dict) -> None:
    lines.append(header)
    for k, v in d.items():
        lines.append(f"{k} = {_toml_value(v)}")
    lines.append("")


def _seg_len(seg: str, longest: dict[str, int]) -> int:
    """The most tokens a prompt segment stands for."""
    if seg.startswith("@"):
        name, _, count = seg[1:].partition(":")
        return min(int(count), longest[name]) if count else longest[name]
    return int(seg.split(":")[1])


def gen(rng: random.Random, name: str, kind: str) -> str:
    # `stress`: any connector, more requests, a tighter pool, more sessions, faults and async
    # scheduling (the same draws as `any`, with other odds, plus a failed load's nth).
    stress = kind == "stress"
    # `long`: the draws of `any` with prompts of up to 16 blocks (jobs of many keys: 0.24's
    # key sets of more than 8, long block tables) and a larger host tier.
    long = kind == "long"
    connector = kind if kind not in ("any", "stress", "long") else rng.choice(["offloading", "offloading", "simple-cpu", "none"])
    bs = rng.choice([4, 4, 8, 8, 16])
    n = rng.randint(4, 8) if stress else rng.randint(2, 6)
    sys_len = rng.choice([0, bs, 2 * bs, bs + bs // 2])
    max_prompt = (16 if long else 6) * bs
    max_tokens_cap = 3 * bs
    # The pool: from barely one request's worth (preemption, evictions) to roomy.
    # a session's inputs: 3 blocks (stress: up to 3 inputs of 1.5 blocks)
    one = (max_prompt + max_tokens_cap + (5 if stress else 3) * bs) // bs + 1
    gpu_blocks = rng.randint(one + 1, one + 3) if stress else rng.randint(one + 1, one + 2 + 3 * n)
    eng = {
        "block_size": bs,
        "gpu_blocks": gpu_blocks,
        "max_num_batched_tokens": rng.choice([4 * bs, 16 * bs, 32 * bs] if long else [2 * bs, 4 * bs, 8 * bs]),
        "max_num_seqs": rng.choice([1, 2, 4, 4, 8]),
        # vLLM's planner wants the whole pool (less the null block) to hold max_model_len.
        "max_model_len": (gpu_blocks - 1) * bs,
        "connector": connector,
    }
    if connector in ("offloading", "mooncake"):
        eng["load_failure_policy"] = rng.choice(["fail", "recompute"])
    # mooncake with it since the recorder and kvmc run the store under async scheduling (the
    # draw was made and dropped before, so only those scenarios changed).
    if rng.random() < (0.5 if stress else 0.25):
        eng["async_scheduling"] = True
    if rng.random() < 0.15:
        eng["long_prefill_token_threshold"] = rng.choice([bs, 2 * bs])
    if rng.random() < 0.1:  # 0.34+ (the recorder skips it on older releases)
        eng["cache_aware_admission_window"] = rng.randint(2, 4)
        eng["cache_aware_admission_threshold"] = rng.choice([0.5, 0.75])
    # G1 prefix caching off (CacheConfig.enable_prefix_caching), never with SimpleCPU (which
    # disables itself without it). Drawn from its own stream, so the scenarios of earlier
    # seeds stay as they were.
    if connector not in ("simple-cpu", "mooncake") and random.Random(f"{name}/prefix-caching").random() < 0.15:
        eng["enable_prefix_caching"] = False
    # Whole-sequence admission off (SchedulerConfig.scheduler_reserve_full_isl = False): the
    # scheduler passes full_sequence_must_fit=False to KVCacheManager.allocate_slots for a
    # waiting request, so it is admitted when its first chunk (or, with an async load, its
    # loaded blocks) fits, not its whole prompt; chunks past the free pool then preempt.
    # Only a prompt longer than its first chunk, in a pool tight against it, tells the two
    # apart: these scenarios get the pool of `stress` (one request's worth and 1 to 3 blocks
    # more) and a batch budget of at most 2 or 4 blocks (long: 4 or 8). Every connector (the
    # gate applies to connector loads alike). Its own stream: earlier seeds keep their
    # scenarios but for these keys.
    isl = random.Random(f"{name}/reserve-full-isl")
    if isl.random() < (0.2 if stress else 0.12):
        eng["scheduler_reserve_full_isl"] = False
        if not stress:
            eng["gpu_blocks"] = isl.randint(one + 1, one + 3)
            eng["max_model_len"] = (eng["gpu_blocks"] - 1) * bs
        cap = isl.choice([4 * bs, 8 * bs] if long else [2 * bs, 4 * bs])
        eng["max_num_batched_tokens"] = min(eng["max_num_batched_tokens"], cap)
    lines = [f'name = "{name}"', 'description = "gen_scenarios.py: a random workload"', ""]
    _table(lines, "[engine]", eng)
    if connector == "offloading":
        off = {
            "host_chunks": rng.randint(2, (20 if long else 6) * n),
            "blocks_per_chunk": rng.choice([1, 1, 1, 2, 2, 4]),
            "offload_prompt_only": rng.random() < 0.5,
        }
        if rng.random() < 0.3:  # synchronous host loads, 0.33+
            off["sync_load_budget_tokens"] = rng.choice([2 * bs, 4 * bs, 64 * bs])
        if rng.random() < 0.3:  # the host tier's ARC policy (cpu/policies/arc.py)
            off["eviction_policy"] = "arc"
        _table(lines, "[offload]", off)
    elif connector == "simple-cpu":
        scpu = {"cpu_blocks": rng.randint(2, 4 * n + 2)}
        if rng.random() < 0.3:  # lazy_offload: stores chosen by a walk of the G1 free queue
            scpu["mode"] = "lazy"
        _table(lines, "[simple_cpu]", scpu)
    preloaded = False
    mc: dict = {}
    if connector == "mooncake" and sys_len >= bs and rng.random() < 0.7:
        # Another instance put (a block-aligned prefix of) the shared system prompt.
        mc["preload"] = [f"SYS:{rng.randint(1, sys_len // bs) * bs}"]
        preloaded = True
    # Decode steps save too (its own stream: earlier seeds keep their scenarios otherwise).
    if connector == "mooncake" and random.Random(f"{name}/save-decode").random() < 0.3:
        mc["save_decode_cache"] = True
    if mc:
        _table(lines, "[mooncake]", mc)
    wrk = {"max_steps": 400}
    if connector != "none":
        wrk["store_delay"] = (rng.choice([1, 1, 2, 3]) if connector == "offloading"
                              else rng.choice([0, 1, 2, 3]) if connector == "mooncake" else rng.choice([0, 1, 2]))
        wrk["load_delay"] = rng.choice([0, 1, 1, 2])
    _table(lines, "[worker]", wrk)

    names = NAMES[:n]
    # Streaming-input sessions: each request is one with probability 0.12.
    sessions = {r for r in names if rng.random() < (0.3 if stress else 0.12)}
    if connector == "mooncake":
        sessions = set()   # not recorded with the Mooncake store
    longest: dict[str, int] = {}  # a request's most tokens (prompt and outputs)
    sharing: set[str] = set()  # requests whose prompt starts with a shared segment
    from_pool: set[str] = set()  # Mooncake: requests whose prompt starts with the preload
    for i, r in enumerate(names):
        prompt: list[str] = []
        shape = rng.random()
        earlier = names[:i]
        if earlier and shape < 0.4:
            # Another request's tokens (prompt and outputs so far), or a block-aligned prefix
            # of them; at most 3 blocks, so a prompt stays within 6 blocks.
            src = rng.choice(earlier)
            if shape < 0.25 and longest[src] <= (12 if long else 3) * bs:
                prompt.append(f"@{src}")
            else:
                prompt.append(f"@{src}:{rng.randint(1, 10 if long else 3) * bs}")
        elif sys_len and shape < 0.8:
            prompt.append(f"SYS:{sys_len}")
        if prompt:
            sharing.add(r)
        if preloaded and prompt and prompt[0].startswith("SYS"):
            from_pool.add(r)
        most = 6 if long else 3  # a prompt stays within 6 blocks (long: 16)
        own = rng.randint(1, most * bs) if rng.random() < 0.5 else rng.randint(1, most) * bs
        prompt.append(f"{r}:{own}")
        req = {"name": r, "prompt": prompt, "max_tokens": rng.randint(1, max_tokens_cap)}
        longest[r] = sum(_seg_len(p, longest) for p in prompt) + req["max_tokens"]
        if rng.random() < 0.2:
            req["eos_at"] = rng.randint(0, req["max_tokens"] - 1)
        refs = [p[1:].split(":")[0] for p in prompt if p.startswith("@")]
        if i == 0:
            req["arrive"] = 1
        elif refs and rng.random() < 0.6:
            req["after"] = refs[0]
            req["delay"] = rng.randint(1, 3)
        elif refs:
            req["after_arrival"] = refs[0]
            req["delay"] = rng.randint(1, 4)
        else:
            w = rng.random()
            if w < 0.4:
                req["arrive"] = rng.randint(1, 8)
            elif w < 0.7:
                req["after_arrival"] = rng.choice(earlier)
                req["delay"] = rng.randint(0, 3)
            else:
                req["after"] = rng.choice(earlier)
                req["delay"] = rng.randint(1, 3)
        _table(lines, "[[request]]", req)
        if r in sessions:
            # Inputs sent once the session parks, or (for a session arriving at a fixed step)
            # at fixed steps, taken at once if it is parked and queued if it is still running.
            fixed = "arrive" in req and rng.random() < 0.5
            at = req.get("arrive", 0)
            for k in range(rng.randint(1, 3 if stress else 2)):
                inp = {"prompt": [f"{r}{k + 2}:{rng.randint(1, bs)}"],
                       "max_tokens": rng.randint(1, max(1, bs // 2))}
                if fixed:
                    at += rng.randint(1, 6)
                    inp["send"] = at
                else:
                    inp["send"] = "parked"
                    inp["delay"] = rng.randint(1, 2)
                longest[r] += _seg_len(inp["prompt"][0], longest) + inp["max_tokens"]
                _table(lines, "[[request.input]]", inp)
            end = {"end": True, "send": at + rng.randint(1, 6)} if fixed else {"end": True, "send": "parked"}
            _table(lines, "[[request.input]]", end)

    for r in names:
        if r in sessions:
            continue
        x = rng.random()
        if x < (0.2 if stress else 0.12):
            _table(lines, "[[event]]", {"abort": r, "after_arrival": r, "delay": rng.randint(1, 6)})
        elif x < (0.3 if stress else 0.18):
            _table(lines, "[[event]]", {"error": r, "after_arrival": r, "delay": rng.randint(1, 6)})
    if connector in ("offloading", "mooncake"):
        for r in names:
            # Only a request that shares a prefix can load (a failure that never applies is a
            # recording error).
            if r not in sharing or r in sessions:
                continue  # (a session that a failed load finishes never takes its inputs)
            if connector == "mooncake":
                # A pool load is sure only for a request that starts with the preload (a G1 hit
                # usually covers another request's saved prefix); the slow job is a save.
                if r in from_pool and rng.random() < 0.4:
                    _table(lines, "[[load_failure]]", {"req": r, "from_block": rng.randint(0, 1)})
                if rng.random() < 0.25:
                    _table(lines, "[[transfer_delay]]", {"req": r, "kind": "store", "nth": 1,
                                                          "delay": rng.randint(2, 6)})
                continue
            if rng.random() < (0.5 if stress else 0.3):
                nth = rng.randint(1, 2) if stress else 1
                _table(lines, "[[load_failure]]", {"req": r, "nth": nth, "from_block": rng.randint(0, 2)})
            if rng.random() < 0.25:
                _table(lines, "[[transfer_delay]]", {"req": r, "kind": rng.choice(["store", "load"]),
                                                      "nth": 1, "delay": rng.randint(2, 5)})
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--kind", choices=["any", "offloading", "simple-cpu", "none", "mooncake", "stress", "long",
                                       "nixl"], default="any")
    args = ap.parse_args(argv)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for i in range(args.count):
        rng = random.Random(f"{args.seed}/{i}/{args.kind}")
        name = f"fuzz-{args.seed}-{i}"
        path = out / f"{name}.toml"
        path.write_text(gen_nixl(rng, name) if args.kind == "nixl" else gen(rng, name, args.kind))
        load_scenario(path)  # a generator bug is an error here, not a recording failure
    return 0


if __name__ == "__main__":
    sys.exit(main())
