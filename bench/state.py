"""What keyed state costs: a keyed running count with checkpoints on against off, on the engine
and on Bytewax 0.21 in the same run.

The workload (bench/state_fns.py): K keys, first each key once (the state filled), then
--events events spread evenly over the keys; each event adds one to its key's count and emits
the key and the count; the output sums the counts, and the bench checks the sum on both sides.
Every input makes its events as it is read, inside the clock.

- The engine: one peer group (input, keyed fn, output: one peer each), the fn's
  count in the keyed state the engine keeps, on each of --backends (memory; disk, an embedded
  RocksDB in a directory), checkpoints every --barrier-period seconds into a directory, against
  the same job with no checkpoints.
  Figures: throughput after the fill (the --events events over the time from the output's
  write that went past the fill to its last write: the state is there, as for a job that has
  run a while), the ratio on over off (medians), the same over the whole run (the fill too,
  first read to last write: a state growing from nothing), the bytes of the keyed task's
  snapshot per checkpoint (mean of the ``onyx_checkpoint_size_bytes`` histogram) next to the
  events per checkpoint (each changes one key once the state is filled), and the mean
  checkpoint duration (barrier to commit).
- Bytewax 0.21, one worker: the same events through ``stateful_map`` with its
  SQLite recovery at the same epoch interval, against no recovery, for K up to --bytewax-keys
  (with a million keys a run of 3 M events did not finish in 9 minutes when measured before).

Each contender runs --repeat times, taking turns, each run in a fresh interpreter of its own
(what a run leaves in a process would slow the next); every run's figure is printed, so each
side's spread shows. Each run's peak resident memory is its process's (VmHWM): the
interpreter and its libraries besides the state, so it compares sides of one K rather than
measuring state alone (bench/state_backends.py measures the stores alone).

Then the state held against memory (``held``): --held-keys keys of --pad-bytes each, on each
backend, each run in a process of its own; ``{memory,disk}_state_to_rss_ratio`` is the pad
bytes over the run's peak resident memory. Not covered here: restores and rescaling
(bench/recovery.py and bench/rescale.py; their keys in the JSON are null).

Run: .venv-bench/bin/python bench/state.py [--keys 100000 1000000] [--events 3000000]
     [--repeat 3] [--barrier-period 1] [--bytewax-keys 100000] [--backends memory disk]
     [--held-keys 2000000] [--pad-bytes 1024]
``--keys`` with no value leaves the keyed count out, ``--held-keys 0`` the state held. The last
line of output is one JSON document holding every figure.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from prometheus_client import REGISTRY  # noqa: E402

from bench import bytewax_io, workload  # noqa: E402
from bench.bytewax_io import handing_sink, numbered_source  # noqa: E402
from bench.dataplane import taking_turns  # noqa: E402
from bench.state_fns import expected_sum, key_of  # noqa: E402
from peer import api  # noqa: E402
from peer.cluster.local import LocalCluster  # noqa: E402
from tests.support import wait_for  # noqa: E402

BATCH = 1000


def label(keys: int) -> str:
    """100000 -> 100k, 1000000 -> 1m."""
    return f"{keys // 1_000_000}m" if keys >= 1_000_000 else f"{keys // 1000}k"


@dataclass(frozen=True)
class Run:
    """One run: events per second (first read to last write, and after the fill), the
    process's peak resident
    memory during it, and, checkpointed, the keyed task's mean snapshot bytes per checkpoint
    and the mean checkpoint duration."""

    rate: float
    peak_rss: int
    bytes_per_checkpoint: float | None = None
    checkpoint_s: float | None = None
    after_fill: float | None = None
    """Events per second after the fill: the events after it, over the time from the write
    that went past the fill to the last write."""


def peak_reset() -> None:
    """Start this process's peak resident memory (VmHWM) again from what it holds now."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_rss() -> int:
    """This process's peak resident memory since ``peak_reset``, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/self/status has no VmHWM")


def engine_job(
    events: int, keys: int, period: float | None, marks: Path, backend: str, *, fn: str
) -> dict[str, Any]:
    noted = {"marks": str(marks)}
    return {
        "workflow": [["read", "count"], ["count", "write"]],
        "catalog": [
            {"name": "read", "kind": "input", "plugin": "bench.state_fns:keyed_input",
             "params": {"count": events, "keys": keys, **noted}, "batch_size": BATCH, "n_peers": 1},
            {"name": "count", "kind": "function", "fn": f"bench.state_fns:{fn}",
             "group_by_key": "key", "batch_size": BATCH, "n_peers": 1},
            {"name": "write", "kind": "output", "plugin": "bench.state_fns:summing_output",
             "params": {**noted, "passing": keys}, "batch_size": BATCH, "n_peers": 1},
        ],
        "barrier_period": period,
        "checkpoint_timeout": 600,
        "state_backend": backend,
    }  # fmt: skip


def histogram(name: str, labels: dict[str, str]) -> tuple[float, float]:
    """The sum and count of histogram ``name``'s series with ``labels``, in this process."""
    total = count = 0.0
    for family in REGISTRY.collect():
        for sample in family.samples:
            if not all(sample.labels.get(k) == v for k, v in labels.items()):
                continue
            if sample.name == f"{name}_sum":
                total = sample.value
            elif sample.name == f"{name}_count":
                count = sample.value
    return total, count


