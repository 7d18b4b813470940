"""Capture of vLLM's own KV cache event stream (the ``KVEventBatch`` payloads a real
engine publishes over ZMQ), written next to each log as NAME.kvevents.

``engine.build_engine`` enables events with ``KVEventsConfig(enable_kv_cache_events=True,
publisher="null")``: the GPU ``BlockPool`` and the ``OffloadingConnector`` (its
``CPUOffloadingManager`` + ``OffloadingEventsTracker``) then queue events, and
``Scheduler.update_from_output`` drains them once per step (block-pool events, then
``connector.take_events()``) into one ``KVEventBatch`` handed to
``scheduler.kv_event_publisher.publish`` when the list is non-empty.

``KVEventCapture`` shadows ``publish`` on the live ``NullEventPublisher`` instance and
does what ``ZmqEventPublisher`` does with a batch: fill ``data_parallel_rank`` from the
publisher when it is None (``ZmqEventPublisher.publish``), then
``msgspec.msgpack.Encoder().encode(batch)`` (``ZmqEventPublisher._publisher_thread``;
the payload is the third frame of the ZMQ message). The only change: ``ts`` (vLLM's
``time.time()``) is replaced by the engine step number as a float, for reproducibility.
"""

from __future__ import annotations

import json


class KVEventCapture:
    def __init__(self, scheduler, step_of):
        import msgspec

        self.step_of = step_of               # () -> current engine step
        self.payloads: list[bytes] = []
        self.steps: list[int] = []
        self.num_events = 0
        pub = scheduler.kv_event_publisher
        if not getattr(scheduler, "enable_kv_cache_events", False):
            raise RuntimeError("KV cache events are not enabled in the VllmConfig")
        # The encoder ZmqEventPublisher._publisher_thread builds (default options).
        self._pack = msgspec.msgpack.Encoder()
        self._dp_rank = getattr(pub, "_data_parallel_rank", 0)
        orig = pub.publish

        def publish(batch) -> None:
            if batch.data_parallel_rank is None:      # as ZmqEventPublisher.publish
                batch.data_parallel_rank = self._dp_rank
            step = self.step_of()
            batch.ts = float(step)                    # determinism: ts = engine step
            self.payloads.append(self._pack.encode(batch))
            self.steps.append(step)
            self.num_events += len(batch.events)
            orig(batch)

        pub.publish = publish

    def write(self, path_events, path_steps) -> None:
        with open(path_events, "wb") as f:
            for p in self.payloads:
                f.write(p)
        with open(path_steps, "w") as f:
            f.write(json.dumps(self.steps, separators=(",", ":")) + "\n")


def kvevents_paths(jsonl_path):
    """NAME.jsonl -> (NAME.kvevents, NAME.kvevents.steps.json)."""
    from pathlib import Path

    p = Path(jsonl_path)
    stem = p.name[:-len(".jsonl")] if p.name.endswith(".jsonl") else p.name
    return p.with_name(stem + ".kvevents"), p.with_name(stem + ".kvevents.steps.json")
