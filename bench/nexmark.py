"""Nexmark's queries: events per second per core on the engine, against Bytewax 0.21 in the
same run, with Flink 1.13's published per-core figures printed beside.

Each query (examples/nexmark) runs over --events generated events (the generator inside the
clock: events are made as the input reads them), in order (``out_of_order_group_size`` 1), on
one peer group in a fresh interpreter of its own, with checkpoints every --barrier-period
seconds into a directory, its answer written to a sink that counts it (the null output). A
run's figure is its events over the CPU seconds its process used from submit to completion
(all its threads and children: what Flink's "throughput per core" divides by), and the
answer's rows are checked against DuckDB's count over the same events.

Both sides make the events a batch of 500 at a time as Arrow columns (peer.nexmark.columns), and
run each query's first steps on the batches (the queries' Arrow fns: a filter and a
projection), turning only what those keep into rows for the windows and joins after them.

Bytewax, the baseline: the same queries where written for it (q0, q1, q2, q3, q5, q7, q8) over the
same generator's events, one worker in a fresh interpreter, with its SQLite recovery at the
same epoch interval, its answer counted and checked alike. Its event clocks hold the watermark
1 s behind the latest event (5 s in q5's first stage), and q5's second stage until the input ends
(``WAIT_MS``, ``Q5_WAIT_MS``, ``HOLD_MS``: with less it drops events as late and answers
otherwise).

Flink's figures are the nexmark project's published results for Flink 1.13 (8 workers of 8
cores, RocksDB, exactly once, 100 M events at 10 M/s): not measured here, and printed only
beside the engine's for a sense of scale; ``q{N}_ratio_to_flink_per_core`` divides by them.

Latency: each query again, at half the highest rate its runs reached (their median events per
wall second), over --latency-seconds of events that come at their event time by the wall clock
(bench/nexmark_wall.py: the generator's rate set to that, its base time a wall time), its
output's lag sampled every 5 ms: the wall clock less the output's watermark, how long ago the
events it has passed were due. Its p50 and p99 are per run, over the samples after the first
second, the median and spread of --repeat runs given. It is the lag of the output's event-time
progress, sampled in time, not each row's latency: a windowed query's rows are due when the
watermark passes their window's end, which is what it shows; it does not show how long a window
waits for its end.

Not covered: Bytewax for q4 and q6 (an auction's bids up to its end, then an order per seller:
not written for it here), and Flink's q6 (not in its published results).

Run: .venv-bench/bin/python bench/nexmark.py [--events 300000] [--repeat 3]
     [--queries q0 ... q8] [--barrier-period 1] [--latency-seconds 10]
The last line of output is one JSON document holding every figure.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import resource
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import bytewax_io  # noqa: E402
from bench.bytewax_io import handing_sink, numbered_source  # noqa: E402
from bench.dataplane import taking_turns  # noqa: E402
from bench.state import isolated  # noqa: E402
from examples.nexmark import oracle  # noqa: E402
from examples.nexmark.common import bid  # noqa: E402
from peer import api  # noqa: E402
from peer.cluster.local import LocalCluster  # noqa: E402
from peer.job.chains import chained  # noqa: E402
from peer.job.spec import Job  # noqa: E402
from peer.metrics import segments_in, watermark_of  # noqa: E402
from peer.nexmark.columns import batch  # noqa: E402
from peer.nexmark.config import NexmarkConfig  # noqa: E402

SETTINGS = {"seed": 1}
"""The generator's settings besides the count: in order, its defaults."""

FLINK_PER_CORE = {"q0": 155_020, "q1": 157_940, "q2": 175_210, "q3": 152_120, "q4": 34_330,
                  "q5": 22_140, "q7": 12_330, "q8": 146_140}  # fmt: skip
"""Events per second per core, Flink 1.13, from the nexmark project's published results."""

QUERIES = ("q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8")
BYTEWAX_QUERIES = ("q0", "q1", "q2", "q3", "q5", "q7", "q8")


@dataclass(frozen=True)
class Run:
    """One run: its events, the CPU seconds and wall seconds they took, the rows answered."""

    events: int
    cpu_s: float
    wall_s: float
    rows: int

    @property
    def per_core(self) -> float:
        return self.events / self.cpu_s


