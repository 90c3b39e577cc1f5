"""Baselines for the data plane: the machine's own limit and the same job on Bytewax.

The workload is bench/workload.py's (its docstring says what the job does); every contender's
input makes its segments as it is read, so making them is timed everywhere alike.

- ``python_limit``: a plain Python loop over batches of --batch-size segments that makes each
  batch (the input's work), encodes it, decodes it, applies f1, f2 and f3 to every segment and
  encodes it again: the least work any engine that moves encoded batches from its input to its
  functions and on to its output must do, with no transport, no scheduling and no recovery.
  bench/dataplane.py passes the engine's own frame codec; alone, this script uses msgpack's
  packb/unpackb. The same loop with no codec at all (the batches stay Python lists) is printed
  too, as ``functions_only_segments_per_s``: the ceiling for one process.
- ``bytewax_rate``: the job on Bytewax 0.21 in this process, one worker, recovery on at
  --snapshot-interval; ``bytewax_cluster_rate``: the same in separate processes of one worker
  each (bench/bytewax_process.py, one OS process per Bytewax process, over Bytewax's own TCP
  between them), as ``python -m bytewax.testing -p N`` runs it. Either runs one of three flows:
  ``rows`` (per-segment ``op.map`` steps of f1, f2, f3), ``arrow`` (each item one record batch of
  --arrow-batch-size rows through arrow_f1, arrow_f2, arrow_f3: the best Bytewax can do with
  the columnar computation), and ``paced`` (rows made at a steady rate, for latency). Its input
  hands out --batch-size segments per read, as the engine's input and the limit loop do, and its
  partitions read the very ids the engine's input slots do, in the same runs.

Run: .venv-bench/bin/python bench/baselines.py [--segments 200000] [--batch-size 1000]
     [--snapshot-interval 1.0] [--repeat 3]
The last line of output is one JSON document holding every figure. Bytewax is a benchmark-only
dependency (wheels up to Python 3.12): without it the Bytewax figures are null.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.workload import (  # noqa: E402
    Segment,
    arrow_f1,
    arrow_f2,
    arrow_f3,
    expected,
    f1,
    f2,
    f3,
    make_segment,
    record_batch_of,
    splits_of,
)
from peer.plugins.splits import Numbered  # noqa: E402

Encode = Callable[[list[Segment]], bytes]
Decode = Callable[[bytes], list[Segment]]
KINDS = ("rows", "arrow", "paced")


def default_codec() -> tuple[str, Encode, Decode]:
    """msgpack's packb/unpackb (a dependency of the engine)."""
    import msgpack  # noqa: PLC0415

    return "msgpack", msgpack.packb, msgpack.unpackb


def _same(batch: Any) -> Any:
    """The codec of a run that never leaves the process: a batch stays a list."""
    return batch


def python_limit(n: int, batch_size: int, encode: Encode, decode: Decode) -> float:
    """Segments per second of a plain loop: make a batch, encode and decode it, f1, f2, f3 on
    each segment, encode it. The last segment is checked against ``expected`` after the clock
    stops."""
    if n <= 0 or batch_size <= 0:
        raise ValueError("n and batch_size must be positive")
    done = size = 0
    last: bytes = b""
    start = time.perf_counter()
    for first in range(0, n, batch_size):
        made = encode([make_segment(i) for i in range(first, min(first + batch_size, n))])
        segments = [f3(f2(f1(segment))) for segment in decode(made)]
        done += len(segments)
        last = encode(segments)
        size += len(last)
    elapsed = time.perf_counter() - start
    if done != n or decode(last)[-1] != expected(n - 1) or size <= 0:
        raise AssertionError(f"python_limit processed {done} of {n} segments or got them wrong")
    return n / elapsed


# -- Bytewax --------------------------------------------------------------------------------------


@dataclass
class Tally:
    """What one sink partition saw: rows, wall time of its first and last write, the last row,
    and with latency on, the seconds from each row's ``created`` to its write."""

    rows: int = 0
    first: float = 0.0
    last: float = 0.0
    last_row: Segment | None = None
    latencies: list[float] = field(default_factory=list)


@dataclass
class Seen:
    """What a flow's partitions note as it runs: the wall time of each input partition's first
    read, and one tally per sink partition."""

    reads: list[float] = field(default_factory=list)
    tallies: list[Tally] = field(default_factory=list)

    def check(self, n: int, who: str) -> None:
        """Every row arrived, and each sink partition's last one is right."""
        total = sum(t.rows for t in self.tallies)
        lasts = [t.last_row for t in self.tallies if t.last_row is not None]
        if total != n or any(
            {**row, "created": None} != {**expected(row["id"]), "created": None} for row in lasts
        ):
            raise AssertionError(f"{who} delivered {total} of {n} segments or got them wrong")

    def rate(self) -> float:
        """Rows per second from the first read of any input partition to the last write: the
        cluster is formed by then, so Bytewax's start-up is left out."""
        rows = sum(t.rows for t in self.tallies)
        return rows / (max(t.last for t in self.tallies) - min(self.reads))


