"""Peer groups in this process on the embedded store: the runtime around the pure core."""

from __future__ import annotations

import json
import threading

import pytest
from prometheus_client import REGISTRY

from peer.cluster.group import GroupConfig, Incarnation, PeerGroup
from peer.cluster.local import LocalCluster
from peer.log import subscriber
from peer.log.entries import KINDS
from peer.log.entries.group_leave import GROUP_LEAVE
from peer.log.entries.join import PREPARE_JOIN
from peer.log.entries.leave import EXIT, LEAVE
from peer.log.entry import EntryKind
from peer.log.replica import ring_settled
from peer.log.store import store_origin_and_trim
from peer.log.stores.memory import MemoryLog
from tests.support import wait_for

FAST = GroupConfig(vpeers=2, join_back_off=0.02, poll_interval=0.05, leave_timeout=5)


@pytest.fixture
def cluster():
    c = LocalCluster(groups=4, vpeers=2)
    c.start()
    yield c
    c.stop()


def start_group(cluster: LocalCluster) -> tuple[PeerGroup, threading.Thread]:
    group = PeerGroup(cluster.log.session(), FAST)
    thread = threading.Thread(target=group.run, daemon=True)
    thread.start()
    return group, thread


def ring_of(cluster: LocalCluster, size: int):
    def settled():
        r = cluster.replica()
        return r if ring_settled(r, size, FAST.vpeers) else None

    return wait_for(settled, 20, f"a settled ring of {size}")


def test_groups_form_one_ring_with_every_virtual_peer(cluster):
    replica = cluster.await_ring(timeout=20)
    assert sorted(replica.groups) == sorted(g.id for g in cluster.groups)
    assert sorted(replica.peers) == sorted(p for g in cluster.groups for p in g.current.peers)


def test_an_expired_session_repairs_the_ring_and_the_group_rejoins_fresh(cluster):
    cluster.await_ring(timeout=20)
    victim = cluster.groups[1]
    old_id = victim.id
    victim.store.expire()
    wait_for(lambda: old_id in cluster.replica().left, 20, "the expired group to be reported")
    replica = ring_of(cluster, 4)
    assert old_id not in replica.groups
    assert victim.id in replica.groups
    assert victim.id != old_id


def test_graceful_stop_removes_the_group(cluster):
    """As `onyx leave` does: leaving, exiting, then removed (by itself: groups without a
    transport run no membership, so there is no leader to remove them)."""
    cluster.await_ring(timeout=20)
    leaver = cluster.groups[0]
    gid = leaver.id
    leaver.stop()
    cluster.threads[0].join(10)
    assert not cluster.threads[0].is_alive()
    replica = ring_of(cluster, 3)
    assert gid in replica.removed
    # Only the leave's own kinds: an abort of a join attempt of the group's can name it too.
    leave = [LEAVE.name, EXIT.name, GROUP_LEAVE.name]
    steps = [e.fn for e in cluster.reader.read(after=-1) if e.args.get("id") == gid]
    assert [fn for fn in steps if fn in leave][:3] == leave


def test_a_stop_leaves_gracefully_and_at_once_only_when_its_time_runs_out():
    """The deadlines under a clock the test gives: member-leave at the stop, a hand-over capped
    at half the leave timeout, and group-leave-cluster at three quarters if still there."""
    store = MemoryLog().session()
    me = Incarnation(store, FAST, threading.Event())
    me.replica = me.replica.evolve(groups=me.replica.groups.add(me.id))
    me._leave_on_stop(100.0)
    me.hand_over()
    assert me.handing_over.deadline == 100.0 + FAST.leave_timeout / 2
    me._leave_on_stop(100.0 + FAST.leave_timeout * 0.7)
    assert [e.fn for e in store.read(after=-1)] == [LEAVE.name]
    me._leave_on_stop(100.0 + FAST.leave_timeout * 0.75)
    assert [e.fn for e in store.read(after=-1)] == [LEAVE.name, GROUP_LEAVE.name]


def test_a_group_that_has_not_joined_leaves_at_once():
    store = MemoryLog().session()
    me = Incarnation(store, FAST, threading.Event())
    me._leave_on_stop(100.0)
    assert [e.fn for e in store.read(after=-1)] == [GROUP_LEAVE.name]


def test_a_group_presumed_dead_while_alive_restarts_under_a_new_id(cluster):
    cluster.await_ring(timeout=20)
    target = cluster.groups[2]
    old_id = target.id
    cluster.reader.append(GROUP_LEAVE.entry(id=old_id))
    wait_for(lambda: target.id != old_id, 20, "the group to take a new id")
    replica = ring_of(cluster, 4)
    assert target.id in replica.groups
    assert not cluster.log.pulses.get(old_id)


