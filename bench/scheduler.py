"""How long the schedulers take to allocate a large cluster.

Builds --peers virtual peers in groups of 16 and --jobs jobs of --tasks tasks each (balanced
task scheduler, every task min 1 and unbounded, so every job can use every peer), then times
allocate() with each job scheduler from scratch, best of --repeat runs. The same-run baseline
is a trivial round-robin of the same peers over the same tasks: the floor of any assignment
that touches every peer once. A last run times the balanced scheduler again with the previous
allocation, the case a log entry meets after a change.

Run: .venv/bin/python bench/scheduler.py [--peers 10000] [--jobs 10] [--tasks 10]
The last line of output is one JSON document holding every figure.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence

from peer.scheduling import JOB_SCHEDULERS, JobDemand, PeerInfo, TaskDemand, allocate


def build(peers: int, jobs: int, tasks: int) -> tuple[list[PeerInfo], list[JobDemand]]:
    cluster = [PeerInfo(f"p{i:06d}", f"g{i // 16:05d}", frozenset()) for i in range(peers)]
    demands = [
        JobDemand(f"j{j:03d}", tuple(TaskDemand(f"t{t:03d}") for t in range(tasks)))
        for j in range(jobs)
    ]
    return cluster, demands


def round_robin(peers: Sequence[PeerInfo], jobs: Sequence[JobDemand]) -> dict:
    slots = [(job.id, task.name) for job in jobs for task in job.tasks]
    plan: dict[tuple[str, str], list[str]] = {slot: [] for slot in slots}
    for i, peer in enumerate(peers):
        plan[slots[i % len(slots)]].append(peer.id)
    return plan


def best(run: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    peers, jobs = build(args.peers, args.jobs, args.tasks)
    if args.jobs:
        jobs = [JobDemand(j.id, j.tasks, percentage=100 / args.jobs) for j in jobs]
    figures: dict[str, float | int] = {"peers": args.peers, "jobs": args.jobs, "tasks": args.tasks}
    figures["seconds_round_robin"] = best(lambda: round_robin(peers, jobs), args.repeat)
    for name in JOB_SCHEDULERS:
        figures[f"seconds_{name}"] = best(lambda n=name: allocate(n, jobs, peers), args.repeat)
    previous = allocate("balanced", jobs, peers)
    figures["seconds_balanced_with_previous"] = best(
        lambda: allocate("balanced", jobs, peers, previous), args.repeat
    )
    figures["seconds_10k_peers"] = figures["seconds_balanced"]
    figures["ratio_to_round_robin"] = round(
        figures["seconds_balanced"] / figures["seconds_round_robin"], 1
    )
    for key, value in figures.items():
        unit = "s" if key.startswith("seconds") else ("x" if key.startswith("ratio") else "")
        print(f"{key}: {value:.4f} {unit}" if unit == "s" else f"{key}: {value}{unit}")
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
