"""The engine loop: requests added as the closed loop (and sessions' delays) allow, then
EngineCore.step's work by hand: Scheduler.schedule(), the model runner's KV connector
lifecycle on the worker side (preemption flushes, loads, stores, finished transfers), a
ModelRunnerOutput of deterministic sampled tokens, and update_from_output(); the counts in
the "first reached" convention, kvmc's model time (60 ms a prefill step, 20 ms a decode
step), the per-request rows and the --dump-steps lines."""

from __future__ import annotations

import dataclasses as _dc
import heapq
import os
import sys
import time

from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import RequestStatus

_MRO_HAS_INDEX = "req_id_to_index" in {f.name for f in _dc.fields(ModelRunnerOutput)}
STATUS_CH = {"WAITING": "W", "WAITING_FOR_REMOTE_KVS": "R", "RUNNING": "U", "PREEMPTED": "X"}


def MRO_INDEX(req_ids):
    """ModelRunnerOutput.req_id_to_index, which 0.34 dropped."""
    return {"req_id_to_index": {rid: k for k, rid in enumerate(req_ids)}} if _MRO_HAS_INDEX else {}


def CPUFREE(args, sconn, state, PROBE_ROW):
    """SimpleCPU's free CPU blocks for the dump (and PROBE_ROW's blocks in the CPU pool)."""
    if args.connector == "simple-cpu":
        out = [f"cpufree={sconn.scheduler_manager.cpu_block_pool.get_num_free_blocks()}"]
        if PROBE_ROW is not None and str(int(PROBE_ROW) - 1) in state.REQS:
            from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id
            pool = sconn.scheduler_manager.cpu_block_pool
            hs = state.REQS[str(int(PROBE_ROW) - 1)].block_hashes
            present = [i for i, h in enumerate(hs)
                       if pool.cached_block_hash_to_block.get_one_block(make_block_hash_with_group_id(h, 0)) is not None]
            split = int(os.environ.get("PROBE_SPLIT", "1000000000"))
            out.append(f"probe={sum(1 for i in present if i < 32)}/{len(present)}/{sum(1 for i in present if i < split)}/{len(hs)}")
        return out
    return []


@_dc.dataclass
class Totals:
    """What the loop counted besides the ReplayState's counters."""
    rows: int
    finished: int
    prompt_tokens: int
    output_tokens: int
    steps: int
    t_start: float


