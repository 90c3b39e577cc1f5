"""Local recovery (causal logging, standby tasks) against global rollback, detection as shipped.

Everything runs on one cluster of `onyx peer start` processes over a real ZooKeeper (started
here) and Aeron: --slots + 3 members of one virtual peer each, running their peers in their own
process (`--workers 0`). They detect a failure as a deployment does by default: the heartbeat
interval, the leader's auto-down and the ZooKeeper session timeout (whose end downs a member
too) are read from `onyx peer start`'s own parser (its defaults, peer/cli.py and
peer.membership.agent.MembershipSettings, without environment or config file) and passed as
they are, the session timeout because the test harness's members otherwise run a shorter one.
--heartbeat-interval, --auto-down and --session-timeout override them, and
``detector_shipped`` says whether any did. The job code is bench/recovery_fns.py.

1. Throughput: a keyed job, input -> a stateful fn counting per key (``Count``, keyed, on
   --throughput-slots peers) -> an output that discards, with local_recovery false and true,
   everything else equal (checkpoints every 1 s in both: causal logging needs them). Timed from
   the first read of the input to the last write of the output (the plugins' marks, as
   bench/dataplane.py), --repeat runs each, the two taking turns after a warm-up run of each.
   Each figure is the median of the runs with their spread (lowest, highest), since the runs
   of a shared machine spread more than the difference measured: ``causal_on_segments_per_s``
   against ``causal_off_segments_per_s``, and ``throughput_ratio_causal_on_vs_off``, each turn's
   on over its off.
2. Recovery: input -> ``KeyedHold`` (keyed, --slots slots, each holding --state-mb MB in the
   keyed state the engine keeps besides its counts, restored by key group; with --state fn,
   ``Hold``, the same in the fn's own snapshot, which a restoring slot reads whole; held in
   memory, or with --state-backend disk in RocksDB under each member's state directory) -> an
   output noting when each record arrives; the input paced at --rate records per second, so
   that per-second throughputs mean something. Each slot, the input and the output are on a
   member of their own, and one member is free. --kills rounds, each killing once in each mode
   in turn, a fresh job per kill and a fresh member replacing the killed one. A kill (SIGKILL)
   hits the member of one slot once the job has committed twice and run --before s more, at a
   moment drawn from random.Random(--seed) relative to a barrier (when the coordinator sent it:
   its commit's log line less the checkpoint's duration it states; the next comes a period
   later, as long as checkpoints take less than a period), within the range the mode is about:
   - ``local``: the job with ``local_recovery: true`` and ``standby: true`` on the keyed task,
     so the free member is the standby of one slot (standbys go only on free peers), and that
     slot's member is killed 0.1 to 1 s (EARLY) after a barrier: the next barrier comes after the
     recovery. The default --barrier-period, 10 s, is longer than a recovery at the shipped
     detection (about 6 s: heartbeats find the member unreachable within a second or so, and
     the leader downs it 5 s later).
   - ``local_barrier``: the same, killed 0.5 to 1.5 s (BEFORE_BARRIER) before a barrier, which
     comes during the detection. The output aligns barriers from every slot, so it waits for the
     failed seat's until its replacement has replayed up to it.
   - ``global``: the same job without either, a slot drawn at random killed at any moment of
     the period: the failure rolls the job back and every slot restores.
   Per kill (each kill's figures in ``<mode>_kills``; per mode, each figure's median over the
   kills under its name, and its spread, lowest and highest, in ``<name>_spread``):
   ``recovery_s``: from the kill to the first output record of the failed slot's keys (the keys
   that slot's process emitted before the kill) that a fn made after the kill;
   ``detection_s``: from the kill to the group-leave entry of the killed member in the log, so a
   recovery reads as detection plus the rest (``after_detection_s``); ``task_recovered_s`` (the
   local modes): the kill to the replacement's task-recovered entry;
   ``kill_after_barrier_s`` and ``next_barrier_after_kill_s``: where the kill fell (the drawn
   offset in ``kill_after_barrier_drawn_s``), and ``barrier_in_recovery`` whether the next
   barrier came before the recovery ended (``<mode>_kills_with_barrier_in_recovery`` counts them:
   none for ``local``, every kill for ``local_barrier``, if the modes mean what they say). The
   restores the surviving members counted (onyx_task_restores_total by scope), the job's
   allocation versions and any rollback-job entry show what rolled back. ``global_...`` is the
   baseline of ``local_...`` and ``local_barrier_...``.
3. What the restores read: ``restore_read_mb``, per restoring slot, onyx_restore_read_bytes_total
   of the keyed task from just before the kill to the end of the run, per member (one peer
   each), so ``restore_read_slot_max_mb`` (the most one slot read) stands against
   ``state_mb_per_slot``. The global rollback reads only what it needs: at an unchanged slot
   count each slot of the new allocation fetches its own slot's snapshot alone
   (peer/runtime/task.py, ``_to_fetch``), which holds only the key groups that slot owns; after
   a change of slots it asks for the key groups it owns now (``_await_recovery``) and reads only
   their bytes (peer/runtime/checkpoints.py, ``_groups``: a snapshot stores its key groups in
   order, its header saying where each lies). Every slot reading every slot's state would read
   --slots times as much. In the local modes a standby's fetch of a commit in that time counts
   too (it reads the new links of its seat's chain).
4. Throughput of the slots that did not fail: in each run, their new records (first arrivals of
   each record) per second, in one-second bins from the kill to the end of the last bin that
   overlaps the recovery, and in 100 ms bins from 0.5 s before the kill
   (``unaffected_per_100ms``); ``unaffected_min_throughput_ratio`` is the lowest one-second bin
   over their mean per second in the --window s before the kill. The figure of that name is the
   lower of the two local modes' medians.

Run: .venv/bin/python bench/recovery.py [--segments 1000000] [--batch-size 1000] [--repeat 5]
     [--throughput-slots 2] [--slots 8] [--state-mb 32] [--rate 4000] [--keys 4096]
     [--barrier-period 10] [--kills 5] [--seed 1] [--before 8] [--window 5] [--after 3]
     [--heartbeat-interval S] [--auto-down S] [--session-timeout S] [--state keyed]
     [--state-backend memory] [--quick] [--logs DIR]
``--quick`` is --segments 50000 --repeat 2 --state-mb 4 --before 4 --window 3 --after 2. Each
figure is printed with its unit beside its baseline; the last line of output is one JSON
document holding every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import random
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
from peer import api, cli  # noqa: E402
from peer.log.entry import Transition  # noqa: E402
from peer.log.store import LogStore  # noqa: E402
from peer.runtime.checkpoints import Commits  # noqa: E402
from peer.runtime.placement import placements  # noqa: E402
from tests.support import PeerProcess, ZooKeeperServer, free_port, wait_for  # noqa: E402

TENANCY = "bench"
KEYED = "hold"
MB = 2**20
MODES = ("local", "local_barrier", "global")
EARLY = (0.1, 1.0)
"""Seconds after a barrier a ``local`` kill falls within: early, so that the next barrier comes
after the recovery."""
BEFORE_BARRIER = (0.5, 1.5)
"""Seconds before a barrier a ``local_barrier`` kill falls within: the barrier comes during the
detection."""
AHEAD = 0.5
"""Seconds a kill is planned ahead at least: reading the members' counters comes between."""
DETECTOR = (
    ("heartbeat_interval", "--heartbeat-interval", "heartbeat_interval"),
    ("auto_down", "--auto-down-unreachable-after", "auto_down_unreachable_after"),
    ("session_timeout", "--session-timeout", "session_timeout"),
)
"""(this bench's option, `onyx peer start`'s flag, its destination): what decides how soon a
killed member is found gone: heartbeats and the leader's auto-down, or its ZooKeeper session's
end, whichever comes first (peer/cluster/downing.py)."""
SUMMARIZED = ("recovery_s", "detection_s", "after_detection_s", "task_recovered_s",
              "kill_after_barrier_s", "next_barrier_after_kill_s", "checkpoint_s",
              "unaffected_before_records_per_s", "unaffected_min_throughput_ratio",
              "local_scope_restores", "global_scope_restores", "allocation_moves",
              "rollback_entries", "restoring_slots", "restore_read_slot_max_mb",
              "restore_read_total_mb")  # fmt: skip
