"""Cross-check of the .kvevents capture against vLLM's real ZMQ publisher.

    python zmq_crosscheck.py ../scenarios/*.toml [--fixtures ../fixtures]

Runs each scenario like record.py, but with the scheduler's publisher replaced by a real
``ZmqEventPublisher`` (built by ``EventPublisherFactory`` from
``KVEventsConfig(publisher="zmq", endpoint="inproc://...")``) and a SUB socket on the
same endpoint. KVEventCapture still sets ``ts`` to the step before handing the batch
on, so the payload frames received over ZMQ (published by vLLM's publisher thread with
its own encoder) must equal the captured bytes, the topic frame must be empty and the
seq frames 0, 1, 2, ...; with --fixtures, the received stream must also equal the
committed NAME.kvevents. Not part of record-fixtures.sh (it takes threads and sockets).
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

import record  # re-executes with PYTHONHASHSEED=0, puts this directory on sys.path
from scenario import load_scenario


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("scenarios", nargs="+")
    ap.add_argument("--fixtures", help="directory with the committed NAME.kvevents")
    args = ap.parse_args(argv)

    import zmq
    from vllm.config import KVEventsConfig
    from vllm.distributed.kv_events import EventPublisherFactory

    import engine

    orig_build = engine.build_engine
    state: dict = {}

    def build_engine(sc):
        eng = orig_build(sc)
        endpoint = f"inproc://kvmc-kvevents-{sc.name}"
        pub = EventPublisherFactory.create(
            KVEventsConfig(enable_kv_cache_events=True, publisher="zmq",
                           endpoint=endpoint), 0)
        eng.scheduler.kv_event_publisher = pub
        sub = zmq.Context.instance().socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(endpoint)
        time.sleep(0.3)                  # let the subscription reach the PUB socket
        state.update(pub=pub, sub=sub)
        return eng

    engine.build_engine = build_engine
    status = 0
    for path in args.scenarios:
        sc = load_scenario(path)
        caps: list = []
        record.run(sc, io.StringIO(), kvevents=caps)
        cap = caps[0]
        sub, pub = state["sub"], state["pub"]
        got = []
        while len(got) < len(cap.payloads) and sub.poll(5000):
            got.append(sub.recv_multipart())
        pub.shutdown()
        sub.close()
        ok = (len(got) == len(cap.payloads)
              and all(t == b"" for t, _, _ in got)
              and [int.from_bytes(s, "big") for _, s, _ in got] == list(range(len(got)))
              and [p for _, _, p in got] == cap.payloads)
        if ok and args.fixtures:
            ok = (Path(args.fixtures) / f"{sc.name}.kvevents").read_bytes() == \
                b"".join(p for _, _, p in got)
        print(f"{sc.name}: {len(got)}/{len(cap.payloads)} batches over ZMQ, "
              f"{'identical' if ok else 'DIFFERENT'}", file=sys.stderr)
        status |= not ok
    return status


if __name__ == "__main__":
    sys.exit(main())