def engine_run(
    events: int, keys: int, period: float | None, backend: str, fn: str = "KeyedCount"
) -> Run:
    """One run on a fresh local cluster checkpointing into a fresh directory."""
    total = keys + events
    peak_reset()
    with tempfile.TemporaryDirectory(prefix="state-bench-") as directory:
        marks, stored = Path(directory, "marks"), Path(directory, "checkpoints")
        marks.mkdir()
        cluster = LocalCluster(1, 3, checkpoints=str(stored), state_dir=Path(directory, "state"))
        cluster.start()
        try:
            cluster.await_ring(30)
            job = engine_job(total, keys, period, marks, backend, fn=fn)
            job_id = api.submit(cluster.reader, job)
            final = api.wait(cluster.reader, job_id, timeout=1800)
            if final.state != "completed":
                raise RuntimeError(f"the benchmark job ended {final.state}")
            seen = wait_for(lambda: (m := workload.read_marks(marks)).written() == total and m,
                            60, "the output's marks")  # fmt: skip
        finally:
            cluster.stop()
        summed = sum(int(p.read_text()) for p in marks.glob("sum-*.txt"))
    if summed != expected_sum(total, keys):
        raise RuntimeError(f"the engine's counts sum to {summed}, not {expected_sum(total, keys)}")
    snapshot_bytes, snapshots = histogram(
        "onyx_checkpoint_size_bytes", {"onyx_job": job_id, "task": "count"}
    )
    took, commits = histogram("onyx_checkpoint_duration_seconds", {"onyx_job": job_id})
    (written,) = seen.of("write")  # one output slot, never restarted
    return Run(
        total / seen.seconds(),
        peak_rss(),
        snapshot_bytes / snapshots if snapshots else None,
        took / commits if commits else None,
        events / (written.last - written.passed),
    )


@dataclass
class Tally:
    first: float = 0.0
    last: float = 0.0
    rows: int = 0
    total: int = 0
    reads: list[float] = field(default_factory=list)
    passed: float = 0.0
    """When the rows written went past the fill."""


def bytewax_run(events: int, keys: int, period: float | None) -> Run:
    """The workload on Bytewax in the calling process, one worker; with ``period``, its SQLite
    recovery (a fresh directory of one partition) at that epoch interval."""
    import bytewax.operators as op  # noqa: PLC0415
    from bytewax.dataflow import Dataflow  # noqa: PLC0415

    total, tally = keys + events, Tally()
    peak_reset()

    def made(start: int, stop: int) -> list[Any]:
        if not tally.reads:
            tally.reads.append(time.time())
        return [{"key": key_of(i, keys)} for i in range(start, stop)]

    def summed(items: list[Any]) -> None:
        if items:
            tally.last = time.time()
            tally.first = tally.first or tally.last
            tally.rows += len(items)
            tally.total += sum(count for _, count in items)
            if not tally.passed and tally.rows > keys:
                tally.passed = tally.last

    def count(state: int | None, event: dict[str, Any]) -> tuple[int, int]:
        n = (state or 0) + 1
        return n, n

    flow = Dataflow("keyed-count")
    source = numbered_source(total, BATCH, made)
    keyed = op.key_on("key", op.input("inp", flow, source), lambda e: str(e["key"]))
    op.output("out", op.stateful_map("count", keyed, count), handing_sink(summed))
    bytewax_io.run(flow, period)
    if tally.rows != total or tally.total != expected_sum(total, keys):
        raise RuntimeError(f"Bytewax wrote {tally.rows} events summing to {tally.total}")
    return Run(total / (tally.last - tally.reads[0]), peak_rss(),
               after_fill=events / (tally.last - tally.passed))  # fmt: skip


