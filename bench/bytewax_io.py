"""Bytewax for the benchmarks' baselines: a source of one partition of numbered items made as
they are read, resuming from its position, a sink that hands each batch on, and a run with or
without its recovery."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any


def numbered_source(total: int, batch: int, make: Callable[[int, int], list[Any]]) -> Any:
    """Items 0 to ``total`` - 1, ``batch`` at a time, as ``make(start, stop)`` makes them; the
    partition's snapshot is its position."""
    from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition  # noqa: PLC0415

    class Partition(StatefulSourcePartition):
        def __init__(self, resume: int) -> None:
            self.position = resume

        def next_batch(self) -> list[Any]:
            if self.position >= total:
                raise StopIteration
            stop = min(self.position + batch, total)
            made = make(self.position, stop)
            self.position = stop
            return made

        def snapshot(self) -> int:
            return self.position

    class Source(FixedPartitionedSource):
        def list_parts(self) -> list[str]:
            return ["items"]

        def build_part(self, step_id: str, for_part: str, resume_state: int | None) -> Partition:
            return Partition(resume_state or 0)

    return Source()


def handing_sink(write: Callable[[list[Any]], None]) -> Any:
    """A sink of one partition per worker that hands each batch written to ``write``."""
    from bytewax.outputs import DynamicSink, StatelessSinkPartition  # noqa: PLC0415

    class Handing(StatelessSinkPartition):
        def write_batch(self, items: list[Any]) -> None:
            write(items)

    class Sink(DynamicSink):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> Handing:
            return Handing()

    return Sink()


def run(flow: Any, period: float | None) -> None:
    """Run ``flow`` on one worker in this process; with ``period``, with its SQLite recovery (a
    fresh directory of one partition, removed after) at that epoch interval."""
    from bytewax.recovery import RecoveryConfig, init_db_dir  # noqa: PLC0415
    from bytewax.testing import run_main  # noqa: PLC0415

    if period is None:
        run_main(flow)
        return
    directory = Path(tempfile.mkdtemp(prefix="bytewax-recovery-"))
    try:
        init_db_dir(directory, 1)
        run_main(flow, epoch_interval=timedelta(seconds=period),
                 recovery_config=RecoveryConfig(directory))  # fmt: skip
    finally:
        shutil.rmtree(directory, ignore_errors=True)
