"""Failure detection and membership: how fast a dead member is found, how often a live one is
suspected, and how fast a change spreads by gossip.

Gossip convergence (measured): --sizes simulated members (10, 100 and 1,000) in one process,
each holding its own membership state and running the real gossip code of peer/membership
(``GossipStatus``, ``respond``, ``pick_target``, ``rounds_per_interval``, ``Gossip.receive``)
over a loopback transport: a queue of messages between members, each delivered --latency
seconds after it was sent. Time is a simulated clock, so the figures are seconds of the
cluster's time, not of this machine's. Each member runs ``rounds_per_interval`` rounds per
--gossip-interval seconds (three while most members have not seen the latest version), starting
at a random phase. A round is push-pull: the gossiper sends its status (its version and a digest
of its seen set) to the member ``pick_target`` chooses; the receiver's ``respond`` decides
whether a full state travels, and which way (a request for it costs one more small message and
one more latency). A state carries every member and the seen set, so it grows with the cluster;
a status does not.

A run starts from a converged cluster of N up members; one member, picked at random, moves
itself to leaving (a change that can converge: an unreachable member blocks convergence by
design). The figure is the simulated time from that change until every member holds its version
and its own state says converged (every member knows that every member has seen it, which the
leader waits for before moving a member on), median, min and max over --repeat runs with
different seeds drawn from --seed. The time until every member merely holds the version is
printed too (dissemination).

The same-run baseline is naive push gossip on the same cluster, change and seed: every member,
once per interval, sends its full state to a uniformly random other member, with no digest and
no bias towards members that have not seen the version. Each figure is printed next to the naive
one and the ratio of their medians (push-pull / naive). The real cost is printed as well: this
machine's wall seconds per simulated run at each N, the mean microseconds per ``Gossip.receive``
(a merge), and the messages sent until convergence, full states apart from statuses and
requests; each figure of a run is given as the median, min and max over the runs. Runs go to
--jobs processes (their results do not depend on it), so each run's wall time is measured while
the other processes run too.

Failure detection (measured on real processes): a cluster of member processes
(bench/membership_member.py), each running the real MembershipService over the real Aeron
beacon of a transport with its own embedded media driver, driven by a loop like a peer group's;
the benchmark stands in for the log (it tells every member the members and their sites, and
lets a downed member leave). Three observers stay up: ``a-phi`` with the shipped
MembershipSettings (first in sorted order, so the leader, which downs), and two recorders that
heartbeat the same way every 0.1 s and every 0.5 s with a threshold out of reach, so they never
mark anyone unreachable themselves. Each observer writes down when every heartbeat reply of the
subject arrived, and its own loop's stalls.

Both detectors get the same grace before a suspicion moves work: the shipped auto-down time
(MembershipSettings.auto_down_unreachable_after), so their reallocations compare like for like.
The old code had no grace (it reported the peers at the first suspicion): what that rule gave is
printed only labelled as the old code's, and no comparison or goal uses it.

- Kills: --kills subjects in turn join, are heard by every observer, heartbeat for --warmup
  seconds, and are killed -9. Phi's detection is live: from the kill until the leader's
  gossiped state holds the subject unreachable (its own verdict); its down is live too: until
  the leader downs it, where a peer group writes GROUP_LEAVE to the log. The fixed detector
  (the deleted peer/runtime/liveness.py: suspect after 1 s without a heartbeat, heartbeats every
  0.1 s) is the bench's FixedJudge on the replies the 0.1 s recorder got in the same run
  (request/reply through the real service, where the old beats were one-way from a thread of
  the sender). Its reallocation is when its suspicion has lasted the grace: its detection plus
  the grace (the old code reallocated at its detection). Both stop at the leave handed to the
  log, whose write and the reallocation after it are the same for both. Each figure is the
  median, min and max over the kills.
- Load: a fresh subject, one busy loop per core, and the subject stopped by SIGSTOP for 0.3-1.5 s
  (seeded) every --pause-gap seconds, for --load-seconds. Phi's false suspicions are the
  leader's live unreachable marks of the subject, its needless reallocations the leader's
  downs; the fixed detector's suspicions come from FixedJudge on the 0.1 s trace, and its
  needless reallocations are those lasting the grace (the old code's, one per suspicion, are
  its false suspicions). Counts are extrapolated per hour from the measured period.
- Grid: every (heartbeat interval of an observer, acceptable pause, threshold) judged by the real
  HeartbeatMonitor (PhiJudge) on the same recorded traces, asked every membership tick, with
  the agent's forgiveness of the observer's own stalls: detection median, min and max over the
  kills, false suspicions and needless reallocations (suspicions lasting the grace) per hour,
  and whether it meets the goal against the fixed detector at the same grace (median detection
  no slower, and at most a tenth of its needless reallocations: none where it has none). The
  shipped settings are judged this way too, as a check of the live figures.

Run: .venv/bin/python -m bench.failure_detection [--kills 20] [--warmup 3] [--load-seconds 180]
     [--pause-gap 1,5] [--sizes 10,100,1000] [--gossip-interval 1.0] [--latency 0.001]
     [--repeat 5] [--jobs 2] [--parts detection,gossip] [--seed 1] [--quick]
``--quick`` is --repeat 1 --kills 5 --load-seconds 30. The last line of output is one JSON
document holding every figure.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.membership_member import STALL  # noqa: E402
from peer.membership.agent import MembershipSettings  # noqa: E402
from peer.membership.gossip import Gossip, Status  # noqa: E402
from peer.membership.heartbeat import HeartbeatMonitor  # noqa: E402
from peer.membership.phi import PhiSettings  # noqa: E402
from peer.membership.pushpull import (  # noqa: E402
    GossipReply,
    GossipStatus,
    pick_target,
    respond,
    rounds_per_interval,
)
from peer.membership.vclock import VectorClock  # noqa: E402

#: Simulated intervals after which a run that has not converged is a failure, not a slow figure.
GIVE_UP_INTERVALS = 1000


@dataclass(frozen=True, slots=True)
class Timing:
    """The simulated cluster's clock: rounds per interval and one-way message latency."""

    interval: float
    latency: float