"""The figures of a kill summed up per mode, each by its median and spread."""


def shipped_detection() -> dict[str, Any]:
    """`onyx peer start`'s own defaults of the detector settings: its parser, given no
    environment and no config file."""
    args = cli.parse_args(["peer", "start", "--zookeeper", "127.0.0.1:2181",
                           "--tenancy", TENANCY], {})  # fmt: skip
    return {dest: getattr(args, dest) for _, _, dest in DETECTOR}


def detector_flags(args: argparse.Namespace) -> list[str]:
    """The detector flags of the settings ``args`` holds (a bench that has none of an option
    leaves that one to the test harness)."""
    flags = []
    for option, flag, _ in DETECTOR:
        value = getattr(args, option, None)
        if value is not None:
            flags += [flag, str(value)]
    return flags


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
    flags = ["--mtu", "8192", *detector_flags(args), "--state-dir", str(logs / "state")]
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


def spread_of(name: str, values: list[float], digits: int) -> dict[str, Any]:
    """``name``: the median of ``values``; ``<name>_spread``: their lowest and highest (None
    for none)."""
    if not values:
        return {name: None, f"{name}_spread": None}

    def rounded(value: float) -> float:
        return round(value, digits) if digits else round(value)

    return {
        name: rounded(statistics.median(values)),
        f"{name}_spread": [rounded(min(values)), rounded(max(values))],
    }


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
    """Medians and spreads of the two modes' rates, and of each turn's ratio: a turn's two runs
    share the machine's moment, so their ratio spreads less than the rates do."""
    rates: dict[bool, list[float]] = {False: [], True: []}
    for local in (False, True):
        timed_run(c, args, local)  # a warm-up of each: the first jobs pay for imports
    for _ in range(args.repeat):
        for local in (False, True):
            rate = timed_run(c, args, local)
            rates[local].append(rate)
            print(f"  causal logging {'on' if local else 'off'}: {rate:,.0f} segments/s")
    ratios = [on / off for off, on in zip(rates[False], rates[True], strict=True)]
    return {
        **spread_of("causal_off_segments_per_s", rates[False], 0),
        **spread_of("causal_on_segments_per_s", rates[True], 0),
        **spread_of("throughput_ratio_causal_on_vs_off", ratios, 3),
        "causal_off_runs_segments_per_s": [round(r) for r in rates[False]],
        "causal_on_runs_segments_per_s": [round(r) for r in rates[True]],
    }


