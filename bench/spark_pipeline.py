"""The clickstream example on the engine against the same computation on Spark Structured
Streaming, and what a Spark task costs per batch.

1. The input: examples/clickstream/generate.py's page views (--events, 2000 users, 8 Parquet
   files, seed 7) and its pages table, in a temporary directory.
2. Spark runs on --master (local[2]) with spark.sql.shuffle.partitions set to
   --shuffle-partitions (Structured Streaming's stateful operator has that many state stores; the
   default of 200 is for clusters) and the UI off. The session is built and runs one trivial query
   before anything is timed, so neither side pays the JVM's start.
3. The engine: examples/clickstream/job.yaml (Spark input, an Arrow `clean` task running
   `pipeline.clean_arrow`, session windows of 30 minutes per user in the peers, the exactly-once
   Parquet sink) on a local cluster of one group of 5 virtual peers, its paths pointed at the
   temporary directory and its checkpoints (every second, the job's barrier period) written to a
   directory there, as Structured Streaming's are to its checkpointLocation; timed from the
   submit-job entry to the job's completion read back from the log. Throughput is input events
   per second. `clean_arrow` is `pipeline.clean` in pyarrow.compute: the same rows in the same
   order (tests/integration/test_spark_clickstream_clean.py), and the sessions rows of both sides
   are compared below.
4. The baseline, in the same process and Spark session: the same computation as a Structured
   Streaming query over the same files: `readStream` Parquet with the files' schema, the very
   `pipeline.clean` (a broadcast join of the static pages table with the stream), a watermark on
   `ts` with no delay (the engine's watermark is the largest event time read, with no lateness
   allowed either), `groupBy(user_id, session_window(ts, "30 minutes"))` counting views, summing
   duration_ms, taking the first and last ts and the top section with `mode(section,
   deterministic=True)` (the engine's tie-break too: the first name in order), written as Parquet
   partitioned by day in append mode with a checkpoint, `trigger(availableNow=True)`; timed from
   building the query to `awaitTermination()` returning. Both outputs' rows are counted, and
   those identical in both (see `structured_streaming_run` for why the counts differ).
   Each side runs once untimed (a warm-up: imports, Spark's plans and code generation, the
   peers' first job), then --repeat times, taking turns (engine, Structured Streaming, engine,
   ...) so that a slow spell of a shared machine falls on both alike. Every run of a side must
   write the same rows as its warm-up. Each side's throughput is the median of its runs, with
   their spread (min, max); the ratio divides the medians.
5. A Spark task's cost per batch: batches of --batch cleaned rows through `SparkFunction` (what a
   Spark task does per batch: rows to Arrow, a DataFrame, the fn, back to rows) with an identity
   DataFrame fn, against the same batches through a plain Python identity fn applied per segment
   as a Python task does; mean seconds per batch over --batches batches after 2 warm-up batches.

6. Latency from a file's arrival to its rows being queryable in a table. Files of --file-rows
   rows (columns ``file``, ``row``) arrive in a watched directory one every --file-period
   seconds, --latency-files of them, each written under a hidden name and renamed in whole (the
   arrival time is the rename's). The engine: a job of the streaming Spark source
   (``peer.spark.source:stream``, listing every --trigger seconds) into the exactly-once Parquet
   table sink, with a barrier period of --trigger seconds (the sink publishes an epoch when it
   commits). The baseline: a Structured Streaming query, ``readStream`` Parquet from the same kind
   of directory into a Parquet table, ``trigger(processingTime=--trigger seconds)``. Each gets
   its own directories (the engine's checkpoints in the cluster's directory, Spark's in its
   checkpointLocation) and one warm-up file before the timed ones. A watcher polls each table's
   directory every 20 ms and reads every new Parquet file outside ``_``/``.`` names; a file's
   rows are queryable once all of them can be read there (for Spark's file sink that is as soon
   as its part files are written, before its ``_spark_metadata`` commit: generous to Spark).
   p50 and p99 in seconds over the timed files of a run; --latency-repeat runs of each side,
   taking turns, give each figure as the median of the runs' with their spread.

Spark writes warnings to stderr; they are harmless. The defaults take several minutes; --quick
sets 200,000 events, 2 repeats, 10 latency files and one latency run (flags given win).

Run: .venv/bin/python bench/spark_pipeline.py [--events 2000000] [--master local[2]]
     [--shuffle-partitions 4] [--batch 1000] [--batches 20] [--repeat 5]
     [--latency-files 30] [--file-rows 1000] [--file-period 0.5] [--trigger 1.0]
     [--latency-repeat 3] [--quick]
The last line of output is one JSON document holding every figure: a figure repeated is its
runs' median, next to `<figure>_min`, `<figure>_max` and `<figure>_runs` (each run in order).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.dataplane import taking_turns  # noqa: E402
from examples.clickstream import generate, pipeline  # noqa: E402
from peer import api  # noqa: E402
from peer.cluster.local import LocalCluster  # noqa: E402
from peer.job.arrow_schema import to_rows  # noqa: E402
from peer.job.load import load  # noqa: E402
from peer.job.spec import Task  # noqa: E402
from peer.spark import session as spark_session  # noqa: E402
from peer.spark.function import SparkFunction  # noqa: E402

JOB = REPO / "examples" / "clickstream" / "job.yaml"
USERS, FILES, SEED = 2000, 8, 7
QUICK = {"events": 200_000, "repeat": 2, "latency_files": 10, "latency_repeat": 1}
"""What --quick sets: a check that every part runs, in about a minute."""
VPEERS = 5
"""The job's tasks need 5 virtual peers: views 2, clean, visits and sessions 1 each."""
GAP = "30 minutes"
"""The job's session gap, 1800 s."""
WARM_UP = 2
FIELDS = ("user_id", "day", "start", "end", "views", "duration_ms", "top_section")
"""A row of the sessions table."""
Rows = set[tuple[Any, ...]]
CLEANED = {"user_id": "string", "ts": "timestamp", "page": "string", "section": "string",
           "duration_ms": "bigint"}  # fmt: skip