@dataclass(frozen=True, slots=True)
class RunResult:
    """One simulated run, from the change until every member holds it converged."""

    convergence_s: float
    dissemination_s: float
    statuses: int
    requests: int
    states: int
    merges: int
    merge_wall_s: float
    wall_s: float


@dataclass(frozen=True, slots=True)
class Spread:
    """A figure over a benchmark's repeats or kills: the median and the range, so a reader sees
    how far the repeats strayed, not only the best or the worst of them."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        ordered = sorted(values)
        return cls(statistics.median(ordered), ordered[0], ordered[-1])

    def seconds(self) -> str:
        return f"{r(self.median)} s (min {r(self.low)}, max {r(self.high)})"


def member_ids(n: int) -> tuple[str, ...]:
    """Group ids of ``n`` members, in sorted order."""
    return tuple(f"group-{i:04d}" for i in range(n))


def converged_cluster(ids: Sequence[str]) -> Gossip:
    """The state every member holds before the change: all up, seen by all."""
    state = Gossip()
    for member in ids:
        state = state.with_member_status(ids[0], member, Status.UP)
    return replace(state, seen=frozenset(ids))


class Simulation:
    """Members' states, a queue of timed events and what a run counts.

    Subclasses say what a round is and how a message is taken in. Events are ordered by time,
    then by when they were queued, so a run depends only on its seed.
    """

    def __init__(self, n: int, timing: Timing, rng: random.Random) -> None:
        self.ids = member_ids(n)
        self.timing = timing
        self.rng = rng
        start = converged_cluster(self.ids)
        self.states = dict.fromkeys(self.ids, start)
        changer = rng.choice(self.ids)
        self.states[changer] = start.with_member_status(changer, changer, Status.LEAVING)
        self.target: VectorClock = self.states[changer].version
        self.holding = {changer}
        self.done: set[str] = set()
        self.now = 0.0
        self.events: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self.order = itertools.count()
        self.dissemination_s: float | None = None
        self.statuses = self.requests = self.states_sent = self.merges = 0
        self.merge_wall_s = 0.0
        for member in self.ids:
            self.at(rng.uniform(0.0, timing.interval), self.round, member)

    def at(self, when: float, action: Callable[..., None], *args: Any) -> None:
        heapq.heappush(self.events, (when, next(self.order), action, args))

    def send(self, action: Callable[..., None], *args: Any) -> None:
        """A message, handled by ``action`` at its receiver one latency from now."""
        self.at(self.now + self.timing.latency, action, *args)

    def run(self) -> RunResult:
        began = time.perf_counter()
        give_up = GIVE_UP_INTERVALS * self.timing.interval
        while len(self.done) < len(self.ids):
            self.now, _, action, args = heapq.heappop(self.events)
            if self.now > give_up:
                raise RuntimeError(f"{len(self.ids)} members did not converge in {give_up} s")
            action(*args)
        assert self.dissemination_s is not None
        return RunResult(
            convergence_s=self.now,
            dissemination_s=self.dissemination_s,
            statuses=self.statuses,
            requests=self.requests,
            states=self.states_sent,
            merges=self.merges,
            merge_wall_s=self.merge_wall_s,
            wall_s=time.perf_counter() - began,
        )

    def take_state(self, member: str, incoming: Gossip) -> None:
        """``member`` merges a full state it was sent, timed; then progress is noted."""
        began = time.perf_counter()
        state = self.states[member].receive(member, incoming)
        self.merge_wall_s += time.perf_counter() - began
        self.merges += 1
        self.states[member] = state
        if state.version != self.target:
            return
        if member not in self.holding:
            self.holding.add(member)
            if len(self.holding) == len(self.ids):
                self.dissemination_s = self.now
        # Converged needs every member in the seen set (none is gone in these runs): counting
        # first spares most calls of converged(), which walks every member.
        if member not in self.done and len(state.seen) == len(self.ids) and state.converged():
            self.done.add(member)

    def round(self, member: str) -> None:
        raise NotImplementedError


class PushPull(Simulation):
    """Push-pull gossip with the real decisions: status first, the state only where needed.

    A member's status and rounds per interval are functions of its state alone, and each walks
    every member: they are kept per member until its state changes, which spares most of the
    simulation's cost at 1,000 members and changes nothing that is sent or when.
    """

    def __init__(self, n: int, timing: Timing, rng: random.Random) -> None:
        super().__init__(n, timing, rng)
        self.derived: dict[str, tuple[Gossip, GossipStatus, int]] = {}

    def round(self, member: str) -> None:
        state = self.states[member]
        status, rounds = self.derive(member, state)
        target = pick_target(state, member, self.ids, self.rng)
        if target is not None:
            self.statuses += 1
            self.send(self.on_status, target, status)
        self.at(self.now + self.timing.interval / rounds, self.round, member)

    def derive(self, member: str, state: Gossip) -> tuple[GossipStatus, int]:
        """``member``'s status and rounds per interval for ``state``, computed once per state."""
        known = self.derived.get(member)
        if known is None or known[0] is not state:
            known = (state, GossipStatus.of(member, state), rounds_per_interval(state))
            self.derived[member] = known
        return known[1], known[2]

    def on_status(self, member: str, status: GossipStatus) -> None:
        reply = respond(self.states[member], status)
        if reply is GossipReply.SEND_STATE:
            self.send_state(member, status.sender)
        elif reply is GossipReply.REQUEST_STATE:
            self.requests += 1
            self.send(self.on_request, status.sender, member)

    def on_request(self, member: str, asker: str) -> None:
        self.send_state(member, asker)

    def send_state(self, sender: str, receiver: str) -> None:
        self.states_sent += 1
        self.send(self.take_state, receiver, self.states[sender])


