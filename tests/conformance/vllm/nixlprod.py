"""NixlConnector as the P/D producer in host-buffer mode (``connector = "nixl"``): what the
recorder needs to drive vLLM's real ``NixlConnector`` scheduler side (``NixlPullConnector
Scheduler``, ``kv_role = "kv_producer"``, ``kv_buffer_device = "cpu"``, one rank, synchronous
scheduling) without a decode instance, a NIXL agent or the ``nixl`` package
(docs/conformance.md, "NixlConnector (producer, host buffer)").

The scheduler side is vLLM's, unchanged: ``update_state_after_alloc`` (``_reqs_need_save``,
``_reqs_in_batch``), ``build_connector_meta`` / ``_build_save_meta`` (``reqs_to_save``,
``reqs_to_send``, ``reqs_not_processed``) and ``request_finished`` (``delay_free_blocks``, the
``kv_transfer_params`` a decoder reads with). Nothing of it is stubbed: vLLM imports ``nixl``
only when a worker builds its agent (``vllm.distributed.nixl_utils`` loads it lazily), and the
handshake listener starts only when an engine core hands the scheduler its workers' handshake
metadata, which the recorder never does. Every request is a P/D prefill request
(``kv_transfer_params`` with ``do_remote_decode``, ``max_tokens = 1``; engine.make_request).

``NixlFakeWorker`` plays the producer's ``NixlPullConnectorWorker`` and the decode instance's
read. It keeps a KV label per position of every GPU block: after each forward pass the
positions the step computed hold the label of their request's token prefix (the tuple of the
token ids up to and including the position; equal prefixes have equal KV). Per step, in the
order of the real worker (``KVConnectorModelRunnerMixin``):

* ``register`` (``start_load_kv``): ``reqs_in_batch`` join ``_reqs_to_process``,
  ``reqs_not_processed`` leave it, ``reqs_to_send`` (the requests that finished with their free
  delayed) start their lease (``_reqs_to_send``);
* ``complete``: the forward pass writes the scheduled positions (a block it starts at its
  first position is fresh: earlier content of a freed block is dropped); ``wait_for_save`` ->
  ``save_kv_to_host`` copies the labels of every block of ``reqs_to_save`` into the host buffer
  (indexed by GPU block id; one ``nixl_save`` line per request, with how many leading
  positions of each copied block held the request's KV); ``get_finished``: the requests a
  consumer read since the last step (NIXL notifications; ``_get_new_notifs`` takes one whose
  request is in ``_reqs_to_process`` or ``_reqs_to_send``) are reported in
  ``finished_sending`` (one ``finished_sending`` line each), and the scheduler frees their
  blocks (``_update_from_kv_xfer_finished``). No lease expires (``kv_lease_duration`` is 30 s).
* ``consumer_reads`` (before the step's ``schedule()``, an input like an abort): the scenario's
  ``[[consumer_read]]``s that are due. The decode instance reads the request's
  ``remote_block_ids`` (the first ``cdiv(remote_num_tokens, block_size)``), compares each
  block's host copy with the labels of the request's own tokens over the positions it sends,
  writes a ``consumer_read`` line (``stale``: the blocks whose copy differs, #59102's
  half-written block) and notifies the producer. A request without a ``[[consumer_read]]`` is
  read at the earliest step: the one after the step whose output carried its
  ``kv_transfer_params``.

Not a module named ``nixl``: that is the NIXL package's name.
"""

from __future__ import annotations

from fakeworker import FakeWorker
from scenario import ScenarioError


def check(eng) -> None:
    """The scheduler side is the producer in host-buffer mode (vLLM's own configuration
    decides it: ``use_host_buffer`` is False on a platform whose device type is "cpu")."""
    cs = getattr(eng.connector, "connector_scheduler", None)
    if cs is None or not hasattr(cs, "_reqs_need_save"):
        raise RuntimeError(f"connector {type(eng.connector).__name__} is not vLLM's NixlConnector")
    if not cs.use_host_buffer:
        raise RuntimeError("NixlConnector's scheduler is not in host-buffer mode on this platform "
                           "(current_platform.device_type is 'cpu'): nothing is saved")