def run(args, engine, state, trace, wconn, fake_worker) -> Totals:
    scheduler, sconn = engine.scheduler, engine.sconn
    C, hw, PR, REQS, EVS = state.C, state.hw, state.PR, state.REQS, state.EVS
    SESS_NEXT, SESS_DELAY = trace.SESS_NEXT, trace.SESS_DELAY
    N = len(trace.rows)
    next_row = 0
    live: set[str] = set()
    finished = 0
    prompt_tokens = 0
    output_tokens = 0
    steps = 0
    model_ms = 0.0                   # kvmc's model time: 60 ms prefill step, 20 ms decode
    t_start = time.perf_counter()
    PROBE_ROW = os.environ.get("PROBE_ROW")  # 1-based request id (str(i) is 0-based)
    DUMP = open(args.dump_steps, "w") if args.dump_steps else None
    next_progress = args.progress_every

    ELIGIBLE = [i for i in range(N) if i not in trace.SESS_PREV]
    heapq.heapify(ELIGIBLE)
    TIMED: list = []
    while True:
        while TIMED and TIMED[0][0] <= model_ms + 1e-9:
            heapq.heappush(ELIGIBLE, heapq.heappop(TIMED)[1])
        while len(live) < args.concurrency and ELIGIBLE:
            next_row = heapq.heappop(ELIGIBLE)
            req = trace.make_request(next_row)
            if req is None:
                continue
            prompt_tokens += req.num_prompt_tokens
            if args.per_request:
                PR[req.request_id] = [model_ms, 0.0, 0, 0, 0, 0, 0]
            scheduler.add_request(req)
            REQS[req.request_id] = req
            live.add(req.request_id)
        if not scheduler.has_requests():
            if TIMED and not ELIGIBLE:
                model_ms = max(model_ms, TIMED[0][0])
                continue
            if not ELIGIBLE:
                break
            continue

        state.STEP_PREEMPTED.clear()
        so = scheduler.schedule()
        engine.fresh_finished_set()  # schedule() handed its set to `so` and started a plain one
        steps += 1
        state.steps = steps
        fake_worker.step = steps
        state.sc_step = steps

        # --- worker side (GPUModelRunner.execute_model + KV connector mixin) ---
        md = so.kv_connector_metadata
        if wconn is None:
            kv_out = None
        else:
            sync_loads = getattr(so, "has_sync_kv_loads", False)  # 0.24: no sync loads
            wconn.handle_preemptions(md)
            wconn.bind_connector_metadata(md)
            if sync_loads:
                wconn.start_load_kv(None)
            # (forward pass would run here)
            if not sync_loads:
                wconn.start_load_kv(None)
            if hasattr(wconn, "finish_forward"):  # 0.34
                wconn.finish_forward()
            wconn.wait_for_save()
            if hasattr(wconn, "get_transfer_results"):  # 0.34: failed_recving too
                tr = wconn.get_transfer_results(so.finished_req_ids)
                fin_send, fin_recv = tr.finished_sending, tr.finished_recving
                extra_out = {"failed_recving": set(tr.failed_recving or ())}
            else:
                fin_send, fin_recv = wconn.get_finished(so.finished_req_ids)
                extra_out = {}
            kv_out = KVConnectorOutput(
                finished_sending=set(fin_send or ()),
                finished_recving=set(fin_recv or ()),
                kv_connector_worker_meta=wconn.build_connector_worker_meta(),
                **extra_out,
            )
            wconn.clear_connector_metadata()

        nst = so.num_scheduled_tokens
        PF0 = C["prefill_first"]
        if so.total_num_scheduled_tokens == 0:
            if kv_out is None:
                mro = ModelRunnerOutput(req_ids=[], sampled_token_ids=[], **MRO_INDEX([]))
            else:
                mro = ModelRunnerOutput.with_kv_conn_output_only(kv_out)
        else:
            C["nonempty_steps"] += 1
            req_ids = list(nst.keys())
            sampled = []
            any_prefill = False
            for rid in req_ids:
                n = nst[rid]
                r = scheduler.requests[rid]
                end = r.num_computed_tokens  # already advanced by schedule()
                start = end - n
                h = hw.get(rid, 0)
                new = max(0, end - max(start, h))
                C["recomputed"] += n - new
                if n == 1 and start >= r.num_prompt_tokens:
                    C["decode_first"] += new
                else:
                    C["prefill_first"] += new
                    any_prefill = True
                    if rid in PR:
                        PR[rid][4] += new
                if rid in PR:
                    PR[rid][5] += n - new
                if end > h:
                    hw[rid] = end
                C["scheduled_tokens"] += n
                # The runner discards the sample of a partial prefill chunk.
                sampled.append([trace.sampled_token(rid, end)] if end >= r.num_tokens else [])
            model_ms += 60.0 if any_prefill else 20.0
            mro = ModelRunnerOutput(
                req_ids=req_ids,
                **MRO_INDEX(req_ids),
                sampled_token_ids=sampled,
                kv_connector_output=kv_out,
            )

        outs = scheduler.update_from_output(so, mro)
        if DUMP is not None:
            parts = []
            for rid in sorted(live, key=int):
                r = REQS[rid]
                st = r.status
                c = STATUS_CH.get(st.name, "F" if RequestStatus.is_finished(st) else "?")
                parts.append(f"{int(rid) + 1}:{c}:{r.num_computed_tokens}:{r.num_output_tokens}")
            sched_str = ",".join(f"{int(k) + 1}={v}" for k, v in sorted(nst.items(), key=lambda kv: int(kv[0])))
            DUMP.write(
                f"{steps} free={scheduler.kv_cache_manager.block_pool.get_num_free_blocks()} "
                f"st={fake_worker.store_jobs}/{fake_worker.store_chunks} "
                f"ld={fake_worker.load_jobs}/{fake_worker.load_chunks} pre={C['preemptions']} ms={model_ms:.0f} "
                f"newpf={C['prefill_first'] - PF0} | "
                + " ".join(parts) + f" || ev {' '.join(EVS + CPUFREE(args, sconn, state, PROBE_ROW))} "
                f"hev={state.HEV} || sched {sched_str} preempted {state.STEP_PREEMPTED}\n")
            EVS.clear()
            state.HEV = 0
        for eco in outs.values():
            for o in eco.outputs:
                output_tokens += len(o.new_token_ids)
                if o.finish_reason is not None and o.request_id in live:
                    live.discard(o.request_id)
                    hw.pop(o.request_id, None)
                    if o.request_id in PR:
                        PR[o.request_id][1] = model_ms
                    if int(o.request_id) in SESS_NEXT:
                        nx = SESS_NEXT[int(o.request_id)]
                        heapq.heappush(TIMED, (model_ms + SESS_DELAY.get(nx, 0.0), nx))
                    finished += 1
                    if finished >= next_progress:
                        el = time.perf_counter() - t_start
                        print(
                            f"[progress] finished {finished}/{N} steps {steps} "
                            f"elapsed {el:.1f}s",
                            file=sys.stderr, flush=True,
                        )
                        next_progress += args.progress_every
    return Totals(rows=N, finished=finished, prompt_tokens=prompt_tokens,
                  output_tokens=output_tokens, steps=steps, t_start=t_start)