class NaivePush(Simulation):
    """The baseline: once per interval, the full state to a uniformly random other member."""

    def __init__(self, n: int, timing: Timing, rng: random.Random) -> None:
        super().__init__(n, timing, rng)
        self.position = {member: i for i, member in enumerate(self.ids)}

    def round(self, member: str) -> None:
        others = len(self.ids) - 1
        if others:
            pick = self.rng.randrange(others)
            target = self.ids[pick + (pick >= self.position[member])]
            self.states_sent += 1
            self.send(self.take_state, target, self.states[member])
        self.at(self.now + self.timing.interval, self.round, member)


SIMULATIONS: dict[str, type[Simulation]] = {"pushpull": PushPull, "naive": NaivePush}


def simulate(kind: str, n: int, timing: Timing, seed: int) -> RunResult:
    """One run of gossip ``kind`` ("pushpull" or "naive") on ``n`` members."""
    return SIMULATIONS[kind](n, timing, random.Random(seed)).run()


def gossip_runs(
    sizes: Sequence[int], timing: Timing, repeat: int, seed: int, jobs: int = 1
) -> dict[int, dict[str, list[RunResult]]]:
    """Runs of both kinds per size, in ``jobs`` processes; the two kinds share each run's seed
    (and so its change), and the results do not depend on ``jobs``."""
    seeds = random.Random(seed)
    tasks = [
        (kind, n, run_seed)
        for n in sizes
        for run_seed in [seeds.getrandbits(64) for _ in range(repeat)]
        for kind in sorted(SIMULATIONS)
    ]
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            futures = [pool.submit(simulate, kind, n, timing, s) for kind, n, s in tasks]
            results = [future.result() for future in futures]
    else:
        results = [simulate(kind, n, timing, s) for kind, n, s in tasks]
    runs: dict[int, dict[str, list[RunResult]]] = {n: {k: [] for k in SIMULATIONS} for n in sizes}
    for (kind, n, _), result in zip(tasks, results, strict=True):
        runs[n][kind].append(result)
    return runs


PER_RUN: dict[str, Callable[[RunResult], float]] = {
    "convergence_s": lambda run: run.convergence_s,
    "dissemination_s": lambda run: run.dissemination_s,
    "states_sent": lambda run: run.states,
    "statuses_sent": lambda run: run.statuses,
    "requests_sent": lambda run: run.requests,
    "wall_s_per_run": lambda run: run.wall_s,
}
"""What each run gives: reported as median, min (``_min``) and max (``_max``) over the runs."""


def summary(runs: Sequence[RunResult]) -> dict[str, float]:
    """A kind's figures at one size: each run's figures as median, min and max over its runs,
    and the mean cost of a merge over all of them (thousands of merges, not a few repeats)."""
    figures: dict[str, float] = {}
    for key, of_run in PER_RUN.items():
        spread = Spread.of(of_run(run) for run in runs)
        figures[key] = round(spread.median, 4)
        figures[f"{key}_min"] = round(spread.low, 4)
        figures[f"{key}_max"] = round(spread.high, 4)
    merges = sum(run.merges for run in runs)
    merge_wall_s = sum(run.merge_wall_s for run in runs)
    figures["us_per_merge"] = round(merge_wall_s / max(merges, 1) * 1e6, 2)
    return figures


FIGURES = (
    ("convergence_s", "s", "convergence"),
    ("dissemination_s", "s", "every member holds the version"),
    ("states_sent", "states", "full states sent until convergence"),
    ("statuses_sent", "statuses", "statuses sent until convergence"),
    ("requests_sent", "requests", "state requests sent until convergence"),
    ("wall_s_per_run", "s", "wall time of one simulated run"),
    ("us_per_merge", "us", "wall time per Gossip.receive, mean"),
)
"""What is printed per size, median (min, max) where the runs give one figure each."""


def shown(figures: dict[str, float], key: str, unit: str) -> str:
    """A figure with its unit, and its range over the runs where it has one."""
    if f"{key}_min" not in figures:
        return f"{figures[key]} {unit}"
    return f"{figures[key]} {unit} (min {figures[f'{key}_min']}, max {figures[f'{key}_max']})"


def ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def gossip_figures(args: argparse.Namespace) -> dict[str, Any]:
    """Gossip convergence per size, push-pull next to naive push, printed and returned."""
    timing = Timing(args.gossip_interval, args.latency)
    figures: dict[str, Any] = {}
    for n, kinds in gossip_runs(args.sizes, timing, args.repeat, args.seed, args.jobs).items():
        pushpull, naive = summary(kinds["pushpull"]), summary(kinds["naive"])
        print(f"gossip, {n} members ({args.repeat} runs; push-pull | naive push | ratio of"
              f" medians; median (min, max) over the runs):")  # fmt: skip
        for key, unit, label in FIGURES:
            print(f"  {label}: {shown(pushpull, key, unit)} | {shown(naive, key, unit)} | "
                  f"{ratio(pushpull[key], naive[key])}")  # fmt: skip
        for key in pushpull:
            figures[f"gossip_{key}_{n}"] = pushpull[key]
            figures[f"gossip_{key}_naive_{n}"] = naive[key]
        figures[f"gossip_convergence_ratio_{n}"] = ratio(
            pushpull["convergence_s"], naive["convergence_s"]
        )
    return figures


# -- failure detection on real processes ---------------------------------------------------------