def bytewax_flow(kind: str, n: int, parts: int, batch: int, rate: float = 0.0) -> tuple[Any, Seen]:
    """A Bytewax dataflow of the workload and what its partitions will note.

    Input: a ``FixedPartitionedSource`` of ``parts`` partitions, partition p reading the ids
    the engine's input slot p of ``parts`` reads (the splits it owns, as runs), made as read:
    ``batch`` segments per ``next_batch`` (``rows``, ``paced``), or one record batch of ``batch``
    rows (``arrow``); its snapshot is its positions, so it resumes exactly. ``paced`` hands out
    only the ids due at ``rate`` per second in all since its first read, each row carrying when
    it was due in ``created``, as the engine's paced input does. Three ``op.map`` steps.
    Output: a ``DynamicSink`` (no routing between workers) whose partitions count rows and note
    the times."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    import bytewax.operators as op  # noqa: PLC0415
    from bytewax.dataflow import Dataflow  # noqa: PLC0415
    from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition  # noqa: PLC0415
    from bytewax.outputs import DynamicSink, StatelessSinkPartition  # noqa: PLC0415

    class Partition(StatefulSourcePartition):
        """Partition ``part`` reads what the engine's input slot ``part`` of ``parts`` does
        (bench/workload.py ``NumberedInput``: the ids of the splits it owns, as runs), so both
        sides make the very same rows in the very same runs."""

        def __init__(self, part: int, resume: Any) -> None:
            self.reading = Numbered(splits_of(part, parts), n, resume, ValueError)
            self.start = 0.0

        def next_batch(self) -> list[Any]:
            if self.reading.completed():
                raise StopIteration
            if not self.start:
                self.start = time.time()
                seen.reads.append(self.start)
            if kind == "paced":  # the ids due by now at ``rate`` in all, as the engine's
                due = int((time.time() - self.start) * rate) + 1
                runs = self.reading.take(batch, due)
                return [{**make_segment(i), "created": self.start + i / rate}
                        for run in runs for i in run]  # fmt: skip
            runs = self.reading.take(batch)
            if kind == "arrow":
                return [record_batch_of(runs)]
            return [make_segment(i) for run in runs for i in run]

        def snapshot(self) -> Any:
            return self.reading.checkpoint()

    class Source(FixedPartitionedSource):
        def list_parts(self) -> list[str]:
            return [f"part-{part}" for part in range(parts)]

        def build_part(self, step_id: str, for_part: str, resume_state: Any):
            return Partition(int(for_part.removeprefix("part-")), resume_state)

    seen = Seen()

    class Counting(StatelessSinkPartition):
        def __init__(self) -> None:
            self.tally = Tally()
            seen.tallies.append(self.tally)

        def write_batch(self, items: list[Any]) -> None:
            if not items:
                return
            now, tally = time.time(), self.tally
            tally.first = tally.first or now
            tally.last = now
            if kind == "arrow":
                tally.rows += sum(len(item) for item in items)
                tally.last_row = items[-1].slice(len(items[-1]) - 1).to_pylist()[0]
                return
            tally.rows += len(items)
            tally.last_row = items[-1]
            if kind == "paced":
                tally.latencies.extend(now - item["created"] for item in items)

    class Sink(DynamicSink):
        def build(self, step_id: str, worker_index: int, worker_count: int):
            return Counting()

    fns = (arrow_f1, arrow_f2, arrow_f3) if kind == "arrow" else (f1, f2, f3)
    flow = Dataflow(f"baseline-{kind}")
    stream = op.input("inp", flow, Source())
    for fn in fns:
        stream = op.map(fn.__name__, stream, fn)
    op.output("out", stream, Sink())
    return flow, seen


@dataclass(frozen=True)
class BytewaxRun:
    """A Bytewax run's rows per second (first read to last write, wall clock) and latencies."""

    rate: float
    latencies: list[float]


