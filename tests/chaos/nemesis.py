"""A nemesis: seeded, reproducible sequences of faults against a real cluster running a keyed,
windowed job into two exactly-once sinks, and the checks that the job came through them exactly
once and never went long without a commit. The chaos test (tests/chaos/test_nemesis.py) runs a
few short sequences, the bench (bench/nemesis.py) many long ones.

A run's faults come from ``random.Random(seed)`` alone: the same seed gives the same kinds,
victims (by member slot), workers, pauses and progress waits, so a failing run is replayed by its
seed. When each fault lands is the job's: before each, the nemesis waits for the cluster to be
whole again and for the job to commit the drawn number of epochs (none: it strikes as soon as
the members are back, while the job may still be recovering from the last fault).

The cluster is three `onyx peer start` members of six virtual peers in two worker processes
each, on a ZooKeeper server of the run's own (one fault is its kill -9 and restart on the same
port and data). The job is the local-recovery chaos test's (tests/chaos/test_local_recovery.py:
fixed windows with count, watermark and timer triggers, standbys, ``local_recovery``), with a
session window added and both outputs exactly-once sinks. It is held while the run's hold file
exists: its input reads ``RATE`` events a second until the last fault has landed, then the rest
at full speed, so a short sequence is never cut off by the input's end and a long one never
waits for it. The other chaos tests pace the keyed fn instead (tests/chaos/pacing.py); here that
would stop the commits altogether (see ``PACED``), so it is an option of the bench's.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import re
import shutil
import signal
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from kazoo.exceptions import KazooException

from peer import api
from peer.job.spec import Job, Task
from peer.log import subscriber
from peer.log.entry import Transition
from peer.log.replica import Replica
from peer.log.store import LogStore, StoreError
from peer.plugins.jsonl import JsonlInput, opened
from peer.plugins.splits import Splits
from peer.runtime.checkpoints import Commits
from peer.values.epoch import Epoch
from tests.chaos.pacing import pace
from tests.chaos.test_exactly_once import USERS
from tests.chaos.test_local_recovery import job as local_recovery_job
from tests.chaos.test_local_recovery import pulses, records, visits
from tests.integration.test_member_workers import alive
from tests.support import PeerProcess, ZooKeeperServer, free_port, onyx, wait_for

KINDS = ("kill-worker", "kill-member", "stop-member", "down-member", "leave-member",
         "kill-zookeeper")  # fmt: skip
MEMBERS = 3
VPEERS = 6
WORKERS = 2
SCALE_MODES = ("--join-direct", "--epidemic-log", "--async-allocation")
"""The coordination modes built for large clusters, as the member tests pass them."""
MODES = {"classic": (), "scale": SCALE_MODES}
PACE = "0.2"
"""Seconds the held fn sleeps per hundred events (``ONYX_TEST_PACE``), where the fn is paced."""
HOLD = os.environ.get("ONYX_NEMESIS_HOLD", "")
RATE = float(os.environ.get("ONYX_NEMESIS_RATE", "1000"))
"""Events a second the held input reads."""
PACED = ("input", "fn")
"""Where the held job is slowed. At the input by default: nothing queues anywhere. Pacing the
keyed fn instead (pacing.pace, ONYX_TEST_PACE) back-pressures the input: what the fn's seats have
no credit for waits in the input's in-flight log, and the input reads no more meanwhile."""
SESSION_GAP = 200
SESSION_EVERY = 2000
"""Every ``SESSION_EVERY`` events event time jumps by five gaps, closing every user's session."""
CHECKPOINT_TIMEOUT = 10.0
TOLERABLE_ABANDONED_EPOCHS = 1
RECOVERY_ALLOWANCE = 30.0
"""Seconds a failure may cost on top of the abandoned epochs before a commit: detection and the
auto-down (about 2 s here), reallocation, restoring, a ZooKeeper server's start, on two shared
cores."""
DEADLINE = 240.0
"""Seconds any wait of a run may take before the run is called stuck: generous, the machine is
shared."""
STALL = 120.0
"""Seconds without a new commit after which a run's job is called stuck: over every bound a
fault here should cost, even on a loaded machine."""
COMMITTED = re.compile(
    r"^(\S+ \S+) INFO peer\.runtime\.coordinator: job (\w+): epoch (\d+) of allocation (\d+) "
    r"committed"
)
ABANDONED = re.compile(r"job (\w+): epoch (\d+) of allocation (\d+) abandoned")