def cpu_seconds() -> float:
    """This process's CPU time so far, its threads and its reaped children's."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def counted_job(query: str, events: int, period: float | None, **settings: Any) -> Job:
    """The query over ``events`` events, its answer counted by the null output."""
    module = importlib.import_module(f"examples.nexmark.{query}")
    job = module.flow(events, "unused", barrier_period=period, **SETTINGS, **settings).job()
    counted = tuple(
        replace(task, plugin="peer.plugins.null:output", params={})
        if task.kind == "output" else task
        for task in job.catalog
    )  # fmt: skip
    return replace(job, catalog=counted)


def peers(job: Job) -> int:
    """Virtual peers enough for every task of ``job`` as the cluster runs it, chains made: one
    group runs it all."""
    return sum(task.min_peers for task in chained(job).catalog)


def engine_run(query: str, events: int, period: float | None) -> Run:
    """The query on one peer group, as fast as it goes."""
    job = counted_job(query, events, period)
    with tempfile.TemporaryDirectory(prefix="nexmark-bench-") as directory:
        cluster = LocalCluster(1, peers(job), checkpoints=str(Path(directory, "checkpoints")))
        cluster.start()
        try:
            cluster.await_ring(30)
            started, wall = cpu_seconds(), time.perf_counter()
            job_id = api.submit(cluster.reader, job.to_dict())
            final = api.wait(cluster.reader, job_id, timeout=3600)
            took, cpu = time.perf_counter() - wall, cpu_seconds() - started
        finally:
            cluster.stop()
    if final.state != "completed":
        raise RuntimeError(f"{query} ended {final.state}")
    return Run(events, cpu, took, int(segments_in(job_id, "write")))


@dataclass(frozen=True)
class Lags:
    """A run's output lags behind the wall clock, in milliseconds, the rows it answered, and
    the wall time its events started at (its base_time)."""

    lags_ms: list[float]
    rows: int
    base_time: int


def latency_run(query: str, events: int, period: float | None, rate: float) -> Lags:
    """The query over events that come at ``rate`` a second at their event time by the wall
    clock (bench/nexmark_wall.py), starting ``START_S`` from now, its output's lag behind the
    wall clock sampled every ``SAMPLE_S``, those from the first ``WARM_S`` left out."""
    base = int((time.time() + START_S) * 1000)
    job = counted_job(query, events, period, rate=rate, base_time=base)
    walled = tuple(replace(task, plugin="bench.nexmark_wall:input") if task.kind == "input"
                   else task for task in job.catalog)  # fmt: skip
    job = replace(job, catalog=walled)
    lags: list[float] = []
    with tempfile.TemporaryDirectory(prefix="nexmark-bench-") as directory:
        cluster = LocalCluster(1, peers(job), checkpoints=str(Path(directory, "checkpoints")))
        cluster.start()
        try:
            cluster.await_ring(30)
            job_id = api.submit(cluster.reader, job.to_dict())
            done = threading.Event()
            sampler = threading.Thread(target=_sample, args=(job_id, base, done, lags),
                                       daemon=True)  # fmt: skip
            sampler.start()
            try:
                final = api.wait(cluster.reader, job_id, timeout=3600)
            finally:
                done.set()
                sampler.join()
        finally:
            cluster.stop()
    if final.state != "completed":
        raise RuntimeError(f"{query} ended {final.state}")
    return Lags(lags, int(segments_in(job_id, "write")), base)


def _sample(job_id: str, base: int, done: threading.Event, lags: list[float]) -> None:
    """Every SAMPLE_S until ``done``: how far the output's watermark is behind the wall clock,
    from WARM_S after the events started."""
    while not done.wait(SAMPLE_S):
        mark = watermark_of(job_id, "write")
        now = time.time() * 1000
        if mark is None or not math.isfinite(mark) or now < base + WARM_S * 1000:
            continue
        lags.append(now - mark)


SAMPLE_S = 0.005
"""How often the output's lag is sampled, in seconds."""
WARM_S = 1.0
"""Seconds of a paced run left out of its lags: the start, while the first batches warm up."""
START_S = 3.0
"""Seconds from a paced run's start to its first event's time: the cluster starts meanwhile."""


def bytewax_run(query: str, events: int, period: float | None) -> Run:
    """The query on Bytewax, one worker; with ``period``, its SQLite recovery at that epoch
    interval."""
    rows = [0]
    flow = bytewax_flow(query, events, rows)
    started, wall = cpu_seconds(), time.perf_counter()
    bytewax_io.run(flow, period)
    return Run(events, cpu_seconds() - started, time.perf_counter() - wall, rows[0])


