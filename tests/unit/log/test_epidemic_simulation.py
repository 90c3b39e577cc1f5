"""Many members in one process on a simulated clock: a writer appends entries and gossips each;
every member must consume every entry in order, from gossip while it is healthy and from the log
alone when it is dropped, and the log is read about once per entry a member's gossip missed."""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field

import pytest

from peer.log.epidemic.fallback import Fallback
from peer.log.epidemic.reorder import ReorderCache
from peer.log.epidemic.rumor import LiveMembers, Rumor, Sends, Spread, copy_rng, forward, originate

SILENCE = 1.0
APPEND_EVERY = 0.05
LATENCY = (0.001, 0.01)


@dataclass
class Member:
    cache: ReorderCache
    timer: Fallback
    consumed: list[int] = field(default_factory=list)
    found_reads: int = 0
    empty_reads: int = 0
    evictions: int = 0


class Cluster:
    """The members, the log (position to bytes, what ZooKeeper holds) and a queue of timed
    events: appends, deliveries of gossip and members' timer wake-ups, one wake-up per member
    pending at a time, at the time its timer says (never a poll loop)."""

    def __init__(self, size: int, spread: Spread, bound: int, drop: float, seed: int) -> None:
        self.members = LiveMembers.of(f"m{i:04d}" for i in range(size))
        self.writer = self.members.ids[0]
        self.spread, self.drop = spread, drop
        self.rng = random.Random(seed)
        self.log: dict[int, bytes] = {}
        self.state = {
            m: Member(ReorderCache(next=0, bound=bound), Fallback.start(0.0, SILENCE))
            for m in self.members.ids
        }
        self.events: list[tuple[float, int, str, tuple]] = []
        self.order = itertools.count()
        self.messages = 0
        for member in self.members.ids:
            self.at(SILENCE, "wake", member)

    def at(self, time: float, kind: str, *payload) -> None:
        heapq.heappush(self.events, (time, next(self.order), kind, payload))

    def run(self, entries: int, until: float) -> None:
        for position in range(entries):
            self.at(position * APPEND_EVERY, "append", position)
        while self.events and self.events[0][0] <= until:
            now, _, kind, payload = heapq.heappop(self.events)
            getattr(self, kind)(now, *payload)

    def append(self, now: float, position: int) -> None:
        data = f"entry {position}".encode()
        self.log[position] = data
        self.receive(now, self.writer, position, data)
        rumor = Rumor(position, data, 0)
        rng = copy_rng(self.writer, self.writer, rumor)
        self.send(
            now,
            self.writer,
            originate(position, data, self.writer, self.members, rng=rng, spread=self.spread),
        )

    def send(self, now: float, sender: str, sends: Sends) -> None:
        for target in sends.targets:
            self.messages += 1
            if self.rng.random() >= self.drop:
                self.at(now + self.rng.uniform(*LATENCY), "deliver", target, sender, sends.rumor)

    def deliver(self, now: float, member: str, sender: str, rumor: Rumor) -> None:
        rng = copy_rng(member, sender, rumor)
        self.send(now, member, forward(rumor, member, self.members, rng=rng, spread=self.spread))
        self.receive(now, member, rumor.position, rumor.data)

    def receive(self, now: float, member: str, position: int, data: bytes) -> bool:
        state = self.state[member]
        cache = state.cache
        new = position >= cache.next and position not in cache.held
        state.evictions += new and len(cache.held) == cache.bound
        run, state.cache = cache.add(position, data).take()
        assert all(d == self.log[p] for p, d in run)
        state.consumed.extend(p for p, _ in run)
        if run:
            state.timer = state.timer.after_consumed(now)
        return bool(run)

    def wake(self, now: float, member: str) -> None:
        state = self.state[member]
        position = state.timer.position_to_read(now, state.cache.next)
        if position is not None:
            data = self.log.get(position)
            if data is None:
                state.empty_reads += 1
            else:
                state.found_reads += 1
                self.receive(now, member, position, data)
            state.timer = state.timer.after_read(now, found=data is not None)
        self.at(state.timer.due_at, "wake", member)

    def others(self) -> list[Member]:
        return [self.state[m] for m in self.members.ids if m != self.writer]


def simulate(size: int, entries: int, drop: float, bound: int = 64, seed: int = 16) -> Cluster:
    cluster = Cluster(size, Spread.for_members(size), bound, drop, seed)
    until = entries * APPEND_EVERY + 5 * SILENCE
    cluster.run(entries, until)
    for state in cluster.state.values():
        assert state.consumed == list(range(entries))
        assert state.empty_reads <= until / SILENCE + 1
    return cluster


def reads_per_entry_per_member(cluster: Cluster, entries: int) -> float:
    others = cluster.others()
    return sum(s.found_reads for s in others) / (entries * len(others))


def test_healthy_gossip_brings_every_entry_with_almost_no_reads_of_the_log():
    cluster = simulate(size=200, entries=20, drop=0.0)
    assert cluster.messages == 20 * 1092  # 3 + 9 + ... + 3^6: six rounds at 200 members
    assert reads_per_entry_per_member(cluster, 20) < 0.05


def test_without_gossip_the_timer_alone_reads_every_entry_once():
    cluster = simulate(size=200, entries=20, drop=1.0)
    assert all(s.found_reads == 20 for s in cluster.others())
    assert reads_per_entry_per_member(cluster, 20) == 1.0


@pytest.mark.parametrize(("drop", "bound"), [(0.5, 2), (0.9, 1), (0.2, 4)])
def test_lossy_gossip_and_a_small_cache_still_deliver_every_entry_in_order(drop, bound):
    """Entries evicted from a full cache are read from the log when their turn comes."""
    cluster = simulate(size=40, entries=30, drop=drop, bound=bound)
    assert sum(s.evictions for s in cluster.state.values()) > 0
    assert 0 < reads_per_entry_per_member(cluster, 30) <= 1.0
