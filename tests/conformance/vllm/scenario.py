"""Scenario files for the conformance recorder: parsing, validation, token ids.

A scenario (tests/conformance/scenarios/NAME.toml, format in ../README.md) names an
engine configuration with the same keys as kvmc model files, a set of requests with
segment-built prompts, a timeline (arrivals, aborts, errors) and a fake-worker policy
(transfer delays, load failures). This module has no vLLM dependency; it only turns the
TOML into plain dataclasses and defines the deterministic token ids:

* token ``i`` of prompt segment ``NAME`` is ``3 + fnv1a64(f"{NAME}:{i}") % 997``;
* output token ``n`` (0-based) of request ``R`` is ``3 + fnv1a64(f"{R}#{n}") % 997``,
  except at ``eos_at`` where it is the EOS id 2. In input ``k`` >= 2 of a streaming
  session ``S`` (``[[request.input]]``) the name is ``S@k`` (``n`` counts from 0 again).

Both land in [3, 999], so they never hit bos (1) or eos (2) of the tiny model.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

EOS_TOKEN_ID = 2

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3


def fnv1a64(text: str) -> int:
    h = _FNV_OFFSET
    for b in text.encode("utf-8"):
        h ^= b
        h = (h * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def segment_token(name: str, i: int) -> int:
    return 3 + fnv1a64(f"{name}:{i}") % 997


def sampled_token(req: str, n: int, eos_at: int | None) -> int:
    if eos_at is not None and n == eos_at:
        return EOS_TOKEN_ID
    return 3 + fnv1a64(f"{req}#{n}") % 997


class ScenarioError(ValueError):
    pass


@dataclass
class When:
    """A point on the timeline: a fixed step, or `delay` steps after another
    request finished (`after`) or arrived (`after_arrival`)."""

    step: int | None = None
    after: str | None = None
    after_arrival: str | None = None
    delay: int = 1

    def describe(self) -> str:
        if self.step is not None:
            return f"step {self.step}"
        if self.after is not None:
            return f"{self.delay} step(s) after {self.after} finishes"
        return f"{self.delay} step(s) after {self.after_arrival} arrives"


@dataclass
class RequestSpec:
    name: str
    prompt: list[str]
    max_tokens: int
    when: When
    eos_at: int | None = None
    # Streaming-input session (vLLM resumable request): its further inputs, in order.
    inputs: list[StreamInputSpec] = field(default_factory=list)

    @property
    def resumable(self) -> bool:
        return bool(self.inputs)


@dataclass
class StreamInputSpec:
    """A further input of a streaming-input session (``[[request.input]]``): the client
    sends it with the session's request id (``Scheduler.add_request`` with an existing id).
    ``end`` = the end-of-session sentinel (no prompt)."""

    index: int                       # 2, 3, ... (the session's first input is 1)
    end: bool
    prompt: list[str]
    max_tokens: int
    eos_at: int | None
    step: int | None = None          # send before this step, or
    delay: int = 1                   # ... `delay` steps after the session parked (step None)

    def describe(self) -> str:
        what = "end-of-session sentinel" if self.end else f"input {self.index}"
        when = (f"step {self.step}" if self.step is not None
                else f"{self.delay} step(s) after the session parks")
        return f"{what} ({when})"


@dataclass
class InputEvent:
    kind: str  # "abort" | "error"
    req: str
    when: When


@dataclass
class ConsumerRead:
    """NIXL P/D (``[[consumer_read]]``): the decode instance reads request ``req``'s blocks from
    the producer's host buffer before step ``at_step`` (None: ``delay`` steps after ``req``
    finished; 1, the earliest, the step after the one whose output carried its
    ``kv_transfer_params``)."""

    req: str
    at_step: int | None = None
    delay: int = 1

    def describe(self) -> str:
        when = f"step {self.at_step}" if self.at_step is not None else f"{self.delay} step(s) after it finishes"
        return f"consumer read of {self.req} ({when})"


@dataclass
class LoadFailure:
    req: str
    nth: int = 1          # the nth load job created for `req` (1-based)
    from_block: int = 0   # invalid blocks = the job's destination blocks [from_block:]


@dataclass
class DelayOverride:
    req: str
    kind: str             # "store" | "load"
    nth: int              # the nth job of that kind for `req` (1-based)
    delay: int


@dataclass
class Scenario:
    name: str
    description: str
    # [engine]
    block_size: int
    gpu_blocks: int
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    long_prefill_token_threshold: int
    load_failure_policy: str
    connector: str
    # [offload]
    host_chunks: int
    blocks_per_chunk: int
    offload_prompt_only: bool
    sync_load_budget_tokens: int
    eviction_policy: str
    # [worker]
    store_delay: int
    load_delay: int
    max_steps: int
    requests: list[RequestSpec] = field(default_factory=list)
    events: list[InputEvent] = field(default_factory=list)
    load_failures: list[LoadFailure] = field(default_factory=list)
    delay_overrides: list[DelayOverride] = field(default_factory=list)
    # [simple_cpu] (connector = "simple-cpu"): num_cpu_blocks, incl. the CPU pool's null block
    cpu_blocks: int = 0
    # [simple_cpu] mode = "lazy": lazy_offload (stores chosen by a walk of the G1 free queue)
    lazy_offload: bool = False
    # [engine] async_scheduling: AsyncScheduler + EngineCore.step_with_batch_queue (record.py)
    async_scheduling: bool = False
    # Not a scenario key: record.py --connector-class MODULE:CLASS (engine.connector_by_name)
    connector_class: str | None = None
    # [engine] enable_prefix_caching (CacheConfig; vLLM's default true). Off, G1 caches no
    # block; an offloading connector still keys the host tier by the request's block hashes.
    enable_prefix_caching: bool = True
    # [engine] scheduler_reserve_full_isl (SchedulerConfig; vLLM's default true). False: a
    # waiting request is admitted when its first chunk fits, not its whole prompt.
    scheduler_reserve_full_isl: bool = True
    # [engine] cache_aware_admission_window / _threshold (vLLM 0.34+; 0 = off, vLLM's default)
    cache_aware_admission_window: int = 0
    cache_aware_admission_threshold: float = 0.5
    # [mooncake] preload (connector = "mooncake"): token sequences (prompt segments, no '@')
    # whose full blocks another instance already put into the Mooncake pool
    mooncake_preload: list[list[str]] = field(default_factory=list)
    # [mooncake] save_decode_cache (kv_connector_extra_config; vLLM's default false)
    mooncake_save_decode_cache: bool = False
    # [[consumer_read]] (connector = "nixl"): when the decode instance reads each request; a
    # request with none is read at the earliest step (ConsumerRead's delay 1)
    consumer_reads: list[ConsumerRead] = field(default_factory=list)

    def request(self, name: str) -> RequestSpec:
        for r in self.requests:
            if r.name == name:
                return r
        raise ScenarioError(f"unknown request {name!r}")


def parse_connector_class(value: str) -> tuple[str, str]:
    """``MODULE:CLASS`` (``record.py --connector-class``) -> (module path, class name)."""
    module, sep, cls = value.partition(":")
    if not sep or not module or not cls.isidentifier() or \
            not all(p.isidentifier() for p in module.split(".")):
        raise ValueError(f"{value!r}: expected MODULE:CLASS (a dotted module path, a colon, "
                         f"a class name), e.g. example_connector.forgetful:"
                         f"ForgetfulOffloadingConnector")
    return module, cls


_SEG_RE = re.compile(r"^(@?)([A-Za-z0-9_\-]+)(?::(\d+))?$")

_ENGINE_KEYS = {
    "block_size", "gpu_blocks", "max_num_batched_tokens", "max_num_seqs",
    "max_model_len", "long_prefill_token_threshold", "load_failure_policy",
    "connector", "profile", "async_scheduling",
    "cache_aware_admission_window", "cache_aware_admission_threshold",
    "enable_prefix_caching", "scheduler_reserve_full_isl",
}
_OFFLOAD_KEYS = {
    "host_chunks", "blocks_per_chunk", "offload_prompt_only",
    "sync_load_budget_tokens", "eviction_policy",
}
_SIMPLE_CPU_KEYS = {"cpu_blocks", "mode"}
_MOONCAKE_KEYS = {"preload", "save_decode_cache"}
_WORKER_KEYS = {"store_delay", "load_delay", "max_steps"}
_REQUEST_KEYS = {"name", "prompt", "max_tokens", "eos_at", "arrive", "after",
                 "after_arrival", "delay", "input"}
_INPUT_KEYS = {"prompt", "max_tokens", "eos_at", "end", "send", "delay"}
_EVENT_KEYS = {"abort", "error", "step", "after", "after_arrival", "delay"}
_TOP_KEYS = {"name", "description", "engine", "offload", "simple_cpu", "mooncake", "worker", "request",
             "event", "load_failure", "transfer_delay", "consumer_read"}


def _bool(v, where: str) -> bool:
    if not isinstance(v, bool):
        raise ScenarioError(f"{where} must be true or false")
    return v


def _check_keys(table: dict, allowed: set[str], where: str) -> None:
    unknown = set(table) - allowed
    if unknown:
        raise ScenarioError(f"{where}: unknown key(s) {sorted(unknown)}")


def _parse_when(t: dict, where: str, step_key: str) -> When:
    fixed = t.get(step_key)
    after = t.get("after")
    after_arrival = t.get("after_arrival")
    given = [x is not None for x in (fixed, after, after_arrival)]
    if sum(given) != 1:
        raise ScenarioError(
            f"{where}: give exactly one of {step_key!r}, 'after', 'after_arrival'")
    delay = int(t.get("delay", 1))
    if delay < 0:
        raise ScenarioError(f"{where}: delay must be >= 0")
    if after is not None and delay < 1:
        raise ScenarioError(f"{where}: 'after' needs delay >= 1 (a request finishes "
                            "inside a step; the next input point is the next step)")
    if fixed is not None:
        if int(fixed) < 1:
            raise ScenarioError(f"{where}: steps start at 1")
        return When(step=int(fixed))
    return When(after=after, after_arrival=after_arrival, delay=delay)


def _parse_inputs(raw: list, where: str) -> list[StreamInputSpec]:
    """``[[request.input]]``: a streaming session's further inputs, then (optionally, last)
    the end-of-session sentinel (``end = true``). ``send`` is a step number (sent before
    that step's ``schedule()``, queued in ``streaming_queue`` if the session is still
    running) or ``"parked"`` (``delay`` steps, default 1, after the session's previous
    input stopped and it parked in WAITING_FOR_STREAMING_REQ)."""
    out: list[StreamInputSpec] = []
    last_step = 0
    for i, t in enumerate(raw):
        w = f"{where}: [[request.input]] #{i + 1}"
        _check_keys(t, _INPUT_KEYS, w)
        end = bool(t.get("end", False))
        if out and out[-1].end:
            raise ScenarioError(f"{w}: nothing may follow the end-of-session sentinel")
        if end:
            extra = {"prompt", "max_tokens", "eos_at"} & set(t)
            if extra:
                raise ScenarioError(f"{w}: the sentinel has no {sorted(extra)}")
            prompt: list[str] = []
            max_tokens = 0
        else:
            prompt = t["prompt"]
            if isinstance(prompt, str):
                prompt = [prompt]
            for seg in prompt:
                parse_segment(seg)
            max_tokens = int(t["max_tokens"])
            if max_tokens < 1:
                raise ScenarioError(f"{w}: max_tokens must be >= 1")
        send = t["send"]
        delay = int(t.get("delay", 1))
        if send == "parked":
            if delay < 1:
                raise ScenarioError(f"{w}: delay must be >= 1 (a session parks inside a step)")
            step = None
        elif isinstance(send, int) and not isinstance(send, bool):
            if "delay" in t:
                raise ScenarioError(f"{w}: delay goes with send = \"parked\"")
            if send < last_step:
                raise ScenarioError(f"{w}: inputs are sent in order (step {send} < {last_step})")
            step = last_step = send
        else:
            raise ScenarioError(f"{w}: send must be a step number or \"parked\"")
        eos_at = t.get("eos_at")
        out.append(StreamInputSpec(index=i + 2, end=end, prompt=list(prompt),
                                   max_tokens=max_tokens,
                                   eos_at=int(eos_at) if eos_at is not None else None,
                                   step=step, delay=delay))
    if out and out[0].end:
        raise ScenarioError(f"{where}: a session needs an input before its sentinel")
    return out


def parse_segment(seg: str) -> tuple[bool, str, int | None]:
    """'SYS:16' -> (False, 'SYS', 16); '@R1' -> (True, 'R1', None)."""
    m = _SEG_RE.match(seg.strip())
    if not m:
        raise ScenarioError(f"bad prompt segment {seg!r}")
    ref, name, count = m.groups()
    if not ref and count is None:
        raise ScenarioError(f"segment {seg!r} needs a length (NAME:N)")
    return bool(ref), name, int(count) if count is not None else None


def load_scenario(path: str | Path) -> Scenario:
    try:
        return _load_scenario(Path(path))
    except KeyError as e:
        raise ScenarioError(f"missing required key {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(f"bad TOML: {e}") from None


def _load_scenario(path: Path) -> Scenario:
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    _check_keys(doc, _TOP_KEYS, str(path))
    eng = doc.get("engine", {})
    off = doc.get("offload", {})
    wrk = doc.get("worker", {})
    scpu = doc.get("simple_cpu", {})
    _check_keys(eng, _ENGINE_KEYS, "[engine]")
    _check_keys(off, _OFFLOAD_KEYS, "[offload]")
    _check_keys(scpu, _SIMPLE_CPU_KEYS, "[simple_cpu]")
    _check_keys(wrk, _WORKER_KEYS, "[worker]")
    mc = doc.get("mooncake", {})
    _check_keys(mc, _MOONCAKE_KEYS, "[mooncake]")

    block_size = int(eng["block_size"])
    gpu_blocks = int(eng["gpu_blocks"])
    connector = eng.get("connector", "offloading")
    if connector not in ("offloading", "none", "simple-cpu", "mooncake", "nixl"):
        raise ScenarioError("[engine] connector must be 'offloading', 'simple-cpu', 'mooncake', 'nixl' "
                            "or 'none'")
    if doc.get("consumer_read") and connector != "nixl":
        raise ScenarioError("[[consumer_read]] goes with connector = 'nixl'")
    if mc and connector != "mooncake":
        raise ScenarioError("[mooncake] goes with connector = 'mooncake'")
    if connector == "mooncake" and off:
        raise ScenarioError("[offload] goes with connector = 'offloading' ([mooncake] here)")
    if connector == "simple-cpu":
        if "cpu_blocks" not in scpu:
            raise ScenarioError("[simple_cpu] cpu_blocks is required with connector = 'simple-cpu'")
        if off:
            raise ScenarioError("[offload] goes with connector = 'offloading' ([simple_cpu] here)")
        if doc.get("load_failure"):
            raise ScenarioError("[[load_failure]]: SimpleCPU never reports a failed load")
        if scpu.get("mode", "eager") not in ("eager", "lazy"):
            raise ScenarioError("[simple_cpu] mode must be 'eager' or 'lazy'")
    elif scpu:
        raise ScenarioError("[simple_cpu] goes with connector = 'simple-cpu'")
    policy = eng.get("load_failure_policy", "fail")
    if policy not in ("fail", "recompute"):
        raise ScenarioError("[engine] load_failure_policy must be 'fail' or 'recompute'")
    if connector == "offloading" and "host_chunks" not in off:
        raise ScenarioError("[offload] host_chunks is required with the offloading connector")
    eviction = off.get("eviction_policy", "lru")
    if eviction not in ("lru", "arc"):
        raise ScenarioError("[offload] eviction_policy must be 'lru' or 'arc'")

    sc = Scenario(
        name=doc.get("name", path.stem),
        description=doc.get("description", ""),
        block_size=block_size,
        gpu_blocks=gpu_blocks,
        max_num_batched_tokens=int(eng["max_num_batched_tokens"]),
        max_num_seqs=int(eng.get("max_num_seqs", 256)),
        max_model_len=int(eng.get("max_model_len", (gpu_blocks - 1) * block_size)),
        long_prefill_token_threshold=int(eng.get("long_prefill_token_threshold", 0)),
        load_failure_policy=policy,
        connector=connector,
        host_chunks=int(off.get("host_chunks", 0)),
        blocks_per_chunk=int(off.get("blocks_per_chunk", 1)),
        offload_prompt_only=bool(off.get("offload_prompt_only", True)),
        sync_load_budget_tokens=int(off.get("sync_load_budget_tokens", 0)),
        eviction_policy=eviction,
        store_delay=int(wrk.get("store_delay", 1)),
        load_delay=int(wrk.get("load_delay", 1)),
        max_steps=int(wrk.get("max_steps", 200)),
        cpu_blocks=int(scpu.get("cpu_blocks", 0)),
        lazy_offload=scpu.get("mode", "eager") == "lazy",
        async_scheduling=_bool(eng.get("async_scheduling", False), "[engine] async_scheduling"),
        enable_prefix_caching=_bool(eng.get("enable_prefix_caching", True), "[engine] enable_prefix_caching"),
        scheduler_reserve_full_isl=_bool(eng.get("scheduler_reserve_full_isl", True),
                                         "[engine] scheduler_reserve_full_isl"),
        cache_aware_admission_window=int(eng.get("cache_aware_admission_window", 0)),
        cache_aware_admission_threshold=float(eng.get("cache_aware_admission_threshold", 0.5)),
    )
    if connector == "simple-cpu" and not sc.enable_prefix_caching:
        raise ScenarioError("[engine] enable_prefix_caching = false: SimpleCPU disables itself without it")
    if connector == "simple-cpu" and sc.cpu_blocks < 2:
        raise ScenarioError("[simple_cpu] cpu_blocks must be >= 2 (block 0 is the null block)")
    sc.mooncake_save_decode_cache = _bool(mc.get("save_decode_cache", False), "[mooncake] save_decode_cache")
    for i, p in enumerate(mc.get("preload", [])):
        segs = [p] if isinstance(p, str) else list(p)
        for seg in segs:
            if parse_segment(seg)[0]:
                raise ScenarioError(f"[mooncake] preload #{i + 1}: no '@' segments (the pool is filled before any request arrives)")
        sc.mooncake_preload.append(segs)
    if sc.store_delay < (0 if connector in ("simple-cpu", "mooncake") else 1):
        # OffloadingConnector stores are submitted a step later; SimpleCPU launches its
        # store event in the step that builds it (wait_for_save), so 0 is possible there.
        raise ScenarioError("[worker] store_delay must be >= 1 (stores are submitted a step later)")
    if sc.load_delay < 0:
        raise ScenarioError("[worker] load_delay must be >= 0")

    names: set[str] = set()
    for i, r in enumerate(doc.get("request", [])):
        where = f"[[request]] #{i + 1}"
        _check_keys(r, _REQUEST_KEYS, where)
        name = r["name"]
        if name in names:
            raise ScenarioError(f"{where}: duplicate request name {name!r}")
        prompt = r["prompt"]
        if isinstance(prompt, str):
            prompt = [prompt]
        for seg in prompt:
            parse_segment(seg)
        eos_at = r.get("eos_at")
        sc.requests.append(RequestSpec(
            name=name, prompt=list(prompt), max_tokens=int(r["max_tokens"]),
            when=_parse_when(r, where, "arrive"),
            eos_at=int(eos_at) if eos_at is not None else None,
            inputs=_parse_inputs(r.get("input", []), f"request {name}")))
        names.add(name)

    for i, e in enumerate(doc.get("event", [])):
        where = f"[[event]] #{i + 1}"
        _check_keys(e, _EVENT_KEYS, where)
        kinds = [k for k in ("abort", "error") if k in e]
        if len(kinds) != 1:
            raise ScenarioError(f"{where}: give exactly one of 'abort', 'error'")
        sc.events.append(InputEvent(kind=kinds[0], req=e[kinds[0]],
                                    when=_parse_when(e, where, "step")))

    for i, f in enumerate(doc.get("load_failure", [])):
        _check_keys(f, {"req", "nth", "from_block"}, f"[[load_failure]] #{i + 1}")
        sc.load_failures.append(LoadFailure(req=f["req"], nth=int(f.get("nth", 1)),
                                            from_block=int(f.get("from_block", 0))))

    for i, d in enumerate(doc.get("transfer_delay", [])):
        _check_keys(d, {"req", "kind", "nth", "delay"}, f"[[transfer_delay]] #{i + 1}")
        if d["kind"] not in ("store", "load"):
            raise ScenarioError("[[transfer_delay]] kind must be 'store' or 'load'")
        sc.delay_overrides.append(DelayOverride(req=d["req"], kind=d["kind"],
                                                nth=int(d.get("nth", 1)),
                                                delay=int(d["delay"])))

    if connector == "nixl":
        _check_nixl(sc, doc, off)

    # Cross references.
    for r in sc.requests:
        for ref in (r.when.after, r.when.after_arrival):
            if ref is not None and ref not in names:
                raise ScenarioError(f"request {r.name}: unknown request {ref!r}")
        for seg in [*r.prompt, *(x for t in r.inputs for x in t.prompt)]:
            is_ref, seg_name, _ = parse_segment(seg)
            if is_ref and seg_name not in names:
                raise ScenarioError(f"request {r.name}: unknown request {seg_name!r}")
    for x in (*sc.load_failures, *sc.delay_overrides, *sc.consumer_reads):
        if x.req not in names:
            raise ScenarioError(f"{type(x).__name__} of unknown request {x.req!r}")
    for e in sc.events:
        if e.req not in names:
            raise ScenarioError(f"{e.kind} of unknown request {e.req!r}")
    return sc


def _check_nixl(sc: Scenario, doc: dict, off: dict) -> None:
    """``connector = "nixl"``: vLLM's NixlConnector as the P/D producer (prefill instance) in
    host-buffer mode, as kvmc models it (docs/models.md): every request is a P/D prefill
    request, which the proxy sends with max_tokens = 1; synchronous scheduling; no other
    connector's tables. Parses ``[[consumer_read]]``."""
    if off:
        raise ScenarioError("[offload] goes with connector = 'offloading' (nixl here)")
    if sc.async_scheduling:
        raise ScenarioError("connector = 'nixl': synchronous scheduling only (kvmc models no async NIXL)")
    for key in ("load_failure", "transfer_delay"):
        if doc.get(key):
            raise ScenarioError(f"[[{key}]]: the NIXL producer has no load or store jobs "
                                f"(its host-buffer copies are synchronous)")
    for r in sc.requests:
        if r.max_tokens != 1:
            raise ScenarioError(f"request {r.name}: a P/D prefill request has max_tokens = 1 "
                                f"(the proxy's; got {r.max_tokens})")
        if r.inputs:
            raise ScenarioError(f"request {r.name}: no streaming inputs with connector = 'nixl'")
    seen: set[str] = set()
    for i, t in enumerate(doc.get("consumer_read", [])):
        where = f"[[consumer_read]] #{i + 1}"
        _check_keys(t, {"request", "at_step", "delay"}, where)
        req = t["request"]
        if req in seen:
            raise ScenarioError(f"{where}: a second read of {req!r} (the consumer reads a request once)")
        seen.add(req)
        if "at_step" in t and "delay" in t:
            raise ScenarioError(f"{where}: give 'at_step' or 'delay', not both")
        at = t.get("at_step")
        delay = int(t.get("delay", 1))
        if at is not None and int(at) < 2:
            raise ScenarioError(f"{where}: at_step must be >= 2 (a request finishes in step 1 at "
                                f"the earliest, and is read before a later step)")
        if delay < 1:
            raise ScenarioError(f"{where}: delay must be >= 1 (the read follows the finish)")
        sc.consumer_reads.append(ConsumerRead(req=req, at_step=int(at) if at is not None else None,
                                              delay=delay))


def build_prompt(spec: RequestSpec | StreamInputSpec, tokens_of: dict[str, list[int]],
                 name: str | None = None) -> list[int]:
    """Prompt token ids; `tokens_of` maps an arrived request to its current tokens
    (prompt + outputs) for '@NAME' segments. `name` names the request of an input."""
    who = name or spec.name
    out: list[int] = []
    for seg in spec.prompt:
        is_ref, name, count = parse_segment(seg)
        if is_ref:
            if name not in tokens_of:
                raise ScenarioError(
                    f"request {who}: '@{name}' used before {name} arrived")
            toks = tokens_of[name]
            out.extend(toks if count is None else toks[:count])
        else:
            assert count is not None
            out.extend(segment_token(name, i) for i in range(count))
    return out


def job_src(job):
    """A TransferJob's source spec (0.32+ ``src_spec``; 0.24 ``transfer_spec[0]``)."""
    return job.src_spec if hasattr(job, "src_spec") else job.transfer_spec[0]


def job_dst(job):
    """A TransferJob's destination spec (0.32+ ``dst_spec``; 0.24 ``transfer_spec[1]``)."""
    return job.dst_spec if hasattr(job, "dst_spec") else job.transfer_spec[1]
