"""Random NixlConnector producer scenarios (``gen_scenarios.py --kind nixl``): the P/D prefill
instance in host-buffer mode (nixlprod.py), as kvmc's ``connector = "nixl"`` model runs it.

Per scenario: block size 2 or 4, 2 to 5 P/D prefill requests (``max_tokens = 1``; EOS as the
one token 15% of the time), prompts of a shared prefix (a block, two, or a block and a token:
G1 hits, shared blocks copied by several saves) or none, then the request's own tokens (up to
three blocks and a token, so prompts end mid-block); a token budget from 2 tokens to two blocks
and more (chunks that end mid-block: #59102), ``max_num_seqs`` up to 4, a pool from one
request's worth up (preemption while a finished request holds its blocks for the consumer),
whole-sequence admission off half the time, an abort of one request 30% of the time (1 to 3
steps after it arrives; vLLM ignores it when the request finished by then), and consumer reads
1 to 5 steps after each finish. No vLLM import.
"""

from __future__ import annotations

import random

NAMES = ["A", "B", "C", "D", "E"]


def gen_nixl(rng: random.Random, name: str) -> str:
    b = rng.choice([2, 4])
    reqs = []
    longest = 0
    for r in NAMES[:rng.randint(2, 5)]:
        prompt = []
        if rng.random() < 0.6:
            prompt.append(f"S:{rng.choice([b, 2 * b, b + 1])}")
        prompt.append(f"{r}x:{rng.randint(1, 3 * b + 1)}")
        longest = max(longest, sum(int(p.split(':')[1]) for p in prompt) + 1)
        reqs.append((r, prompt, rng.randint(1, 5), rng.random() < 0.15))
    gpu = -(-longest // b) + 1 + rng.randint(0, 3)
    budget = rng.randint(2, 2 * b + 2)
    lines = [f'name = "{name}"', 'description = "gen_scenarios.py --kind nixl: a random P/D producer workload"',
             "", "[engine]", f"block_size = {b}", f"gpu_blocks = {gpu}",
             # vLLM's planner wants the whole pool (less the null block) to hold max_model_len.
             f"max_model_len = {(gpu - 1) * b}", f"max_num_batched_tokens = {budget}",
             f"max_num_seqs = {min(budget, 4)}", 'connector = "nixl"']
    if rng.random() < 0.5:
        lines.append("scheduler_reserve_full_isl = false")
    lines += ["", "[worker]", "max_steps = 200"]
    for r, prompt, arrive, eos in reqs:
        segs = ", ".join(f'"{p}"' for p in prompt)
        lines += ["", "[[request]]", f'name = "{r}"', f"prompt = [{segs}]", "max_tokens = 1"]
        if eos:
            lines.append("eos_at = 0")
        lines.append(f"arrive = {arrive}")
    aborted = None
    if rng.random() < 0.3:
        aborted, _, arrive, _ = rng.choice(reqs)
        lines += ["", "[[event]]", f'abort = "{aborted}"', f"step = {arrive + rng.randint(1, 3)}"]
    for r, _, _, _ in reqs:
        delay = rng.choice([1, 1, 2, 3, 5])
        if r != aborted and delay != 1:
            lines += ["", "[[consumer_read]]", f'request = "{r}"', f"delay = {delay}"]
    return "\n".join(lines) + "\n"
