"""What checkpoints cost, and how fast a job gets going again after a group is killed.

1. Throughput of the data-plane benchmark job (bench/dataplane.py: an input, three functions,
   a discarding output; two `onyx peer start` processes with every edge crossing between them
   over Aeron) with checkpoints off (barrier_period null) and with a 1 s barrier period, in the
   same run, best of --repeat; and their ratio. The goal is at most 5% lost.
2. The mean checkpoint duration of the checkpointed runs: from the coordinator's barrier to the
   commit of that epoch, as the coordinator logs it.
3. Recovery: three groups run the job into the exactly-once sink (every 1000th segment kept, so
   the output stays small); one group holding a task is killed with SIGKILL, and the time until
   output advances again is measured: until the sink publishes the first file of the job's next
   allocation. Detection is the groups' membership at its shipped defaults (the phi accrual
   detector, then the leader's auto-down after --auto-down-unreachable-after) or ZooKeeper's
   session expiry, whichever is first; the figure includes it.

Run: .venv/bin/python bench/checkpoints.py [--segments 1000000] [--repeat 2]
The last line of output is one JSON document holding every figure.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import signal
import sys
import tempfile
import time
from pathlib import Path
from statistics import mean
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.dataplane import TASKS, job, peer_processes, timed_run  # noqa: E402
from peer import api  # noqa: E402
from tests.support import wait_for  # noqa: E402

TOOK = re.compile(r"checkpoint took ([0-9.]+) s")


def throughput(segments: int, batch_size: int, repeat: int) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory() as logs,
        peer_processes(Path(logs), ("a", "b")) as (
            store,
            _,
        ),
    ):
        rates = {}
        for period in (None, 1.0):
            doc = {**job(segments, batch_size, tags=True), "barrier_period": period}
            rates[period] = max(timed_run(store, doc, segments) for _ in range(repeat))
        took = [
            float(m) for f in Path(logs).glob("peer-*.log") for m in TOOK.findall(f.read_text())
        ]
    return {
        "checkpoints_off_segments_per_s": round(rates[None]),
        "checkpoints_on_segments_per_s": round(rates[1.0]),
        "throughput_ratio_checkpoints_on_vs_off": round(rates[1.0] / rates[None], 3),
        "mean_checkpoint_s": round(mean(took), 4) if took else None,
        "checkpoints_measured": len(took),
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    figures: dict[str, Any] = {
        "segments": args.segments,
        "tasks": len(TASKS),
        "barrier_period_s": 1.0,
    }
    figures.update(throughput(args.segments, args.batch_size, args.repeat))
    figures["recovery_s"] = round(recovery(20 * args.segments), 3)
    for key, value in figures.items():
        unit = (
            " segments/s" if key.endswith("segments_per_s") else " s" if key.endswith("_s") else ""
        )
        print(f"{key}: {value}{unit}")
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
