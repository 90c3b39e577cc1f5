"""Failure detection and membership: how fast a change spreads by gossip, and what it costs.

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
leader waits for before moving a member on), median and max over --repeat runs with different
seeds drawn from --seed. The time until every member merely holds the version is printed too
(dissemination).

The same-run baseline is naive push gossip on the same cluster, change and seed: every member,
once per interval, sends its full state to a uniformly random other member, with no digest and
no bias towards members that have not seen the version. Each figure is printed next to the naive
one and their ratio (push-pull / naive). The real cost is printed as well: this machine's wall
seconds per simulated run at each N, the mean microseconds per ``Gossip.receive`` (a merge), and
the messages sent until convergence, full states apart from statuses and requests. Runs go to
--jobs processes (their results do not depend on it), so each run's wall time is measured while
the other processes run too.

Detection time of a kill -9 and needless reallocations per hour under pauses (phi accrual against
the fixed timeout) are measured on real peer groups, where the detector now runs; that is not
written yet: they print as null with a note, and their functions are where it will go.

Run: .venv/bin/python bench/failure_detection.py [--sizes 10,100,1000] [--gossip-interval 1.0]
     [--latency 0.001] [--repeat 5] [--jobs 2] [--seed 1] [--quick]
``--quick`` is --repeat 1. The last line of output is one JSON document holding every figure.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from peer.membership.gossip import Gossip, Status  # noqa: E402
from peer.membership.pushpull import (  # noqa: E402
    GossipStatus,
    Reply,
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
        if reply is Reply.SEND_STATE:
            self.send_state(member, status.sender)
        elif reply is Reply.REQUEST_STATE:
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


def summary(runs: Sequence[RunResult]) -> dict[str, float]:
    """A kind's figures at one size: medians (and the max convergence) over its runs."""
    merges = sum(r.merges for r in runs)
    return {
        "convergence_s": round(statistics.median(r.convergence_s for r in runs), 4),
        "convergence_s_max": round(max(r.convergence_s for r in runs), 4),
        "dissemination_s": round(statistics.median(r.dissemination_s for r in runs), 4),
        "wall_s_per_run": round(statistics.median(r.wall_s for r in runs), 4),
        "us_per_merge": round(sum(r.merge_wall_s for r in runs) / max(merges, 1) * 1e6, 2),
        "states_sent": statistics.median(r.states for r in runs),
        "statuses_sent": statistics.median(r.statuses for r in runs),
        "requests_sent": statistics.median(r.requests for r in runs),
    }


FIGURES = (
    ("convergence_s", "s", "convergence, median"),
    ("convergence_s_max", "s", "convergence, max"),
    ("dissemination_s", "s", "every member holds the version, median"),
    ("states_sent", "states", "full states sent until convergence, median"),
    ("statuses_sent", "statuses", "statuses sent until convergence, median"),
    ("requests_sent", "requests", "state requests sent until convergence, median"),
    ("wall_s_per_run", "s", "wall time of one simulated run, median"),
    ("us_per_merge", "us", "wall time per Gossip.receive, mean"),
)


def ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def gossip_figures(args: argparse.Namespace) -> dict[str, Any]:
    """Gossip convergence per size, push-pull next to naive push, printed and returned."""
    timing = Timing(args.gossip_interval, args.latency)
    figures: dict[str, Any] = {}
    for n, kinds in gossip_runs(args.sizes, timing, args.repeat, args.seed, args.jobs).items():
        pushpull, naive = summary(kinds["pushpull"]), summary(kinds["naive"])
        print(f"gossip, {n} members ({args.repeat} runs; push-pull | naive push | ratio):")
        for key, unit, label in FIGURES:
            mine, base = pushpull[key], naive[key]
            shown = ratio(mine, base)
            print(f"  {label}: {mine} {unit} | {base} {unit} | {shown}")
            figures[f"gossip_{key}_{n}"] = mine
            figures[f"gossip_{key}_naive_{n}"] = base
        figures[f"gossip_convergence_ratio_{n}"] = ratio(
            pushpull["convergence_s"], naive["convergence_s"]
        )
    return figures


NOT_MEASURED = "not measured yet: the runs of real peer groups this needs are not written"


def detection_figures(args: argparse.Namespace) -> dict[str, Any]:
    """Detection time of a kill -9, phi accrual against the fixed timeout: to come."""
    print(f"detection time of a kill -9: {NOT_MEASURED}")
    return {"detection_s_median_phi": None, "detection_s_median_fixed": None}


def false_suspicion_figures(args: argparse.Namespace) -> dict[str, Any]:
    """Needless reallocations per hour under pauses and load, phi against fixed: to come."""
    print(f"needless reallocations per hour: {NOT_MEASURED}")
    return {
        "needless_reallocations_per_hour_phi": None,
        "needless_reallocations_per_hour_fixed": None,
    }


def sizes(text: str) -> list[int]:
    values = [int(part) for part in text.split(",")]
    if any(v < 2 for v in values):
        raise argparse.ArgumentTypeError("every size must be at least 2 members")
    return values


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    gossip = parser.add_argument_group("gossip convergence")
    gossip.add_argument("--sizes", type=sizes, default=[10, 100, 1000], help="members, a,b,c")
    gossip.add_argument("--gossip-interval", type=float, default=1.0, help="seconds")
    gossip.add_argument("--latency", type=float, default=0.001, help="one-way, seconds")
    gossip.add_argument("--repeat", type=int, default=5, help="runs per size and kind")
    gossip.add_argument("--jobs", type=int, default=2, help="processes running simulations")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="--repeat 1")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat = 1

    began = time.perf_counter()
    figures = {
        **detection_figures(args),
        **false_suspicion_figures(args),
        **gossip_figures(args),
    }
    figures["options"] = {
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