# -- 2. to 4. recovery, local against global -------------------------------------------------------


@dataclass(frozen=True)
class Kill:
    """One kill as drawn: its mode and round, where it falls in the barrier period (s after a
    barrier) and, in the global mode, which slot (its index among the task's sorted peers)."""

    mode: str
    round: int
    offset: float
    slot: int | None


def draw(rng: random.Random, mode: str, round_: int, args: argparse.Namespace) -> Kill:
    """A kill of ``mode`` at a random moment within the part of the period the mode is about."""
    period = args.barrier_period
    if mode == "local":
        return Kill(mode, round_, round(rng.uniform(*EARLY), 3), None)
    if mode == "local_barrier":
        return Kill(mode, round_, round(max(0.0, period - rng.uniform(*BEFORE_BARRIER)), 3), None)
    return Kill(mode, round_, round(rng.uniform(0.0, period), 3), rng.randrange(args.slots))


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


def victim(c: Cluster, job_id: str, kill: Kill) -> tuple[str, int]:
    """The keyed task's peer to kill and its index among the task's sorted peers: the one the
    kill drew, or, recovering locally, the one with a standby."""
    replica = api.replica(c.store)
    peers = sorted(replica.allocations[job_id][KEYED])
    if kill.slot is not None:
        return peers[kill.slot], kill.slot
    standbys = replica.standbys.get(job_id, {})
    with_standby = [p for p in peers if p in standbys]
    if not with_standby:
        raise RuntimeError(f"job {job_id!r}: no slot of task {KEYED!r} got a standby")
    return with_standby[0], peers.index(with_standby[0])


