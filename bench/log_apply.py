"""How fast the pure functions replay a long membership log, and how that cost grows with the
size of the replica.

A ClusterModel grows a cluster to --groups live groups of --vpeers virtual peers each, then churns
it (kills, graceful leaves and new groups, settling as it goes) until its log holds at least
--entries entries. Only the replay is timed: the whole model.log applied with apply_entry from an
empty Replica, best of --repeat runs. The same-run baseline replays only the first 10% of the
log, where the replica is still small; the last 10%, replayed from the replica at 90%, shows the
cost at full size.

Run: .venv/bin/python bench/log_apply.py [--entries N] [--seed S]
The last line of output is one JSON document holding every figure.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import fields

from peer.cluster.model import ClusterModel, ModelGroup
from peer.cluster.ring import watch_targets
from peer.log.apply import apply_entry
from peer.log.entries.group_leave import GROUP_LEAVE
from peer.log.entry import Effects, Entry, EntryKind, Transition
from peer.log.replica import Replica, invariant_violations, ring_cycle

_DEFAULTS = {f.name: f.default for f in fields(EntryKind)}


class SharedTransition(Transition):
    """A transition shared by every group at its position. An entry whose kind has neither
    reactions nor side effects (most are add-virtual-peer) asks nothing of any actor, so ``act``
    skips calling the defaults once per actor; any other entry acts exactly as a Transition."""

    __slots__ = ()

    def act(self, actors: Sequence[str], effects: Effects) -> list[Entry]:
        kind = self.kind
        if kind is None or (
            kind.reactions is _DEFAULTS["reactions"]
            and kind.side_effects is _DEFAULTS["side_effects"]
        ):
            return []
        return super().act(actors, effects)


class BenchModel(ClusterModel):
    """ClusterModel with three shortcuts that make it fast enough to write a long log with
    hundreds of live groups; none changes what any entry means or who reacts to it.

    * Replicas at a position are equal in every group (the model checks it), so the transition
      for a position is computed once and shared; groups then share replica objects, which also
      makes the model's agreement check an identity comparison.
    * After a group advances, only that group's watches can have changed (pulses change only in
      ``stop``, which still scans every group), so only its watches are checked for deaths, and
      not at all when the entry left the ring and the joins in flight untouched.
    * A new group starts from the replica of the most advanced live group instead of replaying
      the whole history, as a real group starts from the log's origin after gc.
    """

    def __init__(self) -> None:
        super().__init__()
        self._transitions: dict[int, Transition] = {}
        self._scope: ModelGroup | None = None
        self._watches_changed = True

    def transition(self, replica: Replica, entry: Entry) -> Transition:
        known = self._transitions.get(entry.position)
        if known is None or (known.old is not replica and known.old != replica):
            t = apply_entry(replica, entry)
            known = SharedTransition(t.entry, t.old, t.new, t.diff, t.kind)
            self._transitions[entry.position] = known
        old, new = known.old, known.new
        self._watches_changed = not (
            old.groups is new.groups
            and old.pairs is new.pairs
            and old.prepared is new.prepared
            and old.accepted is new.accepted
        )
        return known

    def start(self, vpeers: int = 1) -> str:
        origin = max((g.replica for g in self.alive()), key=lambda r: r.version, default=None)
        gid = super().start(vpeers)
        if origin is not None:
            self.groups[gid].replica = origin
        return gid

    def advance(self, gid: str) -> bool:
        self._scope = self.groups[gid]
        try:
            return super().advance(gid)
        finally:
            self._scope = None

    def stop(self, group: ModelGroup) -> None:
        self._scope = None
        super().stop(group)

    def detect_deaths(self) -> None:
        group = self._scope
        if group is None:
            super().detect_deaths()
            return
        if not group.alive or not self._watches_changed:
            return
        for target in sorted(watch_targets(group.replica, group.id) - group.reported):
            if not self.pulse_alive(target):
                group.reported.add(target)
                self.append(GROUP_LEAVE.entry(id=target))


def settle(model: ClusterModel) -> None:
    if not model.settle():
        raise RuntimeError("the model did not settle")


def generate(entries: int, groups: int, vpeers: int, seed: int) -> BenchModel:
    """Grow to ``groups`` live groups, then churn around that size until the log is long enough."""
    rng = random.Random(seed)
    model = BenchModel()
    while len(model.alive()) < groups:
        for _ in range(min(rng.randint(1, 8), groups - len(model.alive()))):
            model.start(vpeers)
        settle(model)
    while len(model.log) < entries:
        for _ in range(rng.randint(1, 4)):
            live = sorted(g.id for g in model.alive())
            grow = len(live) < groups or (len(live) <= groups * 1.05 and rng.random() < 0.5)
            if grow:
                model.start(vpeers)
            elif rng.random() < 0.5:
                model.kill(rng.choice(live))
            else:
                model.leave(rng.choice(live))
        settle(model)
    return model


def replay(entries: Sequence[Entry], replica: Replica | None = None) -> Replica:
    replica = Replica() if replica is None else replica
    for entry in entries:
        replica = apply_entry(replica, entry).new
    return replica


def best_time(entries: Sequence[Entry], start: Replica | None, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        began = time.perf_counter()
        replay(entries, start)
        best = min(best, time.perf_counter() - began)
    return best


def time_by_kind(entries: Sequence[Entry]) -> dict[str, dict[str, float]]:
    """One more replay, each apply timed on its own: where the time goes, kind by kind."""
    spent: Counter[str] = Counter()
    count: Counter[str] = Counter()
    replica = Replica()
    for entry in entries:
        began = time.perf_counter()
        replica = apply_entry(replica, entry).new
        spent[entry.fn] += time.perf_counter() - began
        count[entry.fn] += 1
    return {
        fn: {"entries": count[fn], "us_per_entry": round(spent[fn] / count[fn] * 1e6, 1)}
        for fn in sorted(count)
    }


def check(model: ClusterModel, final: Replica) -> None:
    """The replay must end where every live group of the model ended, in one ring."""
    live = model.alive()
    problems = invariant_violations(final)
    if final.version != len(model.log) - 1 or any(g.replica != final for g in live):
        problems.append("the replay differs from the model's live groups")
    if set(final.groups) != {g.id for g in live} or ring_cycle(final) is None:
        problems.append("the live groups do not form one ring")
    if problems:
        raise RuntimeError(f"bad log: {problems}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=20_000, help="target log size")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--groups", type=int, default=300, help="live groups to grow to")
    parser.add_argument("--vpeers", type=int, default=16, help="virtual peers per group")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs; the best counts")
    args = parser.parse_args(argv)

    began = time.perf_counter()
    model = generate(args.entries, args.groups, args.vpeers, args.seed)
    generate_s = time.perf_counter() - began
    log = model.log
    final = replay(log)
    check(model, final)

    seconds = best_time(log, None, args.repeat)
    tenth = max(1, len(log) // 10)
    first_s = best_time(log[:tenth], None, args.repeat)
    at_ninety = replay(log[: len(log) - tenth])
    last_s = best_time(log[len(log) - tenth :], at_ninety, args.repeat)
    per_s = len(log) / seconds
    first_per_s, last_per_s = tenth / first_s, tenth / last_s

    f = {
        "seed": args.seed,
        "generate_s": round(generate_s, 3),
        "entries": len(log),
        "seconds": round(seconds, 4),
        "entries_per_s": round(per_s),
        "groups": len(final.groups),
        "peers": len(final.peers),
        "replica_json_bytes": len(json.dumps(final.to_json())),
        "first10_entries": tenth,
        "first10_seconds": round(first_s, 4),
        "first10_entries_per_s": round(first_per_s),
        "first10_groups": len(replay(log[:tenth]).groups),
        "last10_entries": tenth,
        "last10_seconds": round(last_s, 4),
        "last10_entries_per_s": round(last_per_s),
        "last10_groups": len(at_ninety.groups),
        "whole_vs_first10": round(per_s / first_per_s, 3),
        "last10_vs_first10": round(last_per_s / first_per_s, 3),
        "kinds": time_by_kind(log),
    }
    print(f"seed: {f['seed']}")
    print(f"log generated in: {f['generate_s']} s (not timed below)")
    print(f"entries applied: {f['entries']} entries")
    print(f"seconds: {f['seconds']} s (best of {args.repeat})")
    print(f"entries_per_s: {f['entries_per_s']} entries/s")
    print(f"final replica groups: {f['groups']} groups")
    print(f"final replica peers: {f['peers']} peers")
    print(f"final replica json size: {f['replica_json_bytes']} bytes")
    print(
        f"baseline, first 10% from an empty replica: {tenth} entries, {f['first10_seconds']} s, "
        f"{f['first10_entries_per_s']} entries/s (ends at {f['first10_groups']} groups)"
    )
    print(
        f"last 10% from the replica at 90%: {tenth} entries, {f['last10_seconds']} s, "
        f"{f['last10_entries_per_s']} entries/s (starts at {f['last10_groups']} groups)"
    )
    print(f"throughput whole log / first 10%: {f['whole_vs_first10']} x")
    print(f"throughput last 10% / first 10%: {f['last10_vs_first10']} x")
    for fn, figures in f["kinds"].items():
        print(f"apply {fn}: {figures['entries']} entries, {figures['us_per_entry']} us/entry")
    print(json.dumps(f, sort_keys=True))


if __name__ == "__main__":
    main()
