"""The recorder's observation interface for a connector that is not vLLM's OffloadingConnector
or SimpleCPUOffloadConnector (nor a subclass of either, which observe.py's hooks cover).

A ``KVConnectorBase_V1`` implementation loaded with ``record.py --connector-class
MODULE:CLASS`` opts in by defining, on its scheduler-role instance::

    def kvmc_observe(self, observer: ConnectorObserver) -> None
        # called once, after vLLM built the connector and before the first step; keep the
        # observer and call its methods where your connector makes each decision
    def kvmc_host(self) -> tuple[list[tuple[bytes, int, int]], list[bytes]]
        # end of every step: your host tier's (key, slot, ref count) entries and the keys
        # it would evict, first victim first

A connector that defines ``kvmc_observe`` is observed through it only (observe.py's
OffloadingConnector hooks are not installed, even on a subclass). Whatever the connector,
the recorder itself writes the engine lines (``arrive``, ``schedule``, ``finish``,
``sampled``, ``g1``, sessions' turns), the ``lookup`` line (it wraps the connector's
``get_num_new_matched_tokens``, a ``KVConnectorBase_V1`` method) and the worker's
``transfer_done`` / ``transfer_failed``.

Keys are vLLM block hashes (``Request.block_hashes[i]``, ``bytes``), or offload keys
(``BlockHashWithGroupId``: a block hash followed by a 4-byte group id) if the connector sets
``observer.offload_keys = True``; the recorder writes each as its label (``R1.2``). Job ids are the
connector's own, one counter for loads and stores. The lines, their fields and where vLLM's
OffloadingConnector emits each are docs/conformance.md ("Recording your own connector") and
docs/conformance-format.md. Call each method in the order your connector decides: an
``evict`` before the ``store`` that needed the room, every ``store`` of a step from
``build_connector_meta``, ``flush`` last in it.
"""

from __future__ import annotations

from typing import Iterable, Protocol, runtime_checkable


@runtime_checkable
class ObservableConnector(Protocol):
    """What a connector implements to be recorded through this interface."""

    def kvmc_observe(self, observer: "ConnectorObserver") -> None: ...

    def kvmc_host(self) -> tuple[list[tuple[bytes, int, int]], list[bytes]]: ...


class ConnectorObserver:
    """Writes a connector's own lines into the recorder's current step (observe.Recorder)."""

    def __init__(self, recorder):
        self._rec = recorder
        # True: the connector passes offload keys (block hash + 4-byte group id) everywhere,
        # kvmc_host included; set it in kvmc_observe.
        self.offload_keys = False

    def _key(self, key):
        from observe import H, key_hash

        return key_hash(key) if self.offload_keys else H(bytes(key))

    def _keys(self, keys: Iterable) -> list:
        return [self._key(k) for k in keys]

    def load(self, job: int, req: str, keys: Iterable, blocks: Iterable[int],
             slots: Iterable[int], sync: bool = False) -> None:
        """A load job created (``update_state_after_alloc``): the keys it loads, the GPU blocks
        it writes, the host slots it reads; ``sync`` if the forward waits for it."""
        self._rec.emit("load", job=int(job), req=req, keys=self._keys(keys),
                       blocks=[int(b) for b in blocks], slots=[int(s) for s in slots],
                       sync=bool(sync))

    def store(self, job: int, req: str, keys: Iterable, blocks: Iterable[int],
              slots: Iterable[int]) -> None:
        """A store job created (``build_connector_meta``): keys, source GPU blocks,
        destination host slots."""
        self._rec.emit("store", job=int(job), req=req, keys=self._keys(keys),
                       blocks=[int(b) for b in blocks], slots=[int(s) for s in slots])

    def store_refused(self, req: str | None, keys: Iterable) -> None:
        """The host tier refused to store these keys for lack of room."""
        self._rec.emit("store_refused", req=req, keys=self._keys(keys))

    def evict(self, keys: Iterable) -> None:
        """Host-tier victims, in eviction order, of the store that follows."""
        self._rec.emit("evict", medium="CPU", keys=self._keys(keys))

    def flush(self, jobs: Iterable[int]) -> None:
        """The jobs the worker must finish before this step's forward (``jobs_to_flush``);
        nothing is written for an empty set."""
        jobs = sorted(int(j) for j in jobs)
        if jobs:
            self._rec.emit("flush", jobs=jobs)

    def host_line(self, connector) -> None:
        """The end-of-step ``host`` line from ``connector.kvmc_host()`` (the recorder calls
        this; a connector does not)."""
        entries, order = connector.kvmc_host()
        entries = sorted(((k, int(s), int(r)) for k, s, r in entries), key=lambda e: e[1])
        self._rec.emit("host",
                       entries=[{"key": self._key(k), "slot": s, "ref": r}
                                for k, s, r in entries],
                       order=self._keys(order))