"""What `pipeline.clean` returns: the Spark task's declared schema in the overhead test."""


def identity(df: DataFrame) -> DataFrame:
    """The DataFrame fn of the overhead test, named as ``bench.spark_pipeline:identity``."""
    return df


def identity_segment(segment: dict[str, Any]) -> dict[str, Any]:
    """The plain Python fn of the overhead test."""
    return segment


def sessions(path: Path) -> Rows:
    """The rows of a Hive-partitioned sessions table (names starting with _ or . are skipped, so
    neither the sink's _staging nor Spark's _spark_metadata count), times as microseconds since
    the epoch: the engine's sink writes UTC timestamps, Spark INT96 ones that read back without
    a zone, in the session's time zone, UTC."""
    table = ds.dataset(path, format="parquet", partitioning="hive").to_table()
    columns = [
        pc.cast(pc.cast(table[name], pa.timestamp("us")), pa.int64())
        if name in ("start", "end")
        else pc.cast(table[name], pa.string() if name == "day" else table[name].type)
        for name in FIELDS
    ]
    return set(zip(*(column.to_pylist() for column in columns), strict=True))


def warm() -> None:
    """Build the session and run one query, outside every timing."""
    spark_session.session().range(1).count()


# -- the engine -----------------------------------------------------------------------------------


def job_doc(data: Path, out: Path) -> dict[str, Any]:
    """The example job with its paths in ``data`` (the input) and ``out`` (the sessions table)."""
    doc = load(JOB).to_dict()
    params = {
        "views": {"path": str(data / "events")},
        "clean": {"pages": str(data / "pages.csv")},
        "sessions": {"path": str(out / "sessions")},
    }
    for task in doc["catalog"]:
        task["params"] = {**task.get("params", {}), **params.get(task["name"], {})}
    return doc


def engine_run(cluster: LocalCluster, data: Path, out: Path, events: int) -> tuple[float, Rows]:
    """Events per second from submit to completed, and the sessions table's rows."""
    doc = job_doc(data, out)
    start = time.perf_counter()
    job_id = api.submit(cluster.reader, doc)
    final = api.wait(cluster.reader, job_id, timeout=1800)
    elapsed = time.perf_counter() - start
    if final.state != "completed":
        raise RuntimeError(f"the clickstream job ended {final.state}")
    rows = sessions(out / "sessions")
    if not rows:
        raise RuntimeError("the clickstream job completed but its sessions table is empty")
    return events / elapsed, rows


