"""Instrumentation: wrappers around vLLM's own methods that only observe. They count a
request's G1 and host hits when it is first admitted (and again after a preemption), the
preemptions, the G1 and host evictions, the refused stores, and name the step dump's
events (stores, lookups). Everything they count goes to the ReplayState."""

from __future__ import annotations

import os
import sys


def install(engine, state):
    """Wraps the scheduler's methods (and the OffloadingConnector's CPU manager's) in place."""
    args, scheduler, sconn = engine.args, engine.scheduler, engine.sconn
    C, hw, PR, EVS, EVICT = state.C, state.hw, state.PR, state.EVS, state.EVICT
    first_alloc_done = state.first_alloc_done

    _orig_alloc = scheduler.kv_cache_manager.allocate_slots

    def _alloc(request, num_new_tokens, *a, **kw):
        before = request.num_computed_tokens
        res = _orig_alloc(request, num_new_tokens, *a, **kw)
        if res is not None and before == 0 and "num_new_computed_tokens" in kw:
            loc = kw.get("num_new_computed_tokens", 0)
            ext = kw.get("num_external_computed_tokens", 0)
            rid = request.request_id
            if rid not in first_alloc_done:
                first_alloc_done.add(rid)
                C["g1_hit_first"] += loc
                C["host_first"] += ext
                if rid in PR:
                    PR[rid][2] += loc
                    PR[rid][3] += ext
                hw[rid] = loc + ext
            else:
                C["g1_hit_again"] += loc
                C["host_again"] += ext
        return res

    scheduler.kv_cache_manager.allocate_slots = _alloc

    DEBUG_PREEMPT = bool(os.environ.get("REPLAY_DEBUG_PREEMPT"))
    _orig_preempt = scheduler._preempt_request

    def _count_evictions(pool, key):
        orig = pool._maybe_evict_cached_block

        def wrapped(block):
            hit = orig(block)
            if hit:
                EVICT[key] += 1
            return hit
        pool._maybe_evict_cached_block = wrapped

    _count_evictions(scheduler.kv_cache_manager.block_pool, "g1")
    if args.connector == "simple-cpu":
        _count_evictions(sconn.scheduler_manager.cpu_block_pool, "host")

    if args.connector == "offloading":
        _cs = sconn.connector_scheduler
        _mgr = _cs.manager
        _orig_ps = _mgr.prepare_store

        def _ps(keys, req_context, *a, **kw):
            keys = list(keys)
            out = _orig_ps(keys, req_context, *a, **kw)
            r = int(req_context.req_id) + 1
            if out is None:
                EVICT["refused"] += 1
                if state.DUMP_ON:
                    EVS.append(f"S{r}:{len(keys)}->None")
            else:
                state.HEV += len(out.evicted_keys)
                EVICT["host"] += len(out.evicted_keys)
                if out.keys_to_store and state.DUMP_ON:
                    EVS.append(f"S{r}->{len(out.keys_to_store)}")
            return out
        _mgr.prepare_store = _ps

    if args.connector == "offloading" and args.dump_steps:
        _orig_gnm = _cs.get_num_new_matched_tokens

        def _gnm(request, num_computed_tokens, *a, **kw):
            res = _orig_gnm(request, num_computed_tokens, *a, **kw)
            ext = res[0]
            if ext is None or ext > 0:
                EVS.append(f"Q{int(request.request_id) + 1}:{num_computed_tokens}+{'None' if ext is None else f'Some({ext})'}")
            return res
        _cs.get_num_new_matched_tokens = _gnm

    def _preempt(request, *a, **kw):
        C["preemptions"] += 1
        state.STEP_PREEMPTED.append(int(request.request_id) + 1)
        if DEBUG_PREEMPT:
            print(f"[preempt] step {state.steps + 1} victim {int(request.request_id) + 1} "
                  f"computed {request.num_computed_tokens} free "
                  f"{scheduler.kv_cache_manager.block_pool.get_num_free_blocks()} "
                  f"running {len(scheduler.running)}", file=sys.stderr)
        if request.request_id in PR:
            PR[request.request_id][6] += 1
        return _orig_preempt(request, *a, **kw)

    scheduler._preempt_request = _preempt