def member_samples(
    member: Member, name: str, job_id: str
) -> Iterator[tuple[dict[str, str], float]]:
    """The labels and value of every sample of metric ``name`` of the job on ``member``."""
    url = f"http://127.0.0.1:{member.metrics}/metrics"
    with urllib.request.urlopen(url, timeout=5) as reply:
        text = reply.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("onyx_job") == job_id:
                yield sample.labels, sample.value


def samples(c: Cluster, name: str, job_id: str) -> Iterator[tuple[dict[str, str], float]]:
    """The labels and value of every sample of metric ``name`` of the job, over the live
    members."""
    for member in c.live():
        yield from member_samples(member, name, job_id)


def restores(c: Cluster, job_id: str) -> dict[str, int]:
    """onyx_task_restores_total of the job by scope, summed over the live members."""
    totals = {"local": 0.0, "global": 0.0, "handover": 0.0}
    for labels, value in samples(c, "onyx_task_restores_total", job_id):
        totals[labels["scope"]] += value
    return {kind: int(n) for kind, n in totals.items()}


def read_bytes(c: Cluster, job_id: str) -> dict[int, float]:
    """onyx_restore_read_bytes_total of the keyed task per live member, by its metrics port: a
    member runs one peer, so this is what its slot read (a standby's fetches included)."""
    name = "onyx_restore_read_bytes_total"
    return {m.metrics: sum(v for labels, v in member_samples(m, name, job_id)
                           if labels.get("task") == KEYED) for m in c.live()}  # fmt: skip


def restore_reads(before: dict[int, float], after: dict[int, float]) -> dict[str, Any]:
    """What each slot that restored read between the two readings, in MB."""
    read = sorted(round((n - before.get(port, 0.0)) / MB, 2) for port, n in after.items()
                  if n > before.get(port, 0.0))  # fmt: skip
    return {
        "restore_read_mb": read,
        "restoring_slots": len(read),
        "restore_read_slot_max_mb": max(read, default=0.0),
        "restore_read_total_mb": round(sum(read), 2),
    }


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


def kill_point(
    c: Cluster, job_id: str, period: float, offset: float, earliest: float
) -> tuple[float, float]:
    """The first wall time ``offset`` s after the coordinator sends a barrier that is no sooner
    than ``earliest`` and AHEAD s from now (barriers come a period apart, the one after the last
    committed epoch's a period after it: the checkpoint takes less than the period); and the
    checkpoint's duration."""
    while True:
        sent, took = barrier_sent(c, job_id)
        at = sent + period + offset
        if at >= max(earliest, time.time() + AHEAD):
            return at, took
        next_commit(c.store, job_id)


def next_commit(store: LogStore, job_id: str) -> None:
    record, _ = Commits(store, job_id).read()
    now = record.committed

    def moved() -> bool:
        latest, _ = Commits(store, job_id).read()
        return latest.committed != now

    wait_for(moved, 60, f"the next commit of job {job_id!r}", interval=0.05)


def kill_at(member: Member, at: float, arrivals: Arrivals) -> tuple[float, set[str]]:
    """SIGKILL ``member`` at wall time ``at``: when, and the keys its slot emitted before. The
    output read so far is caught up with first, so that the read just before the kill is
    short and the kill on time."""
    arrivals.update()
    time.sleep(max(0.0, at - time.time()))
    arrivals.update()
    killed = time.time()
    member.process.signal(signal.SIGKILL)
    pid = member.process.process.pid
    failed = {r[2] for r in arrivals.records if r[3] == pid}
    if not failed:
        raise RuntimeError("the killed slot's output was never seen")
    return killed, failed


def resumed(arrivals: Arrivals, failed: set[str], killed: float, what: str) -> float:
    """When the first record of the ``failed`` keys made after the kill arrived."""

    def advanced() -> float | None:
        return next((r[0] for r in arrivals.update() if r[2] in failed and r[4] > killed), None)

    return wait_for(advanced, 120, what, interval=0.05)


