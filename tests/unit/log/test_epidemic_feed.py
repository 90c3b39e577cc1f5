"""The epidemic feed over the embedded store: rumors consumed in order whatever order they come
in, each once; ZooKeeper read by position after a silence, never listed; a trim crossed by the
origin, with gossip or without; a gap listed once, with one warning; a malformed frame dropped
with one warning; rumors sent only to members that take them; an entry nobody gossiped started
by its scout."""

from __future__ import annotations

import itertools
import logging

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st
from pyrsistent import pmap, pset

from peer.cluster.aider import JoinRequest
from peer.log import subscriber
from peer.log.apply import apply_entry
from peer.log.entries.gc import GC, SET_REPLICA
from peer.log.entries.group_leave import GROUP_LEAVE
from peer.log.entries.join import PREPARE_JOIN
from peer.log.entries.virtual_peers import ADD_VIRTUAL_PEER
from peer.log.epidemic import wire
from peer.log.epidemic.fallback import scout
from peer.log.epidemic.feed import STUCK_SILENCES, EpidemicFeed, FeedSettings
from peer.log.epidemic.rumor import Rumor
from peer.log.replica import Replica
from peer.log.store import store_origin_and_trim
from peer.log.stores.memory import MemoryLog, MemoryStore
from peer.messaging import messages

SILENCE = 1.0


class ByPositionOnly(MemoryStore):
    """A session that refuses to list the log, so a test fails if the feed ever does."""

    def read(self, after: int) -> list:
        raise AssertionError(f"the feed listed the log after position {after}")

    def tail(self) -> int:
        raise AssertionError("the feed listed the log to find its tail")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Harness:
    def __init__(self, store: MemoryStore, *, me: str = "me", fanout: int = 3,
                 max_frame: int = 8192) -> None:  # fmt: skip
        self.store, self.clock, self.sent = store, Clock(), []
        self.woken = 0
        self.feed = EpidemicFeed(
            store, me, self._send, max_frame, FeedSettings(fanout=fanout, silence=SILENCE),
            clock=self.clock, wake=self._wake,
        )  # fmt: skip
        self.replica = Replica()

    def _send(self, site: str, frame: bytes) -> bool:
        self.sent.append((site, messages.decode(frame)[1].payload))
        return True

    def _wake(self) -> None:
        self.woken += 1

    def consume(self) -> list:
        entries = self.feed.next_entries(self.replica.version, self.replica)
        for entry in entries:
            self.replica = apply_entry(self.replica, entry).new
        return entries


def log_of(n: int, store: MemoryStore | None = None) -> MemoryStore:
    store = store or MemoryLog().session()
    for i in range(n):
        store.append(PREPARE_JOIN.entry(joiner=f"g{i}"))
    return store


def rumor(store: MemoryStore, position: int, sender: str = "other", round_: int = 0) -> bytes:
    return wire.encode(Rumor(position, store.log.entries[position], round_), sender)


def positions(entries) -> list[int]:
    return [e.position for e in entries]


def started(n: int, **options) -> tuple[ByPositionOnly, Harness]:
    """A member that has started (its first look at the log found it empty) and a log of
    ``n`` entries written since, on a session that refuses to list it."""
    store = ByPositionOnly(MemoryLog())
    h = Harness(store, **options)
    assert h.consume() == []
    log_of(n, store)
    return store, h


def test_rumors_in_order_are_consumed_in_order_without_reading_zookeeper():
    store, h = started(3)
    for p in range(3):
        h.feed.receive(rumor(store, p))
    assert positions(h.consume()) == [0, 1, 2]
    assert h.replica == subscriber.catch_up(log_of(3))


def test_rumors_out_of_order_wait_for_the_one_before_them():
    store, h = started(4)
    h.feed.receive(rumor(store, 2))
    h.feed.receive(rumor(store, 3))
    assert h.consume() == []
    h.feed.receive(rumor(store, 0))
    assert positions(h.consume()) == [0]
    h.feed.receive(rumor(store, 1))
    assert positions(h.consume()) == [1, 2, 3]


def test_the_tail_the_metrics_show_is_the_highest_position_heard_of_never_listed():
    store, h = started(4)
    assert h.feed.tail() == -1
    h.feed.receive(rumor(store, 2))
    assert h.feed.tail() == 2
    h.feed.receive(rumor(store, 0))
    h.feed.receive(rumor(store, 1))
    h.feed.receive(rumor(store, 3))
    assert positions(h.consume()) == [0, 1, 2, 3]
    assert h.feed.tail() == 3


