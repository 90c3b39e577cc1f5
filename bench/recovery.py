"""Local recovery (causal logging and standby tasks) against global rollback, on a real cluster.

Everything runs on one cluster of `onyx peer start` processes over a real ZooKeeper (started
here) and Aeron: --slots + 3 members of one virtual peer each, running their peers in their own
process (`--workers 0`), detecting failures with heartbeats every --heartbeat-interval s and the
leader's auto-down after --auto-down s. The job code is bench/recovery_fns.py.

1. Throughput: a keyed job, input -> a stateful fn counting per key (``Count``, keyed, on
   --throughput-slots peers) -> an output that discards, with local_recovery false and true,
   everything else equal (checkpoints every 1 s in both: causal logging needs them). Timed from
   the first read of the input to the last write of the output (the plugins' marks, as
   bench/dataplane.py), best of --repeat runs each, the two taking turns after a warm-up run of
   each. ``throughput_ratio_causal_on_vs_off`` is on over off, ``..._medians`` the same of the
   medians (a shared machine's lucky run moves a best more than a median).
2. Recovery: input -> ``KeyedHold`` (keyed, --slots slots, each holding --state-mb MB in the
   keyed state the engine keeps besides its counts, restored by key group; with --state fn,
   ``Hold``, the same in the fn's own snapshot, which every restoring slot reads whole; held
   in memory, or with --state-backend disk in RocksDB under each member's state directory) -> an
   output noting when each record arrives; the input paced at
   --rate records per second, so that per-second throughputs mean something. Each slot, the
   input and the output are on a member of their own, and one member is free. Three runs, each
   killing (SIGKILL) the member of one slot once the job has committed twice and run --before s
   more, at a chosen time after a barrier (when the coordinator sent it: its commit's log line
   less the checkpoint's duration it states; the next barrier comes a period later, as long as
   checkpoints take less than a period). A fresh member replaces the killed one before the next
   run.
   - ``local``: the job with ``local_recovery: true`` and ``standby: true`` on the keyed task,
     so the free member is the standby of one slot (standbys go only on free peers), and that
     slot's member is killed 0.5 s after a barrier: the next barrier comes --barrier-period -
     0.5 s after the kill, after a recovery shorter than that.
   - ``local_barrier``: the same, killed --barrier-period - 1 s after a barrier: the next one
     comes a second after the kill, during the detection. The output aligns barriers from every
     slot, so it waits for the failed seat's until its replacement has replayed up to it.
   - ``global``: the same job without either, killed 0.5 s after a barrier: the failure
     reallocates the job and every slot restores (from every slot's snapshot).
   ``<run>_recovery_s``: from the kill to the first output record of the failed slot's keys
   (the keys that slot's process emitted before the kill) that a fn made after the kill.
   ``<run>_detection_s``: from the kill to the group-leave entry of the killed member in the
   log, so a recovery time reads as detection plus the rest (``<run>_after_detection_s``).
   ``<run>_task_recovered_s``: the kill to the replacement's task-recovered entry. The restores
   the surviving members counted (onyx_task_restores_total by scope), the job's allocation
   versions and any rollback-job entry show what rolled back. ``local_recovery_s`` is the
   ``local`` run's, ``global_recovery_s`` the baseline.
3. Throughput of the slots that did not fail: in each run, their new records (first arrivals of
   each record) per second, in one-second bins from the kill to the end of the last bin that
   overlaps the recovery, and in 100 ms bins from 0.5 s before the kill (``<run>_unaffected_
   per_100ms``); ``unaffected_min_throughput_ratio_<run>`` is the lowest one-second bin over
   their mean per second in the --window s before the kill. ``unaffected_min_throughput_ratio``
   is the lower of the two local runs'; the global run's is the baseline.

Run: .venv/bin/python bench/recovery.py [--segments 1000000] [--batch-size 1000] [--repeat 5]
     [--throughput-slots 2] [--slots 8] [--state-mb 32] [--rate 4000] [--keys 4096]
     [--barrier-period 3] [--before 8] [--window 5] [--after 3] [--heartbeat-interval 0.1]
     [--auto-down 1] [--state keyed] [--state-backend memory] [--quick] [--logs DIR]
``--quick`` is --segments 50000 --repeat 1 --state-mb 4 --before 4 --window 3 --after 2.
The last line of output is one JSON document holding every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.workload import read_marks  # noqa: E402
from peer import api  # noqa: E402
from peer.log.entry import Transition  # noqa: E402
from peer.log.store import LogStore  # noqa: E402
from peer.runtime.checkpoints import Commits  # noqa: E402
from peer.runtime.placement import placements  # noqa: E402
from tests.support import PeerProcess, ZooKeeperServer, free_port, wait_for  # noqa: E402

TENANCY = "bench"
AFTER_BARRIER = 0.5
"""Seconds from a barrier to the kill in the runs without a barrier during a recovery shorter
than the barrier period less this."""
KEYED = "hold"


@dataclass
class Member:
    process: PeerProcess
    metrics: int


@dataclass
class Cluster:
    """The ZooKeeper server, the members and a store on it."""

    server: ZooKeeperServer
    logs: Path
    flags: list[str]
    members: list[Member] = field(default_factory=list)
    store: LogStore | None = None
    vpeers: int = 1

    def add(self) -> Member:
        used = {m.metrics for m in self.members}
        port = free_port()
        while port in used:
            port = free_port()
        extra = [*self.flags, "--metrics-port", str(port), "--metrics-address", "127.0.0.1"]
        member = Member(PeerProcess(self.server.address, TENANCY, self.logs, vpeers=self.vpeers,
                                    extra=extra), port)  # fmt: skip
        self.members.append(member)
        return member

    def live(self) -> list[Member]:
        return [m for m in self.members if m.process.process.poll() is None]

    def wait_peers(self, count: int) -> None:
        """Until the cluster has ``count`` peers; a member that could not start (its metrics
        port taken meanwhile by another process) is started again."""

        def ready() -> bool:
            for m in list(self.members):
                if m.process.process.poll() is not None and "already in use" in m.process.output():
                    self.members.remove(m)
                    self.add()
            return len(api.replica(self.store).peers) == count

        wait_for(ready, 90, f"{count} peers")

    def member_of(self, group: str) -> Member:
        return next(m for m in self.live() if m.process.runs(group))


@contextlib.contextmanager
def cluster(
    logs: Path, members: int, args: argparse.Namespace, vpeers: int = 1
) -> Iterator[Cluster]:
    """ZooKeeper and ``members`` members of ``vpeers`` virtual peers each."""
    flags = ["--mtu", "8192", "--heartbeat-interval", str(args.heartbeat_interval),
             "--auto-down-unreachable-after", str(args.auto_down),
             "--state-dir", str(logs / "state")]  # fmt: skip
    c = Cluster(ZooKeeperServer().start(), logs, flags, vpeers=vpeers)
    try:
        for _ in range(members):
            c.add()
        c.store = api.connect(c.server.address, TENANCY, create=True)
        c.wait_peers(members * vpeers)
        yield c
    finally:
        if c.store is not None:
            c.store.close()
        for m in c.members:
            if m.process.process.poll() is None:
                m.process.process.terminate()
        for m in c.members:
            with contextlib.suppress(Exception):
                m.process.process.wait(30)
            m.process.kill()
        c.server.stop()


# -- 1. throughput, causal logging off and on ------------------------------------------------------


def counting_job(args: argparse.Namespace, local: bool, marks: Path) -> dict[str, Any]:
    catalog = [
        {"name": "read", "kind": "input", "plugin": "bench.recovery_fns:keyed_input",
         "params": {"count": args.segments, "keys": args.keys, "marks": str(marks)},
         "n_peers": 1},
        {"name": "count", "kind": "function", "fn": "bench.recovery_fns:Count",
         "group_by_key": "key", "n_peers": args.throughput_slots},
        {"name": "write", "kind": "output", "plugin": "bench.workload:discarding_output",
         "params": {"marks": str(marks)}, "n_peers": 1},
    ]  # fmt: skip
    for task in catalog:
        task["batch_size"] = args.batch_size
    return {
        "workflow": [["read", "count"], ["count", "write"]],
        "catalog": catalog,
        "barrier_period": 1.0,
        "local_recovery": local,
    }


def timed_run(c: Cluster, args: argparse.Namespace, local: bool) -> float:
    """Segments per second from the first read to the last write: the plugins note those when
    they close, the input's and the output's in either order, so this waits for both."""
    with tempfile.TemporaryDirectory(prefix="recovery-marks-") as directory:
        marks = Path(directory)
        job_id = api.submit(c.store, counting_job(args, local, marks))
        final = api.wait(c.store, job_id, 600)
        if final.state != "completed":
            raise RuntimeError(f"the throughput job {job_id!r} ended {final.state}")
        seen = wait_for(
            lambda: (m := read_marks(marks)).written() == args.segments and m.of("read") and m,
            60,
            f"the marks of {args.segments} segments in {marks}",
        )
    return args.segments / seen.seconds()


def throughput(c: Cluster, args: argparse.Namespace) -> dict[str, Any]:
    rates: dict[bool, list[float]] = {False: [], True: []}
    for local in (False, True):
        timed_run(c, args, local)  # a warm-up of each: the first jobs pay for imports
    for _ in range(args.repeat):
        for local in (False, True):
            rate = timed_run(c, args, local)
            rates[local].append(rate)
            print(f"  causal logging {'on' if local else 'off'}: {rate:,.0f} segments/s")
    off, on = max(rates[False]), max(rates[True])
    median_off, median_on = statistics.median(rates[False]), statistics.median(rates[True])
    return {
        "causal_off_segments_per_s": round(off),
        "causal_on_segments_per_s": round(on),
        "throughput_ratio_causal_on_vs_off": round(on / off, 3),
        "causal_off_median_segments_per_s": round(median_off),
        "causal_on_median_segments_per_s": round(median_on),
        "throughput_ratio_causal_on_vs_off_medians": round(median_on / median_off, 3),
    }


# -- 2. and 3. recovery, local against global ------------------------------------------------------


def holding_job(args: argparse.Namespace, local: bool, out: Path) -> dict[str, Any]:
    holder = "KeyedHold" if args.state == "keyed" else "Hold"
    keyed = {"name": KEYED, "kind": "function", "fn": f"bench.recovery_fns:{holder}",
             "group_by_key": "key", "n_peers": args.slots}  # fmt: skip
    if local:
        keyed["standby"] = True
    return {
        "workflow": [["read", KEYED], [KEYED, "write"]],
        "catalog": [
            {"name": "read", "kind": "input", "plugin": "bench.recovery_fns:keyed_input",
             "params": {"count": 10**12, "keys": args.keys, "rate": args.rate}, "n_peers": 1},
            keyed,
            {"name": "write", "kind": "output", "plugin": "bench.recovery_fns:stamped_output",
             "params": {"dir": str(out)}, "n_peers": 1},
        ],
        "barrier_period": args.barrier_period,
        "local_recovery": local,
        "state_backend": args.state_backend,
    }  # fmt: skip


class Arrivals:
    """What the output noted, read as it grows: (arrival, seq, key, pid, at) per record."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.read: dict[Path, int] = {}
        self.records: list[tuple[float, int, str, int, float]] = []

    def update(self) -> list[tuple[float, int, str, int, float]]:
        """The records noted since the last update (whole lines only)."""
        new = []
        for path in sorted(self.directory.glob("*.txt")):
            with path.open("rb") as f:
                f.seek(self.read.get(path, 0))
                data = f.read()
            whole = data[: data.rfind(b"\n") + 1]
            self.read[path] = self.read.get(path, 0) + len(whole)
            for line in whole.decode().splitlines():
                arrival, seq, key, pid, at = line.split()
                new.append((float(arrival), int(seq), key, int(pid), float(at)))
        self.records.extend(new)
        return new