def bytewax_flow(query: str, events: int, rows: list[int]) -> Any:
    """The query as a Bytewax dataflow over the generator's first ``events`` events, its
    answer's rows counted in ``rows``."""
    import bytewax.operators as op  # noqa: PLC0415
    import bytewax.operators.windowing as win  # noqa: PLC0415
    from bytewax.dataflow import Dataflow  # noqa: PLC0415

    config = NexmarkConfig(events=events, **SETTINGS)

    def made(start: int, stop: int) -> list[Any]:
        return [batch(config, [range(start, stop)])]

    def counted(items: list[Any]) -> None:
        rows[0] += sum(item.num_rows if isinstance(item, pa.RecordBatch) else 1 for item in items)

    module = importlib.import_module(f"examples.nexmark.{query}")
    flow = Dataflow(f"nexmark-{query}")
    source = numbered_source(events, 500, made)
    read = op.input("events", flow, source)
    if query in ("q3", "q8"):
        op.output("count", _bytewax_join(query, module, read), handing_sink(counted))
        return flow
    if query in ("q0", "q1", "q2"):  # the query's one Arrow fn on each batch
        fn = getattr(module, {"q0": "passed", "q1": "in_euros", "q2": "selected"}[query])
        op.output("count", op.map("answer", read, fn), handing_sink(counted))
        return flow
    bids = op.flat_map("bids", read, lambda events: bid(events).to_pylist())
    if query == "q5":  # sliding counts per auction, then each window end's greatest
        length, slide = timedelta(milliseconds=module.RANGE_MS), timedelta(milliseconds=SLIDE)
        counts = win.count_window("counts", bids, _event_clock("dateTime", Q5_WAIT_MS),
                                  win.SlidingWindower(length, slide, ALIGN),
                                  lambda b: str(b["auction"]))  # fmt: skip
        ends = op.map("ends", counts.down, partial(_counted, module.RANGE_MS))
        per_end = op.key_on("by end", ends, lambda c: str(c["end"]))
        windower = win.TumblingWindower(slide, ALIGN)
        top = win.fold_window("most", per_end, _event_clock("end", HOLD_MS), windower, list,
                              partial(_greatest, "num"),
                              partial(_greatest_merged, "num"))  # fmt: skip
        out = op.flat_map("rows", top.down, lambda kv: kv[1][1])
    else:  # q7: every bid of each window's highest price
        windower = win.TumblingWindower(timedelta(milliseconds=module.WINDOW_MS), ALIGN)
        keyed = op.key_on("all", bids, lambda _: "all")
        top = win.fold_window("highest", keyed, _event_clock("dateTime", WAIT_MS), windower,
                              list, partial(_greatest, "price"),
                              partial(_greatest_merged, "price"))  # fmt: skip
        out = op.flat_map("rows", top.down, lambda kv: kv[1][1])
    op.output("count", out, handing_sink(counted))
    return flow


def _bytewax_join(query: str, module: Any, read: Any) -> Any:
    """q3 and q8 on Bytewax: q3 as a symmetric hash join in a stateful map (each side's rows
    per key kept, each new row paired with the other side's), q8 as its window join of the
    people and the sellers by id, one of each per key and window (as the oracle's SQL groups
    them), a row for each window where both came."""
    import bytewax.operators as op  # noqa: PLC0415
    import bytewax.operators.windowing as win  # noqa: PLC0415

    if query == "q3":
        people = op.key_on("people", op.flat_map("local", read, rows_of(module.local)),
                           lambda p: str(p["id"]))  # fmt: skip
        auctions = op.key_on("auctions", op.flat_map("in category", read,
                                                     rows_of(module.in_category)),
                             lambda a: str(a["seller"]))  # fmt: skip
        sides = op.merge("sides", op.map_value("left", people, lambda p: (0, p)),
                         op.map_value("right", auctions, lambda a: (1, a)))  # fmt: skip
        pairs = op.stateful_flat_map("pairs", sides, _paired)
        return op.map(
            "suggestions",
            pairs,
            lambda kv: module.suggestion({"left": kv[1][0], "right": kv[1][1]}),
        )
    people = op.key_on("people", op.flat_map("registered", read, rows_of(module.person)),
                       lambda p: str(p["id"]))  # fmt: skip
    sellers = op.key_on("sellers", op.flat_map("sold", read, rows_of(module.auction)),
                        lambda a: str(a["seller"]))  # fmt: skip
    windower = win.TumblingWindower(timedelta(milliseconds=module.WINDOW_MS), ALIGN)
    joined = win.join_window("new users", _event_clock("dateTime", WAIT_MS), windower, people,
                             sellers, insert_mode="first", emit_mode="final")  # fmt: skip
    return op.filter_map("rows", joined.down, partial(_new_user, module.WINDOW_MS))


