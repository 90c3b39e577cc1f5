"""Segments per second and latency through the engine, against Bytewax and the machine's limit.

The workload is bench/workload.py's: an input of small segments, three functions that each
change one field, an output that discards; and the same computation as Arrow fns on record
batches. The engine runs the input and the three functions as one chain (``read+f1+f2+f3``,
peer/job/chains.py) and the output as a task of its own; Bytewax runs every step in its worker.
Every contender's input makes its segments as it is read (none is made beforehand), so making
them is timed alike everywhere, and every contender's input hands them out in batches of
--batch-size segments (--arrow-batch-size rows for Arrow). Checkpoints are on everywhere at
--snapshot-interval: the engine's barrier period, Bytewax's epoch interval with its recovery on,
each to a directory on this machine's disk (the engine's checkpoint store, Bytewax's recovery
database). Both sides' outputs are checked alike: every segment arrived, and each output slot's
(each sink partition's) last segment is the one the workload makes. Each figure is printed with
its unit next to the same run's baseline; every figure is the median of --repeat runs, printed
with their lowest and highest (``..._spread`` in the JSON), ratios are of medians, and the runs a
figure is compared with take turns (engine, baseline, engine, ...), so a slow spell of a shared
machine falls on both sides alike.

Every throughput, the engine's and Bytewax's, is timed alike: from the first read of any input
slot to the last write of any output slot, wall clock, so neither side's start-up counts. The
engine's plugins note those times in files (bench/workload.py ``Marker``), which the bench reads
whichever process ran them. Each engine figure also has an end-to-end twin, ``..._end_to_end_
segments_per_s``, timed from the submit-job entry to the job's completion read back from the log
(the job's start and completion protocol included); the ratios use the first kind.

- one process: a local cluster of one peer group, segments between tasks in memory (started for
  each engine run and stopped after it, so no idle engine shares the process with a baseline),
  against Bytewax 0.21 with one worker in this process (``one_process_ratio_to_bytewax``). The
  engine's share of time that is neither making the input nor the functions is
  ``one_process_runtime_share`` (1 - engine / ``functions_only``, the same work in a bare loop).
- two processes: two `onyx peer start` processes on a real ZooKeeper (all three started for each
  engine run and stopped after it, as the one-process engine is), each with its embedded media
  driver, 5 virtual peers in its own process (`--workers 0`) and an Aeron MTU
  of 8192 bytes (loopback's):
  - colocated: the job with ``task_scheduler: colocated`` and 2 peers per task, so each process
    runs a whole pipeline and batches never cross; against Bytewax in two processes of one
    worker each (``two_process_colocated_ratio_to_bytewax_2p``) and the engine in one process
    (``two_process_colocated_ratio_to_one_process``);
  - crossing: the tasks pinned by tags to alternate processes, so every edge crosses over Aeron
    UDP, against the limit loop (bench/baselines.py ``python_limit``) with the engine's own frame
    codec (``two_process_ratio_to_limit``).
- Arrow: the job with ``engine: arrow`` fns on record batches of --arrow-batch-size rows, in
  one process and colocated in two, against Bytewax carrying the same record batches through the
  same pyarrow fns (``arrow_ratio_to_bytewax_arrow``), each with as many processes: columnar work
  on both sides. An engine that refuses ``engine: arrow`` at submit gets null engine figures and
  a note.
- latency: the job in one process and Bytewax with one worker, each fed at the same steady rate,
  half the engine's one-process throughput of this run (or --latency-rate), for
  --latency-seconds; p50 and p99 of the time from each segment's due time (when the input was
  to make it) to its write by the output. Measured on the quiet machine, then again with a
  process spinning on the first core beside either side (``..._loaded``, as a machine busy
  with other work).

The colocated run also prints what each input slot read and when (``two_process_colocated_
reads``: items, first and last poll as seconds from the first read of any slot), to show that
both processes share the work.

Run: .venv-bench/bin/python bench/dataplane.py [--segments 1000000] [--batch-size 1000]
     [--arrow-segments 20000000] [--arrow-batch-size 10000] [--snapshot-interval 1.0]
     [--latency-seconds 10] [--latency-rate R] [--repeat 3] [--quick]
``--quick`` is --segments 100000 --arrow-segments 1000000 --latency-seconds 3 --repeat 1.
Without Bytewax (Python 3.13: no wheels) its figures and ratios are null. The last line of output
is one JSON document holding every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import baselines, workload  # noqa: E402
from peer import api  # noqa: E402
from peer.cluster.local import LocalCluster  # noqa: E402
from peer.job.spec import JobError  # noqa: E402
from peer.log.store import LogStore  # noqa: E402
from peer.messaging.frame import Header, MessageType, decode, encode  # noqa: E402
from tests.support import ZooKeeperServer, wait_for  # noqa: E402

TASKS = ("read", "f1", "f2", "f3", "write")
VPEERS = len(TASKS)
"""Virtual peers per group: a whole pipeline."""


def job(
    segments: int,
    batch_size: int,
    tags: bool,
    *,
    colocated: bool = False,
    arrow: bool = False,
    barrier_period: float | None = 1.0,
    marks: Path | None = None,
) -> dict[str, Any]:
    """The workload as a job. With ``tags``, tasks alternate between peers tagged a and b, so
    each edge crosses; ``colocated`` runs a whole pipeline in each of two groups; ``arrow`` makes
    the input record batches and the fns Arrow ones; with ``marks``, the input and the output
    note their reads and writes in that directory (bench/workload.py ``Marker``)."""
    source = "arrow_input" if arrow else "segment_input"
    prefix = "arrow_" if arrow else ""
    fns = [{"name": f, "kind": "function", "fn": f"bench.workload:{prefix}{f}"} for f in TASKS[1:4]]
    if arrow:
        for fn in fns:
            fn["engine"] = "arrow"
    noted = {} if marks is None else {"marks": str(marks)}
    catalog = [
        {"name": "read", "kind": "input", "plugin": f"bench.workload:{source}",
         "params": {"count": segments, **noted}},
        *fns,
        {"name": "write", "kind": "output", "plugin": "bench.workload:discarding_output",
         "params": {**noted, "check": True}},
    ]  # fmt: skip
    for i, task in enumerate(catalog):
        task.update(n_peers=2 if colocated else 1, batch_size=batch_size)
        if tags:
            task["required_tags"] = ["a" if i % 2 == 0 else "b"]
    doc = {
        "workflow": [list(e) for e in itertools.pairwise(TASKS)],
        "catalog": catalog,
        "barrier_period": barrier_period,
    }
    if colocated:
        doc["task_scheduler"] = "colocated"
    return doc


def paced_job(count: int, rate: float, batch_size: int, run: str, period: float) -> dict[str, Any]:
    """The workload fed at ``rate`` segments per second into the latency output."""
    doc = job(count, batch_size, tags=False, barrier_period=period)
    doc["catalog"][0].update(
        plugin="bench.workload:paced_input", params={"count": count, "rate": rate}
    )
    doc["catalog"][-1].update(plugin="bench.workload:latency_output", params={"run": run})
    return doc


def timed_run(store: LogStore, doc: dict[str, Any], segments: int) -> float:
    """Segments per second end to end: the submit-job entry to the completion in the log."""
    start = time.perf_counter()
    job_id = api.submit(store, doc)
    final = api.wait(store, job_id, timeout=900)
    elapsed = time.perf_counter() - start
    if final.state != "completed":
        raise RuntimeError(f"the benchmark job ended {final.state}")
    return segments / elapsed


@dataclass(frozen=True)
class Timed:
    """One engine run: segments per second from the first read to the last write (as Bytewax
    is timed) and end to end, and the marks its plugins left."""

    rate: float
    end_to_end: float
    marks: workload.Marks


def marked_run(store: LogStore, job_of: Callable[[Path], dict[str, Any]], segments: int) -> Timed:
    """A run of ``job_of(marks)``: the plugins write their marks when their tasks close, which
    may be just after the completion is in the log, so this waits until the output slots'
    marks account for every segment."""
    with tempfile.TemporaryDirectory(prefix="dataplane-marks-") as directory:
        marks = Path(directory)
        end_to_end = timed_run(store, job_of(marks), segments)
        seen = wait_for(
            lambda: (m := workload.read_marks(marks)).written() == segments and m,
            60,
            f"the output marks of {segments} segments in {marks}",
        )
        seen.check(segments, "the engine")
    return Timed(segments / seen.seconds(), end_to_end, seen)


def engine_run(
    engine: Callable[[], AbstractContextManager[LogStore]],
    job_of: Callable[[Path], dict[str, Any]],
    segments: int,
) -> Callable[[], Timed | None]:
    """One run of ``job_of`` on what ``engine`` holds up for the run, as a contender; None with
    a note when the engine refuses the job at submit (an engine without ``engine: arrow``), and
    no more runs of it are tried."""
    refused: list[JobError] = []

    def run() -> Timed | None:
        if refused:
            return None
        try:
            with engine() as store:
                return marked_run(store, job_of, segments)
        except JobError as e:
            print(f"note: the engine refused a benchmark job, so its figures are null: {e}")
            refused.append(e)
            return None

    return run


@contextlib.contextmanager
def local_cluster() -> Iterator[LogStore]:
    """A local cluster of one peer group, in this process, for one engine run and stopped after
    it: an idle group of the engine's would otherwise share this process (and its GIL) with the
    one-process baselines while they are timed. It checkpoints to a directory of its own, as
    durable as Bytewax's recovery directory."""
    with tempfile.TemporaryDirectory(prefix="dataplane-checkpoints-") as checkpoints:
        cluster = LocalCluster(1, VPEERS, checkpoints=checkpoints)
        cluster.start()
        try:
            cluster.await_ring(30)
            yield cluster.reader
        finally:
            cluster.stop()