def bytewax_rate(
    n: int, snapshot_interval_s: float, kind: str = "rows", batch: int = 1000, rate: float = 0.0
) -> BytewaxRun:
    """The workload on Bytewax in this process, one worker, recovery on.

    Recovery: a fresh recovery directory of one partition (``bytewax.recovery.init_db_dir``,
    what ``python -m bytewax.recovery DIR 1`` does), ``RecoveryConfig(dir)`` with the default
    zero backup interval, and the epoch (snapshot) interval passed to the runner, as
    ``python -m bytewax.run -s`` sets it in 0.21. Timed as ``Seen.rate`` says."""
    from bytewax.recovery import RecoveryConfig, init_db_dir  # noqa: PLC0415
    from bytewax.testing import run_main  # noqa: PLC0415

    flow, seen = bytewax_flow(kind, n, 1, batch, rate)
    directory = Path(tempfile.mkdtemp(prefix="bytewax-recovery-"))
    try:
        init_db_dir(directory, 1)
        run_main(
            flow,
            epoch_interval=timedelta(seconds=snapshot_interval_s),
            recovery_config=RecoveryConfig(directory),
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    seen.check(n, f"bytewax ({kind})")
    return BytewaxRun(seen.rate(), [s for t in seen.tallies for s in t.latencies])


def bytewax_cluster_rate(
    n: int, snapshot_interval_s: float, kind: str = "rows", batch: int = 1000, processes: int = 2
) -> float:
    """Rows per second of the workload on ``processes`` Bytewax processes of one worker each
    (bench/bytewax_process.py, as ``python -m bytewax.testing -p`` would start them), recovery
    on with a shared recovery directory of one partition per process, timed as ``Seen.rate``
    says across the processes (their wall clocks are this machine's)."""
    from bytewax.recovery import init_db_dir  # noqa: PLC0415

    from tests.support import free_port  # noqa: PLC0415

    addresses = ";".join(f"localhost:{free_port()}" for _ in range(processes))
    directory = Path(tempfile.mkdtemp(prefix="bytewax-recovery-"))
    children = []
    try:
        init_db_dir(directory, processes)
        for index in range(processes):
            command = [sys.executable, str(REPO / "bench" / "bytewax_process.py"),
                       "--process-id", str(index), "--addresses", addresses, "--kind", kind,
                       "--segments", str(n), "--batch", str(batch), "--recovery", str(directory),
                       "--snapshot-interval", str(snapshot_interval_s)]  # fmt: skip
            children.append(
                subprocess.Popen(
                    command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO
                )
            )
        for child in children:
            if child.stdout.readline().strip() != "ready":
                raise RuntimeError("a Bytewax process did not get ready")
        for child in children:
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children:
            child.stdin.close()
        # Bytewax prints its connection retries on stdout too: the report is the last line.
        reports = [json.loads(child.stdout.read().splitlines()[-1]) for child in children]
        for child in children:
            child.wait(60)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
        shutil.rmtree(directory, ignore_errors=True)
    if any(child.returncode for child in children):
        raise RuntimeError(f"a Bytewax process exited {[c.returncode for c in children]}")
    seen = Seen(
        [read for r in reports for read in r["reads"]],
        [Tally(**t) for r in reports for t in r["tallies"]],
    )
    seen.check(n, f"bytewax in {processes} processes ({kind})")
    return seen.rate()


def bytewax_version() -> str | None:
    try:
        from importlib.metadata import version  # noqa: PLC0415

        return version("bytewax")
    except Exception:
        return None


# -- alone ----------------------------------------------------------------------------------------


def _best(run: Callable[[], float], repeat: int) -> float:
    return max(run() for _ in range(repeat))


def _rows(figures: dict[str, Any]) -> Iterator[str]:
    for key, value in figures.items():
        if key.endswith("segments_per_s"):
            shown = "n/a (bytewax not installed)" if value is None else f"{value:,.0f} segments/s"
            yield f"{key}: {shown}"
        elif key.startswith("ratio"):
            yield f"{key}: {value}x"
        elif key.endswith("_s"):
            yield f"{key}: {value} s"
        else:
            yield f"{key}: {value}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--snapshot-interval", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    codec, encode, decode = default_codec()
    n = args.segments
    limit = _best(lambda: python_limit(n, args.batch_size, encode, decode), args.repeat)
    bare = _best(lambda: python_limit(n, args.batch_size, _same, _same), args.repeat)
    version = bytewax_version()
    rate = None
    if version is not None:
        rate = _best(
            lambda: bytewax_rate(n, args.snapshot_interval, "rows", args.batch_size).rate,
            args.repeat,
        )
    figures: dict[str, Any] = {
        "segments": n,
        "batch_size": args.batch_size,
        "codec": codec,
        "bytewax_version": version,
        "snapshot_interval_s": args.snapshot_interval,
        "functions_only_segments_per_s": round(bare),
        "limit_segments_per_s": round(limit),
        "bytewax_segments_per_s": None if rate is None else round(rate),
    }
    if rate is not None:
        figures["ratio_limit_to_bytewax"] = round(limit / rate, 1)
    for row in _rows(figures):
        print(row)
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
