"""The ZooKeeper log store against a real server: what the subscriber and groups rely on."""

from __future__ import annotations

import threading
import time

import pytest

from peer import api
from peer.log import subscriber
from peer.log.entries.gc import SET_REPLICA
from peer.log.entries.join import PREPARE_JOIN
from peer.log.replica import Replica
from peer.log.store import StoreError
from tests.support import ZooKeeperServer, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def store(zookeeper, tenancy):
    s = api.connect(zookeeper.address, tenancy, create=True)
    yield s
    s.close()


def test_entries_come_back_in_order_with_their_positions(store):
    positions = [store.append(PREPARE_JOIN.entry(joiner=f"g{i}")) for i in range(5)]
    entries = store.read(after=-1)
    assert [e.position for e in entries] == positions == sorted(positions)
    assert [e.args["joiner"] for e in entries] == [f"g{i}" for i in range(5)]
    assert [e.position for e in store.read(after=positions[2])] == positions[3:]


def test_a_trim_behind_the_reader_is_not_mistaken_for_lost_entries(store):
    for i in range(4):
        store.append(PREPARE_JOIN.entry(joiner=f"g{i}"))
    current = subscriber.catch_up(store)
    assert store.trim(before=2) == 2
    later = store.append(PREPARE_JOIN.entry(joiner="late"))
    entries = subscriber.poll(store, current.version)
    assert [(e.fn, e.position) for e in entries] == [(PREPARE_JOIN.name, later)]


def test_a_reader_behind_a_gc_jumps_to_the_origin(store):
    for i in range(4):
        store.append(PREPARE_JOIN.entry(joiner=f"g{i}"))
    result = api.gc(store, caller="tester")
    assert result.deleted == 4
    tail = store.append(PREPARE_JOIN.entry(joiner="after-gc"))
    entries = subscriber.poll(store, version=0)
    assert entries[0].fn == SET_REPLICA.name
    assert entries[0].args["replica"] == store.origin()
    assert entries[0].position == result.position
    assert [e.position for e in entries[1:]] == [tail]


def test_an_entry_is_read_at_its_exact_position_and_a_trimmed_or_unwritten_one_is_none(store):
    positions = [store.append(PREPARE_JOIN.entry(joiner=f"g{i}")) for i in range(3)]
    assert [store.read_at(p).args["joiner"] for p in positions] == ["g0", "g1", "g2"]
    assert store.read_at(positions[1]).position == positions[1]
    assert store.read_at(positions[-1] + 1) is None
    store.trim(before=positions[1])
    assert store.read_at(positions[0]) is None
    assert store.read_at(positions[1]) is not None


def test_a_store_that_does_not_watch_the_log_is_not_woken_by_appends(zookeeper, tenancy, store):
    quiet = api.connect(zookeeper.address, tenancy, watch_log=False)
    watching = api.connect(zookeeper.address, tenancy)
    try:
        woken = {"quiet": threading.Event(), "watching": threading.Event()}
        quiet.on_append(woken["quiet"].set)
        watching.on_append(woken["watching"].set)
        woken["quiet"].clear()
        wait_for(woken["watching"].is_set, 10, "the watch to be set and fire once")
        woken["watching"].clear()
        store.append(PREPARE_JOIN.entry(joiner="new"))
        wait_for(woken["watching"].is_set, 10, "the watching store to hear of the append")
        assert not woken["quiet"].is_set()
    finally:
        quiet.close()
        watching.close()


def test_origin_only_moves_forward_and_its_version_reads_alone(store):
    assert store.origin_version() == -1
    assert store.store_origin(Replica(version=10))
    assert not store.store_origin(Replica(version=5))
    assert store.origin().version == 10
    assert store.origin_version() == 10
    assert store.store_origin(Replica(version=12))
    assert store.origin_version() == 12


def test_racing_origins_leave_the_newest_and_its_version(store, zookeeper, tenancy):
    sessions = [api.connect(zookeeper.address, tenancy) for _ in range(4)]
    try:
        threads = [threading.Thread(target=s.store_origin, args=(Replica(version=v),))
                   for v, s in zip((3, 9, 5, 7), sessions, strict=True)]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for session in sessions:
            session.close()
    assert store.origin().version == store.origin_version() == 9


def test_a_pulse_watch_fires_when_the_session_holding_it_ends(zookeeper, tenancy, store):
    other = api.connect(zookeeper.address, tenancy)
    other.register_pulse("mortal")
    gone = threading.Event()
    store.watch_pulse("mortal", lambda group: gone.set())
    assert store.pulse_exists("mortal")
    other.close()
    wait_for(gone.is_set, 10, "the pulse watch to fire")
    assert not store.pulse_exists("mortal")


def test_watching_a_missing_pulse_fires_at_once(store):
    gone = []
    store.watch_pulse("never-was", gone.append)
    assert gone == ["never-was"]


def test_an_unknown_tenancy_is_refused(zookeeper):
    with pytest.raises(StoreError, match="no tenancy 'nobody-here'"):
        api.connect(zookeeper.address, "nobody-here")


def test_one_read_of_the_pulses_finds_the_sites_they_announced(zookeeper, tenancy, store):
    other = api.connect(zookeeper.address, tenancy)
    other.register_pulse("with-site", "127.0.0.1:4000")
    other.register_pulse("without-site")
    assert store.pulse_sites() == {"with-site": "127.0.0.1:4000"}
    other.close()
    wait_for(lambda: store.pulse_sites() == {}, 10, "the pulses to go with their session")


@pytest.mark.parametrize("outage", [1.0, 3.0])
def test_a_session_outlives_a_server_restart_shorter_than_its_timeout(tenancy, outage):
    """kill -9 of the only server and a new one on its port and data after ``outage`` s: the
    client reconnects before its 40 s session expires (its reconnect back-off stays short), so
    the session, and the pulse it holds, live on. The session leaves room for the new server's
    JVM, which takes seconds to start on a loaded machine and counts the session's time from
    when it has loaded its data: a client whose handshake the new server accepts but has yet to
    answer waits the whole session for the reply. Runs of the whole suite on two cores saw the
    session expire so with 8 s and with 20 s."""
    server = ZooKeeperServer().start()
    store = api.connect(server.address, tenancy, create=True, session_timeout=40.0)
    lost = threading.Event()
    store.lost_callbacks.append(lost.set)
    try:
        store.register_pulse("survivor")
        session = store.client.client_id
        server.process.kill()
        server.process.wait()
        wait_for(lambda: not store.connected, 10, "the client to see the server gone")
        time.sleep(outage)  # the fault's length, not a wait for anything
        (server.dir / "server.log").rename(server.dir / "server.1.log")
        server.start()
        wait_for(lambda: store.connected or lost.is_set(), 90, "the client to reconnect")
        assert not lost.is_set(), "the session expired"
        assert store.client.client_id == session
        assert store.pulse_exists("survivor")
    finally:
        store.close()
        server.stop()