class LogWatch:
    """The log's entries as they are applied here, each with the wall time it was seen."""

    def __init__(self, store: LogStore) -> None:
        self.seen: list[tuple[float, str, dict[str, Any], Any]] = []
        """(wall time, entry fn, entry args, every job's allocation version after it)"""
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._follow, args=(store,), daemon=True)

    def _note(self, t: Transition) -> None:
        self.seen.append((time.time(), t.entry.fn, dict(t.entry.args), t.new.allocation_versions))

    def _follow(self, store: LogStore) -> None:
        api.follow(store, lambda _: self.stop.is_set(), None, each=self._note)

    def first(self, fn: str, after: float, **args: Any) -> float | None:
        return next((t for t, f, a, _ in self.seen if f == fn and t >= after
                     and all(a.get(k) == v for k, v in args.items())), None)  # fmt: skip

    def __enter__(self) -> LogWatch:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(10)


def committed_twice(store: LogStore, job_id: str) -> bool:
    record, _ = Commits(store, job_id).read()
    version = api.replica(store).allocation_versions.get(job_id)
    done = record is not None and record.committed is not None
    return done and record.committed.version == version and record.committed.number >= 2


def victim(c: Cluster, job_id: str, local: bool, index: int | None) -> tuple[str, int]:
    """The keyed task's peer to kill and its index among the task's sorted peers: the one with
    a standby when recovering locally, else the one at ``index``."""
    replica = api.replica(c.store)
    peers = sorted(replica.allocations[job_id][KEYED])
    if local:
        standbys = replica.standbys.get(job_id, {})
        with_standby = [p for p in peers if p in standbys]
        if not with_standby:
            raise RuntimeError(f"job {job_id!r}: no slot of task {KEYED!r} got a standby")
        return with_standby[0], peers.index(with_standby[0])
    return peers[index or 0], index or 0


