"""What debloated credit costs a receiver per batch: an inbox intake sizing its senders' windows
by its throughput (peer.runtime.debloat) against the same intake on fixed windows, in the same
run, each taking turns over --repeat rounds.

Each round delivers --batches batches of --rows rows from --senders senders and reads them all
back, one read per batch, with credit going back to a grant that only counts it: the intake's
own work (the inbox, the ledger, the throughput meter, the row limit), nothing of a fn's or the
transport's. A second pair times reads of an empty inbox, what an idle runner does every step.

Run: .venv/bin/python bench/credit.py [--batches 200000] [--rows 100] [--senders 2] [--repeat 5]
The last line of output is one JSON document holding every figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.dataplane import taking_turns  # noqa: E402
from peer.job.spec import DEFAULT_DEBLOAT_TARGET, Task  # noqa: E402
from peer.messaging.messages import Batch  # noqa: E402
from peer.metrics import task_meters  # noqa: E402
from peer.runtime.intake import InboxIntake, intake_for  # noqa: E402

METERS = task_meters("bench", "credit")


def intake(senders: int, rows: int, target: float | None) -> InboxIntake:
    task = Task("t", "function", fn="bench.workload:f1", batch_size=rows)
    made = intake_for(task, frozenset(range(senders)), lambda *grant: None, METERS, target=target)
    assert isinstance(made, InboxIntake)
    return made


def per_batch(batches: int, rows: int, senders: int, target: float | None) -> Callable[[], float]:
    """One round: nanoseconds per batch delivered and read."""
    batch = Batch([{"n": n} for n in range(rows)])

    def run() -> float:
        receiver = intake(senders, rows, target)
        deliver, read = receiver.deliver, receiver.read
        start = time.perf_counter_ns()
        for n in range(batches):
            deliver(n % senders, batch)
            read()
        return (time.perf_counter_ns() - start) / batches

    return run


def per_empty_read(reads: int, target: float | None) -> Callable[[], float]:
    """One round: nanoseconds per read of an empty inbox."""

    def run() -> float:
        read = intake(2, 100, target).read
        start = time.perf_counter_ns()
        for _ in range(reads):
            read()
        return (time.perf_counter_ns() - start) / reads

    return run


def spread(values: list[float]) -> str:
    """Best, median and range of a side's rounds, in ns."""
    return (f"{min(values):,.0f} ns (median {statistics.median(values):,.0f}, "
            f"{min(values):,.0f}-{max(values):,.0f})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200_000)
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--senders", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    a = parser.parse_args()
    target = DEFAULT_DEBLOAT_TARGET
    runs = taking_turns(a.repeat, {
        "fixed": per_batch(a.batches, a.rows, a.senders, None),
        "debloated": per_batch(a.batches, a.rows, a.senders, target),
        "fixed_empty": per_empty_read(a.batches, None),
        "debloated_empty": per_empty_read(a.batches, target),
    })  # fmt: skip
    figures: dict[str, object] = {
        "batches": a.batches, "rows": a.rows, "senders": a.senders, "debloat_target_s": target,
    }  # fmt: skip
    for name, values in runs.items():
        figures[f"{name}_ns_per_read"] = round(min(values))
        figures[f"{name}_ns_per_read_runs"] = [round(v) for v in values]
    figures["debloat_ns_per_batch"] = round(min(runs["debloated"]) - min(runs["fixed"]))
    figures["debloat_ns_per_empty_read"] = round(
        min(runs["debloated_empty"]) - min(runs["fixed_empty"])
    )
    for kind, what in (("", "a batch delivered and read"), ("_empty", "an empty read")):
        fixed, debloated = runs[f"fixed{kind}"], runs[f"debloated{kind}"]
        print(
            f"{what}: debloated {spread(debloated)}; baseline, fixed windows: {spread(fixed)}; "
            f"difference {min(debloated) - min(fixed):,.0f} ns"
        )
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