def taking_turns(repeat: int, contenders: dict[str, Callable[[], Any]]) -> dict[str, list[Any]]:
    """Each contender run ``repeat`` times, one after the other in turn, so that a slower spell
    of a shared machine falls on every contender alike; a contender that gives None is dropped
    (its list is empty)."""
    runs: dict[str, list[Any]] = {name: [] for name in contenders}
    for _ in range(repeat):
        for name, run in contenders.items():
            result = run()
            if result is not None:
                runs[name].append(result)
    return runs


def reads(timed: Timed) -> list[dict[str, float]]:
    """Each input slot's items and its first and last poll, in seconds from the first read."""
    marks = timed.marks.of("read")
    start = min(m.first for m in marks)
    return [
        {"slot": m.slot, "items": m.items, "first_s": round(m.first - start, 3),
         "last_s": round(m.last - start, 3)}
        for m in marks
    ]  # fmt: skip


@contextlib.contextmanager
def peer_processes(
    logs: Path, tags: Sequence[str], vpeers: int = 3, metrics: Sequence[int] = (),
    checkpoints: str | None = None,
) -> Iterator[tuple[LogStore, list]]:  # fmt: skip
    """A ZooKeeper server and one `onyx peer start` of ``vpeers`` peers per tag ("" for none);
    every group's stderr goes to logs/peer-N.log, checkpoints to logs/checkpoints (or the URL
    ``checkpoints``); with ``metrics``, group N serves its metrics on port ``metrics[N]`` of
    127.0.0.1."""
    server = ZooKeeperServer().start()
    processes = []
    try:
        for number, tag in enumerate(tags):
            command = [
                sys.executable, "-m", "peer.cli", "peer", "start", "--zookeeper", server.address,
                "--tenancy", "bench", "--vpeers", str(vpeers), "--tags", tag, "--mtu", "8192",
                "--checkpoints", checkpoints or str(logs / "checkpoints"), "--workers", "0",
            ]  # fmt: skip
            if metrics:
                command += ["--metrics-port", str(metrics[number])]
                command += ["--metrics-address", "127.0.0.1"]
            log = (logs / f"peer-{number}.log").open("wb")
            processes.append(subprocess.Popen(command, cwd=REPO, stderr=log))
        # Two peer processes starting (imports, media drivers) can hold the two cores for
        # longer than a client's default connect timeout.
        store = api.connect(server.address, "bench", create=True, connect_timeout=60)
        count = vpeers * len(tags)
        wait_for(lambda: len(api.replica(store).peers) == count, 60, f"{count} peers")
        yield store, processes
        store.close()
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:  # a loaded machine: it must not outlive the bench
                process.kill()
                process.wait()
        server.stop()


