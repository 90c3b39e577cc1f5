"""What applying the log costs at 10,000 virtual peers, with allocations computed in the
background (the multi-versioned replica, peer.log.pipeline) and with the classic apply.

The cluster is --groups joined groups of --vpeers virtual peers each (1,000 x 10 by default)
running --jobs jobs of three tasks. The log played on it repeats a round of --round entries:
one virtual peer leaves and a fresh one is announced (two entries that each recompute the
allocation), and the rest are cheap membership entries (a new group's join prepared, then
aborted) that read nothing an allocation writes.

Figures, each next to its same-run classic twin (``_classic``):
- ``apply_us_per_entry_10k_peers``: microseconds the log's thread spends per entry. In the
  background mode that is offering each entry and landing each allocation, the allocations
  themselves computed elsewhere; classically, apply_entry with its allocation.
- ``entry_wait_s_behind_allocation``: seconds a cheap entry that arrives right behind an
  allocation waits for its transition, mean over the cheap entries of a round read at once, the
  member's applier as the group runs it (in the background mode, the allocation on its thread,
  sharing the interpreter with the log's).
- ``allocation_s_10k_peers``: seconds one allocation takes, for scale.

Run: .venv/bin/python bench/async_apply.py [--groups 1000] [--vpeers 10] [--jobs 3]
[--rounds 5] [--round 20] [--quick]. The last line of output is one JSON document.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from collections.abc import Callable

from pyrsistent import pmap, pset, pvector

from peer.cluster.applier import Applier, Background, Sequential
from peer.log.apply import apply_entry
from peer.log.entries.jobs import SUBMIT_JOB
from peer.log.entries.join import ABORT_JOIN, PREPARE_JOIN
from peer.log.entries.virtual_peers import ADD_VIRTUAL_PEER, LEAVE_CLUSTER
from peer.log.entry import Entry
from peer.log.pipeline import Pipeline
from peer.log.replica import Replica

LANDING_TIMEOUT = 120.0
"""The longest the bench waits for a background allocation before giving up on the run."""


def cluster(groups: int, vpeers: int, jobs: int) -> Replica:
    """The joined cluster with its jobs submitted (and allocated, through apply_entry)."""
    ids = [f"g{g:05d}" for g in range(groups)]
    peers = {g: [f"{g}-p{v:02d}" for v in range(vpeers)] for g in ids}
    short = {p: i for i, p in enumerate(p for g in ids for p in peers[g])}
    replica = Replica(
        version=0,
        groups=pset(ids),
        pairs=pmap(dict(zip(ids, [*ids[1:], *ids[:1]], strict=True))),
        group_peers=pmap({g: pset(ps) for g, ps in peers.items()}),
        sites=pmap({g: f"127.0.0.1:{40000 + i}" for i, g in enumerate(ids)}),
        short_ids=pmap(short),
        next_short_id=len(short),
        job_order=pvector(),
    )
    for j in range(jobs):
        entry = SUBMIT_JOB.entry(id=f"job{j}", job=job_doc()).at(replica.version + 1)
        replica = apply_entry(replica, entry).new
    return replica


def job_doc() -> dict:
    return {
        "workflow": [["in", "work"], ["work", "out"]],
        "catalog": [
            {"name": "in", "kind": "input", "plugin": "bench:none", "min_peers": 1},
            {"name": "work", "kind": "function", "fn": "bench:none", "min_peers": 1},
            {"name": "out", "kind": "output", "plugin": "bench:none", "min_peers": 1},
        ],
        "barrier_period": None,
    }


def rounds(replica: Replica, count: int, size: int) -> list[Entry]:
    """``count`` rounds of ``size`` entries after ``replica``: a peer replaced (two
    allocations), then cheap joins prepared and aborted."""
    log, position = [], replica.version
    groups = sorted(replica.groups)
    for r in range(count):
        group = groups[r % len(groups)]
        gone = sorted(replica.group_peers[group])[0] if r == 0 else f"{group}-fresh{r - 1}"
        entries = [
            LEAVE_CLUSTER.entry(id=gone, group=group),
            ADD_VIRTUAL_PEER.entry(id=f"{group}-fresh{r}", group=group),
        ]
        for c in range((size - 2) // 2):
            joiner = f"new{r}-{c}"
            entries += [PREPARE_JOIN.entry(joiner=joiner), ABORT_JOIN.entry(id=joiner)]
        for entry in entries:
            position += 1
            log.append(entry.at(position))
    return log


def classic_cost(replica: Replica, log: list[Entry]) -> float:
    """Seconds per entry, apply_entry with its allocation."""
    start = time.perf_counter()
    for entry in log:
        replica = apply_entry(replica, entry).new
    return (time.perf_counter() - start) / len(log)


def pipeline_cost(replica: Replica, log: list[Entry]) -> tuple[float, float]:
    """Seconds per entry the log's thread spends (offering, landing), and seconds per
    allocation computed, which the background mode spends elsewhere."""
    machine, on_thread, computing, allocations = Pipeline.start(replica), 0.0, 0.0, 0
    for entry in log:
        start = time.perf_counter()
        machine, _ = machine.offer(entry)
        on_thread += time.perf_counter() - start
        while (pending := machine.ready()) is not None:
            start = time.perf_counter()
            allocated = pending.compute()
            computing += time.perf_counter() - start
            allocations += 1
            start = time.perf_counter()
            machine, _ = machine.land(pending.position, allocated)
            on_thread += time.perf_counter() - start
    return on_thread / len(log), computing / max(allocations, 1)


def waits(
    make: Callable[[Replica, threading.Event], Applier],
    replica: Replica,
    log: list[Entry],
    size: int,
) -> float:
    """Mean seconds from reading a round at once to each cheap entry's transition, the
    allocations landing on the applier's own terms."""
    found = []
    for r in range(0, len(log), size):
        wakeup = threading.Event()
        applier: Applier = make(replica, wakeup)
        start, out = time.perf_counter(), {}
        for t in applier.transitions(log[r : r + size]):
            out[t.entry.position] = time.perf_counter() - start
        deadline = time.monotonic() + LANDING_TIMEOUT
        while len(out) < size:
            if time.monotonic() > deadline:
                raise TimeoutError(f"allocations of the round at {r} did not land in time")
            wakeup.wait(0.01)
            wakeup.clear()
            for t in applier.transitions(()):
                out[t.entry.position] = time.perf_counter() - start
        replica = applier.complete
        applier.close()
        cheap = [log[r + i].position for i in range(2, size)]
        found += [out[p] for p in cheap]
    return statistics.mean(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=1_000)
    parser.add_argument("--vpeers", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--round", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="two rounds")
    args = parser.parse_args()
    count = 2 if args.quick else args.rounds
    replica = cluster(args.groups, args.vpeers, args.jobs)
    log = rounds(replica, count, args.round)
    on_thread, allocation = pipeline_cost(replica, log)
    figures = {
        "peers": len(replica.peers),
        "jobs": args.jobs,
        "entries": len(log),
        "apply_us_per_entry_10k_peers": round(on_thread * 1e6, 1),
        "apply_us_per_entry_10k_peers_classic": round(classic_cost(replica, log) * 1e6, 1),
        "entry_wait_s_behind_allocation": round(waits(Background, replica, log, args.round), 6),
        "entry_wait_s_behind_allocation_classic": round(
            waits(lambda r, w: Sequential(r), replica, log, args.round), 6
        ),
        "allocation_s_10k_peers": round(allocation, 6),
    }
    for key, value in figures.items():
        unit = " us" if "_us_" in key else " s" if "_s_" in key else ""
        print(f"{key}: {value}{unit}")
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