def test_a_rumor_heard_twice_is_consumed_once():
    store, h = started(2)
    for payload in [rumor(store, 0), rumor(store, 0, "third", 2), rumor(store, 1)]:
        h.feed.receive(payload)
    assert positions(h.consume()) == [0, 1]
    h.feed.receive(rumor(store, 0))
    h.feed.receive(rumor(store, 1))
    assert h.consume() == []


def test_the_group_is_woken_only_when_the_next_entry_is_there():
    store, h = started(2)
    h.feed.receive(rumor(store, 1))
    assert h.woken == 0
    h.feed.receive(rumor(store, 0))
    assert h.woken == 1


def test_a_member_that_starts_catches_up_on_the_log_at_once_by_position():
    log = MemoryLog()
    log_of(3, log.session())
    h = Harness(ByPositionOnly(log))
    assert positions(h.consume()) == [0, 1, 2]


def test_after_a_silence_the_next_positions_are_read_one_by_one_never_listed():
    store, h = started(3)
    assert h.consume() == []
    assert h.feed.due_in(h.clock.now) == SILENCE
    h.clock.now = SILENCE
    assert positions(h.consume()) == [0, 1, 2]
    store.append(PREPARE_JOIN.entry(joiner="late"))
    h.clock.now += SILENCE / 2
    assert h.consume() == []
    h.clock.now += SILENCE
    assert positions(h.consume()) == [3]


def test_an_entry_consumed_from_gossip_puts_the_read_off_a_whole_silence():
    store, h = started(2)
    h.clock.now = 0.9 * SILENCE
    h.feed.receive(rumor(store, 0))
    assert positions(h.consume()) == [0]
    h.clock.now = 1.5 * SILENCE
    assert h.consume() == []
    h.clock.now = 1.9 * SILENCE
    assert positions(h.consume()) == [1]


def test_a_member_behind_a_trim_jumps_to_the_origin():
    store = log_of(4)
    origin = subscriber.catch_up(store)
    store.append(PREPARE_JOIN.entry(joiner="late"))
    h = Harness(store)
    h.feed.receive(rumor(store, 0))
    assert positions(h.consume()) == [0]
    store_origin_and_trim(store, origin)
    h.feed.receive(rumor(store, 4))
    h.clock.now = SILENCE
    entries = h.consume()
    assert [(e.fn, e.position) for e in entries] == [(SET_REPLICA.name, 3), (PREPARE_JOIN.name, 4)]
    untrimmed = log_of(4)
    untrimmed.append(PREPARE_JOIN.entry(joiner="late"))
    assert h.replica == subscriber.catch_up(untrimmed)


def test_a_missing_position_with_later_ones_known_is_listed_once_with_one_warning(caplog):
    store = log_of(4)
    del store.log.entries[1]  # a gap ZooKeeper never leaves: the safety net's case
    h = Harness(store)
    h.feed.receive(rumor(store, 3))
    h.clock.now = SILENCE
    caplog.set_level(logging.WARNING)
    assert positions(h.consume()) == [0]
    for _ in range(STUCK_SILENCES - 1):
        h.clock.now += SILENCE
        assert h.consume() == []
    h.clock.now += SILENCE
    assert positions(h.consume()) == [2, 3]
    warnings = [r for r in caplog.records if "missing" in r.getMessage()]
    assert len(warnings) == 1
    assert "position 1" in warnings[0].getMessage()


def test_a_malformed_rumor_is_dropped_with_one_warning(caplog):
    store, h = started(1)
    caplog.set_level(logging.WARNING)
    for payload in [b"\xc1 not msgpack", msgspec.msgpack.encode([1, 2]),
                    msgspec.msgpack.encode([-4, 0, "x", b"{}"]),
                    msgspec.msgpack.encode([0, 0, "", b"{}"])]:  # fmt: skip
        h.feed.receive(payload)
    assert len(caplog.records) == 4
    assert all("dropped a rumor" in r.getMessage() for r in caplog.records)
    h.feed.receive(rumor(store, 0))
    assert positions(h.consume()) == [0]


def with_members(replica: Replica, *members: str, classic: tuple[str, ...] = ()) -> Replica:
    """``members`` that take rumors, and ``classic`` ones that do not, each with a site."""
    everyone = (*members, *classic)
    return replica.evolve(
        groups=pset(everyone),
        sites=pmap({m: f"127.0.0.1:{9000 + i}" for i, m in enumerate(everyone)}),
        rumor_takers=pset(members),
    )


