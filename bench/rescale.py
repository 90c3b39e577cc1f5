"""Rescaling a running stateful job from 2 to 3 members: keyed state the engine keeps, restored
by key group, against a fn's own snapshot, which a new slot reads whole from each old slot whose
key groups it gains.

Each run starts ZooKeeper and 2 `onyx peer start` members of 2 virtual peers each, running
their peers in their own process (``--workers 0``), and submits input -> ``hold`` -> output:
the input paced at --rate records per second over --keys keys (bench/recovery_fns.py), ``hold``
keyed by the record's key with between 1 and 4 peers, holding --state-mb MB per slot of the 2 it
starts on (``KeyedHold``: a count and a block per key in keyed state; with fn state, ``Hold``:
the counts and one block in its snapshot), the output noting when each record arrives. Once the
job has committed twice and run --before s more, a third member starts: the job is held back at
its size, pauses at a barrier sent at once, and once that commits grows to 4 ``hold`` slots, each
restoring from the pause's commit (a ``handover`` restore: nothing is done again).

Figures per run, each the median of --repeat runs with the spread (lowest to highest):
- ``rescale_pause_s``: from the log's accepting the third member (which holds the job back at
  its size at once) to the job's new allocation: the job paused at a barrier sent at once, and
  that barrier committed;
- ``rescale_resume_s``: from the new allocation to the first record a slot on the new member
  made: the moved keys' output advancing again;
- ``rescale_stall_s``: the longest time no record arrived at the output, from the join to a
  second after the resume;
- ``rescale_read_mb``: what the restores read from checkpoint storage
  (``onyx_restore_read_bytes_total`` of ``hold``), against ``state_mb_total``, the state held.
Keyed and fn runs take turns, keyed first. ``rescale_resume_s`` and ``rescale_read_mb`` are the
keyed runs', the fn runs' (``fn_...``) the baseline. Checkpoints go to a directory on this
machine; what a read costs from an object store is not covered.

Run: .venv/bin/python bench/rescale.py [--repeat 3] [--state-mb 32] [--keys 4096]
     [--rate 2000] [--barrier-period 1] [--before 3] [--quick] [--logs DIR]
``--quick`` is --repeat 1 --state-mb 4 --before 2. The last line of output is one JSON document
holding every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.recovery import (  # noqa: E402
    KEYED,
    Arrivals,
    Cluster,
    LogWatch,
    cluster,
    committed_twice,
    restores,
    samples,
)
from peer import api  # noqa: E402
from tests.support import wait_for  # noqa: E402

MEMBERS, VPEERS = 2, 2
"""The cluster before the rescale; a third member of VPEERS joins it."""
SLOTS_BEFORE, SLOTS_AFTER = 2, 4
MB = 2**20


def holding_job(args: argparse.Namespace, state: str, out: Path) -> dict[str, Any]:
    holder = "KeyedHold" if state == "keyed" else "Hold"
    return {
        "workflow": [["read", KEYED], [KEYED, "write"]],
        "catalog": [
            {"name": "read", "kind": "input", "plugin": "bench.recovery_fns:keyed_input",
             "params": {"count": 10**12, "keys": args.keys, "rate": args.rate}, "n_peers": 1},
            {"name": KEYED, "kind": "function", "fn": f"bench.recovery_fns:{holder}",
             "group_by_key": "key", "min_peers": 1, "max_peers": SLOTS_AFTER},
            {"name": "write", "kind": "output", "plugin": "bench.recovery_fns:stamped_output",
             "params": {"dir": str(out)}, "n_peers": 1},
        ],
        "barrier_period": args.barrier_period,
    }  # fmt: skip


def slots(c: Cluster, job_id: str) -> int:
    return len(api.replica(c.store).allocations.get(job_id, {}).get(KEYED, ()))


def rescale_run(c: Cluster, args: argparse.Namespace, state: str, out: Path) -> dict[str, float]:
    """Run the holding job on the 2 members, start the third, and measure its growth."""
    out.mkdir()
    with LogWatch(c.store) as watch:
        job_id = api.submit(c.store, holding_job(args, state, out))
        wait_for(lambda: slots(c, job_id) == SLOTS_BEFORE and committed_twice(c.store, job_id),
                 180, "two commits on 2 slots", interval=0.2)  # fmt: skip
        time.sleep(args.before)  # steady running before the join, not a wait for anything
        version = api.replica(c.store).allocation_versions[job_id]
        started = time.time()
        new = c.add()
        pid = new.process.process.pid
        wait_for(lambda: slots(c, job_id) == SLOTS_AFTER, 120, "the growth to 4 slots", 0.05)
        arrivals = Arrivals(out)

        def resumed() -> float | None:
            arrivals.update()
            return next((r[0] for r in arrivals.records if r[3] == pid), None)

        first = wait_for(resumed, 120, "the new member's first record", interval=0.05)
        time.sleep(1.0)  # the output a second after the resume, for the stall
        arrivals.update()
        joined = watch.first("accept-join-cluster", started)
        grown = next(t for t, _, _, v in watch.seen if v.get(job_id, version) > version)
        read = sum(v for labels, v in samples(c, "onyx_restore_read_bytes_total", job_id)
                   if labels.get("task") == KEYED)  # fmt: skip
        counted = restores(c, job_id)
    api.kill(c.store, job_id)
    api.wait(c.store, job_id, 60)
    if joined is None:
        raise RuntimeError(f"job {job_id!r}: the third member's join was not seen in the log")
    times = sorted(r[0] for r in arrivals.records if joined <= r[0] <= first + 1.0)
    gaps = [b - a for a, b in zip([joined, *times], [*times, first + 1.0], strict=True)]
    return {
        "pause_s": grown - joined,
        "resume_s": first - grown,
        "stall_s": max(gaps),
        "read_mb": read / MB,
        "restores_handover": counted["handover"],
        "restores_global": counted["global"],
    }


def summary(prefix: str, runs: list[dict[str, float]]) -> dict[str, Any]:
    """Each figure's median over the runs, and its spread (lowest, highest)."""
    figures: dict[str, Any] = {}
    for name in runs[0]:
        values = [run[name] for run in runs]
        figures[f"{prefix}{name}"] = round(statistics.median(values), 3)
        figures[f"{prefix}{name}_spread"] = [round(min(values), 3), round(max(values), 3)]
    return figures


