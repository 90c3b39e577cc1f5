"""How long a member takes to get an allocation at 10,000 virtual peers: computed here (the
classic protocol) or answered by a scheduling server, the first ask at a position (the server
computes) and the ones after it (the server's cache answers, as for every member but the first).

Builds --groups groups of --vpeers peers and --jobs jobs of --tasks tasks (balanced job and task
schedulers, every task min 1 and unbounded) with the previous allocation of the same jobs on
the same peers less one group, the case of a log entry that adds a member. A real `onyx
scheduler serve` runs on a free port of this machine, and the member's side is the
SchedulingClient that `onyx peer start --scheduler-servers` runs. Each figure is the best of
--repeat runs; the baseline is the same request computed here, in the same run.

Run: .venv/bin/python bench/allocation.py [--groups 1000] [--vpeers 10] [--jobs 5] [--tasks 4]
     [--repeat 5] [--quick]
The last line of output is one JSON document holding every figure.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from peer.scheduling import JobDemand, PeerInfo, SchedulingRequest, TaskDemand, schedule
from peer.scheduling.client import SchedulingClient
from peer.scheduling.request import canonical_text

REPO = Path(__file__).resolve().parent.parent


def build(groups: int, vpeers: int, jobs: int, tasks: int) -> SchedulingRequest:
    """The request of a cluster whose last group just joined: the others hold the jobs."""
    peers = tuple(
        PeerInfo(f"p{g:04d}-{v:02d}", f"g{g:04d}", frozenset())
        for g in range(groups)
        for v in range(vpeers)
    )
    demands = tuple(
        JobDemand(f"j{j:02d}", tuple(TaskDemand(f"t{t:02d}") for t in range(tasks)))
        for j in range(jobs)
    )
    before = SchedulingRequest("balanced", demands, frozenset(), peers[:-vpeers])
    previous = tuple((job, tuple(tasks.items())) for job, tasks in schedule(before).items())
    return SchedulingRequest("balanced", demands, frozenset(j.id for j in demands), peers, previous)


def best(run: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def scheduling_server() -> Iterator[str]:
    """A real `onyx scheduler serve`, its address; stopped with SIGTERM afterwards."""
    address = f"127.0.0.1:{free_port()}"
    process = subprocess.Popen(
        [sys.executable, "-m", "peer.cli", "scheduler", "serve", "--listen", address,
         "--log-level", "warning"],
        cwd=REPO,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://{address}/healthz", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(
                        f"the scheduling server on {address} did not start"
                    ) from None
                time.sleep(0.1)
        yield address
    finally:
        process.terminate()
        process.wait(timeout=30)


def measure(request: SchedulingRequest, address: str, repeat: int) -> dict[str, float]:
    client = SchedulingClient((address,), timeout=60)
    positions = iter(range(1, 1_000_000))
    assert client.plan(request, 0) == schedule(request), "the server answered differently"
    return {
        "allocation_s_10k_peers_classic": best(lambda: schedule(request), repeat),
        "allocation_s_10k_peers_first_ask": best(
            lambda: client.plan(request, next(positions)), repeat
        ),
        "allocation_s_10k_peers": best(lambda: client.plan(request, 0), repeat),
        "request_encoding_s": best(lambda: canonical_text(request.to_json()), repeat),
        "request_bytes": len(json.dumps({"position": 0, "request": request.to_json()})),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--vpeers", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="one run of each figure")
    args = parser.parse_args()
    repeat = 1 if args.quick else args.repeat
    request = build(args.groups, args.vpeers, args.jobs, args.tasks)
    with scheduling_server() as address:
        figures = measure(request, address, repeat)
    figures |= {"peers": len(request.peers), "jobs": args.jobs, "tasks": args.tasks}
    classic = figures["allocation_s_10k_peers_classic"]
    print(f"peers: {len(request.peers)} in {args.groups} groups, {args.jobs} jobs of "
          f"{args.tasks} tasks, request {figures['request_bytes'] / 1e6:.2f} MB")  # fmt: skip
    print(f"computed here (baseline):          {classic:.4f} s")
    for key, what in (
        ("allocation_s_10k_peers_first_ask", "server, first ask (it computes)"),
        ("allocation_s_10k_peers", "server, cached (every other member)"),
        ("request_encoding_s", "of which encoding the request"),
    ):
        print(f"{what + ':':<34} {figures[key]:.4f} s  ({figures[key] / classic:.2f}x baseline)")
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
