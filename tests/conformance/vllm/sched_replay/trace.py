"""The trace's rows as vLLM Requests: token synthesis from hash_ids (each trace block an
interned id repeated trace_block_size times, cut at input_length), the mooncake-delta
sessions of --sessions (a later turn's prompt is the previous prompt, its answer and the new
input), prompts of max_model_len tokens or more refused (with their sessions' later turns),
and the sampled tokens the fake model returns."""

from __future__ import annotations

import json

from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.request import Request


class Trace:
    """The rows read (up to --limit), their sessions, and the requests made of them.

    rows: (input_length, output_length, hash_ids) per row; SESS_PREV / SESS_NEXT: a session
    turn's previous / next row; SESS_DELAY: a later turn's delay (ms); rejected: rows
    refused as too long for the model."""

    def __init__(self, args, engine, state):
        self.state = state
        self.max_model_len = engine.max_model_len
        vllm_config = engine.vllm_config
        hash_fn = get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        if hasattr(vllm_config, "num_hash_lookahead_tokens"):  # 0.33+
            self.block_hasher = get_request_block_hasher(
                engine.hash_bs, hash_fn, vllm_config.num_hash_lookahead_tokens
            )
        else:
            self.block_hasher = get_request_block_hasher(engine.hash_bs, hash_fn)

        rows = self.rows = []
        self.SESS_PREV: dict[int, int] = {}
        self.SESS_NEXT: dict[int, int] = {}
        self.SESS_DELAY: dict[int, float] = {}
        _last_of_session: dict = {}
        with open(args.trace) as f:
            for line in f:
                r = json.loads(line)
                i = len(rows)
                rows.append((r["input_length"], r["output_length"], r["hash_ids"]))
                if args.sessions and r.get("session_id") is not None:
                    sid = r["session_id"]
                    if sid in _last_of_session:
                        p_ = _last_of_session[sid]
                        self.SESS_PREV[i] = p_
                        self.SESS_NEXT[p_] = i
                        self.SESS_DELAY[i] = float(r.get("delay", 0.0))
                    _last_of_session[sid] = i
                if args.limit and len(rows) >= args.limit:
                    break
        self.PROMPTS: dict[int, list] = {}
        self.intern: dict[int, int] = {}
        self.TBS = args.trace_block_size
        self.rejected = 0
        self.OUT_BASE: dict[str, int] = {}
        self.next_out = 0

    def make_request(self, i: int) -> Request:
        """Row i's request, or None (counted in `rejected`) when its prompt does not fit."""
        inp, out, hids = self.rows[i]
        toks: list[int] = []
        for h in hids:
            t = self.intern.setdefault(h, len(self.intern))
            toks.extend([t] * self.TBS)
        del toks[inp:]
        assert len(toks) == inp, (i, len(toks), inp)
        if i in self.SESS_PREV:
            p_ = self.SESS_PREV[i]
            toks = self.PROMPTS.pop(p_) + list(self.state.REQS[str(p_)].output_token_ids) + toks
        if len(toks) >= self.max_model_len:
            # vLLM's input processor refuses a prompt of max_model_len tokens or more (the
            # client gets an error; kvmc counts it as rejected), and a session's later turns
            # build on it.
            n, j = 1, i
            while j in self.SESS_NEXT:
                j = self.SESS_NEXT[j]
                n += 1
            self.rejected += n
            return None
        if i in self.SESS_NEXT:
            self.PROMPTS[i] = list(toks)
        # A prompt that fits but whose answer would not stops at max_model_len
        # (Scheduler's check_stop), as kvmc caps it.
        # Each request's sampled tokens get their own range of ids above the prompt tokens'.
        self.OUT_BASE[str(i)] = self.next_out
        self.next_out += len(toks) + out + 1
        sp = SamplingParams(max_tokens=out, ignore_eos=True, temperature=0.0)
        return Request(
            request_id=str(i),
            prompt_token_ids=toks,
            sampling_params=sp,
            pooling_params=None,
            block_hasher=self.block_hasher,
        )

    def sampled_token(self, rid: str, pos: int) -> int:
        """Distinct for every (request, position) and from every prompt token (interned trace
        blocks, dense from 0). Below 2**31: 0.34 keeps a request's tokens in a TokenBuffer of
        C ints (OverflowError past it); 1e9 + rid * 1e5 + pos, the earlier scheme, passed it
        at row 11,475 of the conversation trace, and collided for positions past 100,000."""
        t = 1_000_000_000 + self.OUT_BASE[rid] + pos
        assert t < 2**31, "the trace has too many tokens for 31-bit sampled ids"
        return t
