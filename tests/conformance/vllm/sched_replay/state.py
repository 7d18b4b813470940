"""The replay's shared state: what the run counts, and what the hooks (hooks.py), the fake
copy engines (workers.py), the request factory (trace.py) and the engine loop (loop.py)
read and write. It was the script's module-level state; one object now, passed to each."""

from __future__ import annotations


class ReplayState:
    """Counters and per-request tables of one run."""

    def __init__(self, args):
        self.args = args
        # Counts in kvmc's "first reached" convention (docs/replay.md).
        self.C = dict(
            g1_hit_first=0, host_first=0, g1_hit_again=0, host_again=0,
            admissions_with_hits=0, preemptions=0,
            prefill_first=0, decode_first=0, recomputed=0,
            scheduled_tokens=0, nonempty_steps=0,
        )
        self.hw: dict[str, int] = {}      # req -> highest position reached
        self.PR: dict[str, list] = {}     # per request: [arrival_ms, finish_ms, g1, restored,
                                          #   computed, recomputed, preemptions]
        self.first_alloc_done: set[str] = set()
        # Engine steps so far (the loop's counter; a preemption's debug line names the step).
        self.steps = 0
        # The step the SimpleCPU fake events compare their due step with.
        self.sc_step = 0
        self.STEP_PREEMPTED: list = []    # rows preempted in the current step (1-based)
        self.REQS: dict = {}              # request id -> vLLM Request, every one added
        self.EVS: list = []               # the step dump's events of the current step
        self.HEV = 0                      # host evictions in the current step (dump)
        self.DUMP_ON = bool(args.dump_steps)
        # Evictions (kvmc's g1_evictions / host_evictions: blocks or chunks that lost their
        # hash) and refused stores (kvmc's store_refusals), counted on every run.
        self.EVICT = dict(g1=0, host=0, refused=0)