def report(figures: dict[str, Any]) -> None:
    for name in ("pause_s", "resume_s", "stall_s", "read_mb", "restores_handover",
                 "restores_global"):  # fmt: skip
        unit = " s" if name.endswith("_s") else " MB" if name.endswith("_mb") else ""
        keyed, fn = f"rescale_{name}", f"fn_rescale_{name}"
        spread, fn_spread = figures[f"{keyed}_spread"], figures[f"{fn}_spread"]
        print(f"{keyed}: {figures[keyed]}{unit} (spread {spread})  "
              f"(baseline {fn}: {figures[fn]}{unit}, spread {fn_spread})")  # fmt: skip
    print(f"state held: {figures['state_mb_total']} MB; read over held, keyed "
          f"{figures['read_over_state_keyed']}, fn {figures['read_over_state_fn']}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--state-mb", type=float, default=32)
    parser.add_argument("--keys", type=int, default=4096)
    parser.add_argument("--rate", type=float, default=2000)
    parser.add_argument("--barrier-period", type=float, default=1.0)
    parser.add_argument("--before", type=float, default=3.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--logs", metavar="DIR", help="keep the members' logs and outputs here "
                        "(an empty directory); none: a temporary one, removed")  # fmt: skip
    args = parser.parse_args()
    if args.quick:
        args.repeat, args.state_mb, args.before = 1, 4, 2.0
    args.heartbeat_interval, args.auto_down = 0.5, 10.0
    logging.basicConfig(level=logging.ERROR)
    os.environ["BENCH_RECOVERY_STATE_BYTES"] = str(int(args.state_mb * MB))
    os.environ["BENCH_RECOVERY_KEY_BYTES"] = str(int(args.state_mb * MB * SLOTS_BEFORE / args.keys))
    started = time.monotonic()
    runs: dict[str, list[dict[str, float]]] = {"keyed": [], "fn": []}
    with (
        contextlib.nullcontext(args.logs)
        if args.logs
        else tempfile.TemporaryDirectory(prefix="bench-rescale-") as logs
    ):
        for n in range(args.repeat):
            for state in ("keyed", "fn"):
                run_dir = Path(logs) / f"{state}-{n}"
                run_dir.mkdir()
                with cluster(run_dir, MEMBERS, args, vpeers=VPEERS) as c:
                    run = rescale_run(c, args, state, run_dir / "out")
                print(f"  {state} state, run {n + 1}: "
                      + ", ".join(f"{k} {v:.3f}" for k, v in run.items()))  # fmt: skip
                runs[state].append(run)
    total = args.state_mb * SLOTS_BEFORE
    figures: dict[str, Any] = {
        "deployment": f"cluster: {MEMBERS} then {MEMBERS + 1} `onyx peer start` members of "
                      f"{VPEERS} peers, --workers 0, ZooKeeper, Aeron, checkpoints in a directory",
        "slots_before": SLOTS_BEFORE, "slots_after": SLOTS_AFTER, "keys": args.keys,
        "state_mb_total": total, "rate_records_per_s": args.rate,
        "barrier_period_s": args.barrier_period, "repeat": args.repeat,
        **summary("rescale_", runs["keyed"]), **summary("fn_rescale_", runs["fn"]),
    }  # fmt: skip
    figures["read_over_state_keyed"] = round(figures["rescale_read_mb"] / total, 2)
    figures["read_over_state_fn"] = round(figures["fn_rescale_read_mb"] / total, 2)
    figures["bench_s"] = round(time.monotonic() - started, 1)
    report(figures)
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
