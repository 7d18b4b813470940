"""``ForgetfulOffloadingConnector``: vLLM's OffloadingConnector with a one-line bug, to show
that ``kvmc testgen``'s scenarios catch it when recorded through ``--connector-class``.

The bug: the scheduler side never builds the final store jobs of a request that finished in
the previous step. vLLM's ``OffloadingConnectorScheduler._build_store_jobs`` walks the step's
scheduled requests and then ``scheduler_output.finished_req_ids`` (the requests that finished
since the last ``build_connector_meta``: an aborted one is stored up to its computed tokens, a
stopped one up to its committed tokens); this subclass hides the finished ids from that walk
only (``on_request_finished`` still sees them, so nothing leaks). A connector with this bug
loses the host copy of every block a request computed in its last steps.

    python record.py ../testgen/*.toml --out-dir /tmp/forgetful \\
        --connector-class example_connector.forgetful:ForgetfulOffloadingConnector

Being a subclass of ``OffloadingConnector`` (its scheduler side and CPU manager unchanged),
it is observed by observe.py's existing hooks, with no code of its own for the recorder.
"""

from __future__ import annotations

import dataclasses

from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
    OffloadingConnectorScheduler,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (
    OffloadingConnector,
)


class ForgetfulOffloadingScheduler(OffloadingConnectorScheduler):
    def _build_store_jobs(self, scheduler_output):
        # THE BUG (one line): finished requests get no final store.
        scheduler_output = dataclasses.replace(scheduler_output, finished_req_ids=set())
        return super()._build_store_jobs(scheduler_output)


class ForgetfulOffloadingConnector(OffloadingConnector):
    """OffloadingConnector whose scheduler side is ``ForgetfulOffloadingScheduler``."""

    def __init__(self, vllm_config, role, kv_cache_config):
        super().__init__(vllm_config, role, kv_cache_config)
        if self.connector_scheduler is not None:
            # Same state, the subclass's methods (vLLM builds the scheduler side itself).
            self.connector_scheduler.__class__ = ForgetfulOffloadingScheduler
