"""Segments per second through the engine, against the machine's limit and against Bytewax.

The job is linear: an input of --segments small segments, three function tasks that each change
one field, and an output that discards (bench/baselines.py holds the code every run shares).
It runs three ways in one invocation:

- one process: a local cluster of one peer group with one virtual peer per task, on the
  embedded log; segments move between tasks in memory;
- two processes: two `onyx peer start` processes on a real ZooKeeper (Debian's, started here on
  a free port), each with its own embedded media driver and an Aeron MTU of 8192 bytes (the
  two are on one machine, so loopback's MTU applies); the tasks are pinned by tags so that every
  edge of the workflow crosses between the processes over Aeron UDP;
- the baselines of the same run: the plain Python loop that decodes, applies the functions and
  encodes the same batches (the limit), and Bytewax with recovery at the same snapshot interval
  (when the `bench` extra is installed).

The engine's figures are end to end: from the submit-job entry to the job's completion read
back from the log, best of --repeat runs. The body codec figures of bench/codec.py are printed
too, since they decided the wire format.

Run: .venv-bench/bin/python bench/dataplane.py [--segments 200000] [--batch-size 100] [--repeat 3]
The last line of output is one JSON document holding every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


from bench import baselines, codec  # noqa: E402
from peer import api  # noqa: E402
from peer.cluster.local import LocalCluster  # noqa: E402
from peer.log.store import LogStore  # noqa: E402
from peer.messaging.frame import Header, MessageType, decode, encode  # noqa: E402
from tests.support import ZooKeeperServer, wait_for  # noqa: E402

TASKS = ("read", "f1", "f2", "f3", "write")


def job(segments: int, batch_size: int, tags: bool) -> dict[str, Any]:
    """With ``tags``, tasks alternate between peers tagged a and b, so each edge crosses."""
    catalog = [
        {"name": "read", "kind": "input", "plugin": "bench.baselines:segment_input",
         "params": {"count": segments}},
        *({"name": f, "kind": "function", "fn": f"bench.baselines:{f}"} for f in TASKS[1:4]),
        {"name": "write", "kind": "output", "plugin": "peer.plugins.null:output"},
    ]  # fmt: skip
    for i, task in enumerate(catalog):
        task.update(n_peers=1, batch_size=batch_size)
        if tags:
            task["required_tags"] = ["a" if i % 2 == 0 else "b"]
    return {"workflow": [list(e) for e in itertools.pairwise(TASKS)], "catalog": catalog}


def timed_run(store: LogStore, doc: dict[str, Any], segments: int) -> float:
    start = time.perf_counter()
    job_id = api.submit(store, doc)
    final = api.wait(store, job_id, timeout=600)
    elapsed = time.perf_counter() - start
    if final.state != "completed":
        raise RuntimeError(f"the benchmark job ended {final.state}")
    return segments / elapsed


def one_process(segments: int, batch_size: int, repeat: int) -> float:
    cluster = LocalCluster(1, len(TASKS))
    cluster.start()
    try:
        cluster.await_ring(30)
        doc = job(segments, batch_size, tags=False)
        return max(timed_run(cluster.reader, doc, segments) for _ in range(repeat))
    finally:
        cluster.stop()


@contextlib.contextmanager
def peer_processes(logs: Path, tags: Sequence[str]) -> Iterator[tuple[LogStore, list]]:
    """A ZooKeeper server and one `onyx peer start` of 3 peers per tag ("" for none); every
    group's stderr goes to logs/peer-N.log, checkpoints to logs/checkpoints."""
    server = ZooKeeperServer().start()
    processes = []
    try:
        for number, tag in enumerate(tags):
            command = [
                sys.executable, "-m", "peer.cli", "peer", "start", "--zookeeper", server.address,
                "--tenancy", "bench", "--vpeers", "3", "--tags", tag, "--mtu", "8192",
                "--checkpoints", str(logs / "checkpoints"),
            ]  # fmt: skip
            log = (logs / f"peer-{number}.log").open("wb")
            processes.append(subprocess.Popen(command, cwd=REPO, stderr=log))
        store = api.connect(server.address, "bench", create=True)
        count = 3 * len(tags)
        wait_for(lambda: len(api.replica(store).peers) == count, 60, f"{count} peers")
        yield store, processes
        store.close()
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            process.wait(30)
        server.stop()


def two_processes(segments: int, batch_size: int, repeat: int) -> float:
    with (
        tempfile.TemporaryDirectory() as logs,
        peer_processes(Path(logs), ("a", "b")) as (store, _),
    ):
        doc = job(segments, batch_size, tags=True)
        return max(timed_run(store, doc, segments) for _ in range(repeat))


def frame_codec() -> tuple[Any, Any]:
    """The engine's own wire format, header included, for the limit loop."""
    header = Header(MessageType.BATCH, 1, 1, 2, 0, 1)
    return (lambda batch: encode(header, batch)), (lambda blob: decode(blob)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--snapshot-interval", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    n, size, repeat = args.segments, args.batch_size, args.repeat
    encode_batch, decode_batch = frame_codec()
    figures: dict[str, Any] = {"segments": n, "batch_size": size}
    figures["limit_segments_per_s"] = round(
        max(baselines.python_limit(n, size, encode_batch, decode_batch) for _ in range(repeat))
    )
    figures["one_process_segments_per_s"] = round(one_process(n, size, repeat))
    figures["two_process_segments_per_s"] = round(two_processes(n, size, repeat))
    bytewax = None
    if baselines._bytewax_version() is not None:
        bytewax = max(baselines.bytewax_rate(n, args.snapshot_interval) for _ in range(repeat))
    figures["bytewax_segments_per_s"] = None if bytewax is None else round(bytewax)
    figures["snapshot_interval_s"] = args.snapshot_interval
    figures["two_process_ratio_to_limit"] = round(
        figures["two_process_segments_per_s"] / figures["limit_segments_per_s"], 3
    )
    if bytewax is not None:
        figures["two_process_ratio_to_bytewax"] = round(
            figures["two_process_segments_per_s"] / bytewax, 3
        )
    for name, rate in codec.measure(batches=500, repeat=repeat).items():
        figures[f"codec_{name}_segments_per_s"] = round(rate)
    for key, value in figures.items():
        unit = " segments/s" if key.endswith("segments_per_s") else ""
        unit = " s" if key.endswith("_s") and not unit else unit
        print(f"{key}: {value:,}{unit}" if isinstance(value, int) else f"{key}: {value}{unit}")
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