def bytewax_available() -> bool:
    try:
        import bytewax  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def spread(rates: list[float]) -> dict[str, float]:
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates)}


def after_fill(run: Run) -> float:
    if run.after_fill is None:
        raise RuntimeError("a run of the keyed count has no rate after the fill")
    return run.after_fill


def measure(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {"events": args.events, "barrier_period_s": args.barrier_period}
    period = args.barrier_period
    for keys in args.keys:
        name = label(keys)
        contenders: dict[str, Callable[[], Run]] = {}
        for backend in args.backends:
            contenders[f"{backend}_on"] = partial(
                isolated, engine_run, args.events, keys, period, backend
            )
            contenders[f"{backend}_off"] = partial(
                isolated, engine_run, args.events, keys, None, backend
            )
        if bytewax_available() and keys <= args.bytewax_keys:
            contenders["bytewax_on"] = partial(isolated, bytewax_run, args.events, keys, period)
            contenders["bytewax_off"] = partial(isolated, bytewax_run, args.events, keys, None)
        runs = taking_turns(args.repeat, contenders)
        rates = {side: spread([after_fill(r) for r in made]) for side, made in runs.items()}
        whole = {side: spread([r.rate for r in made]) for side, made in runs.items()}
        figures[name] = {
            "keys": keys, "rates": rates, "rates_with_fill": whole,
            "runs": {side: [round(after_fill(r)) for r in made] for side, made in runs.items()},
            "runs_with_fill": {side: [round(r.rate) for r in made] for side, made in runs.items()},
        }  # fmt: skip
        for side, made in runs.items():
            figures[f"peak_rss_mib_{side}_{name}"] = max(r.peak_rss for r in made) / 2**20
        for backend in args.backends:
            on, at = runs[f"{backend}_on"], f"{backend}_{name}"
            figures[f"checkpoint_ratio_on_vs_off_{at}"] = (
                rates[f"{backend}_on"]["median"] / rates[f"{backend}_off"]["median"]
            )
            figures[f"checkpoint_ratio_with_fill_on_vs_off_{at}"] = (
                whole[f"{backend}_on"]["median"] / whole[f"{backend}_off"]["median"]
            )
            figures[f"bytes_per_checkpoint_{at}"] = statistics.median(
                r.bytes_per_checkpoint for r in on if r.bytes_per_checkpoint is not None
            )
            figures[f"checkpoint_s_{at}"] = statistics.median(
                r.checkpoint_s for r in on if r.checkpoint_s is not None
            )
            figures[f"events_per_checkpoint_{at}"] = rates[f"{backend}_on"]["median"] * period
        if "bytewax_on" in rates:
            figures[f"bytewax_ratio_on_vs_off_{name}"] = (
                rates["bytewax_on"]["median"] / rates["bytewax_off"]["median"]
            )
            figures[f"memory_on_to_bytewax_on_{name}"] = (
                rates["memory_on"]["median"] / rates["bytewax_on"]["median"]
            )
        report(name, args.backends, figures)
    if args.held_keys:
        figures.update(held(args))
    for elsewhere in ("restore_after_detection_s", "global_restore_after_detection_s",
                      "rescale_resume_s"):  # fmt: skip
        figures[elsewhere] = None  # bench/recovery.py and bench/rescale.py measure these
    return figures


def isolated(run: Callable[..., Run], *args: Any, environ: dict[str, str] | None = None) -> Run:
    """``run(*args)`` in a fresh interpreter of its own (with ``environ`` added to its
    environment): what a run leaves behind in a process (a heap grown and not given back, the
    collector's generations, idle threads) neither slows the next run nor counts in its peak
    memory. In one process taking turns, the runs without checkpoints ran about a sixth slower
    after one with them at a million keys, which made the ratio look better than it is."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context, initializer=_environ,
                             initargs=(environ or {},)) as pool:  # fmt: skip
        return pool.submit(run, *args).result()


def _environ(environ: dict[str, str]) -> None:
    os.environ.update(environ)


def held_run(args: argparse.Namespace, backend: str) -> Run:
    """One run of ``held``: the keys filled and each changed once, with checkpoints."""
    keys, environ = args.held_keys, {"BENCH_STATE_PAD_BYTES": str(args.pad_bytes)}
    return isolated(engine_run, keys, keys, args.barrier_period, backend, "PaddedCount",
                    environ=environ)  # fmt: skip


def held(args: argparse.Namespace) -> dict[str, Any]:
    """State held against the process's memory: --held-keys keys of a count and --pad-bytes
    of incompressible bytes each (``PaddedCount``), filled and then each changed once, with
    checkpoints, on each backend. The state is taken as its incompressible bytes alone (keys
    times pad bytes: less than either backend holds), the memory as the peak resident memory of
    the run's process."""
    keys = args.held_keys
    contenders = {backend: partial(held_run, args, backend) for backend in args.backends}
    runs = taking_turns(args.repeat, contenders)
    figures: dict[str, Any] = {"held_keys": keys, "held_pad_bytes": args.pad_bytes}
    state = keys * args.pad_bytes
    print(f"\n{keys:,} keys of {args.pad_bytes:,} bytes each, state held over peak memory:")
    for backend, made in runs.items():
        ratios = [state / r.peak_rss for r in made]
        figures[f"{backend}_state_to_rss_ratio"] = round(statistics.median(ratios), 2)
        figures[f"{backend}_state_to_rss_ratio_spread"] = [round(min(ratios), 2),
                                                            round(max(ratios), 2)]  # fmt: skip
        state_mib = state / 2**20
        rss_mib = statistics.median(r.peak_rss for r in made) / 2**20
        figures[f"{backend}_held_state_mib"] = round(state_mib)
        figures[f"{backend}_held_peak_rss_mib"] = round(rss_mib)
        print(f"  {backend:6} state {state_mib:,.0f} MiB, peak resident {rss_mib:,.0f} MiB: "
              f"ratio {figures[f'{backend}_state_to_rss_ratio']} (runs: "
              f"{', '.join(f'{r:.2f}' for r in ratios)})")  # fmt: skip
    return figures


def report(name: str, backends: list[str], figures: dict[str, Any]) -> None:
    at = figures[name]
    print(f"\n{at['keys']:,} keys, {figures['events']:,} events after the fill (rates after the "
          "fill; with it, from the first read):")  # fmt: skip
    for side, runs in at["runs"].items():
        rate, each = at["rates"][side], ", ".join(f"{r:,}" for r in runs)
        fill = ", ".join(f"{r:,}" for r in at["runs_with_fill"][side])
        print(f"  {side:12} median {rate['median']:>10,.0f} events/s (runs: {each}; with the "
              f"fill: {fill})")  # fmt: skip
    for backend in backends:
        key = f"{backend}_{name}"
        ratio = figures[f"checkpoint_ratio_on_vs_off_{key}"]
        with_fill = figures[f"checkpoint_ratio_with_fill_on_vs_off_{key}"]
        mib = figures[f"bytes_per_checkpoint_{key}"] / 2**20
        changed = figures[f"events_per_checkpoint_{key}"]
        took = figures[f"checkpoint_s_{key}"]
        print(
            f"  {backend}: checkpoints on / off {ratio:.3f} ({with_fill:.3f} with the fill); "
            f"keyed snapshot {mib:.2f} MiB per checkpoint for ~{changed:,.0f} events; "
            f"checkpoint {took:.3f} s from barrier to commit"
        )
    peaks = ", ".join(f"{side} {figures[f'peak_rss_mib_{side}_{name}']:,.0f}"
                      for side in at["runs"])  # fmt: skip
    print(f"  peak resident memory of the process, MiB (most of any run): {peaks}")
    if f"bytewax_ratio_on_vs_off_{name}" in figures:
        bytewax = figures[f"bytewax_ratio_on_vs_off_{name}"]
        versus = figures[f"memory_on_to_bytewax_on_{name}"]
        print(f"  Bytewax recovery on / off: {bytewax:.3f}; memory on / Bytewax on: {versus:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, nargs="*", default=[100_000, 1_000_000])
    parser.add_argument("--events", type=int, default=3_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--barrier-period", type=float, default=1.0)
    parser.add_argument("--bytewax-keys", type=int, default=100_000,
                        help="the most keys Bytewax is run with")  # fmt: skip
    parser.add_argument("--backends", nargs="+", choices=("memory", "disk"),
                        default=["memory", "disk"])  # fmt: skip
    parser.add_argument(
        "--held-keys",
        type=int,
        default=2_000_000,
        help="keys of the state held against memory (0: not measured)",
    )
    parser.add_argument("--pad-bytes", type=int, default=1024,
                        help="bytes each of those keys holds besides its count")  # fmt: skip
    args = parser.parse_args()
    figures = measure(args)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
