"""The subscriber over the embedded store: origin first, then entries, set-replica on a gap."""

from __future__ import annotations

from peer.log import subscriber
from peer.log.apply import apply_entry
from peer.log.entries.gc import SET_REPLICA
from peer.log.entries.join import PREPARE_JOIN
from peer.log.replica import Replica
from peer.log.store import store_origin_and_trim
from peer.log.stores.memory import MemoryLog


def fill(store, n):
    for i in range(n):
        store.append(PREPARE_JOIN.entry(joiner=f"g{i}"))


def test_boot_without_origin_is_the_empty_replica():
    assert subscriber.boot(MemoryLog().session()) == Replica()


def test_poll_returns_the_entries_after_a_version():
    store = MemoryLog().session()
    fill(store, 3)
    assert [e.position for e in subscriber.poll(store, 0)] == [1, 2]
    assert subscriber.poll(store, 2) == []


def test_catch_up_plays_everything():
    store = MemoryLog().session()
    fill(store, 3)
    replica = subscriber.catch_up(store)
    assert replica.version == 2
    assert replica.groups == {"g0"}


def test_a_reader_behind_a_trim_gets_set_replica_then_the_rest():
    store = MemoryLog().session()
    fill(store, 4)
    origin = subscriber.catch_up(store)
    assert store_origin_and_trim(store, origin) == 3
    store.append(PREPARE_JOIN.entry(joiner="late"))
    entries = subscriber.poll(store, version=0)
    assert [(e.fn, e.position) for e in entries] == [(SET_REPLICA.name, 3), (PREPARE_JOIN.name, 4)]
    replica = Replica()
    for entry in entries:
        replica = apply_entry(replica, entry).new
    untrimmed = MemoryLog().session()
    fill(untrimmed, 4)
    untrimmed.append(PREPARE_JOIN.entry(joiner="late"))
    assert replica == subscriber.catch_up(untrimmed)


def test_a_new_reader_boots_from_the_origin():
    store = MemoryLog().session()
    fill(store, 4)
    origin = subscriber.catch_up(store)
    store_origin_and_trim(store, origin)
    assert subscriber.boot(store) == origin
    assert subscriber.catch_up(store) == origin


def test_an_older_origin_does_not_replace_a_newer_one():
    store = MemoryLog().session()
    assert store.store_origin(Replica(version=7))
    assert not store.store_origin(Replica(version=3))
    assert store.origin().version == 7