def timings(
    kill: Kill, args: argparse.Namespace, at: float, killed: float, recovered: float
) -> dict[str, Any]:
    """Where the kill fell against the barriers, and the recovery."""
    barrier = at - kill.offset  # the last barrier before the planned kill
    next_barrier = barrier + args.barrier_period - killed
    return {
        "kill_after_barrier_drawn_s": kill.offset,
        "kill_after_barrier_s": round(killed - barrier, 3),
        "next_barrier_after_kill_s": round(next_barrier, 3),
        "barrier_in_recovery": next_barrier < recovered,
        "recovery_s": round(recovered, 3),
    }


def logged(
    watch: LogWatch, kill: Kill, job_id: str, *, group: str, killed: float, recovered: float
) -> dict[str, Any]:
    """What the log says of the recovery: detection and the rest, the replacement's
    task-recovered (local modes), allocation versions and rollback entries."""
    left = watch.first("group-leave-cluster", killed, id=group)
    detection = None if left is None else left - killed
    figures: dict[str, Any] = {
        "detection_s": None if detection is None else round(detection, 3),
        "after_detection_s": None if detection is None else round(recovered - detection, 3),
    }
    if kill.mode != "global":
        done = watch.first("task-recovered", killed, job=job_id)
        figures["task_recovered_s"] = None if done is None else round(done - killed, 3)
    versions = sorted({v[job_id] for _, _, _, v in watch.seen if job_id in v})
    reasons = [a.get("reason") for _, f, a, _ in watch.seen
               if f == "rollback-job" and a.get("job") == job_id]  # fmt: skip
    return {**figures, "allocation_versions": versions, "allocation_moves": len(versions) - 1,
            "rollback_entries": len(reasons), "rollback_reasons": reasons}  # fmt: skip


def unaffected(
    arrivals: Arrivals, failed: set[str], killed: float, recovered: float, window: float
) -> dict[str, Any]:
    """The slots that did not fail: their first arrivals per second before the kill and in
    one-second bins over the recovery, and in 100 ms bins around it."""
    first: dict[int, float] = {}
    for arrival, seq, key, _, _ in arrivals.records:
        if key not in failed and seq not in first:
            first[seq] = arrival
    times = list(first.values())
    before = sum(1 for t in times if killed - window <= t < killed) / window
    during = binned(times, killed, max(1, math.ceil(recovered)))
    tenths = binned(times, killed - 0.5, math.ceil((recovered + 1.5) / 0.1), 0.1)
    return {
        "unaffected_before_records_per_s": round(before, 1),
        "unaffected_during_records_per_s": during,
        "unaffected_min_throughput_ratio": round(min(during) / before, 3),
        "unaffected_per_100ms": tenths,
    }


def recovery_run(c: Cluster, args: argparse.Namespace, kill: Kill) -> dict[str, Any]:
    """Run the holding job, kill one slot's member as ``kill`` says, and measure."""
    out = c.logs / f"out-{kill.mode}-{kill.round}"
    out.mkdir()
    with LogWatch(c.store) as watch:
        job_id = api.submit(c.store, holding_job(args, kill.mode != "global", out))
        wait_for(lambda: committed_twice(c.store, job_id), 180, "two commits", interval=0.2)
        earliest = time.time() + args.before  # the steady running measured before the kill
        peer, slot = victim(c, job_id, kill)
        group = api.replica(c.store).group_of(peer)
        member = c.member_of(group)
        arrivals = Arrivals(out)
        at, took = kill_point(c, job_id, args.barrier_period, kill.offset, earliest)
        read_before = read_bytes(c, job_id)
        killed, failed = kill_at(member, at, arrivals)
        recovered = resumed(arrivals, failed, killed, f"the {kill.mode} recovery of slot {slot}")
        recovered -= killed
        time.sleep(math.ceil(recovered) + args.after)  # output after the recovery, measured
        arrivals.update()
        counted = restores(c, job_id)
        figures = {
            "round": kill.round, "slot": slot, "failed_slot_keys": len(failed),
            "checkpoint_s": took, **timings(kill, args, at, killed, recovered),
            **logged(watch, kill, job_id, group=group, killed=killed, recovered=recovered),
            "local_scope_restores": counted["local"], "global_scope_restores": counted["global"],
            **restore_reads(read_before, read_bytes(c, job_id)),
            **unaffected(arrivals, failed, killed, recovered, args.window),
        }  # fmt: skip
    member.process.process.wait()
    api.kill(c.store, job_id)
    api.wait(c.store, job_id, 60)
    return figures