# -- the baseline: Structured Streaming -----------------------------------------------------------


def structured_streaming_run(data: Path, out: Path, events: int) -> tuple[float, Rows]:
    """Events per second of the same computation as a Structured Streaming query over the same
    files, and its output's rows.

    The row counts of the two may differ a little: the engine closes every window when its input
    ends (the final watermark passes them all), while a Structured Streaming query never learns
    that its input has ended, so the sessions within the gap of the last event time stay open in
    its state and are never written."""
    spark = spark_session.session()
    schema = spark.read.parquet(str(data / "events")).schema
    start = time.perf_counter()
    views = spark.readStream.schema(schema).parquet(str(data / "events"))
    cleaned = pipeline.clean(views, {"pages": str(data / "pages.csv")})
    visits = (
        cleaned.withWatermark("ts", "0 seconds")
        .groupBy("user_id", F.session_window("ts", GAP))
        .agg(
            F.min("ts").alias("start"),
            F.max("ts").alias("end"),
            F.count("*").alias("views"),
            F.sum("duration_ms").alias("duration_ms"),
            F.mode("section", deterministic=True).alias("top_section"),
        )
        .select(
            "user_id",
            F.date_format("start", "yyyy-MM-dd").alias("day"),
            "start",
            "end",
            "views",
            "duration_ms",
            "top_section",
        )
    )
    query = (
        visits.writeStream.format("parquet")
        .outputMode("append")
        .partitionBy("day")
        .option("path", str(out / "sessions"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - start
    return events / elapsed, sessions(out / "sessions")


def throughputs(
    cluster: LocalCluster, data: Path, tmp: Path, events: int, repeat: int
) -> tuple[dict[str, list[float]], dict[str, Rows]]:
    """Each side's events per second over ``repeat`` runs taken in turn, after an untimed warm-up
    run of each, and the sessions rows of its warm-up, which each of its runs must write too."""
    outs = (tmp / f"throughput-{number}" for number in itertools.count())
    sides: dict[str, Callable[[], tuple[float, Rows]]] = {
        "engine": lambda: engine_run(cluster, data, next(outs), events),
        "structured_streaming": lambda: structured_streaming_run(data, next(outs), events),
    }
    rows = {side: run()[1] for side, run in sides.items()}

    def timed(side: str) -> float:
        rate, written = sides[side]()
        if written != rows[side]:
            raise RuntimeError(f"a {side} run wrote other sessions rows than its warm-up")
        return rate

    turns = taking_turns(repeat, {side: partial(timed, side) for side in sides})
    return turns, rows


# -- a Spark task's cost per batch ----------------------------------------------------------------


def cleaned_batches(data: Path, size: int, count: int) -> list[list[dict[str, Any]]]:
    """``count`` batches of ``size`` cleaned rows, as segments (what the clean task emits)."""
    spark = spark_session.session()
    frame = pipeline.clean(
        spark.read.parquet(str(data / "events")), {"pages": str(data / "pages.csv")}
    )
    segments = to_rows(frame.limit(size * count).toArrow())
    if len(segments) < size * count:
        raise RuntimeError(f"{len(segments)} cleaned rows, fewer than {count} batches of {size}")
    return [segments[i * size : (i + 1) * size] for i in range(count)]


def mean_batch_seconds(apply: Callable[[list[dict[str, Any]]], Any], batches: list) -> float:
    """Mean seconds of ``apply`` per batch, after WARM_UP batches left out of it."""
    times = []
    for number, batch in enumerate(batches):
        start = time.perf_counter()
        apply(batch)
        if number >= WARM_UP:
            times.append(time.perf_counter() - start)
    return statistics.mean(times)


def batch_overhead(data: Path, size: int, count: int) -> tuple[float, float]:
    """Mean seconds per batch through a Spark task and through a Python task, identity fns."""
    batches = cleaned_batches(data, size, count + WARM_UP)
    task = Task(name="identity", kind="function", engine="spark",
                fn="bench.spark_pipeline:identity", schema=CLEANED)  # fmt: skip
    spark_fn = SparkFunction(task)

    def through_spark(batch: list[dict[str, Any]]) -> None:
        out = spark_fn.submit(batch).result()
        if len(out) != len(batch):
            raise RuntimeError(f"the identity Spark task gave {len(out)} rows for {len(batch)}")

    def through_python(batch: list[dict[str, Any]]) -> None:
        fn = identity_segment
        out = [fn(s) for s in batch]
        if len(out) != len(batch):
            raise RuntimeError("the identity Python fn lost segments")

    return mean_batch_seconds(through_spark, batches), mean_batch_seconds(through_python, batches)


# -- latency from a file's arrival to its rows in the table --------------------------------------

FILE_SCHEMA = {"file": "bigint", "row": "bigint"}
POLL = 0.02
"""Seconds between two looks at a table's directory."""


def latency_job(incoming: Path, table: Path, trigger: float) -> dict[str, Any]:
    """The watched directory ``incoming`` into the Parquet table ``table``."""
    return {
        "workflow": [["files", "table"]],
        "catalog": [
            {"name": "files", "kind": "input", "plugin": "peer.spark.source:stream",
             "n_peers": 1, "batch_size": 10_000, "schema": FILE_SCHEMA,
             "params": {"path": str(incoming), "format": "parquet", "interval": trigger}},
            {"name": "table", "kind": "output", "plugin": "peer.plugins.parquet:output",
             "n_peers": 1, "schema": FILE_SCHEMA, "params": {"path": str(table)}},
        ],
        "barrier_period": trigger,
    }  # fmt: skip


class TableWatch:
    """The rows per ``file`` readable so far from a table's Parquet files."""

    def __init__(self, table: Path) -> None:
        self.table, self.read, self.rows = table, set(), {}

    def look(self) -> None:
        for path in self._files():
            try:
                column = pq.read_table(path, columns=["file"])["file"].to_pylist()
            except Exception:  # still being written: read it next time
                continue
            self.read.add(path)
            for number in column:
                self.rows[number] = self.rows.get(number, 0) + 1

    def _files(self) -> list[Path]:
        found = []
        for root, directories, files in os.walk(self.table):
            directories[:] = [d for d in directories if not d.startswith(("_", "."))]
            found += [Path(root) / f for f in files
                      if f.endswith(".parquet") and not f.startswith(("_", "."))]  # fmt: skip
        return [path for path in sorted(found) if path not in self.read]


def arrive(incoming: Path, number: int, rows: int) -> float:
    """Write file ``number`` under a hidden name, rename it in whole; the time it arrived."""
    table = pa.table({"file": pa.array([number] * rows, pa.int64()),
                      "row": pa.array(range(rows), pa.int64())})  # fmt: skip
    hidden = incoming / f".{number:06d}.parquet"
    pq.write_table(table, hidden)
    os.rename(hidden, incoming / f"{number:06d}.parquet")
    return time.time()


def file_latencies(
    incoming: Path, table: Path, files: int, rows: int, period: float
) -> list[float]:
    """Seconds from each timed file's arrival to all its rows being readable in ``table``: a
    warm-up file (number 0) first, then files 1..files every ``period`` seconds."""
    watch = TableWatch(table)
    arrive(incoming, 0, rows)
    deadline = time.monotonic() + 300
    while watch.rows.get(0, 0) < rows:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the warm-up file never reached the table {table}")
        time.sleep(POLL)
        watch.look()
    arrived, seen = {}, {}
    due = time.monotonic()
    deadline = due + files * period + 300
    while len(seen) < files:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{files - len(seen)} files never reached the table {table}")
        if len(arrived) < files and time.monotonic() >= due:
            number = len(arrived) + 1
            arrived[number] = arrive(incoming, number, rows)
            due += period
            continue
        time.sleep(POLL)
        watch.look()
        now = time.time()
        for number in arrived:
            if number not in seen and watch.rows.get(number, 0) >= rows:
                seen[number] = now
    if any(watch.rows[number] != rows for number in seen):
        raise AssertionError(f"a file's rows reached the table {table} more than once")
    return [seen[number] - arrived[number] for number in sorted(arrived)]


def engine_latencies(cluster: LocalCluster, run: Path, args: argparse.Namespace) -> list[float]:
    incoming, table = run / "incoming", run / "table"
    incoming.mkdir()
    job_id = api.submit(cluster.reader, latency_job(incoming, table, args.trigger))
    try:
        return file_latencies(incoming, table, args.latency_files, args.file_rows,
                              args.file_period)  # fmt: skip
    finally:
        api.kill(cluster.reader, job_id)


def structured_streaming_latencies(run: Path, args: argparse.Namespace) -> list[float]:
    incoming, table = run / "incoming", run / "table"
    incoming.mkdir()
    spark = spark_session.session()
    query = (
        spark.readStream.schema("file BIGINT, row BIGINT")
        .parquet(str(incoming))
        .writeStream.format("parquet")
        .option("path", str(table))
        .option("checkpointLocation", str(run / "checkpoint"))
        .trigger(processingTime=f"{args.trigger} seconds")
        .start()
    )
    try:
        latencies = file_latencies(incoming, table, args.latency_files, args.file_rows,
                                   args.file_period)  # fmt: skip
        query.processAllAvailable()  # so that stopping interrupts no write
        return latencies
    finally:
        query.stop()


def latency_runs(cluster: LocalCluster, tmp: Path, args: argparse.Namespace) -> dict[str, list]:
    """Each side's file-to-table latencies of --latency-repeat runs taken in turn, every run in
    directories of its own (a table belongs to one job or query)."""
    directories = (tmp / f"latency-{number}" for number in itertools.count())

    def fresh() -> Path:
        directory = next(directories)
        directory.mkdir()
        return directory

    return taking_turns(args.latency_repeat, {
        "engine": lambda: engine_latencies(cluster, fresh(), args),
        "structured_streaming": lambda: structured_streaming_latencies(fresh(), args),
    })  # fmt: skip


def quantile(values: list[float], p: int) -> float:
    return round(statistics.quantiles(values, n=100, method="inclusive")[p - 1], 3)


def spread(name: str, values: list[float], digits: int | None) -> dict[str, Any]:
    """The figure ``name``, the median of a side's runs (one slow or fast run moves it little),
    with their spread and every run, rounded to ``digits`` (None: a whole number)."""
    return {
        name: round(statistics.median(values), digits),
        f"{name}_min": round(min(values), digits),
        f"{name}_max": round(max(values), digits),
        f"{name}_runs": [round(value, digits) for value in values],
    }


# -- the run --------------------------------------------------------------------------------------


def runs(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"


def ranged(f: dict[str, Any], name: str, unit: str) -> str:
    """A repeated figure as its median, unit and spread."""
    low, high = format(f[f"{name}_min"], ","), format(f[f"{name}_max"], ",")
    return f"{f[name]:,} {unit} ({low} to {high})"


def report(f: dict[str, Any]) -> None:
    """Each figure with its unit, next to the same run's baseline."""
    print(
        f"input: {f['events']:,} events of {USERS} users in {FILES} Parquet files; "
        f"Spark {f['master']}, {f['shuffle_partitions']} shuffle partitions"
    )
    print(
        f"engine, clickstream job (1 group x {VPEERS} vpeers, checkpoints to a directory), "
        f"median of {runs(f['repeat'])}: {ranged(f, 'onyx_events_per_s', 'events/s')}; "
        f"{f['onyx_sessions_rows']:,} sessions rows"
    )
    print(
        f"  baseline, same run: Structured Streaming, availableNow, median of {runs(f['repeat'])}: "
        f"{ranged(f, 'structured_streaming_events_per_s', 'events/s')}; "
        f"{f['structured_streaming_sessions_rows']:,} sessions rows "
        f"(top section by {f['structured_streaming_top_section']})"
    )
    print(f"  engine / Structured Streaming, medians: {f['ratio_vs_structured_streaming']}")
    print(f"  sessions rows identical in both outputs: {f['sessions_rows_identical']:,}")
    print(
        f"  every run in turn, events/s: engine {f['onyx_events_per_s_runs']}, "
        f"Structured Streaming {f['structured_streaming_events_per_s_runs']}"
    )
    print(
        f"Spark task, identity fn, batches of {f['batch_rows']} rows: "
        f"{f['spark_batch_s']} s per batch"
    )
    print(
        f"  baseline, same batches: Python identity fn per segment: "
        f"{f['python_batch_s']} s per batch"
    )
    print(f"  Spark task overhead: {f['spark_task_overhead_s_per_batch']} s per batch")
    print(
        f"file to table ({f['latency_files']} files of {f['file_rows']} rows, one every "
        f"{f['file_period_s']} s; listing, barrier and trigger every {f['trigger_s']} s), "
        f"medians of {runs(f['latency_repeat'])}: engine "
        f"p50 {ranged(f, 'p50_file_to_table_s', 's')}, p99 {ranged(f, 'p99_file_to_table_s', 's')}"
    )
    print(
        f"  baseline, same run: Structured Streaming, processing-time trigger: "
        f"p50 {ranged(f, 'structured_streaming_p50_file_to_table_s', 's')}, "
        f"p99 {ranged(f, 'structured_streaming_p99_file_to_table_s', 's')}"
    )
    print(f"took {f['total_s']} s in all (after an untimed warm-up run of each side)")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every part's figures, in one Spark session and one local cluster whose checkpoints go to a
    directory in the run's temporary directory."""
    conf = {
        "spark.sql.shuffle.partitions": str(args.shuffle_partitions),
        "spark.ui.enabled": "false",
    }
    spark_session.configure(args.master, conf, app="bench-spark-pipeline")
    with tempfile.TemporaryDirectory(prefix="spark-pipeline-") as name:
        tmp = Path(name)
        generate.write(tmp / "data", args.events, USERS, FILES, SEED)
        cluster = LocalCluster(1, VPEERS, checkpoints=str(tmp / "checkpoints"))
        try:
            warm()
            cluster.start()
            cluster.await_ring(60)
            rates, rows = throughputs(cluster, tmp / "data", tmp, args.events, args.repeat)
            batch = batch_overhead(tmp / "data", args.batch, args.batches)
            latency = latency_runs(cluster, tmp, args)
        finally:
            cluster.stop()
            spark_session.stop()
    return {
        **throughput_figures(args, rates, rows),
        **overhead_figures(args, *batch),
        **latency_figures(args, latency),
    }


def throughput_figures(
    args: argparse.Namespace, rates: dict[str, list[float]], rows: dict[str, Rows]
) -> dict[str, Any]:
    engine, streaming = rates["engine"], rates["structured_streaming"]
    return {
        "events": args.events,
        "master": args.master,
        "shuffle_partitions": args.shuffle_partitions,
        "repeat": args.repeat,
        **spread("onyx_events_per_s", engine, None),
        **spread("structured_streaming_events_per_s", streaming, None),
        "ratio_vs_structured_streaming": round(
            statistics.median(engine) / statistics.median(streaming), 3
        ),
        "onyx_sessions_rows": len(rows["engine"]),
        "structured_streaming_sessions_rows": len(rows["structured_streaming"]),
        "sessions_rows_identical": len(rows["engine"] & rows["structured_streaming"]),
        "structured_streaming_top_section": "mode(section, deterministic=True)",
    }


def overhead_figures(args: argparse.Namespace, spark: float, python: float) -> dict[str, Any]:
    return {
        "batch_rows": args.batch,
        "batches": args.batches,
        "spark_batch_s": round(spark, 5),
        "python_batch_s": round(python, 7),
        "spark_task_overhead_s_per_batch": round(spark - python, 5),
    }


def latency_figures(args: argparse.Namespace, latency: dict[str, list]) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "latency_files": args.latency_files,
        "latency_repeat": args.latency_repeat,
        "file_rows": args.file_rows,
        "file_period_s": args.file_period,
        "trigger_s": args.trigger,
    }
    for side, prefix in (("engine", ""), ("structured_streaming", "structured_streaming_")):
        for p in (50, 99):
            runs = [quantile(run, p) for run in latency[side]]
            figures.update(spread(f"{prefix}p{p}_file_to_table_s", runs, 3))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--shuffle-partitions", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--latency-files", type=int, default=30)
    parser.add_argument("--file-rows", type=int, default=1000)
    parser.add_argument("--file-period", type=float, default=0.5)
    parser.add_argument("--trigger", type=float, default=1.0)
    parser.add_argument("--latency-repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help=f"a short check: {QUICK}")
    args = parser.parse_args()
    if args.quick:  # parsed again so that flags given win over the quick run's settings
        parser.set_defaults(**QUICK)
        args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    began = time.perf_counter()
    figures = measure(args)
    figures["total_s"] = round(time.perf_counter() - began, 1)
    report(figures)
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