def test_a_copy_is_passed_on_to_fanout_members_other_than_itself_and_its_writer_originates():
    store, h = started(1, fanout=2)
    h.replica = with_members(h.replica, "me", "a", "b", "c", "d")
    h.consume()
    h.feed.receive(rumor(store, 0, "a", 0))
    assert len(h.sent) == 2
    assert "127.0.0.1:9000" not in {site for site, _ in h.sent}  # itself
    assert {wire.decode(p)[0].round for _, p in h.sent} == {1}
    h.sent.clear()
    entry = PREPARE_JOIN.entry(joiner="mine")
    h.feed.wrote(1, entry, h.replica)
    assert len(h.sent) == 2
    assert {wire.decode(p)[0] for _, p in h.sent} == {Rumor(1, entry.encode(), 0)}


def test_fanout_zero_sends_nothing():
    store, h = started(1, fanout=0)
    h.replica = with_members(h.replica, "me", "a", "b")
    h.consume()
    h.feed.receive(rumor(store, 0))
    h.feed.wrote(1, PREPARE_JOIN.entry(joiner="mine"), h.replica)
    assert h.sent == []


def test_an_entry_too_large_for_a_frame_goes_as_its_position_and_is_read_at_once():
    store = log_of(0)
    big = PREPARE_JOIN.entry(joiner="x" * 2000)
    position = store.append(big)
    writer = Harness(store, me="w", max_frame=512)
    writer.replica = with_members(writer.replica, "w", "me")
    writer.consume()
    writer.feed.wrote(position, big, writer.replica)
    [(_, payload)] = writer.sent
    assert wire.decode(payload)[2] is False
    reader = Harness(ByPositionOnly(store.log))
    reader.feed.receive(payload)
    assert reader.woken == 1
    assert [e.args["joiner"] for e in reader.consume()] == ["x" * 2000]


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_whatever_arrives_in_whatever_order_the_log_is_consumed_in_order_once(data):
    n = data.draw(st.integers(1, 12))
    store, h = started(n)
    heard = data.draw(st.lists(st.integers(0, n - 1), max_size=3 * n))
    consumed = []
    for p in heard:
        h.feed.receive(rumor(store, p))
        if data.draw(st.booleans()):
            consumed += h.consume()
    while len(consumed) < n:
        h.clock.now += SILENCE
        consumed += h.consume()
    assert positions(consumed) == list(range(n))
    assert h.replica == subscriber.catch_up(log_of(n))


class OriginCounted(ByPositionOnly):
    """A session that counts the fetches of the origin's whole replica."""

    fetched = 0

    def origin(self):
        self.fetched += 1
        return super().origin()


def gc_by_the_command_line(store: MemoryStore) -> int:
    """What `onyx gc` does: append gc, store the log's replica as the origin, trim before it."""
    position = store.append(GC.entry(id="cli"))
    store_origin_and_trim(store, subscriber.catch_up(store))
    return position


def test_a_member_with_gossip_off_behind_a_trim_jumps_to_the_origin_with_no_rumor():
    """Nothing tells this member that the log moved on: its read of the next position finds
    nothing, and the origin's version says the position was trimmed, not yet to come."""
    log = MemoryLog()
    log_of(2, log.session())
    h = Harness(OriginCounted(log), fanout=0)
    assert positions(h.consume()) == [0, 1]
    mirror = log_of(5)
    for i in range(2, 5):
        log.session().append(PREPARE_JOIN.entry(joiner=f"g{i}"))
    mirror.append(GC.entry(id="cli"))
    assert gc_by_the_command_line(log.session()) == 5
    h.clock.now = SILENCE
    entries = h.consume()
    assert [(e.fn, e.position) for e in entries] == [(SET_REPLICA.name, 5)]
    assert h.replica == subscriber.catch_up(mirror)
    assert h.feed.known < 5  # nobody said the log had moved on


def test_an_idle_member_reads_the_origins_version_never_the_origin_itself():
    log = MemoryLog()
    log_of(3, log.session())
    gc_by_the_command_line(log.session())
    store = OriginCounted(log)
    h = Harness(store, fanout=0)
    h.replica = subscriber.catch_up(log.session())
    for _ in range(5):
        h.clock.now += SILENCE
        assert h.consume() == []
    assert store.fetched == 0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(["append", "gc", "step"]), max_size=30))
