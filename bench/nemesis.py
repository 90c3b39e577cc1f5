"""Generative chaos at length: many seeded sequences of faults against a real cluster, checking
exactly-once and how long the job goes without a commit.

Each run is tests/chaos/nemesis.py's: three `onyx peer start` members (6 virtual peers in 2
workers each) on a ZooKeeper server of its own, running a keyed job with fixed and session
windows, timers, local recovery and standbys into two exactly-once JSON-lines sinks, while the
faults of its seed land one at a time, each once the cluster is whole again and the job has
committed the drawn number of epochs: kill -9 of a worker, kill -9 of a member (and a
replacement), SIGSTOP of a member (alone or with its workers) for 2-8 s, `onyx down` of a member
(it rejoins under a new id), `onyx leave` of a member (and a replacement), kill -9 of ZooKeeper
and its restart on the same port and data. Every seed runs once in each of --modes (classic,
and scale: --join-direct --epidemic-log --async-allocation).

Figures, summed over the runs: faults landed; records lost and duplicated in both sinks against
a failure-free `onyx run` of the same job (the deterministic windows' records, and the events
the timer's counts fall short of or exceed); abandoned epochs (the coordinators' "abandoned"
log lines); rollbacks (rollback-job entries that took effect, from the cluster's log); and the
longest time between two commits of a job (its coordinators' "committed" log lines), against
the same-run baseline of a run without faults held as long as --baseline-epochs epochs, and,
where the job spec has a checkpoint timeout, against the bound the runs assert:
(tolerable_abandoned_epochs + 1) x checkpoint_timeout + a recovery allowance.

Run: .venv/bin/python bench/nemesis.py [--runs 9] [--faults-per-run 6] [--seed 1]
[--events 300000] [--modes classic,scale] [--paced input] [--rate 1000] [--baseline-epochs 20]
[--logs DIR]. The last line of output is one JSON document holding every figure.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.chaos import nemesis  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="seeds, each run in every mode")
    parser.add_argument("--faults-per-run", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1, help="the first run's; then +1 each")
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--modes", default="classic,scale", help="of: classic, scale")
    parser.add_argument("--paced", choices=nemesis.PACED, default="input")
    parser.add_argument("--rate", type=float, default=1000.0, help="held input, events/s")
    parser.add_argument(
        "--baseline-epochs", type=int, default=20,
        help="commits the run without faults is held for; 0: no baseline run",
    )  # fmt: skip
    parser.add_argument("--logs", type=Path, help="keep every run's logs here")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(nemesis.MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}; known: {sorted(nemesis.MODES)}")
    logging.basicConfig(level=logging.CRITICAL)  # the client's reconnections through a restart
    logs = args.logs or Path(tempfile.mkdtemp(prefix="bench-nemesis-"))
    logs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print(f"failure-free reference: {args.events} events, `onyx run`")
    expected = nemesis.reference(logs / "reference", args.events)
    env = {"ONYX_NEMESIS_RATE": str(args.rate)}
    with nemesis.environment(**env):
        baseline = None
        if args.baseline_epochs:
            print(f"baseline: no faults, held for {args.baseline_epochs} commits")
            baseline = nemesis.run(
                args.seed, 0, modes=modes[0], events=args.events, base=logs / "baseline",
                expected=expected, paced=args.paced, hold_epochs=args.baseline_epochs,
            )  # fmt: skip
        outcomes = []
        for n in range(args.runs):
            for mode in modes:
                seed = args.seed + n
                outcomes.append(nemesis.run(
                    seed, args.faults_per_run, modes=mode, events=args.events,
                    base=logs / f"run-{seed}-{mode}", expected=expected, paced=args.paced,
                ))  # fmt: skip
    figures = summary(outcomes, baseline, args, time.monotonic() - started)
    if not args.logs:
        for outcome in [*outcomes, baseline]:
            if outcome is not None and not outcome.problems:
                shutil.rmtree(outcome.logs, ignore_errors=True)
        print(f"logs of the failed runs kept in {logs}")
    report(figures, outcomes)
    print(json.dumps(figures, sort_keys=True))


def summary(outcomes: list[nemesis.Outcome], baseline: nemesis.Outcome | None,
            args: argparse.Namespace, seconds: float) -> dict[str, Any]:  # fmt: skip
    gaps = [o.longest_without_commit for o in outcomes if o.longest_without_commit is not None]
    kinds = Counter(f.kind for o in outcomes for f in o.faults[: len(o.landed)])
    bounds = {o.bound for o in outcomes} - {None}
    return {
        "runs": len(outcomes),
        "faults": sum(len(o.landed) for o in outcomes),
        "faults_drawn": sum(len(o.faults) for o in outcomes),
        "faults_by_kind": dict(sorted(kinds.items())),
        "failed_runs": sum(1 for o in outcomes if o.problems),
        "failed_seeds": sorted({f"{o.seed}-{o.modes}" for o in outcomes if o.problems}),
        "lost": sum(o.lost for o in outcomes),
        "duplicated": sum(o.duplicated for o in outcomes),
        "abandoned_epochs": sum(o.abandoned for o in outcomes),
        "rollbacks": sum(o.rollbacks for o in outcomes),
        "reallocations": sum(o.reallocations for o in outcomes),
        "takeovers": sum(o.takeovers for o in outcomes),
        "longest_without_commit_s": round(max(gaps), 2) if gaps else None,
        "longest_without_commit_s_no_faults": (
            round(baseline.longest_without_commit, 2)
            if baseline is not None and baseline.longest_without_commit is not None
            else None
        ),
        "no_commit_bound_s": max(bounds) if bounds else None,
        "events": args.events,
        "faults_per_run": args.faults_per_run,
        "modes": args.modes,
        "paced": args.paced,
        "first_seed": args.seed,
        "bench_s": round(seconds, 1),
    }


def report(figures: dict[str, Any], outcomes: list[nemesis.Outcome]) -> None:
    print()
    for o in outcomes:
        verdict = "ok" if not o.problems else f"FAILED ({o.replay()})"
        print(f"seed {o.seed} {o.modes}: {len(o.landed)} faults, lost {o.lost}, duplicated "
              f"{o.duplicated}, abandoned {o.abandoned}, rollbacks {o.rollbacks}, longest "
              f"without a commit {nemesis.fmt_seconds(o.longest_without_commit)}, "
              f"{o.seconds:.0f} s: {verdict}")  # fmt: skip
        for problem in o.problems:
            print(f"    {problem.splitlines()[0]}")
    print()
    units = {"lost": " records", "duplicated": " records", "abandoned_epochs": " epochs",
             "rollbacks": " rollback-job entries", "faults": " faults landed"}  # fmt: skip
    for key, value in figures.items():
        unit = units.get(key, " s" if key.endswith("_s") or "_s_" in key else "")
        print(f"{key}: {value}{unit if value is not None else ''}")
    baseline = figures["longest_without_commit_s_no_faults"]
    if baseline and figures["longest_without_commit_s"] is not None:
        ratio = figures["longest_without_commit_s"] / baseline
        print(f"longest without a commit, faults against none: {ratio:.1f}x")


if __name__ == "__main__":
    main()