@contextlib.contextmanager
def two_groups() -> Iterator[LogStore]:
    """Two `onyx peer start` processes, tagged "a" and "b", on a ZooKeeper of their own, for one
    engine run and stopped after it, as the one-process engine is: idle, they would otherwise
    share the machine's two cores with the two-process baselines while those are timed."""
    with (
        tempfile.TemporaryDirectory(prefix="dataplane-peers-") as logs,
        peer_processes(Path(logs), ("a", "b"), VPEERS) as (store, _),
    ):
        yield store


def frame_codec() -> tuple[Callable[[list[Any]], bytes], Callable[[bytes], list[Any]]]:
    """The engine's own wire format, header included, for the limit loop."""
    header = Header(MessageType.BATCH, 1, 1, 2, 0, 1)
    return (lambda batch: encode(header, batch)), (lambda blob: decode(blob)[1])


@contextlib.contextmanager
def hog() -> Iterator[None]:
    """A process spinning on the first core for as long as the block runs: a machine busy with
    other work beside the side being timed."""
    spin = "import os\nos.sched_setaffinity(0, {0})\nwhile True: pass"
    process = subprocess.Popen([sys.executable, "-c", spin])
    try:
        yield
    finally:
        process.kill()
        process.wait()


def percentile(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


class Run:
    """One invocation's options and figures; each part adds its figures."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.figures = args, {}
        self.bytewax = baselines.bytewax_version() is not None
        self.figures.update(
            segments=args.segments,
            batch_size=args.batch_size,
            arrow_segments=args.arrow_segments,
            arrow_batch_size=args.arrow_batch_size,
            snapshot_interval_s=args.snapshot_interval,
            repeat=args.repeat,
            bytewax_version=baselines.bytewax_version(),
        )

    def turns(
        self,
        engines: dict[str, Callable[[], Timed | None]],
        rates: dict[str, Callable[[], float | None]],
    ) -> dict[str, Timed | None]:
        """Run the engine's runs and the baselines' taking turns, and record each one's median
        and spread over the repeats: an engine's two figures, ``name`` (first read to last
        write) and its end-to-end twin, a baseline's rate. The engine's runs of median rate are
        returned (None: refused)."""
        runs = taking_turns(self.args.repeat, {**engines, **rates})
        middles: dict[str, Timed | None] = {}
        for name in engines:
            timed = sorted(runs[name], key=lambda r: r.rate)
            middles[name] = timed[(len(timed) - 1) // 2] if timed else None
            self.spread(f"{name}_segments_per_s", [r.rate for r in timed])
            self.spread(f"{name}_end_to_end_segments_per_s", [r.end_to_end for r in timed])
        for name in rates:
            self.spread(f"{name}_segments_per_s", runs[name])
        return middles

    def spread(self, key: str, values: list[float]) -> None:
        """``key``: the median of ``values`` (None: there are none); ``key_spread``: their
        lowest and highest."""
        self.figures[key] = statistics.median(values) if values else None
        self.figures[f"{key}_spread"] = [min(values), max(values)] if values else None

    def bytewax_run(
        self, n: int, kind: str, batch: int, processes: int = 1
    ) -> Callable[[], float | None]:
        """One Bytewax run of the workload as a contender; None without Bytewax."""
        interval = self.args.snapshot_interval

        def run() -> float | None:
            if not self.bytewax:
                return None
            if processes == 1:
                return baselines.bytewax_rate(n, interval, kind, batch).rate
            return baselines.bytewax_cluster_rate(n, interval, kind, batch, processes)

        return run

    def limit_run(self, codec: bool) -> Callable[[], float]:
        """One run of the limit loop: with the engine's frame codec, or with none (the bare
        loop of making the segments and the fns)."""
        a = self.args
        encode_batch, decode_batch = frame_codec() if codec else (baselines._same,) * 2
        return lambda: baselines.python_limit(a.segments, a.batch_size, encode_batch, decode_batch)

    def one_process(self) -> None:
        a = self.args
        period = a.snapshot_interval

        def rows(marks: Path) -> dict[str, Any]:
            return job(a.segments, a.batch_size, tags=False, barrier_period=period, marks=marks)

        def arrow(marks: Path) -> dict[str, Any]:
            return job(
                a.arrow_segments, a.arrow_batch_size, tags=False, arrow=True,
                barrier_period=period, marks=marks,
            )  # fmt: skip

        self.turns(
            {"one_process": engine_run(local_cluster, rows, a.segments)},
            {
                "bytewax": self.bytewax_run(a.segments, "rows", a.batch_size),
                "functions_only": self.limit_run(codec=False),
            },
        )
        self.turns(
            {"one_process_arrow": engine_run(local_cluster, arrow, a.arrow_segments)},
            {"bytewax_arrow": self.bytewax_run(a.arrow_segments, "arrow", a.arrow_batch_size)},
        )

    def two_processes(self) -> None:
        a = self.args
        period = a.snapshot_interval

        def colocated(marks: Path) -> dict[str, Any]:
            return job(
                a.segments, a.batch_size, tags=False, colocated=True,
                barrier_period=period, marks=marks,
            )  # fmt: skip

        def crossing(marks: Path) -> dict[str, Any]:
            return job(a.segments, a.batch_size, tags=True, barrier_period=period, marks=marks)

        def arrow(marks: Path) -> dict[str, Any]:
            return job(
                a.arrow_segments, a.arrow_batch_size, tags=False, colocated=True,
                arrow=True, barrier_period=period, marks=marks,
            )  # fmt: skip

        shared = self.turns(
            {"two_process_colocated": engine_run(two_groups, colocated, a.segments)},
            {"bytewax_2p": self.bytewax_run(a.segments, "rows", a.batch_size, 2)},
        )["two_process_colocated"]
        if shared is not None:
            self.figures["two_process_colocated_reads"] = reads(shared)
        self.turns(
            {"two_process": engine_run(two_groups, crossing, a.segments)},
            {"limit": self.limit_run(codec=True)},
        )
        self.turns(
            {"two_process_arrow": engine_run(two_groups, arrow, a.arrow_segments)},
            {"bytewax_arrow_2p": self.bytewax_run(
                a.arrow_segments, "arrow", a.arrow_batch_size, 2
            )},
        )  # fmt: skip

    def latency(self) -> None:
        """Latency at one steady rate, on a quiet machine and then with a CPU hog on one core
        beside both sides; each side's p50 and p99 per run, their medians over --repeat runs
        (taking turns) and the p99s' spread."""
        a, f = self.args, self.figures
        rate = a.latency_rate or f["one_process_segments_per_s"] / 2
        count = max(int(rate * a.latency_seconds), 200)
        f["latency_offered_segments_per_s"] = rate
        f["latency_segments"] = count
        contenders = {"": self.engine_latency(count, rate), "bytewax_": self.bytewax_latency(
            count, rate)}  # fmt: skip
        for loaded in ("", "_loaded"):
            with hog() if loaded else contextlib.nullcontext():
                runs = taking_turns(a.repeat, contenders)
            for side, latencies in runs.items():
                for p in (50, 99):
                    self.spread(
                        f"{side}p{p}_latency{loaded}_ms",
                        [percentile(each, p) * 1000 for each in latencies],
                    )

    def engine_latency(self, count: int, rate: float) -> Callable[[], list[float]]:
        """One run of the paced job on a fresh local cluster: each segment's latency."""
        doc = paced_job(count, rate, self.args.batch_size, "engine", self.args.snapshot_interval)

        def run() -> list[float]:
            with local_cluster() as store:
                timed_run(store, doc, count)
            ours = workload.LATENCIES.pop("engine")
            if len(ours) != count:
                raise AssertionError(f"the latency job wrote {len(ours)} of {count} segments")
            return ours

        return run

    def bytewax_latency(self, count: int, rate: float) -> Callable[[], list[float] | None]:
        """One run of Bytewax's paced flow: each segment's latency (None without Bytewax)."""
        a = self.args

        def run() -> list[float] | None:
            if not self.bytewax:
                return None
            return baselines.bytewax_rate(
                count, a.snapshot_interval, "paced", a.batch_size, rate
            ).latencies

        return run

    def ratios(self) -> None:
        f = self.figures

        def ratio(name: str, top: str, bottom: str) -> None:
            up, down = f.get(top), f.get(bottom)
            f[name] = None if up is None or down is None else round(up / down, 3)

        ratio(
            "one_process_ratio_to_bytewax", "one_process_segments_per_s", "bytewax_segments_per_s"
        )
        f["one_process_runtime_share"] = round(
            1 - f["one_process_segments_per_s"] / f["functions_only_segments_per_s"], 3
        )
        ratio(
            "two_process_colocated_ratio_to_bytewax_2p",
            "two_process_colocated_segments_per_s",
            "bytewax_2p_segments_per_s",
        )
        ratio(
            "two_process_colocated_ratio_to_one_process",
            "two_process_colocated_segments_per_s",
            "one_process_segments_per_s",
        )
        ratio("two_process_ratio_to_limit", "two_process_segments_per_s", "limit_segments_per_s")
        ratio(
            "arrow_ratio_to_bytewax_arrow",
            "one_process_arrow_segments_per_s",
            "bytewax_arrow_segments_per_s",
        )
        ratio(
            "two_process_arrow_ratio_to_bytewax_arrow_2p",
            "two_process_arrow_segments_per_s",
            "bytewax_arrow_2p_segments_per_s",
        )
        ratio("p99_latency_ratio_to_bytewax", "p99_latency_ms", "bytewax_p99_latency_ms")
        ratio(
            "p99_latency_ratio_to_bytewax_loaded",
            "p99_latency_loaded_ms",
            "bytewax_p99_latency_loaded_ms",
        )
        for key, value in f.items():
            f[key] = rounded(key.removesuffix("_spread"), value)


