"""The connectors benchmark's job on Bytewax 0.21 (bench/connectors.py runs it as a process).

Its own Kafka connector: ``KafkaSource`` reads the input topic's partitions from their start
(each partition's offset in Bytewax's snapshots), the events ``{"user", "ts"}`` are keyed by
user, ``op.stateful_map`` keeps each user's running count, and ``KafkaSink`` writes
``{"user", "ts", "count"}`` per event to the output topic, keyed by user. One worker, its SQLite
recovery on at an epoch interval of --commit-interval seconds, so that its state and offsets are
as durable as Bytewax makes them.

Its guarantee is at least once, not exactly once: ``KafkaSink`` produces each batch as it comes,
outside any transaction (it flushes every batch), and after a failure Bytewax resumes from the
last snapshot, so what the resumed epoch wrote is written again (its connector's docstring says
so). With no failure, as here, every record is written once.

With --events N (any N > 0) it reads each partition to the end a fetch finds (``tail=False``)
and returns; with 0 it tails the topic until it is killed.
"""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from pathlib import Path
from typing import Any


def flow(bootstrap: str, source: str, target: str, bounded: bool) -> Any:
    """The dataflow: the input topic, a running count per user, the output topic."""
    import bytewax.operators as op  # noqa: PLC0415
    from bytewax.connectors.kafka import (  # noqa: PLC0415
        OFFSET_BEGINNING,
        KafkaSink,
        KafkaSinkMessage,
        KafkaSource,
    )
    from bytewax.dataflow import Dataflow  # noqa: PLC0415

    def keyed(message: Any) -> tuple[str, dict[str, Any]]:
        return message.key.decode(), json.loads(message.value)

    def counted(held: int | None, event: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        count = (held or 0) + 1
        return count, {"user": event["user"], "ts": event["ts"], "count": count}

    def record(user_row: tuple[str, dict[str, Any]]) -> Any:
        user, row = user_row
        return KafkaSinkMessage(user.encode(), json.dumps(row).encode())

    dataflow = Dataflow("connectors-running-count")
    read = op.input("read", dataflow, KafkaSource([bootstrap], [source], tail=not bounded,
                                                  starting_offset=OFFSET_BEGINNING))  # fmt: skip
    counts = op.stateful_map("count", op.map("key", read, keyed), counted)
    op.output("write", op.map("record", counts, record), KafkaSink([bootstrap], target))
    return dataflow


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--recovery", type=Path, required=True, help="a directory of its own")
    parser.add_argument("--events", type=int, default=0, help="0: tail the topic for ever")
    parser.add_argument("--commit-interval", type=float, default=1.0)
    args = parser.parse_args()
    from bytewax.recovery import RecoveryConfig, init_db_dir  # noqa: PLC0415
    from bytewax.testing import run_main  # noqa: PLC0415

    dataflow = flow(args.bootstrap, args.input, args.output, bounded=args.events > 0)
    args.recovery.mkdir(parents=True, exist_ok=True)
    init_db_dir(args.recovery, 1)
    run_main(dataflow, epoch_interval=timedelta(seconds=args.commit_interval),
             recovery_config=RecoveryConfig(str(args.recovery)))  # fmt: skip


if __name__ == "__main__":
    main()