def _blocks(groups) -> list[int]:
    """The block ids of one KV cache group (a tuple of one list, or the list itself)."""
    ids = groups[0] if groups and not isinstance(groups[0], int) else groups
    assert len(groups) <= 1 or ids is groups, "one KV cache group"
    return [int(b) for b in ids]


class NixlFakeWorker:
    tagged = False   # no transfer jobs: its lines are nixl_save / finished_sending

    def __init__(self, sc, eng, rec):
        self.sc = sc
        self.eng = eng
        self.rec = rec
        self.b = sc.block_size
        self.gpu: dict[int, list] = {}    # GPU block id -> a KV label per position (None: unwritten)
        self.host: dict[int, list] = {}   # the host transfer buffer, by GPU block id
        self.to_process: set[str] = set()  # _reqs_to_process
        self.to_send: set[str] = set()     # _reqs_to_send (a lease each)
        self.notifs: list[str] = []        # consumer notifications since the last get_finished
        self.finished_sending: list[str] = []
        self.so = None                     # the step's SchedulerOutput (install)
        self.held: dict[str, tuple[list[int], int, list[int]]] = {}   # request_finished
        self.reads = {r.req: r for r in sc.consumer_reads}
        self.read: set[str] = set()

    # -- inputs -------------------------------------------------------------------------
    def consumer_reads(self, step: int, finished_at: dict[str, int]) -> None:
        """The decode instance's reads due before this step (an input, like an abort)."""
        for name, at in sorted(finished_at.items(), key=lambda kv: kv[1]):
            if name in self.read:
                continue
            r = self.reads.get(name)
            if r is not None and r.at_step is not None:
                due = r.at_step
            elif r is not None or name in self.held:
                due = at + (r.delay if r is not None else 1)
            else:
                continue   # aborted, or failed: nothing to read
            if due > step:
                continue
            if due < step:
                raise ScenarioError(f"consumer read of {name} missed its step ({due})")
            if name not in self.held:
                raise ScenarioError(f"consumer read of {name}: it holds no blocks for the "
                                    f"consumer (it finished without delay_free_blocks)")
            self._read(name)
        for name, r in self.reads.items():
            if name not in self.read and r.at_step is not None and r.at_step < step:
                raise ScenarioError(f"{r.describe()}: {name} had not finished")

    def _read(self, name: str) -> None:
        blocks, tokens, ids = self.held[name]
        b = self.b
        stale = []
        for i, blk in enumerate(blocks[:-(-tokens // b)]):
            need = min(b, tokens - i * b)
            copy = self.host.get(blk, [None] * b)
            if any(copy[j] != tuple(ids[:i * b + j + 1]) for j in range(need)):
                stale.append(blk)
        self.rec.emit("consumer_read", req=name, blocks=blocks, tokens=tokens, stale=stale)
        self.read.add(name)
        self.notifs.append(name)

    def unused(self) -> list[str]:
        return [r.describe() for n, r in self.reads.items() if n not in self.read]

    # -- the worker's step --------------------------------------------------------------
    def register(self, step: int, meta) -> None:
        """``NixlPullConnectorWorker.start_load_kv``'s bookkeeping of the producer's sends."""
        self.to_process.update(meta.reqs_in_batch)
        for rid in meta.reqs_not_processed:
            self.to_process.discard(rid)
            assert rid not in self.to_send
        self.to_send.update(r for r in meta.reqs_to_send if r in self.to_process)

    def _forward(self) -> None:
        """The model runner writes the KV of the step's scheduled positions. A block the
        request starts to write at its first position (one past its computed frontier: newly
        allocated to it) holds nothing of it before: what a freed block kept from an earlier
        owner, even the request's own KV from before a preemption, is dropped (the kvmc model's
        content is what was written since allocation)."""
        so = self.so
        r2b = self.eng.req_to_blocks()
        b = self.b
        for rid, n in so.num_scheduled_tokens.items():
            req = self.eng.scheduler.requests[rid]
            ids = list(req.all_token_ids)
            table = r2b[rid]
            start = req.num_computed_tokens - n   # advanced by _update_after_schedule
            for p in range(start, start + n):
                blk = table[p // b].block_id
                if p % b == 0 or blk not in self.gpu:
                    self.gpu[blk] = [None] * b
                self.gpu[blk][p % b] = tuple(ids[:p + 1])

    def complete(self, step: int, meta) -> list:
        """Forward pass, ``wait_for_save`` (``save_kv_to_host``), ``get_finished``. The NIXL
        producer has no transfer jobs: returns none."""
        if self.so is not None and self.so.total_num_scheduled_tokens > 0:
            self._forward()
            for rid, m in meta.reqs_to_save.items():
                blocks = _blocks(m.local_block_ids)
                req = self.eng.scheduler.requests[rid]
                ids = list(req.all_token_ids)
                table = [x.block_id for x in self.eng.req_to_blocks()[rid]]
                filled = []
                for blk in blocks:
                    self.host[blk] = list(self.gpu.get(blk, [None] * self.b))
                    i = table.index(blk)
                    n = 0
                    while n < self.b and self.host[blk][n] is not None and \
                            self.host[blk][n] == tuple(ids[:i * self.b + n + 1]):
                        n += 1
                    filled.append(n)
                self.rec.emit("nixl_save", req=rid, blocks=blocks, filled=filled)
        done = []
        for rid in self.notifs:
            if rid not in self.to_send and rid not in self.to_process:
                raise RuntimeError(f"the consumer's notification of {rid} names no request the "
                                   f"producer sends (_get_new_notifs drops it)")
            self.to_process.discard(rid)
            self.to_send.discard(rid)
            done.append(rid)
        self.notifs = []
        self.finished_sending = sorted(done)
        for rid in self.finished_sending:
            self.rec.emit("finished_sending", req=rid)
        return []

    def kv_output(self, done, meta=None):
        from vllm.v1.outputs import KVConnectorOutput

        sent = set(self.finished_sending)
        for rid in sent:
            self.held.pop(rid, None)
        return KVConnectorOutput(finished_sending=sent or None, finished_recving=None,
                                 invalid_block_ids=set())

    model_output = FakeWorker.model_output


def install(rec) -> None:
    """Wrap ``NixlConnector.build_connector_meta`` (hand the step's ``SchedulerOutput`` to the
    fake worker) and the scheduler side's ``request_finished`` (the ``kv_transfer_params`` of a request whose free
    is delayed: the blocks and token count the decoder reads)."""
    conn = rec.eng.connector
    orig_build = conn.build_connector_meta

    def build_connector_meta(scheduler_output, *a, **kw):
        rec.worker.so = scheduler_output
        return orig_build(scheduler_output, *a, **kw)

    conn.build_connector_meta = build_connector_meta

    # The scheduler-side object's: NixlConnector.request_finished and (SupportsHMA, what
    # Scheduler._connector_finished calls) request_finished_all_groups both forward to it.
    cs = conn.connector_scheduler
    orig_finished = cs.request_finished

    def request_finished(request, block_ids, *a, **kw):
        delay, params = orig_finished(request, block_ids, *a, **kw)
        if delay:
            rec.worker.held[request.request_id] = (
                _blocks(params["remote_block_ids"]), int(params["remote_num_tokens"]),
                list(request.all_token_ids))
        return delay, params

    cs.request_finished = request_finished


def snapshot(rec) -> None:
    """End of step: ``_reqs_need_save`` (sorted) and the finished requests whose blocks wait
    for the consumer (in ``Scheduler.requests``, in no queue), with their blocks."""
    sched = rec.eng.scheduler
    cs = rec.eng.connector.connector_scheduler
    order = {r.request_id: i for i, r in enumerate(rec.arrivals)}
    r2b = rec.eng.req_to_blocks()
    held = {rid: [b.block_id for b in r2b.get(rid, ())]
            for rid in sorted(sched.requests, key=lambda r: order.get(r, len(order)))
            if sched.requests[rid].is_finished()}
    rec.emit("nixl", need_save=sorted(cs._reqs_need_save), held=held)