def rounded(key: str, value: Any) -> Any:
    """Rates to whole segments, milliseconds to microseconds; a spread's either end alike."""
    if isinstance(value, list) and not key.endswith("_reads"):
        return [rounded(key, v) for v in value]
    if value is not None and key.endswith("segments_per_s"):
        return round(value)
    if value is not None and key.endswith("_ms"):
        return round(value, 3)
    return value


LINES = (
    ("one process", "one_process_segments_per_s", "bytewax_segments_per_s",
     "one_process_ratio_to_bytewax"),
    ("  end to end", "one_process_end_to_end_segments_per_s", "bytewax_segments_per_s", None),
    ("  runtime's share", "one_process_segments_per_s", "functions_only_segments_per_s",
     "one_process_runtime_share"),
    ("two processes, colocated", "two_process_colocated_segments_per_s",
     "bytewax_2p_segments_per_s", "two_process_colocated_ratio_to_bytewax_2p"),
    ("  against one process", "two_process_colocated_segments_per_s",
     "one_process_segments_per_s", "two_process_colocated_ratio_to_one_process"),
    ("  end to end", "two_process_colocated_end_to_end_segments_per_s",
     "bytewax_2p_segments_per_s", None),
    ("two processes, every edge crossing", "two_process_segments_per_s", "limit_segments_per_s",
     "two_process_ratio_to_limit"),
    ("  end to end", "two_process_end_to_end_segments_per_s", "limit_segments_per_s", None),
    ("Arrow, one process", "one_process_arrow_segments_per_s",
     "bytewax_arrow_segments_per_s", "arrow_ratio_to_bytewax_arrow"),
    ("  end to end", "one_process_arrow_end_to_end_segments_per_s",
     "bytewax_arrow_segments_per_s", None),
    ("Arrow, two processes, colocated", "two_process_arrow_segments_per_s",
     "bytewax_arrow_2p_segments_per_s", "two_process_arrow_ratio_to_bytewax_arrow_2p"),
    ("  end to end", "two_process_arrow_end_to_end_segments_per_s",
     "bytewax_arrow_2p_segments_per_s", None),
    ("latency p50", "p50_latency_ms", "bytewax_p50_latency_ms", None),
    ("latency p99", "p99_latency_ms", "bytewax_p99_latency_ms", "p99_latency_ratio_to_bytewax"),
    ("latency p50, a CPU hog on one core", "p50_latency_loaded_ms",
     "bytewax_p50_latency_loaded_ms", None),
    ("latency p99, a CPU hog on one core", "p99_latency_loaded_ms",
     "bytewax_p99_latency_loaded_ms", "p99_latency_ratio_to_bytewax_loaded"),
)  # fmt: skip