def rows_of(fn: Any) -> Any:
    """A query's Arrow fn, its answer as rows: the step after it takes rows."""
    return lambda events: fn(events).to_pylist()


def _paired(held: Any, side_row: tuple[int, Any]) -> tuple[Any, list[tuple[Any, Any]]]:
    """A regular join's step: the key's rows of each side so far, and the pairs a new row
    makes with the other side's."""
    side, row = side_row
    held = held or ([], [])
    other = held[1 - side]
    pairs = [(row, o) for o in other] if side == 0 else [(o, row) for o in other]
    held[side].append(row)
    return held, pairs


def _new_user(window_ms: int, keyed: tuple[str, tuple[int, tuple[Any, Any]]]) -> Any:
    """A window where a person registered and sold, as q8's row; None where one is missing."""
    _, (window, (person, auction)) = keyed
    if person is None or auction is None:
        return None
    return {"id": person["id"], "name": person["name"],
            "starttime": ALIGN_MS + window * window_ms}  # fmt: skip


SLIDE = 2_000
"""q5's slide, in milliseconds."""

ALIGN_MS = NexmarkConfig().base_time - 3_600_000
"""Where Bytewax's windows are aligned: an hour before the generator's start (a multiple of
every window), so that the windows that end after it start as the oracle's do, before it too."""
ALIGN = datetime.fromtimestamp(ALIGN_MS / 1000, UTC)


WAIT_MS = 1_000
"""How far Bytewax's event clocks hold their watermark behind the latest event: its watermark
also moves with the system clock between batches, so with none an event of the same
millisecond as the latest, read in the next batch, would be late and dropped."""

Q5_WAIT_MS = 5_000
"""q5's first stage's wait: its epoch snapshots grow with its sliding windows until a pause of
more than 1 s dropped some bids as late and changed its answer (21 rows where DuckDB answers
19, at 300,000 events). Holding windows longer costs Bytewax's q5 about a quarter of its
throughput (4,474 events/s per core with 1 s, 3,217 with 5 s, in runs of 2026-11-29 and 30)."""


HOLD_MS = 86_400_000
"""How far q5's second stage holds its watermark behind the latest window end: Bytewax closes
each auction's sliding windows as that auction's own clock passes them, so the counts of one
end come out of order with others by up to the run's length, and any watermark short of it
would drop some as late. So that stage answers once the input has ended."""


def _event_clock(field: str, wait_ms: int) -> Any:
    """Event time from ``field`` (milliseconds), the watermark ``wait_ms`` behind the latest."""
    import bytewax.operators.windowing as win  # noqa: PLC0415

    return win.EventClock(lambda row: datetime.fromtimestamp(row[field] / 1000, UTC),
                          wait_for_system_duration=timedelta(milliseconds=wait_ms))  # fmt: skip


def _counted(range_ms: int, keyed: tuple[str, tuple[int, int]]) -> dict[str, Any]:
    """A sliding window's count of an auction, with the window's end (window ids count
    slides from the alignment)."""
    auction, (window, count) = keyed
    end = ALIGN_MS + window * SLIDE + range_ms
    return {"auction": int(auction), "end": end, "num": count}


def _greatest(field: str, held: list[Any], row: dict[str, Any]) -> list[Any]:
    """The rows of the greatest ``field`` so far, ties kept: Bytewax's fold for an arg-max."""
    if not held or row[field] > held[0][field]:
        return [row]
    if row[field] == held[0][field]:
        held.append(row)
    return held


def _greatest_merged(field: str, a: list[Any], b: list[Any]) -> list[Any]:
    for row in b:
        a = _greatest(field, a, row)
    return a