class HeldInput(JsonlInput):
    """The JSON-lines input, reading ``RATE`` events a second while the run's hold file
    (``ONYX_NEMESIS_HOLD``) exists and at full speed after."""

    def poll(self, limit: int) -> list[Any]:
        segments = super().poll(limit)
        if HOLD and segments and os.path.exists(HOLD):
            time.sleep(len(segments) / RATE)  # the workload's pace, not a wait for anything
        return segments


def held_input(task: Task, slot: int, slots: int, *, splits: Splits) -> HeldInput:
    """The factory named ``tests.chaos.nemesis:held_input``: ``peer.plugins.jsonl:input``'s."""
    path = task.params["path"]
    return HeldInput(task, path, opened(task, path), splits)


def held(segment: dict[str, Any]) -> dict[str, Any]:
    """``pacing.pace`` while the run's hold file (``ONYX_NEMESIS_HOLD``) exists, identity after:
    the job's output does not depend on it, only how long the job lasts."""
    if HOLD and segment["ts"] % 100 == 0 and os.path.exists(HOLD):
        return pace(segment)
    return segment


def write_events(path: Path, count: int) -> None:
    """``count`` events of ``USERS`` users, each user's every fiftieth, with a pause in event
    time every ``SESSION_EVERY`` events that closes their sessions."""
    with path.open("w") as f:
        for i in range(count):
            ts = i + 5 * SESSION_GAP * (i // SESSION_EVERY)
            f.write(json.dumps({"user": f"u{(i * 7) % USERS}", "ts": ts}) + "\n")


def checkpoint_settings() -> dict[str, Any]:
    """The job's checkpoint timeout and tolerated abandoned epochs, where the job spec has them
    (an older spec refuses unknown fields): empty otherwise."""
    names = {f.name for f in fields(Job)}
    if not {"checkpoint_timeout", "tolerable_abandoned_epochs"} <= names:
        return {}
    return {"checkpoint_timeout": CHECKPOINT_TIMEOUT,
            "tolerable_abandoned_epochs": TOLERABLE_ABANDONED_EPOCHS}  # fmt: skip


def no_commit_bound(settings: dict[str, Any]) -> float | None:
    """The longest a job may go without a commit: every tolerated abandoned epoch and the one
    that rolls it back, each a whole timeout, and the recovery; None where the spec has no
    timeout, so nothing bounds it."""
    if not settings:
        return None
    epochs = settings["tolerable_abandoned_epochs"] + 1
    return epochs * settings["checkpoint_timeout"] + RECOVERY_ALLOWANCE


def job(events: Path, first: Path, second: Path, paced: str = "input") -> dict:
    """The local-recovery chaos job, its second output exactly-once too, a session window on
    the keyed task, and held: its input paced (``paced`` "input") or, as the other chaos tests
    pace theirs, its keyed fn ("fn"; see ``PACED``)."""
    doc = local_recovery_job(events, first, second)
    doc["workflow"] = [[a, "second" if b == "loose" else b] for a, b in doc["workflow"]]
    for task in doc["catalog"]:
        if task["name"] == "loose":
            task.update(name="second", plugin="peer.plugins.jsonl:exactly_once_output")
        if task["name"] == "read":
            task["plugin"] = f"{__name__}:held_input"
        if task["name"] == "count" and paced == "fn":
            task["fn"] = f"{__name__}:held"
    doc["windows"].append({"id": "sessions", "task": "count", "type": "session",
                           "aggregation": "count", "key": "ts", "gap": SESSION_GAP})  # fmt: skip
    doc["triggers"].append({"window": "sessions", "on": "watermark"})
    return {**doc, **checkpoint_settings()}


def sessions(found: list[dict]) -> Counter:
    """The session window's records, fired by the watermark: the same in every run."""
    return Counter(json.dumps(r, sort_keys=True) for r in found if r["window"] == "sessions")


@dataclass(frozen=True)
class Expected:
    """A failure-free run's output: the deterministic records as multisets, the timer's counts
    summed per user."""

    visits: Counter
    sessions: Counter
    pulses: dict[str, int]


def reference(base: Path, events: int) -> Expected:
    """The job without failures or pacing, in one process (`onyx run`); both sinks agree."""
    base.mkdir(parents=True, exist_ok=True)
    write_events(base / "events.jsonl", events)
    doc = job(base / "events.jsonl", base / "first", base / "second")
    (base / "job.yaml").write_text(yaml.safe_dump(doc))
    result = onyx("run", str(base / "job.yaml"), "--vpeers", "5", timeout=900)
    assert result.returncode == 0, result.stderr
    first, second = records(base / "first"), records(base / "second")
    expected = Expected(visits(first), sessions(first), pulses(first))
    assert expected == Expected(visits(second), sessions(second), pulses(second))
    assert sum(expected.pulses.values()) == events, "the timer counted every event once"
    assert len(expected.sessions) == USERS * -(-events // SESSION_EVERY)
    return expected


def differences(expected: Expected, found: list[dict]) -> tuple[int, int]:
    """(lost, duplicated): records of the deterministic windows missing or extra, plus events
    the timer's counts of a user fall short of or exceed."""
    lost = duplicated = 0
    for want, got in ((expected.visits, visits(found)), (expected.sessions, sessions(found))):
        lost += sum((want - got).values())
        duplicated += sum((got - want).values())
    counted = pulses(found)
    for user in expected.pulses.keys() | counted.keys():
        gap = expected.pulses.get(user, 0) - counted.get(user, 0)
        lost, duplicated = lost + max(gap, 0), duplicated + max(-gap, 0)
    return lost, duplicated


# -- faults ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """One fault as drawn: its kind, the member slot it strikes, how many epochs the job must
    commit before it, and its parameters (the worker's index, a pause's length, whether a stop
    takes the member's workers too)."""

    kind: str
    member: int
    after: int
    worker: int = 0
    seconds: float = 0.0
    whole: bool = False

    def __str__(self) -> str:
        what = {
            "kill-worker": f"kill-worker m{self.member} w{self.worker}",
            "stop-member": f"stop-member m{self.member} {self.seconds:.1f} s"
            + (" with its workers" if self.whole else ""),
            "kill-zookeeper": f"kill-zookeeper, restart after {self.seconds:.1f} s",
        }.get(self.kind, f"{self.kind} m{self.member}")
        return f"{what} (after {self.after} epochs)"


def draw(rng: random.Random, count: int, kinds: Sequence[str] = KINDS) -> list[Fault]:
    """``count`` faults, each drawn whole before the next, so a sequence is a prefix of a
    longer one of the same seed."""
    faults = []
    for _ in range(count):
        kind, member, after = rng.choice(kinds), rng.randrange(MEMBERS), rng.randrange(4)
        worker, seconds, whole = rng.randrange(WORKERS), 0.0, False
        if kind == "stop-member":
            seconds, whole = round(rng.uniform(2, 8), 1), rng.random() < 0.5
        elif kind == "kill-zookeeper":
            seconds = round(rng.uniform(0, 3), 1)
        faults.append(Fault(kind, member, after, worker, seconds, whole))
    return faults


def sequence(seed: int, count: int) -> list[Fault]:
    return draw(random.Random(seed), count)


# -- the cluster ----------------------------------------------------------------------------------


def children(pid: int) -> list[int]:
    """The live worker processes of member ``pid``: its children that multiprocessing spawned
    (not its resource tracker)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(c) for c in task.read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    workers = []
    for child in sorted(set(found)):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if b"spawn_main" in cmdline and alive(child):
            workers.append(child)
    return workers


def current_id(member: PeerProcess) -> str | None:
    """The member's identity now: a member downed or expired rejoins under a new id, each
    announced by its own start line."""
    found = re.findall(r"group (\S+) starting with", member.output())
    return found[-1] if found else None


def tolerant[T](read: Callable[[], T]) -> Callable[[], T | None]:
    """``read``, giving None instead of failing while ZooKeeper is away: a condition polled
    through a ZooKeeper restart asks again."""

    def call() -> T | None:
        try:
            return read()
        except (KazooException, StoreError, ConnectionError, TimeoutError):
            return None

    return call


class Cluster:
    """The run's ZooKeeper server, its members by slot (a replacement takes the slot of the
    member it replaces), every member process ever started (their logs are the run's) and a
    client session. ``env`` is what the members' environment adds (the job's pace)."""

    def __init__(self, logs: Path, modes: Sequence[str], env: dict[str, str]) -> None:
        self.logs, self.env = logs, env
        self.server = ZooKeeperServer().start()
        self.tenancy = f"nemesis-{uuid.uuid4().hex[:8]}"
        self.extra = ["--auto-down-unreachable-after", "1", "--workers", str(WORKERS), *modes]
        self.started: list[PeerProcess] = []
        self.metrics: dict[PeerProcess, int] = {}
        """Each member's metrics port: what a stuck job's peers were doing."""
        self.workers: set[int] = set()
        self.zookeeper_restarts = 0
        self.known: Replica | None = None
        self.last_commit: tuple[Epoch | None, float] | None = None
        self.store: LogStore | None = None
        try:
            self.slots = [self._start() for _ in range(MEMBERS)]
            self.store = api.connect(self.server.address, self.tenancy, create=True,
                                     session_timeout=30, connect_timeout=DEADLINE)  # fmt: skip
        except BaseException:
            self.close()
            raise

    def replica(self) -> Replica:
        """The replica as of the log's tail, played on from the last one read rather than from
        the log's start at every poll."""
        self.known = subscriber.catch_up(self.store, self.known)
        return self.known

    def _start(self) -> PeerProcess:
        """A member, with the run's pace in its environment."""
        port = free_port()
        metrics = ["--metrics-port", str(port), "--metrics-address", "127.0.0.1"]
        with environment(**self.env):
            member = PeerProcess(self.server.address, self.tenancy, self.logs, vpeers=VPEERS,
                                 extra=[*self.extra, *metrics])  # fmt: skip
        self.started.append(member)
        self.metrics[member] = port
        return member

    def replace(self, slot: int) -> None:
        self.slots[slot] = self._start()

    def committed(self, job_id: str) -> Epoch | None:
        """The job's last committed epoch; an AssertionError once it has not changed for
        ``STALL`` s, which no fault here explains: the job is stuck."""
        record, _ = Commits(self.store, job_id).read()
        epoch, now = (record.committed if record else None), time.monotonic()
        if self.last_commit is None or self.last_commit[0] != epoch:
            self.last_commit = (epoch, now)
        assert now - self.last_commit[1] < STALL, (
            f"the job has committed nothing for {STALL:g} s (the last: {epoch})"
        )
        return epoch

    def whole(self) -> bool:
        """Every slot's member has joined with all its peers, and no other member is left in
        the ring (a dead one has been downed, a leaving one has exited)."""
        ids = [current_id(m) for m in self.slots]
        if None in ids:
            return False
        current = self.replica()
        return set(current.groups) == set(ids) and all(
            len(current.group_peers.get(i, ())) == VPEERS for i in ids
        )

    def await_whole(self) -> None:
        wait_for(tolerant(self.whole), DEADLINE, "every member to be in the ring with its peers",
                 interval=0.25)  # fmt: skip
        for member in self.slots:
            wait_for(lambda m=member: len(children(m.process.pid)) == WORKERS, DEADLINE,
                     "every member's workers")  # fmt: skip
            self.workers.update(children(member.process.pid))

    def restart_zookeeper(self, outage: float) -> None:
        """kill -9 of the server, and a new one on the same port and data directory after
        ``outage`` s (the fault's parameter). The old server's log is kept beside the new."""
        process = self.server.process
        assert process is not None
        process.kill()
        process.wait()
        time.sleep(outage)
        self.zookeeper_restarts += 1
        log = self.server.dir / "server.log"
        log.rename(log.with_name(f"server.{self.zookeeper_restarts}.log"))
        self.server.start()

    def member_logs(self) -> dict[Path, str]:
        return {m.log_path: m.output() for m in self.started}

    def close(self) -> None:
        """Every process the run started, ended: a stopped one is killed as it is."""
        if self.store is not None:
            with contextlib.suppress(Exception):  # the session may be gone with its server
                self.store.close()
        for member in self.started:
            self.workers.update(children(member.process.pid))
            member.kill()
        for pid in self.workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        kept = self.logs / "zookeeper"
        kept.mkdir(exist_ok=True)
        for log in self.server.dir.glob("server*.log"):
            shutil.copy(log, kept / log.name)
        self.server.stop()


# -- a run ----------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What a run found. ``problems`` says what breaks exactly-once or liveness; empty, the run
    passed."""

    seed: int
    modes: str
    faults: list[Fault]
    logs: Path
    paced: str = "input"
    landed: list[str] = field(default_factory=list)
    lost: int = 0
    duplicated: int = 0
    abandoned: int = 0
    rollbacks: int = 0
    reallocations: int = 0
    takeovers: int = 0
    longest_without_commit: float | None = None
    longest_after: str = ""
    bound: float | None = None
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    def replay(self) -> str:
        paced = "" if self.paced == "input" else f" NEMESIS_PACED={self.paced}"
        return (f"NEMESIS_SEED={self.seed} NEMESIS_FAULTS={len(self.faults)} "
                f"NEMESIS_MODES={self.modes}{paced}")  # fmt: skip

    def describe(self) -> str:
        lines = [
            f"seed {self.seed}, {self.modes} modes ({self.replay()}); logs in {self.logs}",
            "faults: " + "; ".join(str(f) for f in self.faults),
            "landed: " + ("; ".join(self.landed) or "none"),
            f"lost {self.lost}, duplicated {self.duplicated}, abandoned epochs {self.abandoned}, "
            f"rollbacks {self.rollbacks}, reallocations {self.reallocations}, "
            f"takeovers {self.takeovers}",
            f"longest without a commit: {fmt_seconds(self.longest_without_commit)}"
            f"{' (' + self.longest_after + ')' if self.longest_after else ''}, bound "
            f"{fmt_seconds(self.bound)}; run {self.seconds:.1f} s",
        ]
        return "\n".join([*lines, *(f"PROBLEM: {p}" for p in self.problems)])


def fmt_seconds(value: float | None) -> str:
    return "none" if value is None else f"{value:.1f} s"


@contextmanager
def holding(path: Path) -> Iterator[None]:
    """The job's pace on while the faults land (see ``held``)."""
    path.touch()
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


@contextmanager
def environment(**values: str) -> Iterator[None]:
    """``values`` in this process's environment, which the members inherit, and the old
    values back after: other tests' members must not be paced."""
    old = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run(
    seed: int,
    count: int,
    *,
    modes: str,
    events: int,
    base: Path,
    expected: Expected,
    paced: str = "input",
    hold_epochs: int = 0,
    say: Callable[[str], object] = print,
) -> Outcome:
    """One run: a cluster, the job, ``count`` faults of ``seed``, then the checks. The job is
    held until the last fault has landed and it has committed ``hold_epochs`` epochs more (a
    run without faults, as a baseline, is held that long). Every wait has a deadline; one
    passed is a problem of the run (the job or the cluster stuck), not an error of the harness,
    so the run's figures and logs are still gathered."""
    base.mkdir(parents=True, exist_ok=True)
    outcome = Outcome(seed, modes, sequence(seed, count), base, paced)
    outcome.bound = no_commit_bound(checkpoint_settings())
    started = time.monotonic()
    hold = base / "hold"
    write_events(base / "events.jsonl", events)
    doc = job(base / "events.jsonl", base / "first", base / "second", paced)
    say(f"run: seed {seed}, {modes} modes, {paced} paced, {count} faults: "
        + "; ".join(str(f) for f in outcome.faults))  # fmt: skip
    pace = {"ONYX_TEST_PACE": PACE} if paced == "fn" else {}
    cluster = Cluster(base, MODES[modes], {"ONYX_NEMESIS_HOLD": str(hold), **pace})
    job_id, completed = None, False
    try:
        cluster.await_whole()
        with holding(hold):
            job_id = api.submit(cluster.store, doc)
            strike_all(cluster, job_id, outcome, say)
            if hold_epochs and not outcome.problems:
                progressed(cluster, job_id, hold_epochs)
        if not outcome.problems:
            final = wait_for(tolerant(lambda: finished(cluster, job_id)), DEADLINE * 2,
                             "the job to complete", interval=0.5)  # fmt: skip
            completed = final.state == "completed"
            if not completed:
                outcome.problems.append(f"the job ended {final.state}: {final.reason}")
    except AssertionError as e:
        outcome.problems.append(f"{e}{stuck(cluster, job_id)}")
    except Exception as e:  # the harness's own failure, reported with the run's
        outcome.problems.append(f"the harness failed: {e!r}{stuck(cluster, job_id)}")
    finally:
        ended = time.time()
        outcome.seconds = time.monotonic() - started
        try:
            if job_id is not None:
                figures_from_log(cluster.store, job_id, outcome)
        except Exception as e:  # figures of a run whose ZooKeeper is gone
            outcome.problems.append(f"could not read the log: {e!r}")
        logs = cluster.member_logs()
        cluster.close()
    check(outcome, expected, base, logs, job_id=job_id, open_until=None if completed else ended)
    say(outcome.describe())
    return outcome


def finished(cluster: Cluster, job_id: str) -> api.JobStatus | None:
    state = api.status(cluster.replica(), job_id)
    if not state.finished:
        cluster.committed(job_id)  # fails once the job has stalled
    return state if state.finished else None


def strike_all(cluster: Cluster, job_id: str, outcome: Outcome,
               say: Callable[[str], object]) -> None:  # fmt: skip
    """Each fault in turn, once the cluster is whole and the job has committed its epochs; one
    the job outlives no longer lands (it completed first), which is a problem of the run: its
    input was too short for its faults."""
    for number, fault in enumerate(outcome.faults, 1):
        cluster.await_whole()
        if not progressed(cluster, job_id, fault.after):
            outcome.problems.append(f"the job completed before fault {number} landed: its "
                                    "input is too short for the faults")  # fmt: skip
            return
        at = datetime.now().strftime("%H:%M:%S.%f")[:-3]
        detail = strike(cluster, fault)
        outcome.landed.append(f"{at} {fault}{detail}")
        say(f"  {at} {fault}{detail}")
    cluster.await_whole()


def progressed(cluster: Cluster, job_id: str, epochs: int) -> bool:
    """Wait until the job has committed ``epochs`` more epochs, the last on its current
    allocation (none: until it has committed any, so it has started); False if it has
    finished instead."""
    base = wait_for(tolerant(lambda: [cluster.committed(job_id)]), DEADLINE,
                    "the job's commit record")[0]  # fmt: skip

    def moved() -> str | None:
        current = cluster.replica()
        if job_id not in current.jobs:
            return "finished"
        committed = cluster.committed(job_id)
        if committed is None:
            return None
        if epochs == 0:
            return "progressed"
        if committed.version != current.allocation_versions.get(job_id):
            return None
        same = base is not None and base.version == committed.version
        return "progressed" if committed.number - (base.number if same else 0) >= epochs else None

    what = f"the job to commit {epochs} epochs on its allocation"
    state = wait_for(tolerant(moved), DEADLINE, what, interval=0.2)
    return state == "progressed"


def strike(cluster: Cluster, fault: Fault) -> str:
    """Carry ``fault`` out and wait for its immediate effect (a process gone, a server back);
    what it struck, for the record."""
    member = cluster.slots[fault.member]
    pid, name = member.process.pid, current_id(member) or "?"
    workers = children(pid)
    cluster.workers.update(workers)
    if fault.kind == "kill-worker":
        victim = workers[fault.worker % len(workers)]
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: victim not in children(pid) and len(children(pid)) == WORKERS,
                 DEADLINE, f"member {name[:8]} to restart worker {victim}")  # fmt: skip
        return f": worker pid {victim} of {name[:8]}"
    if fault.kind == "kill-member":
        member.signal(signal.SIGKILL)
        member.process.wait()
        wait_for(lambda: not [w for w in workers if alive(w)], 60,
                 f"the workers {workers} of killed member {name[:8]} to die with it")  # fmt: skip
        cluster.replace(fault.member)
        return f": {name[:8]} (pid {pid})"
    if fault.kind == "stop-member":
        stopped = [*workers, pid] if fault.whole else [pid]
        for p in stopped:
            os.kill(p, signal.SIGSTOP)
        time.sleep(fault.seconds)  # the pause is the fault's parameter
        for p in reversed(stopped):
            os.kill(p, signal.SIGCONT)
        return f": {name[:8]} (pid {pid})"
    if fault.kind == "down-member":
        result = onyx("down", "--zookeeper", cluster.server.address, "--tenancy",
                      cluster.tenancy, name)  # fmt: skip
        # the member may be down already: its session expired in an earlier fault, and it has
        # not yet printed the id it rejoins under
        assert result.returncode == 0 or "down already" in result.stderr, (
            f"onyx down {name}: {result.stderr}"
        )
        # a running member rejoins under a new id: it is its own replacement
        wait_for(lambda: current_id(member) != name or member.process.poll() is not None,
                 DEADLINE, f"downed member {name[:8]} to rejoin or exit")  # fmt: skip
        if member.process.poll() is not None:
            cluster.replace(fault.member)
            return f": {name[:8]}, which exited"
        return f": {name[:8]}, back as {current_id(member)[:8]}"
    if fault.kind == "leave-member":
        result = onyx("leave", "--zookeeper", cluster.server.address, "--tenancy",
                      cluster.tenancy, name)  # fmt: skip
        assert result.returncode == 0, f"onyx leave {name}: {result.stderr}"
        wait_for(lambda: member.process.poll() is not None, DEADLINE,
                 f"leaving member {name[:8]} to exit")  # fmt: skip
        code = member.process.returncode
        assert code == 0, f"member {name} exited with {code} on leaving"
        cluster.replace(fault.member)
        return f": {name[:8]}"
    assert fault.kind == "kill-zookeeper", fault.kind
    cluster.restart_zookeeper(fault.seconds)
    return ""


def stuck(cluster: Cluster, job_id: str | None) -> str:
    """Where a run that timed out stood: the job's status and last commit, and in the run's
    diagnosis.txt where each of its peers ran and what the members' metrics said of it."""
    if job_id is None:
        return ""
    try:
        current = cluster.replica()
        state = api.status(current, job_id)
        committed = api.last_committed(cluster.store, job_id)
    except Exception as e:  # the cluster may be what is broken
        return f"; could not read the job's state: {e!r}"
    lines = [f"allocation version {state.allocation_version}, last commit {committed}",
             f"standbys {state.standbys}", f"takeovers {state.takeovers}",
             f"recovering {state.recovering}"]  # fmt: skip
    for task, peers in state.allocation.items():
        for peer in peers:
            group = current.group_of(peer)
            lines.append(f"{task}: peer {peer} of member {group} at {current.peer_sites.get(peer)}")
    for member, port in cluster.metrics.items():
        if member.process.poll() is not None:
            continue
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
                text = reply.read().decode()
        except OSError as e:
            lines.append(f"member {current_id(member)}: no metrics: {e!r}")
            continue
        lines.append(f"member {current_id(member)} (log {member.log_path.name}):")
        lines += [
            f"  {line}"
            for line in text.splitlines()
            if job_id in line
            and not any(part in line for part in ("_bucket{", "_created{", "_sum{", "_count{"))
        ]
    (cluster.logs / "diagnosis.txt").write_text("\n".join(lines) + "\n")
    return (f"; job {state.state}, allocation version {state.allocation_version}, last commit "
            f"{committed}, recovering {state.recovering}, takeovers {state.takeovers}; its peers "
            f"and metrics in {cluster.logs / 'diagnosis.txt'}")  # fmt: skip


def figures_from_log(store: LogStore, job_id: str, outcome: Outcome) -> None:
    """The job's rollbacks (rollback-job entries that took effect), reallocations (allocation
    versions after the first) and seats taken over, from the whole cluster log, which is kept
    beside the members' logs (log.jsonl: each entry, and the job's allocation version and
    takeovers after it): the server and its data go with the run."""
    versions: set[int] = set()
    seats: set[tuple[str, int]] = set()
    kept = (outcome.logs / "log.jsonl").open("w")

    def note(t: Transition) -> None:
        kind = t.kind.name if t.kind is not None else None
        after = {"version": t.new.allocation_versions.get(job_id),
                 "takeovers": dict(t.new.takeovers.get(job_id, {}))}  # fmt: skip
        line = {"position": t.entry.position, "fn": t.entry.fn, "args": dict(t.entry.args)}
        kept.write(json.dumps({**line, "refused": t.kind is None, "job": after}, default=str))
        kept.write("\n")
        if kind == "rollback-job" and t.diff is not None and t.entry.args.get("job") == job_id:
            outcome.rollbacks += 1
        version = t.new.allocation_versions.get(job_id)
        if version is not None:
            versions.add(version)
            for peer in t.new.takeovers.get(job_id, {}):
                seats.add((peer, version))

    with kept:
        api.follow(store, lambda _: True, 60, each=note)
    outcome.reallocations = max(len(versions) - 1, 0)
    outcome.takeovers = len(seats)


def commit_times(logs: dict[Path, str], job_id: str) -> list[tuple[float, Epoch]]:
    """Every commit of the job from its coordinators' log lines (wall clock, ms), in order."""
    seen: dict[Epoch, float] = {}
    for text in logs.values():
        for line in text.splitlines():
            m = COMMITTED.match(line)
            if m and m.group(2) == job_id:
                at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                seen.setdefault(Epoch(int(m.group(4)), int(m.group(3))), at)
    return sorted((at, epoch) for epoch, at in seen.items())


def longest_gap(commits: list[tuple[float, Epoch]]) -> tuple[float | None, str]:
    """The longest time between two consecutive commits, and which."""
    if len(commits) < 2:
        return None, ""
    gap, (before, after) = max((b[0] - a[0], (a, b)) for a, b in itertools.pairwise(commits))
    clock = datetime.fromtimestamp(before[0]).strftime("%H:%M:%S.%f")[:-3]
    return gap, (f"from {clock}, epoch {before[1].number} of allocation {before[1].version}, "
                 f"to epoch {after[1].number} of allocation {after[1].version}")  # fmt: skip


def check(
    outcome: Outcome,
    expected: Expected,
    base: Path,
    logs: dict[Path, str],
    *,
    job_id: str | None,
    open_until: float | None,
) -> None:
    """Exactly-once in both sinks, no traceback in any member's log, no stretch without a
    commit over the bound; figures into ``outcome``, failures into its problems. A job that did
    not complete has a stretch open from its last commit to ``open_until``."""
    for text in logs.values():
        outcome.abandoned += sum(1 for m in ABANDONED.finditer(text) if m.group(1) == job_id)
    for path, text in logs.items():
        if "Traceback" in text:
            at = text.index("Traceback")
            outcome.problems.append(f"a traceback in {path.name}:\n"
                                    + text[max(0, at - 300):at + 2000])  # fmt: skip
    if job_id is None:
        return
    commits = commit_times(logs, job_id)
    outcome.longest_without_commit, outcome.longest_after = longest_gap(commits)
    if open_until is not None and commits:
        still = open_until - commits[-1][0]
        if still > (outcome.longest_without_commit or 0):
            outcome.longest_without_commit = still
            last = commits[-1][1]
            outcome.longest_after = (
                f"from the last commit, epoch {last.number} of allocation {last.version}, to "
                "the run's end, uncommitted"
            )
    if outcome.problems:
        return  # the job did not complete: its output is partial
    for sink in ("first", "second"):
        lost, duplicated = differences(expected, records(base / sink))
        outcome.lost += lost
        outcome.duplicated += duplicated
        if lost or duplicated:
            outcome.problems.append(f"sink {sink}: {lost} lost, {duplicated} duplicated")
    gap, bound = outcome.longest_without_commit, outcome.bound
    if gap is not None and bound is not None and gap > bound:
        outcome.problems.append(f"{gap:.1f} s without a commit ({outcome.longest_after}), over "
                                f"the bound of {bound:.1f} s")  # fmt: skip
