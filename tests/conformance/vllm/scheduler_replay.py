#!/usr/bin/env python3
"""Replay a Mooncake trace through vLLM's real scheduler side (0.24, 0.32, 0.33, 0.34).

Real: vllm.v1.core.sched.scheduler.Scheduler (synchronous), its KVCacheManager
(prefix caching, chunked prefill), the OffloadingConnector scheduler side with
the CPUOffloadingSpec's CPUOffloadingManager (LRU), and the OffloadingConnector
*worker* side (OffloadingConnectorWorker: store deferral, flushes on
preemption, sync/async loads, completion metadata).

Faked: the model (no forward pass; sampled tokens are a deterministic function
of row and position) and the OffloadingWorker under the connector worker (no
KV tensors; a copy completes a fixed number of steps after submission). Pinned: str
hashing (--hash-seed, default 0; the script re-executes itself with PYTHONHASHSEED), and
the order in which build_connector_meta walks Scheduler.finished_req_ids, a Python set
whose order decides which finished request's host-tier LRU re-rank is fresher
(--finished-order finish, the default: the order the requests finished, kvmc replay's
order; --finished-order set: the set's own, from the hash seed).

Run (from a venv with vllm 0.24.0, 0.32.0, 0.33.0 or 0.34.0; API differences between
releases are detected on vLLM's own code, not on its version number):
    python tests/conformance/vllm/scheduler_replay.py [--limit N] [--json-out F]
and compare with
    kvmc replay ../shared/traces/conversation_trace.jsonl --model models/replay-mooncake.toml
(docs/replay.md, "Against vLLM 0.33"; for 0.24, 0.32 and 0.34 add --profile vllm-0.24,
vllm-0.32 or vllm-0.34: "Against vLLM 0.24, 0.32 and 0.34"). --copy-steps 1 here is kvmc's
store_steps = 0 and load_steps = 0 (its defaults); --copy-steps 2 is store_steps = 1 and
load_steps = 1; --store-copy-steps 2 is kvmc's store_steps = 1. The JSON also counts
g1_evictions, host_evictions and store_refusals (kvmc's names). Other flags: --connector simple-cpu --cpu-blocks N,
--blocks-per-chunk, --no-prefix-caching, --offload-decode, --sessions (the mooncake-delta
dialect), --per-request FILE.tsv, --dump-steps FILE (one line per step, to find the first
step where two runs part).

This file holds the command line, the hash-seed pin and the output; the configuration, the
fake workers, the hooks, the trace and the engine loop are in sched_replay/ next to it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
# Model Runner V2 (0.33's default; it reports resumed requests as new requests with their
# full block table). 0.24 and 0.32 fall back to V1 on a machine without Triton; pin V2 as
# engine.py does, so every release schedules as on a GPU machine.
os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
# The project root is three levels up; the shared traces sit next to it (../shared/traces).
TRACE = os.path.normpath(os.path.join(HERE, "..", "..", "..", "..", "shared", "traces", "conversation_trace.jsonl"))


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--trace", default=TRACE)
    p.add_argument("--limit", type=int, default=0, help="first N rows (0: all)")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--gpu-blocks", type=int, default=8192)
    p.add_argument("--host-chunks", type=int, default=65536)
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--max-model-len", type=int, default=0,
                   help="0: (gpu_blocks - 1) * block_size, as kvmc")
    p.add_argument("--trace-block-size", type=int, default=512)
    p.add_argument("--copy-steps", type=int, default=1,
                   help="a store/load built in step k is reported done by the "
                        "worker at the end of step k + copy-steps")
    p.add_argument("--progress-every", type=int, default=500)
    # flags for other configurations
    p.add_argument("--blocks-per-chunk", type=int, default=1)
    p.add_argument("--sessions", action="store_true",
                   help="mooncake-delta: session_id/delay rows, later turns = prev prompt + answer + new input")
    p.add_argument("--store-copy-steps", type=int, default=0,
                   help="offloading: a store built in step k is reported done at the end of step "
                        "k + this (default: --copy-steps). 2 = kvmc store_steps 1")
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--connector", default="offloading", choices=["offloading", "simple-cpu", "none"])
    p.add_argument("--cpu-blocks", type=int, default=0, help="simple-cpu: num_cpu_blocks")
    p.add_argument("--lazy", action="store_true", help="simple-cpu: lazy_offload")
    p.add_argument("--offload-decode", action="store_true", help="offloading: offload_prompt_only=False")
    p.add_argument("--dump-steps", default="", help="per-step state dump file")
    p.add_argument("--json-out", default="")
    p.add_argument("--hash-seed", default="0",
                   help="PYTHONHASHSEED for the run (default 0; 'random': leave it unpinned)")
    p.add_argument("--finished-order", default="finish", choices=["finish", "set"],
                   help="finish: walk finished_req_ids in finish order (kvmc replay's order); "
                        "set: vLLM's Python set (order from the hash seed)")
    p.add_argument("--per-request", default="",
                   help="write one TSV row per request (kvmc --per-request columns)")
    return p.parse_args()


def main():
    args = parse_args()
    # vLLM iterates sets of request ids whose order reaches decisions (finished_req_ids: the
    # order of the finish-time stores and of the host LRU's finish re-ranks); a str's hash
    # depends on PYTHONHASHSEED, so pin it (as record.py does) and two runs agree.
    if args.hash_seed != "random" and os.environ.get("PYTHONHASHSEED") != args.hash_seed:
        os.environ["PYTHONHASHSEED"] = args.hash_seed
        os.execv(sys.executable, [sys.executable, *sys.argv])
    T0_WALL = time.perf_counter()
    T0_CPU = time.process_time()

    # The parts (sched_replay/, next to this file); engine first: it imports torch and vLLM.
    # No __pycache__ is left in the repository.
    sys.dont_write_bytecode = True
    from sched_replay.engine import Engine
    from sched_replay.trace import Trace
    from sched_replay.workers import worker_side
    from sched_replay.state import ReplayState
    from sched_replay import hooks, loop

    import logging
    logging.getLogger("vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler").setLevel(logging.ERROR)
    T_IMPORT = time.perf_counter() - T0_WALL

    engine = Engine(args)  # the configuration, the Scheduler and its connector's scheduler side
    state = ReplayState(args)
    wconn, fake_worker = worker_side(engine, state)
    hooks.install(engine, state)
    trace = Trace(args, engine, state)
    t = loop.run(args, engine, state, trace, wconn, fake_worker)

    wall = time.perf_counter() - T0_WALL
    cpu = time.process_time() - T0_CPU
    loop_wall = time.perf_counter() - t.t_start

    try:
        import resource
        peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    except Exception:
        peak_rss_mib = float("nan")

    C, EVICT = state.C, state.EVICT
    res = dict(
        rows=t.rows,
        finished=t.finished,
        rejected=trace.rejected,
        engine_steps=t.steps,
        nonempty_steps=C["nonempty_steps"],
        prompt_tokens=t.prompt_tokens,
        output_tokens=t.output_tokens,
        g1_hit_tokens_first=C["g1_hit_first"],
        host_restored_tokens_first=C["host_first"],
        prefill_computed_first=C["prefill_first"],
        decode_first=C["decode_first"],
        recomputed=C["recomputed"],
        g1_hit_tokens_after_preemption=C["g1_hit_again"],
        host_restored_tokens_after_preemption=C["host_again"],
        scheduled_tokens=C["scheduled_tokens"],
        preemptions=C["preemptions"],
        g1_evictions=EVICT["g1"],
        host_evictions=EVICT["host"],
        store_refusals=EVICT["refused"],
        store_jobs=fake_worker.store_jobs,
        store_chunks=fake_worker.store_chunks,
        load_jobs=fake_worker.load_jobs,
        load_chunks=fake_worker.load_chunks,
        sync_load_jobs=fake_worker.sync_load_jobs,
        flushed_jobs=fake_worker.flushed_jobs,
        pending_copies_at_end=len(fake_worker.pending),
        copy_steps=args.copy_steps,
        hash_seed=os.environ.get("PYTHONHASHSEED", "random"),
        finished_order=args.finished_order,
        import_s=round(T_IMPORT, 2),
        loop_wall_s=round(loop_wall, 2),
        wall_s=round(wall, 2),
        cpu_s=round(cpu, 2),
        peak_rss_mib=round(peak_rss_mib, 1),
    )
    print(json.dumps(res, indent=1))
    if args.per_request:
        with open(args.per_request, "w") as f:
            f.write("line\tarrival_ms\tfinish_ms\tg1_hit\trestored\tcomputed\trecomp\tpreempt\n")
            for rid in sorted(state.PR, key=int):
                a, fin, g, h, c, rc, pe = state.PR[rid]
                f.write(f"{int(rid) + 1}\t{a:.1f}\t{fin:.1f}\t{g}\t{h}\t{c}\t{rc}\t{pe}\n")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