def recoveries(c: Cluster, args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """--kills rounds of one kill per mode, the modes in turn so that a drift of the machine's
    load falls on all three alike; each kill drawn from one seeded generator, in order, so that
    a seed replays them."""
    rng = random.Random(args.seed)
    kills: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for n in range(args.kills):
        for mode in MODES:
            kill = draw(rng, mode, n, args)
            if n or mode != MODES[0]:
                c.add()  # in place of the member killed
                c.wait_peers(args.slots + 3)
            which = "" if kill.slot is None else f", slot {kill.slot}"
            print(f"recovery, {mode}, kill {n + 1} of {args.kills}: {kill.offset:g} s after a "
                  f"barrier (drawn){which}")  # fmt: skip
            run = recovery_run(c, args, kill)
            print(f"    {kill_line(run)}")
            kills[mode].append(run)
    return kills


def kill_line(run: dict[str, Any]) -> str:
    return (f"slot {run['slot']}, killed {run['kill_after_barrier_s']} s after a barrier, the "
            f"next {run['next_barrier_after_kill_s']} s after the kill: recovery "
            f"{run['recovery_s']} s (detection {run['detection_s']} s, then "
            f"{run['after_detection_s']} s); restores read {run['restore_read_mb']} MB"
            )  # fmt: skip


def summary(mode: str, kills: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the mode's kills with its spread, and every kill's figures."""
    figures: dict[str, Any] = {
        f"{mode}_kills": kills,
        f"{mode}_kills_with_barrier_in_recovery": sum(k["barrier_in_recovery"] for k in kills),
    }
    for name in SUMMARIZED:
        if any(name in k for k in kills):
            values = [k[name] for k in kills if k.get(name) is not None]
            figures.update(spread_of(f"{mode}_{name}", values, 3))
    return figures


# -- the run -----------------------------------------------------------------------------------


UNITS = (("_segments_per_s", " segments/s"), ("_records_per_s", " records/s"), ("_s", " s"),
         ("_mb", " MB"), ("_mb_per_slot", " MB"), ("_mb_total", " MB"), ("_slots", " slots"),
         ("_restores", " restores"), ("_moves", " moves"), ("_entries", " entries"),
         ("_in_recovery", " kills"))  # fmt: skip


def unit(key: str) -> str:
    return next((u for suffix, u in UNITS if key.endswith(suffix)), "")


def shown(figures: dict[str, Any], key: str) -> str:
    """A figure with its unit, and its spread (lowest to highest) where it has one."""
    text = f"{key}: {figures.get(key)}{unit(key)}"
    spread = figures.get(f"{key}_spread")
    if spread is not None:
        text += f" (spread {spread[0]} to {spread[1]}{unit(key)})"
    return text


def line(figures: dict[str, Any], key: str, baseline: str | None) -> str:
    if baseline is None:
        return shown(figures, key)
    return f"{shown(figures, key)}  (baseline {shown(figures, baseline)})"


def report(figures: dict[str, Any]) -> None:
    print(f"throughput, medians of {figures['repeat']} runs each:")
    print(line(figures, "causal_on_segments_per_s", "causal_off_segments_per_s"))
    print(line(figures, "throughput_ratio_causal_on_vs_off", None))
    print(f"recovery, medians of {figures['kills']} kills per mode, global rollback the "
          "baseline:")  # fmt: skip
    for name in SUMMARIZED:
        for mode in ("local", "local_barrier"):
            if f"{mode}_{name}" in figures:
                baseline = f"global_{name}" if f"global_{name}" in figures else None
                print(line(figures, f"{mode}_{name}", baseline))
    for key, baseline in (
        ("local_kills_with_barrier_in_recovery", "global_kills_with_barrier_in_recovery"),
        ("local_barrier_kills_with_barrier_in_recovery", "global_kills_with_barrier_in_recovery"),
        ("unaffected_min_throughput_ratio", "global_unaffected_min_throughput_ratio"),
    ):
        print(line(figures, key, baseline))
    print("what one restoring slot of the global rollback read, against the state it holds:")
    print(line(figures, "global_restore_read_slot_max_mb", "state_mb_per_slot"))
    print(line(figures, "global_restore_read_total_mb", "state_mb_total"))


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--throughput-slots", type=int, default=2)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--state-mb", type=float, default=32)
    parser.add_argument("--rate", type=float, default=4000)
    parser.add_argument("--keys", type=int, default=4096)
    parser.add_argument("--barrier-period", type=float, default=10.0)
    parser.add_argument("--kills", type=int, default=5, help="kills per recovery mode")
    parser.add_argument("--seed", type=int, default=1, help="of the kills' moments and slots")
    parser.add_argument("--before", type=float, default=8.0)
    parser.add_argument("--window", type=float, default=5.0)
    parser.add_argument("--after", type=float, default=3.0)
    for option, flag, _ in DETECTOR:
        parser.add_argument(
            f"--{option.replace('_', '-')}", type=float, metavar="S",
            help=f"the members' {flag}; none: `onyx peer start`'s default",
        )  # fmt: skip
    parser.add_argument(
        "--state", choices=("keyed", "fn"), default="keyed",
        help="where Hold keeps its state: keyed state the engine keeps, restored by key group "
        "(KeyedHold), or the fn's own snapshot, which a restoring slot reads whole (Hold)",
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
        args.segments, args.repeat, args.state_mb = 50_000, 2, 4
        args.before, args.window, args.after = 4.0, 3.0, 2.0
    return args


def detection(args: argparse.Namespace) -> dict[str, Any]:
    """Each detector setting not given, set to the shipped default; the figures of them."""
    shipped = shipped_detection()
    for option, _, dest in DETECTOR:
        if getattr(args, option) is None:
            setattr(args, option, shipped[dest])
    return {
        **{f"{option}_s": getattr(args, option) for option, _, _ in DETECTOR},
        "detector_shipped": all(getattr(args, o) == shipped[d] for o, _, d in DETECTOR),
    }


def main() -> None:
    args = arguments()
    logging.basicConfig(level=logging.ERROR)
    os.environ["BENCH_RECOVERY_STATE_BYTES"] = str(int(args.state_mb * MB))
    os.environ["BENCH_RECOVERY_KEY_BYTES"] = str(int(args.state_mb * MB * args.slots / args.keys))
    started = time.monotonic()
    figures: dict[str, Any] = {
        "deployment": f"cluster: {args.slots + 3} `onyx peer start` members of 1 peer, "
                      "--workers 0, ZooKeeper, Aeron",
        "segments": args.segments, "repeat": args.repeat, "throughput_slots": args.throughput_slots,
        "slots": args.slots, "state": args.state, "state_backend": args.state_backend,
        "state_mb_per_slot": args.state_mb,
        "state_mb_total": args.state_mb * args.slots, "rate_records_per_s": args.rate,
        "barrier_period_s": args.barrier_period, "kills": args.kills, "seed": args.seed,
        **detection(args),
    }  # fmt: skip
    with (
        contextlib.nullcontext(args.logs)
        if args.logs
        else tempfile.TemporaryDirectory(prefix="bench-recovery-") as logs,
        cluster(Path(logs), args.slots + 3, args) as c,
    ):
        print("throughput, causal logging off and on:")
        figures.update(throughput(c, args))
        for mode, kills in recoveries(c, args).items():
            figures.update(summary(mode, kills))
    figures["unaffected_min_throughput_ratio"] = min(
        figures["local_unaffected_min_throughput_ratio"],
        figures["local_barrier_unaffected_min_throughput_ratio"],
    )
    figures["bench_s"] = round(time.monotonic() - started, 1)
    report(figures)
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
