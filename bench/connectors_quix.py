"""The connectors benchmark's job on Quix Streams (bench/connectors.py runs it as a process).

It reads JSON events ``{"user", "ts"}`` from the input topic (keyed by user), keeps each user's
running count in Quix's keyed state, and writes ``{"user", "ts", "count"}`` per event to the
output topic, keyed by user, with ``processing_guarantee="exactly-once"``: each checkpoint's
records, its state's changelog and its input offsets in one Kafka transaction, committed every
--commit-interval seconds. The bench runs this same computation on every side.

With --events N it stops once it has processed N records (``Application.run(count=N)``), which
commits its last checkpoint before it returns; with 0 it runs until SIGTERM, as deployed.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True, help="a consumer group of its own")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--events", type=int, default=0, help="stop after this many; 0: never")
    parser.add_argument("--commit-interval", type=float, default=1.0)
    args = parser.parse_args()
    from quixstreams import Application  # noqa: PLC0415
    from quixstreams.state import State  # noqa: PLC0415

    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        commit_interval=args.commit_interval,
        state_dir=args.state_dir,
        loglevel=logging.WARNING,
    )
    source = app.topic(args.input, key_deserializer="str", value_deserializer="json")
    target = app.topic(args.output, key_serializer="str", value_serializer="json")

    def running_count(event: dict[str, Any], state: State) -> dict[str, Any]:
        count = state.get("count", 0) + 1
        state.set("count", count)
        return {"user": event["user"], "ts": event["ts"], "count": count}

    app.dataframe(source).apply(running_count, stateful=True).to_topic(target)
    app.run(count=args.events, collect=False)


if __name__ == "__main__":
    main()