def test_a_member_without_gossip_follows_the_log_through_any_trims(steps):
    """Entries and gcs come while the member is stalled or reading: at the end it has the
    replica of the whole log, trimmed or not."""
    log, mirror = MemoryLog(), MemoryLog().session()
    h = Harness(ByPositionOnly(log), fanout=0)
    for step in [*steps, "step"]:
        h.clock.now += SILENCE
        if step == "append":
            log.session().append(PREPARE_JOIN.entry(joiner=f"g{len(mirror.log.entries)}"))
            mirror.append(PREPARE_JOIN.entry(joiner=f"g{len(mirror.log.entries)}"))
        elif step == "gc":
            gc_by_the_command_line(log.session())
            mirror.append(GC.entry(id="cli"))
        else:
            h.consume()
    assert h.replica == subscriber.catch_up(mirror)


def test_rumors_go_only_to_the_members_that_take_them():
    store, h = started(1, fanout=3)
    h.replica = with_members(h.replica, "me", "a", "b", classic=("c", "d", "e"))
    h.consume()
    h.feed.receive(rumor(store, 0, "a", 0))
    h.feed.wrote(1, PREPARE_JOIN.entry(joiner="mine"), h.replica)
    takers = {h.replica.sites[m] for m in ("a", "b")}
    assert h.sent
    assert {site for site, _ in h.sent} <= takers


TAKERS = ("a", "b", "c", "d")


def waiting_for_the_command_line(me: str) -> tuple[MemoryStore, Harness]:
    """Member ``me`` among TAKERS, caught up on an empty log at time 0."""
    store = ByPositionOnly(MemoryLog())
    h = Harness(store, me=me)
    h.replica = with_members(h.replica, *TAKERS)
    assert h.consume() == []
    return store, h


def test_the_scout_of_an_entry_nobody_gossiped_reads_it_first_and_starts_its_rumor():
    store, h = waiting_for_the_command_line(scout(0, TAKERS))
    store.append(PREPARE_JOIN.entry(joiner="by-the-command-line"))
    h.clock.now = SILENCE
    assert positions(h.consume()) == [0]
    assert len(h.sent) == 3
    assert {wire.decode(p)[0] for _, p in h.sent} == {Rumor(0, store.log.entries[0], 0)}


def test_the_others_wait_longer_for_its_rumor_and_start_none():
    other = next(m for m in TAKERS if m not in (scout(0, TAKERS), scout(1, TAKERS)))
    store, h = waiting_for_the_command_line(other)
    store.append(PREPARE_JOIN.entry(joiner="by-the-command-line"))
    h.clock.now = SILENCE
    assert h.consume() == []
    h.feed.receive(rumor(store, 0, "a", 1))
    assert positions(h.consume()) == [0]
    h.sent.clear()
    store.append(PREPARE_JOIN.entry(joiner="no-rumor-came"))
    h.clock.now = 10 * SILENCE
    assert positions(h.consume()) == [1]
    assert h.sent == []


def test_no_rumor_is_started_for_an_entry_read_while_catching_up_or_already_rumored():
    me = scout(0, TAKERS)
    log = MemoryLog()
    log_of(3, log.session())
    h = Harness(ByPositionOnly(log), me=me)
    h.replica = with_members(h.replica, *TAKERS)
    assert positions(h.consume()) == [0, 1, 2]
    assert h.sent == []
    scouted = next(p for p in itertools.count(3) if scout(p, TAKERS) == me)
    for i in range(3, scouted + 2):
        log.session().append(PREPARE_JOIN.entry(joiner=f"g{i}"))
    h.feed.receive(wire.encode(Rumor(scouted + 1, log.entries[scouted + 1], 0), "a"))
    h.sent.clear()
    h.clock.now = 10 * SILENCE
    assert positions(h.consume()) == list(range(3, scouted + 2))
    assert h.sent == []


def test_a_group_announced_or_stitched_in_with_rumors_takes_them_until_it_leaves():
    replica = Replica()
    for position, entry in enumerate([
        PREPARE_JOIN.entry(joiner="epidemic"),
        ADD_VIRTUAL_PEER.entry(id="p1", group="epidemic", site="h:1", rumors=True),
        ADD_VIRTUAL_PEER.entry(id="p2", group="classic", site="h:2"),
        JoinRequest("joined-directly", ("p3",), "h:3", rumors=True).entry("epidemic"),
    ]):  # fmt: skip
        replica = apply_entry(replica, entry.at(position)).new
    assert replica.rumor_takers == pset({"epidemic", "joined-directly"})
    left = apply_entry(replica, GROUP_LEAVE.entry(id="epidemic").at(4)).new
    assert left.rumor_takers == pset({"joined-directly"})