FIXED_TIMEOUT = 1.0
"""The deleted fixed detector: a group not heard from for this long was reported."""
FIXED_INTERVAL = 0.1
"""... with heartbeats every this often."""
SHIPPED = MembershipSettings()
TICK = SHIPPED.tick


def shipped_grace() -> float:
    """The shipped auto-down time, read from MembershipSettings: the grace both detectors get
    before a suspicion reallocates, so that their reallocations compare like for like."""
    after = SHIPPED.auto_down_unreachable_after
    if after is None:
        raise RuntimeError("the shipped settings never auto-down: there is no grace to compare at")
    return after


GRACE = shipped_grace()
"""How often a member's membership thread looks at its agent."""
LEADER = "a-phi"
"""The member with the shipped settings; first in sorted order, so the leader that downs."""
RECORDERS = {"b-record-0.1": FIXED_INTERVAL, "c-record-0.5": 0.5}
"""Members heartbeating at other intervals only to record reply arrivals: their threshold is
out of reach, so the unreachability and downs of the cluster are the shipped member's alone."""
RECORDER_THRESHOLD = 1e6
PAUSE_RANGE = (0.3, 1.5)
"""Seconds of each SIGSTOP of the paused member: a stand-in for a long collection."""
GRID_PAUSES = (0.2, 0.3, 0.5, 1.0)
GRID_THRESHOLDS = (8.0, 12.0)
HORIZON = 20.0
"""Seconds after a kill within which every detector of the grid must have suspected the subject
and, GRACE later, reallocated."""
DEADLINE = 60.0
"""Seconds to wait for any one thing a member process should say."""


@dataclass(frozen=True, slots=True)
class Trace:
    """What one observer saw of one subject: the heartbeat replies' arrival times and the
    observer's own stalls (gaps of its loop), judged from ``start`` to ``end``; monotonic s."""

    arrivals: tuple[float, ...]
    stalls: tuple[tuple[float, float], ...]
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class Suspicion:
    start: float
    end: float | None
    """None: still suspected when the trace ends."""

    def length(self, trace_end: float) -> float:
        return (self.end if self.end is not None else trace_end) - self.start


class FixedJudge:
    """The deleted fixed detector (peer/runtime/liveness.py): a subject not heard from for
    ``timeout`` seconds is suspected; an observer that finds its own loop stalled for over half
    the timeout restarts the clock. The old code reported the peers at the first suspicion; the
    benchmark gives it phi's grace instead (a suspicion reallocates once it lasts GRACE)."""

    def __init__(self, timeout: float = FIXED_TIMEOUT) -> None:
        self.timeout = timeout
        self.forgive_after = timeout / 2
        self.last: float | None = None

    def heartbeat(self, now: float) -> None:
        self.last = now

    def forgive(self, since: float, now: float) -> None:
        if self.last is not None:
            self.last = now

    def suspects(self, now: float) -> bool:
        return self.last is not None and now - self.last > self.timeout


class PhiJudge:
    """The shipped detector as a member's agent runs it: the real HeartbeatMonitor with the
    given settings, leaving the observer's own stalls longer than an interval and the
    acceptable pause (MembershipSettings.stall_after) out of the subject's silence."""

    def __init__(self, settings: PhiSettings) -> None:
        self.monitor = HeartbeatMonitor("observer", settings, 1).for_members(["subject"])
        self.forgive_after = settings.first_heartbeat_estimate + settings.acceptable_heartbeat_pause

    def heartbeat(self, now: float) -> None:
        self.monitor = self.monitor.replied("subject", now)

    def forgive(self, since: float, now: float) -> None:
        self.monitor = self.monitor.forgive(since, now)

    def suspects(self, now: float) -> bool:
        return not self.monitor.reachability(now).get("subject", True)


Judge = FixedJudge | PhiJudge


def suspicions(trace: Trace, judge: Judge, step: float = TICK) -> list[Suspicion]:
    """The judge's suspicions along ``trace``, asked every ``step`` seconds as the membership
    thread asks its agent. Heartbeats are taken in at their arrival times; a stall of the
    observer longer than the judge forgives is forgiven at its end, and nobody is judged during
    it (the agent's rule; the fixed detector's loop did not run either)."""
    events = sorted(
        [(t, 1, t) for t in trace.arrivals]
        + [(end, 0, start) for start, end in trace.stalls if end - start > judge.forgive_after]
    )
    blackouts = [
        (s + judge.forgive_after, e) for s, e in trace.stalls if e - s > judge.forgive_after
    ]
    found: list[Suspicion] = []
    opened: float | None = None
    i = 0
    for k in range(int((trace.end - trace.start) / step) + 1):
        now = trace.start + k * step
        while i < len(events) and events[i][0] <= now:
            moment, kind, since = events[i]
            if kind:
                judge.heartbeat(moment)
            else:
                judge.forgive(since, moment)
            i += 1
        if any(s < now < e for s, e in blackouts):
            continue
        suspected = judge.suspects(now)
        if suspected and opened is None:
            opened = now
        elif not suspected and opened is not None:
            found.append(Suspicion(opened, now))
            opened = None
    if opened is not None:
        found.append(Suspicion(opened, None))
    return found


def of_death(trace: Trace, judge: Judge) -> list[Suspicion]:
    """The judge's suspicions after the subject's last reply: of its death. There are several
    when the observer stalled, forgave the silence and suspected again."""
    last = trace.arrivals[-1]
    return [s for s in suspicions(trace, judge) if s.start >= last]


def detection_after(trace: Trace, judge: Judge, killed: float) -> float | None:
    """Seconds from the kill until the judge first suspected the dead subject (None: never)."""
    found = of_death(trace, judge)
    return found[0].start - killed if found else None