def bytewax_available() -> bool:
    try:
        import bytewax  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def expected_rows(query: str, events: int, **settings: Any) -> int:
    """How many rows DuckDB's answer has over the same events."""
    module = importlib.import_module(f"examples.nexmark.{query}")
    return len(oracle.answer(module.SQL, NexmarkConfig(**SETTINGS, **settings), events))


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {"events": args.events, "barrier_period_s": args.barrier_period}
    bytewax = bytewax_available()
    for query in args.queries:
        expected = expected_rows(query, args.events)
        contenders = {"engine": partial(isolated, engine_run, query, args.events,
                                        args.barrier_period)}  # fmt: skip
        if bytewax and query in BYTEWAX_QUERIES:
            contenders["bytewax"] = partial(isolated, bytewax_run, query, args.events,
                                            args.barrier_period)  # fmt: skip
        runs = taking_turns(args.repeat, contenders)
        for side, made in runs.items():
            wrong = [r.rows for r in made if r.rows != expected]
            if wrong:
                raise RuntimeError(f"{query} on {side} answered {wrong[0]} rows, not {expected}")
        per_core = {side: spread([r.per_core for r in made]) for side, made in runs.items()}
        engine = per_core["engine"]["median"]
        figures[query] = {"rows": expected, "per_core": per_core,
                          "runs": {side: [round(r.per_core) for r in made]
                                   for side, made in runs.items()},
                          "wall_s": {side: [round(r.wall_s, 2) for r in made]
                                     for side, made in runs.items()}}  # fmt: skip
        figures[f"{query}_events_per_s_per_core"] = engine
        flink = FLINK_PER_CORE.get(query)
        figures[f"{query}_ratio_to_flink_per_core"] = None if flink is None else engine / flink
        figures[f"{query}_ratio_to_bytewax"] = (
            engine / per_core["bytewax"]["median"] if "bytewax" in per_core else None
        )
        latency(query, args, runs["engine"], figures)
        report(query, figures)
    return figures


def latency(query: str, args: argparse.Namespace, runs: list[Run],
            figures: dict[str, Any]) -> None:  # fmt: skip
    """The output's lag paced at half the highest rate the runs reached (their median events per
    wall second), over --latency-seconds of events, --repeat times."""
    rate = statistics.median(r.events / r.wall_s for r in runs) / 2
    events = max(1, int(rate * args.latency_seconds))
    p50s, p99s = [], []
    for _ in range(args.repeat):
        lags = isolated(latency_run, query, events, args.barrier_period, rate)
        expected = expected_rows(query, events, rate=rate, base_time=lags.base_time)
        if lags.rows != expected:
            raise RuntimeError(f"{query} paced answered {lags.rows} rows, not {expected}")
        if len(lags.lags_ms) < 2:
            raise RuntimeError(f"{query} paced: too few lag samples ({len(lags.lags_ms)})")
        cuts = statistics.quantiles(lags.lags_ms, n=100)
        p50s.append(cuts[49])
        p99s.append(cuts[98])
    figures[query]["latency"] = {"rate": round(rate), "events": events,
                                 "p50_ms": spread(p50s), "p99_ms": spread(p99s)}  # fmt: skip
    figures[f"{query}_p50_ms"] = statistics.median(p50s)
    figures[f"{query}_p99_ms"] = statistics.median(p99s)


def report(query: str, figures: dict[str, Any]) -> None:
    at = figures[query]
    print(f"\n{query}: {figures['events']:,} events, {at['rows']:,} rows answered (events per "
          "CPU second of the run's process):")  # fmt: skip
    for side, runs in at["runs"].items():
        median = at["per_core"][side]["median"]
        walls = ", ".join(f"{w} s" for w in at["wall_s"][side])
        print(f"  {side:8} median {median:>10,.0f} events/s per core (runs: "
              f"{', '.join(f'{r:,}' for r in runs)}; wall {walls})")  # fmt: skip
    flink = FLINK_PER_CORE.get(query)
    if flink is not None:
        print(f"  Flink 1.13, published: {flink:,} events/s per core (ratio "
              f"{figures[f'{query}_ratio_to_flink_per_core']:.3f})")  # fmt: skip
    ratio = figures[f"{query}_ratio_to_bytewax"]
    print(f"  engine / Bytewax: {'not run' if ratio is None else f'{ratio:.2f}'}")
    lag = at["latency"]
    print(f"  engine paced at {lag['rate']:,} events/s (half its highest), {lag['events']:,} "
          f"events: output lag p50 {lag['p50_ms']['median']:.1f} ms (runs "
          f"{lag['p50_ms']['min']:.1f} to {lag['p50_ms']['max']:.1f}), p99 "
          f"{lag['p99_ms']['median']:.1f} ms ({lag['p99_ms']['min']:.1f} to "
          f"{lag['p99_ms']['max']:.1f})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--queries", nargs="+", default=list(QUERIES), choices=QUERIES)
    parser.add_argument("--barrier-period", type=float, default=1.0)
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    args = parser.parse_args()
    print(json.dumps(measure(args)))


if __name__ == "__main__":
    main()