def test_a_group_started_after_gc_boots_from_the_origin(cluster):
    cluster.await_ring(timeout=20)
    origin = subscriber.catch_up(cluster.reader)
    store_origin_and_trim(cluster.reader, origin)
    assert min(cluster.log.entries) == origin.version
    group, thread = start_group(cluster)
    try:
        replica = ring_of(cluster, 5)
        assert group.id in replica.groups
    finally:
        group.stop()
        thread.join(10)


def test_a_joiner_whose_watcher_is_dead_evicts_it_and_joins_alone():
    """The lone group of a cluster dies; nobody watches a lone group, so only the next joiner,
    which watches its future watcher while prepared, can find it gone."""
    log = MemoryLog()
    ghost = log.session()
    ghost.register_pulse("ghost")
    ghost.append(PREPARE_JOIN.entry(joiner="ghost"))
    ghost.expire()
    group = PeerGroup(log.session(), FAST)
    thread = threading.Thread(target=group.run, daemon=True)
    thread.start()
    try:
        reader = log.session()

        def alone():
            replica = subscriber.catch_up(reader)
            return replica if group.id and replica.groups == {group.id} else None

        replica = wait_for(alone, 20, "the new group to join alone")
        assert "ghost" in replica.left
    finally:
        group.stop()
        thread.join(10)


def test_work_entries_wait_in_the_outbox_until_the_group_has_joined(monkeypatch):
    volunteer = EntryKind("volunteer", {}, apply=lambda r, e: r, while_joining=False)
    monkeypatch.setitem(KINDS, volunteer.name, volunteer)
    store = MemoryLog().session()
    me = Incarnation(store, FAST, threading.Event())
    me.outbox = [volunteer.entry(), PREPARE_JOIN.entry(joiner=me.id)]
    me.flush()
    assert [e.fn for e in store.read(after=-1)] == [PREPARE_JOIN.name]
    assert [e.fn for e in me.outbox] == ["volunteer"]
    me.replica = me.replica.evolve(groups=me.replica.groups.add(me.id))
    me.flush()
    assert [e.fn for e in store.read(after=-1)] == [PREPARE_JOIN.name, "volunteer"]
    assert me.outbox == []


def applied(kind: str) -> float:
    return REGISTRY.get_sample_value("onyx_log_entries_applied_total", {"kind": kind}) or 0.0


def test_groups_live_through_junk_in_the_log_and_count_it_as_refused(cluster):
    """Bytes no client of ours would write, put straight into the shared log: every group refuses
    them alike, stays in the ring, and counts them under one label, never the entry's own kind."""
    cluster.await_ring(timeout=20)
    before = applied("refused")
    deep = b'{"fn": "submit-job", "args": {"id": "d", "job": ' + b"[" * 5000 + b"]" * 5000 + b"}}"
    junk = [deep, b"not json", json.dumps({"fn": "k" * 100_000, "args": {}}).encode()]
    with cluster.log.lock:
        for data in junk:
            cluster.log.entries[cluster.log.next_position] = data
            cluster.log.next_position += 1
    for callback in list(cluster.log.append_callbacks):
        callback()
    last = cluster.log.next_position - 1
    wait_for(
        lambda: all(g.current.replica.version >= last for g in cluster.groups),
        20,
        "every group to read past the junk",
    )
    assert applied("refused") - before == len(junk) * len(cluster.groups)
    kinds = {s.labels["kind"] for m in REGISTRY.collect() for s in m.samples if "kind" in s.labels}
    assert kinds <= {*KINDS, "refused"}
    replica = ring_of(cluster, 4)
    assert all(t.is_alive() for t in cluster.threads)
    assert sorted(replica.groups) == sorted(g.id for g in cluster.groups)


def test_while_the_store_is_away_the_log_waits_and_nothing_blocks():
    """A store that is not connected is not asked: entries to write stay in the outbox and
    entries others wrote are read once it is back."""
    log = MemoryLog()
    store, other = log.session(), log.session()
    me = Incarnation(store, FAST, threading.Event())
    me.replica = me.replica.evolve(groups=me.replica.groups.add(me.id))
    me.outbox = [GROUP_LEAVE.entry(id="someone")]
    other.append(PREPARE_JOIN.entry(joiner="x"))
    store.connected = False
    me._step(threading.Event())
    assert me.replica.version == -1
    assert [e.fn for e in me.outbox] == [GROUP_LEAVE.name]
    assert [e.fn for e in store.read(after=-1)] == [PREPARE_JOIN.name]
    store.connected = True
    me._step(threading.Event())
    assert me.replica.version >= 0
    assert me.outbox == []
    assert GROUP_LEAVE.name in [e.fn for e in store.read(after=0)]