def samples(c: Cluster, name: str, job_id: str) -> Iterator[tuple[dict[str, str], float]]:
    """The labels and value of every sample of metric ``name`` of the job, over the live
    members."""
    for member in c.live():
        url = f"http://127.0.0.1:{member.metrics}/metrics"
        with urllib.request.urlopen(url, timeout=5) as reply:
            text = reply.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and sample.labels.get("onyx_job") == job_id:
                    yield sample.labels, sample.value


def restores(c: Cluster, job_id: str) -> dict[str, int]:
    """onyx_task_restores_total of the job by scope, summed over the live members."""
    totals = {"local": 0.0, "global": 0.0, "handover": 0.0}
    for labels, value in samples(c, "onyx_task_restores_total", job_id):
        totals[labels["scope"]] += value
    return {kind: int(n) for kind, n in totals.items()}


def binned(times: list[float], start: float, bins: int, width: float = 1.0) -> list[int]:
    """How many of ``times`` fall in each of ``bins`` bins of ``width`` s from ``start``."""
    counts = Counter(math.floor((t - start) / width) for t in times if t >= start)
    return [counts.get(i, 0) for i in range(bins)]


def barrier_sent(c: Cluster, job_id: str) -> tuple[float, float]:
    """When the coordinator sent the barrier of the job's last committed epoch (wall time), and
    how long that checkpoint took: its commit's log line, less what the line says it took."""
    record, _ = Commits(c.store, job_id).read()
    epoch = record.committed
    replica = api.replica(c.store)
    coordinator = placements(replica, {})[job_id].coordinator
    member = c.member_of(replica.group_of(coordinator))
    line = re.compile(
        rf"^(\S+ \S+) INFO .*job {job_id}: epoch {epoch.number} of allocation {epoch.version} "
        r"committed; its checkpoint took ([0-9.]+) s$", re.MULTILINE,
    )  # fmt: skip
    found = wait_for(lambda: line.search(member.process.output()), 10, "the commit's log line")
    at = datetime.strptime(found[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return at - float(found[2]), float(found[2])


def kill_point(c: Cluster, job_id: str, period: float, offset: float) -> tuple[float, float]:
    """A wall time ``offset`` s after the coordinator sends a barrier (the one after the last
    committed epoch's, a period later: the checkpoint takes less than the period), at least
    0.1 s ahead; and the checkpoint's duration."""
    while True:
        sent, took = barrier_sent(c, job_id)
        at = sent + period + offset
        if at > time.time() + 0.1:
            return at, took
        next_commit(c.store, job_id)


def next_commit(store: LogStore, job_id: str) -> None:
    record, _ = Commits(store, job_id).read()
    now = record.committed

    def moved() -> bool:
        latest, _ = Commits(store, job_id).read()
        return latest.committed != now

    wait_for(moved, 60, f"the next commit of job {job_id!r}", interval=0.05)


def recovery_run(
    c: Cluster, args: argparse.Namespace, mode: str, offset: float, index: int | None
) -> dict[str, Any]:
    """Run the holding job, kill one slot's member ``offset`` s after a barrier, and
    measure."""
    local = mode != "global"
    out = c.logs / f"out-{mode}"
    out.mkdir()
    with LogWatch(c.store) as watch:
        job_id = api.submit(c.store, holding_job(args, local, out))
        wait_for(lambda: committed_twice(c.store, job_id), 180, "two commits", interval=0.2)
        time.sleep(args.before)  # the steady running measured before the kill, not a wait
        peer, index = victim(c, job_id, local, index)
        group = api.replica(c.store).group_of(peer)
        member = c.member_of(group)
        arrivals = Arrivals(out)
        at, took = kill_point(c, job_id, args.barrier_period, offset)
        time.sleep(at - time.time())  # where in the barrier period the kill falls
        arrivals.update()
        killed = time.time()
        member.process.signal(signal.SIGKILL)
        pid = member.process.process.pid
        failed = {r[2] for r in arrivals.records if r[3] == pid}
        if not failed:
            raise RuntimeError(f"job {job_id!r}: the killed slot's output was never seen")

        def advanced() -> float | None:
            arrivals.update()
            return next((r[0] for r in arrivals.records if r[2] in failed and r[4] > killed), None)

        resumed = wait_for(advanced, 120, f"the {mode} recovery of slot {index}", interval=0.05)
        recovered = resumed - killed
        time.sleep(math.ceil(recovered) + args.after)  # output after the recovery, measured
        arrivals.update()
        left = watch.first("group-leave-cluster", killed, id=group)
        task_recovered = watch.first("task-recovered", killed, job=job_id)
        counted = restores(c, job_id)
        versions = sorted({v[job_id] for _, _, _, v in watch.seen if job_id in v})
        rollbacks = [a.get("reason") for _, f, a, _ in watch.seen
                     if f == "rollback-job" and a.get("job") == job_id]  # fmt: skip
    member.process.process.wait()
    api.kill(c.store, job_id)
    api.wait(c.store, job_id, 60)
    first: dict[int, float] = {}
    for arrival, seq, key, _, _ in arrivals.records:
        if key not in failed and seq not in first:
            first[seq] = arrival
    times = list(first.values())
    before = sum(1 for t in times if killed - args.window <= t < killed) / args.window
    during = binned(times, killed, max(1, math.ceil(recovered)))
    tenths = binned(times, killed - 0.5, math.ceil((recovered + 1.5) / 0.1), 0.1)
    detection = None if left is None else left - killed
    figures = {
        f"{mode}_recovery_s": round(recovered, 3),
        f"{mode}_detection_s": None if detection is None else round(detection, 3),
        f"{mode}_after_detection_s": None if detection is None else round(recovered - detection, 3),
        f"{mode}_unaffected_before_records_per_s": round(before, 1),
        f"{mode}_unaffected_during_records_per_s": during,
        f"unaffected_min_throughput_ratio_{mode}": round(min(during) / before, 3),
        f"{mode}_unaffected_per_100ms": tenths,
        f"{mode}_restores_local": counted["local"],
        f"{mode}_restores_global": counted["global"],
        f"{mode}_failed_slot_keys": len(failed),
        f"{mode}_kill_after_barrier_s": offset,
        f"{mode}_checkpoint_s": took,
        f"{mode}_allocation_versions": versions,
        f"{mode}_rollbacks": rollbacks,
    }
    if local:
        figures[f"{mode}_task_recovered_s"] = (
            None if task_recovered is None else round(task_recovered - killed, 3)
        )
    return {"index": index, "figures": figures}


# -- the run -----------------------------------------------------------------------------------


UNITS = (("_segments_per_s", " segments/s"), ("_records_per_s", " records/s"), ("_s", " s"),
         ("_mb", " MB"))  # fmt: skip


def unit(key: str) -> str:
    return next((u for suffix, u in UNITS if key.endswith(suffix)), "")


def report(figures: dict[str, Any]) -> None:
    pairs = [
        ("causal_on_segments_per_s", "causal_off_segments_per_s"),
        ("throughput_ratio_causal_on_vs_off", None),
        ("causal_on_median_segments_per_s", "causal_off_median_segments_per_s"),
        ("throughput_ratio_causal_on_vs_off_medians", None),
        ("local_recovery_s", "global_recovery_s"),
        ("local_detection_s", "global_detection_s"),
        ("local_after_detection_s", "global_after_detection_s"),
        ("local_task_recovered_s", None),
        ("local_barrier_recovery_s", "global_recovery_s"),
        ("local_barrier_detection_s", None),
        ("local_barrier_task_recovered_s", None),
        ("unaffected_min_throughput_ratio", "unaffected_min_throughput_ratio_global"),
        ("unaffected_min_throughput_ratio_local", "unaffected_min_throughput_ratio_global"),
        ("unaffected_min_throughput_ratio_local_barrier", "unaffected_min_throughput_ratio_global"),
        ("local_unaffected_before_records_per_s", "global_unaffected_before_records_per_s"),
        ("local_unaffected_during_records_per_s", "global_unaffected_during_records_per_s"),
        ("local_unaffected_per_100ms", "global_unaffected_per_100ms"),
        ("local_barrier_unaffected_per_100ms", None),
        ("local_restores_local", "global_restores_local"),
        ("local_restores_global", "global_restores_global"),
        ("local_barrier_restores_local", None),
        ("local_barrier_restores_global", None),
        ("local_allocation_versions", "global_allocation_versions"),
        ("local_barrier_allocation_versions", None),
        ("local_rollbacks", "local_barrier_rollbacks"),
        ("local_checkpoint_s", "global_checkpoint_s"),
    ]
    for key, baseline in pairs:
        line = f"{key}: {figures.get(key)}{unit(key)}"
        if baseline is not None:
            line += f"  (baseline {baseline}: {figures.get(baseline)}{unit(baseline)})"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--throughput-slots", type=int, default=2)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--state-mb", type=float, default=32)
    parser.add_argument("--rate", type=float, default=4000)
    parser.add_argument("--keys", type=int, default=4096)
    parser.add_argument("--barrier-period", type=float, default=3.0)
    parser.add_argument("--before", type=float, default=8.0)
    parser.add_argument("--window", type=float, default=5.0)
    parser.add_argument("--after", type=float, default=3.0)
    parser.add_argument("--heartbeat-interval", type=float, default=0.1)
    parser.add_argument("--auto-down", type=float, default=1.0)
    parser.add_argument(
        "--state", choices=("keyed", "fn"), default="keyed",
        help="where Hold keeps its state: keyed state the engine keeps, restored by key group "
        "(KeyedHold), or the fn's own snapshot, which every slot reads whole (Hold)",
    )  # fmt: skip
    parser.add_argument(
        "--state-backend", choices=("memory", "disk"), default="memory",
        help="the job's state_backend: where KeyedHold's keyed state is held",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--logs",
        metavar="DIR",
        help="keep the members' logs and the outputs "
        "here (an empty directory); none: a temporary one, removed",
    )
    args = parser.parse_args()
    if args.quick:
        args.segments, args.repeat, args.state_mb = 50_000, 1, 4
        args.before, args.window, args.after = 4.0, 3.0, 2.0
    logging.basicConfig(level=logging.ERROR)
    os.environ["BENCH_RECOVERY_STATE_BYTES"] = str(int(args.state_mb * 2**20))
    os.environ["BENCH_RECOVERY_KEY_BYTES"] = str(
        int(args.state_mb * 2**20 * args.slots / args.keys)
    )
    started = time.monotonic()
    figures: dict[str, Any] = {
        "deployment": f"cluster: {args.slots + 3} `onyx peer start` members of 1 peer, "
                      "--workers 0, ZooKeeper, Aeron",
        "segments": args.segments, "throughput_slots": args.throughput_slots,
        "slots": args.slots, "state": args.state, "state_backend": args.state_backend,
        "state_mb_per_slot": args.state_mb,
        "state_mb_total": args.state_mb * args.slots, "rate_records_per_s": args.rate,
        "barrier_period_s": args.barrier_period, "heartbeat_interval_s": args.heartbeat_interval,
        "auto_down_s": args.auto_down,
    }  # fmt: skip
    with (
        contextlib.nullcontext(args.logs)
        if args.logs
        else tempfile.TemporaryDirectory(prefix="bench-recovery-") as logs,
        cluster(Path(logs), args.slots + 3, args) as c,
    ):
        print("throughput, causal logging off and on:")
        figures.update(throughput(c, args))
        index = None
        runs = (("local", AFTER_BARRIER), ("local_barrier", max(0.0, args.barrier_period - 1)),
                ("global", AFTER_BARRIER))  # fmt: skip
        for n, (mode, offset) in enumerate(runs):
            if n:
                c.add()  # in place of the member killed
                c.wait_peers(args.slots + 3)
            print(f"recovery, {mode}, the kill {offset:g} s after a barrier:")
            run = recovery_run(c, args, mode, offset, index)
            figures.update(run["figures"])
            index = run["index"]
    figures["unaffected_min_throughput_ratio"] = min(
        figures["unaffected_min_throughput_ratio_local"],
        figures["unaffected_min_throughput_ratio_local_barrier"],
    )
    figures["bench_s"] = round(time.monotonic() - started, 1)
    report(figures)
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