def reallocation_after(trace: Trace, judge: Judge, killed: float, grace: float) -> float | None:
    """Seconds from the kill until a suspicion of the dead subject had lasted ``grace`` (None:
    none did before the trace ends). A suspicion cut short restarts the wait, as the leader's
    auto-down clock restarts for a member reachable again."""
    lasting = [s for s in of_death(trace, judge) if s.length(trace.end) >= grace]
    return lasting[0].start + grace - killed if lasting else None


def needless(found: Sequence[Suspicion], trace_end: float, grace: float) -> int:
    """How many suspicions reallocated: those lasting ``grace`` seconds (one still open at the
    trace's end counts with its length so far)."""
    return sum(1 for s in found if s.length(trace_end) >= grace)


class MemberProcess:
    """A bench/membership_member.py process and the lines it has written, read by a thread."""

    def __init__(self, member: str, flags: Sequence[str], logs: Path) -> None:
        self.id = member
        self.stderr = (logs / f"{member}.log").open("w")
        command = [sys.executable, "-m", "bench.membership_member", member, *flags]
        self.process = subprocess.Popen(
            command, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.stderr, text=True, bufsize=1,
        )  # fmt: skip
        self.events: list[dict[str, Any]] = []
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self.site = self.wait_for(lambda e: e["e"] == "ready")["site"]

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self.changed:
                self.events.append(json.loads(line))
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def wait_for(self, wanted: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The first event ``wanted`` accepts, waiting up to DEADLINE for it."""
        deadline = time.monotonic() + DEADLINE
        with self.changed:
            while True:
                found = next((e for e in self.events if wanted(e)), None)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or self.process.poll() is not None:
                    raise RuntimeError(f"member {self.id} did not say what was awaited in time "
                                       f"(its log: {self.stderr.name})")  # fmt: skip
                self.changed.wait(left)

    def tell(self, view: str) -> None:
        if self.process.poll() is None and self.process.stdin is not None:
            try:
                self.process.stdin.write(view + "\n")
                self.process.stdin.flush()
            except BrokenPipeError:
                pass

    def trace(self, subject: str, end: float) -> Trace:
        """This observer's view of ``subject``, judged from its first reply until ``end``."""
        with self.changed:
            events = list(self.events)
        arrivals = tuple(e["t"] for e in events if e["e"] == "hb" and e["member"] == subject)
        stalls = tuple((e["start"], e["end"]) for e in events if e["e"] == "stall")
        return Trace(arrivals, stalls, arrivals[0], end)

    def times(self, event: str, member: str) -> list[float]:
        with self.changed:
            return [e["t"] for e in self.events if e["e"] == event and e.get("member") == member]

    def close(self) -> None:
        if self.process.stdin is not None and self.process.poll() is None:
            self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.stderr.close()


class Cluster:
    """The observers and the subject of the moment, each told the members as a log would."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.members: dict[str, MemberProcess] = {}
        self.left: set[str] = set()
        self.add(LEADER, [])
        for member, interval in RECORDERS.items():
            flags = ["--heartbeat-interval", str(interval), "--auto-down", "none"]
            self.add(member, [*flags, "--threshold", str(RECORDER_THRESHOLD)])

    @property
    def observers(self) -> list[MemberProcess]:
        return [self.members[m] for m in (LEADER, *RECORDERS)]

    def add(self, member: str, flags: Sequence[str]) -> MemberProcess:
        self.members[member] = MemberProcess(member, flags, self.logs)
        self._tell()
        return self.members[member]

    def leave(self, member: str) -> None:
        """What a GROUP_LEAVE in the log does: the member is gone for everyone."""
        self.left.add(member)
        self._tell()

    def warm_up(self, subject: str, seconds: float) -> None:
        """Every observer hears ``subject``, then its history builds for ``seconds``."""
        for observer in self.observers:
            observer.wait_for(lambda e: e["e"] == "hb" and e["member"] == subject)
        time.sleep(seconds)

    def _tell(self) -> None:
        sites = {m: p.site for m, p in self.members.items()}
        view = json.dumps({"members": sites, "left": sorted(self.left)})
        for member, process in self.members.items():
            if member not in self.left:
                process.tell(view)

    def close(self) -> None:
        for process in self.members.values():
            process.close()


@dataclass(frozen=True, slots=True)
class Kill:
    subject: str
    killed: float
    unreachable_s: float
    """The leader's gossiped state holds the subject unreachable (its own phi verdict)."""
    down_s: float
    """The leader downs it: where a group writes GROUP_LEAVE to the log."""
    traces: dict[str, Trace]
    """Per observer."""


def kill_runs(cluster: Cluster, kills: int, warmup: float) -> list[Kill]:
    """``kills`` subjects in turn: each joins, warms up and is killed -9; the next starts once
    the leader holds the last unreachable, and is killed once the last is down."""
    leader = cluster.members[LEADER]
    done: list[Kill] = []
    pending: tuple[str, float, float] | None = None
    subject = cluster.add("subject-01", [])
    for k in range(1, kills + 1):
        cluster.warm_up(subject.id, warmup)
        if pending is not None:
            done.append(finish_kill(cluster, *pending))
        killed = time.monotonic()
        os.kill(subject.process.pid, signal.SIGKILL)
        subject.process.wait()
        name = subject.id
        seen = leader.wait_for(lambda e, n=name: e["e"] == "unreachable" and e["member"] == n)
        pending = (name, killed, seen["t"] - killed)
        if k < kills:
            subject = cluster.add(f"subject-{k + 1:02d}", [])
    if pending is not None:
        done.append(finish_kill(cluster, *pending))
    return done


def finish_kill(cluster: Cluster, subject: str, killed: float, unreachable_s: float) -> Kill:
    """Waits for the leader's down of ``subject``, then lets it leave, as the log would."""
    leader = cluster.members[LEADER]
    down = leader.wait_for(lambda e: e["e"] == "down" and e["member"] == subject)
    cluster.leave(subject)
    end = killed + HORIZON
    traces = {o.id: o.trace(subject, end) for o in cluster.observers}
    return Kill(subject, killed, unreachable_s, down["t"] - killed, traces)


@dataclass(frozen=True, slots=True)
class LoadRun:
    start: float
    end: float
    pauses: tuple[tuple[float, float], ...]
    traces: dict[str, Trace]
    unreachable: int
    """Times the leader held the paused member unreachable in the period (live)."""
    downs: int
    """Members the leader downed in the period (live): each a needless reallocation."""
    others_unreachable: int
    """Times the leader held an unpaused member unreachable (live)."""
    stalls: int
    """Observers' loop gaps over STALL in the period (forgiven past each detector's limit)."""


def load_run(cluster: Cluster, seconds: float, warmup: float, gaps: tuple[float, float],
             rng: random.Random) -> LoadRun:  # fmt: skip
    """A member paused by random SIGSTOPs while a busy loop per core runs, for ``seconds``."""
    subject = cluster.add("subject-paused", [])
    cluster.warm_up(subject.id, warmup)
    hog = [sys.executable, "-c", "while True: pass"]
    hogs = [subprocess.Popen(hog) for _ in range(os.cpu_count() or 1)]
    pauses: list[tuple[float, float]] = []
    leader = cluster.members[LEADER]
    try:
        start = time.monotonic()
        while time.monotonic() < start + seconds and not leader.times("down", subject.id):
            time.sleep(rng.uniform(*gaps))
            stopped = time.monotonic()
            os.kill(subject.process.pid, signal.SIGSTOP)
            try:
                time.sleep(rng.uniform(*PAUSE_RANGE))
            finally:
                os.kill(subject.process.pid, signal.SIGCONT)
            pauses.append((stopped, time.monotonic()))
        end = time.monotonic()
    finally:
        for process in hogs:
            process.kill()
            process.wait()
    traces = {o.id: o.trace(subject.id, end) for o in cluster.observers}
    with leader.changed:
        events = [e for e in leader.events if start <= e.get("t", start - 1) <= end]
    unreachable = [e for e in events if e["e"] == "unreachable"]
    stalls = sum(1 for t in traces.values() for s, _ in t.stalls if start <= s <= end)
    return LoadRun(
        start, end, tuple(pauses), traces,
        unreachable=sum(1 for e in unreachable if e["member"] == subject.id),
        downs=sum(1 for e in events if e["e"] == "down"),
        others_unreachable=sum(1 for e in unreachable if e["member"] != subject.id),
        stalls=stalls,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Setting:
    """One point of the grid: a phi detector on the trace of the observer heartbeating at
    ``interval``, or the fixed detector (``phi`` None) on the 0.1 s trace. Every one of them
    reallocates after the same grace, GRACE."""

    name: str
    observer: str
    phi: PhiSettings | None

    def judge(self) -> Judge:
        return FixedJudge() if self.phi is None else PhiJudge(self.phi)


def phi_setting(observer: str, interval: float, pause: float, threshold: float) -> Setting:
    phi = replace(
        SHIPPED.phi,
        acceptable_heartbeat_pause=pause,
        threshold=threshold,
        first_heartbeat_estimate=interval,
    )
    name = f"phi interval {interval} s, pause {pause} s, threshold {threshold:g}"
    return Setting(name, observer, phi)


FIXED = Setting(f"fixed {FIXED_TIMEOUT} s timeout, beats every {FIXED_INTERVAL} s",
                "b-record-0.1", None)  # fmt: skip
SHIPPED_SETTING = phi_setting(
    LEADER, SHIPPED.heartbeat_interval, SHIPPED.acceptable_heartbeat_pause, SHIPPED.threshold
)


def grid() -> list[Setting]:
    """The shipped setting first, then every other combination of interval (one per recording
    observer), acceptable pause and threshold."""
    observers = {LEADER: SHIPPED.heartbeat_interval, **RECORDERS}
    points = [
        phi_setting(o, i, p, t)
        for o, i in sorted(observers.items(), key=lambda item: item[1])
        for p in GRID_PAUSES
        for t in GRID_THRESHOLDS
    ]
    return [SHIPPED_SETTING, *(p for p in points if p != SHIPPED_SETTING)]


@dataclass(frozen=True, slots=True)
class Judged:
    detection: list[float]
    reallocation: list[float]
    """Seconds from each kill until a suspicion of it had lasted GRACE."""
    suspicions: int
    reallocations: int
    """Suspicions under load that lasted GRACE: needless reallocations."""
    hours: float
    longest: float
    """Seconds of the longest suspicion under load: what the auto-down time must outlast."""

    @property
    def median(self) -> float:
        return statistics.median(self.detection)

    def per_hour(self, count: int) -> float:
        return round(count / self.hours, 1)


def judge_runs(setting: Setting, kills: Sequence[Kill], load: LoadRun) -> Judged:
    """A setting's detection and reallocation times over the kills, and its suspicions and
    needless reallocations in the load period, every detector given the same grace."""
    detection, reallocation = [], []
    for kill in kills:
        trace = kill.traces[setting.observer]
        seconds = detection_after(trace, setting.judge(), kill.killed)
        moved = reallocation_after(trace, setting.judge(), kill.killed, GRACE)
        if seconds is None or moved is None:
            raise RuntimeError(f"{setting.name} did not suspect {kill.subject} for {GRACE} s")
        detection.append(seconds)
        reallocation.append(moved)
    trace = load.traces[setting.observer]
    found = [s for s in suspicions(trace, setting.judge()) if load.start <= s.start <= load.end]
    return Judged(
        detection,
        reallocation,
        suspicions=len(found),
        reallocations=needless(found, trace.end, GRACE),
        hours=(load.end - load.start) / 3600,
        longest=max((s.length(trace.end) for s in found), default=0.0),
    )


def measured(args: argparse.Namespace) -> tuple[list[Kill], LoadRun]:
    """The kills, then the load run, on one cluster of real member processes."""
    with tempfile.TemporaryDirectory(prefix="onyx-fd-bench-") as logs:
        cluster = Cluster(Path(logs))
        try:
            kills = kill_runs(cluster, args.kills, args.warmup)
            load = load_run(cluster, args.load_seconds, args.warmup, args.pause_gap,
                            random.Random(args.seed))  # fmt: skip
        finally:
            cluster.close()
    return kills, load


def detection_figures(args: argparse.Namespace) -> dict[str, Any]:
    """Detection, down and reallocation after kill -9, and suspicions under load: phi accrual
    (the shipped settings, live and on the recorded traces) against the fixed detector on the
    same run's 0.1 s heartbeat stream, both reallocating after the shipped auto-down time; then
    the grid of settings on the same traces."""
    kills, load = measured(args)
    fixed, shipped = judge_runs(FIXED, kills, load), judge_runs(SHIPPED_SETTING, kills, load)
    live = [k.unreachable_s for k in kills]
    downs = [k.down_s for k in kills]
    report_kills(live, downs, fixed, shipped)
    report_load(load, fixed, shipped, args.pause_gap)
    return {
        **over_kills("detection_s", "_phi", live),
        **over_kills("detection_s", "_phi_trace", shipped.detection),
        **over_kills("detection_s", "_fixed", fixed.detection),
        **over_kills("down_s", "_phi", downs),
        **over_kills("reallocation_s", "_phi_trace", shipped.reallocation),
        **over_kills("reallocation_s", "_fixed", fixed.reallocation),
        "reallocation_grace_s": GRACE,
        "false_suspicions_per_hour_phi": shipped.per_hour(load.unreachable),
        "false_suspicions_per_hour_phi_trace": shipped.per_hour(shipped.suspicions),
        "false_suspicions_per_hour_fixed": fixed.per_hour(fixed.suspicions),
        "longest_suspicion_s_phi_trace": r(shipped.longest),
        "needless_reallocations_per_hour_phi": shipped.per_hour(load.downs),
        "needless_reallocations_per_hour_phi_trace": shipped.per_hour(shipped.reallocations),
        "needless_reallocations_per_hour_fixed": fixed.per_hour(fixed.reallocations),
        "load_period_s": r(load.end - load.start),
        "load_stops": len(load.pauses),
        "load_paused_s": r(sum(e - s for s, e in load.pauses)),
        "load_observer_stalls": load.stalls,
        "kills": len(kills),
        "grid": grid_figures(kills, load, fixed),
    }


SPREAD = ("median", "min", "max")


def over_kills(figure: str, tail: str, seconds: Sequence[float]) -> dict[str, float]:
    """Seconds over the kills as figures ``{figure}_median{tail}``, ``_min`` and ``_max``."""
    spread = Spread.of(seconds)
    values = (spread.median, spread.low, spread.high)
    return {f"{figure}_{stat}{tail}": r(v) for stat, v in zip(SPREAD, values, strict=True)}


def report_kills(live: list[float], downs: list[float], fixed: Judged, shipped: Judged) -> None:
    print(f"detection of a kill -9, {len(live)} kills, median (min, max) (phi accrual, shipped | "
          f"fixed {FIXED_TIMEOUT} s timeout):")  # fmt: skip
    report_spreads(live, fixed.detection, shipped.detection)
    print(f"until reallocation, both after a suspicion of the shipped auto-down time, {GRACE} s "
          f"(phi: the leader's down | fixed: its suspicion lasting as long; the old code "
          f"reallocated at its first suspicion, its detection above):")  # fmt: skip
    report_spreads(downs, fixed.reallocation, shipped.reallocation)


def report_spreads(live: list[float], fixed: list[float], on_trace: list[float]) -> None:
    """One line of seconds over the kills: phi live | fixed, then phi on the recorded replies."""
    print(f"  {Spread.of(live).seconds()} | {Spread.of(fixed).seconds()}"
          f"  (phi on the recorded replies: {Spread.of(on_trace).seconds()})")  # fmt: skip


def report_load(load: LoadRun, fixed: Judged, shipped: Judged, gap: tuple[float, float]) -> None:
    paused = r(sum(e - s for s, e in load.pauses))
    print(f"under load ({os.cpu_count()} busy loops; {len(load.pauses)} stops of "
          f"{PAUSE_RANGE[0]}-{PAUSE_RANGE[1]} s, {paused} s in all, every {gap[0]}-{gap[1]} s; "
          f"measured for {r(load.end - load.start)} s, per hour extrapolated):")  # fmt: skip
    print(f"  false suspicions: {shipped.per_hour(load.unreachable)} /h | "
          f"{fixed.per_hour(fixed.suspicions)} /h  (phi on the recorded replies: "
          f"{shipped.per_hour(shipped.suspicions)} /h; counts {load.unreachable} | "
          f"{fixed.suspicions})")  # fmt: skip
    print(f"  needless reallocations, suspicions lasting {GRACE} s: "
          f"{shipped.per_hour(load.downs)} /h | {fixed.per_hour(fixed.reallocations)} /h  "
          f"(counts {load.downs} | {fixed.reallocations}; phi on the recorded replies: "
          f"{shipped.reallocations})")  # fmt: skip
    print(f"  the old code, reallocating at every suspicion of the fixed detector: "
          f"{fixed.per_hour(fixed.suspicions)} /h")  # fmt: skip
    print(f"  unpaused members the leader held unreachable: {load.others_unreachable}; "
          f"observers' loop gaps over {STALL} s: {load.stalls}")  # fmt: skip


def meets_goal(judged: Judged, fixed: Judged) -> bool:
    """The goal, against the fixed detector given the same grace: detection no slower (median
    over the kills) and at most a tenth of its needless reallocations (none if it has none)."""
    return judged.median <= fixed.median and judged.reallocations * 10 <= fixed.reallocations


def grid_figures(kills: Sequence[Kill], load: LoadRun, fixed: Judged) -> list[Any]:
    """Every setting of the grid on the same traces, each judged against the fixed detector."""
    print(
        f"settings on the same traces (detection median (min, max) over the kills; false "
        f"suspicions and needless reallocations, suspicions lasting {GRACE} s, per hour; the "
        f"goal, against the fixed detector given the same grace: median <= {r(fixed.median)} s, "
        f"reallocations <= {round(fixed.per_hour(fixed.reallocations) / 10, 1)} /h):"
    )
    rows = []
    for setting in grid():
        judged = judge_runs(setting, kills, load)
        meets = meets_goal(judged, fixed)
        print(f"  {setting.name}: {Spread.of(judged.detection).seconds()}; "
              f"{judged.per_hour(judged.suspicions)} /h (longest {r(judged.longest)} s); "
              f"{judged.per_hour(judged.reallocations)} /h{GOAL_MET if meets else ''}")  # fmt: skip
        assert setting.phi is not None
        rows.append({
            "heartbeat_interval": setting.phi.first_heartbeat_estimate,
            "acceptable_heartbeat_pause": setting.phi.acceptable_heartbeat_pause,
            "threshold": setting.phi.threshold,
            **over_kills("detection_s", "", judged.detection),
            "false_suspicions_per_hour": judged.per_hour(judged.suspicions),
            "longest_suspicion_s": r(judged.longest),
            "needless_reallocations_per_hour": judged.per_hour(judged.reallocations),
            "meets_goal": meets,
        })  # fmt: skip
    return rows


GOAL_MET = "  meets the goal"


def r(seconds: float) -> float:
    return round(seconds, 3)


def gaps(text: str) -> tuple[float, float]:
    low, high = (float(part) for part in text.split(","))
    if not 0 < low <= high:
        raise argparse.ArgumentTypeError(
            "the gap between stops is LOW,HIGH seconds, 0 < LOW <= HIGH"
        )
    return low, high


def sizes(text: str) -> list[int]:
    values = [int(part) for part in text.split(",")]
    if any(v < 2 for v in values):
        raise argparse.ArgumentTypeError("every size must be at least 2 members")
    return values


PARTS = ("detection", "gossip")


def parts(text: str) -> set[str]:
    chosen = set(text.split(","))
    if not chosen <= set(PARTS):
        raise argparse.ArgumentTypeError(f"parts are some of {','.join(PARTS)}")
    return chosen


NOT_RUN = dict.fromkeys(
    [f"{figure}_{stat}_{who}"
     for figure, who in [("detection_s", "phi"), ("detection_s", "fixed"), ("down_s", "phi"),
                         ("reallocation_s", "fixed")]
     for stat in SPREAD]
    + [f"{figure}_per_hour_{who}"
       for figure in ("false_suspicions", "needless_reallocations") for who in ("phi", "fixed")]
)  # fmt: skip
"""The main detection figures' keys, null when --parts leaves that part out."""


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    detection = parser.add_argument_group("detection on real member processes")
    detection.add_argument("--kills", type=int, default=20, help="members killed -9 in turn")
    detection.add_argument("--warmup", type=float, default=3.0,
                           help="seconds of heartbeats before a kill or the load")  # fmt: skip
    detection.add_argument("--load-seconds", type=float, default=180.0,
                           help="seconds of the period under load and stops")  # fmt: skip
    detection.add_argument("--pause-gap", type=gaps, default=(1.0, 5.0),
                           help="LOW,HIGH seconds of running between two stops")  # fmt: skip
    gossip = parser.add_argument_group("gossip convergence")
    gossip.add_argument("--sizes", type=sizes, default=[10, 100, 1000], help="members, a,b,c")
    gossip.add_argument("--gossip-interval", type=float, default=1.0, help="seconds")
    gossip.add_argument("--latency", type=float, default=0.001, help="one-way, seconds")
    gossip.add_argument("--repeat", type=int, default=5, help="runs per size and kind")
    gossip.add_argument("--jobs", type=int, default=2, help="processes running simulations")
    parser.add_argument("--parts", type=parts, default=set(PARTS), help="detection,gossip")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true",
                        help="--repeat 1 --kills 5 --load-seconds 30")  # fmt: skip
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat, args.kills, args.load_seconds = 1, 5, 30.0
    if args.kills < 1:
        parser.error("--kills must be at least 1")

    began = time.perf_counter()
    figures: dict[str, Any] = dict(NOT_RUN)
    if "detection" in args.parts:
        figures.update(detection_figures(args))
    if "gossip" in args.parts:
        figures.update(gossip_figures(args))
    figures["options"] = {
        "parts": sorted(args.parts),
        "kills": args.kills,
        "warmup": args.warmup,
        "load_seconds": args.load_seconds,
        "pause_gap": list(args.pause_gap),
        "sizes": args.sizes,
        "gossip_interval": args.gossip_interval,
        "latency": args.latency,
        "repeat": args.repeat,
        "seed": args.seed,
        "jobs": args.jobs,
        "quick": args.quick,
    }
    figures["bench_wall_s"] = round(time.perf_counter() - began, 2)
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