def shown(figures: dict[str, Any], key: str) -> str:
    """A figure with its unit, and the spread of its repeats where it has one."""
    value, spread = figures.get(key), figures.get(f"{key}_spread")
    if value is None:
        return f"{key} n/a"
    if key.endswith("segments_per_s"):
        unit, form = "segments/s", "{:,}"
    elif key.endswith("_ms"):
        unit, form = "ms", "{}"
    else:
        return f"{key} {value}"
    low_high = f" ({form.format(spread[0])} to {form.format(spread[1])})" if spread else ""
    return f"{key} {form.format(value)} {unit}{low_high}"


def report(figures: dict[str, Any]) -> None:
    """Each figure with its unit, next to the same run's baseline and their ratio."""
    print(
        f"{figures['segments']:,} segments in batches of {figures['batch_size']} "
        f"({figures['arrow_segments']:,} in record batches of {figures['arrow_batch_size']:,} "
        f"for Arrow); checkpoints every {figures['snapshot_interval_s']} s; "
        f"Bytewax {figures['bytewax_version'] or 'not installed'}"
    )
    for title, ours, theirs, ratio in LINES:
        line = f"{title}: {shown(figures, ours)}; baseline: {shown(figures, theirs)}"
        print(line + (f"; {ratio} = {figures.get(ratio)}" if ratio else ""))
    print(
        f"latency offered rate: {figures['latency_offered_segments_per_s']:,.0f} segments/s "
        f"({figures['latency_segments']:,} segments)"
    )
    for slot in figures.get("two_process_colocated_reads", []):
        print(
            f"colocated input slot {slot['slot']}: read {slot['items']:,} segments from "
            f"{slot['first_s']} s to {slot['last_s']} s after the first read"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--arrow-segments", type=int, default=20_000_000)
    parser.add_argument("--arrow-batch-size", type=int, default=10_000)
    parser.add_argument("--snapshot-interval", type=float, default=1.0)
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--latency-rate", type=float, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.segments, args.arrow_segments, args.latency_seconds, args.repeat = (
            100_000, 1_000_000, 3.0, 1,
        )  # fmt: skip
    logging.basicConfig(level=logging.ERROR)
    began = time.perf_counter()
    run = Run(args)
    if not run.bytewax:
        print(
            "note: Bytewax is not installed here (wheels up to Python 3.12): its figures are "
            "null; see bench/README.md"
        )
    run.one_process()
    run.latency()
    run.two_processes()
    run.ratios()
    run.figures["total_s"] = round(time.perf_counter() - began, 1)
    report(run.figures)
    print(json.dumps(run.figures, sort_keys=True))


if __name__ == "__main__":
    main()
