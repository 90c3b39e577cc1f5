"""The ring over a real ZooKeeper, with every peer group in its own OS process."""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from peer import api
from peer.log.replica import Replica, ring_cycle, ring_settled
from peer.log.store import StoreError
from tests.support import PeerProcess, ZooKeeperServer, wait_for

pytestmark = pytest.mark.integration

VPEERS = 2
SESSION_TIMEOUT = 4.0
# Death is seen when ZooKeeper expires the dead group's session; the repair then takes a few
# log round trips, which on a loaded two-core machine can take some seconds.
REPAIR_DEADLINE = SESSION_TIMEOUT + 20


def read_replica(zookeeper: ZooKeeperServer, tenancy: str) -> Replica:
    store = api.connect(zookeeper.address, tenancy)
    try:
        return api.replica(store)
    finally:
        store.close()


def settled_ring(zookeeper: ZooKeeperServer, tenancy: str, size: int) -> Replica | None:
    """The replica if it holds one complete ring of ``size`` groups and nothing in flight."""
    try:
        replica = read_replica(zookeeper, tenancy)
    except StoreError:  # the first group has not created the tenancy yet
        return None
    return replica if ring_settled(replica, size, VPEERS) else None


def await_ring(zookeeper: ZooKeeperServer, tenancy: str, size: int, timeout: float) -> Replica:
    return wait_for(
        lambda: settled_ring(zookeeper, tenancy, size),
        timeout,
        f"a settled ring of {size} groups",
        interval=0.25,
    )


def form_ring(
    start_peer: Callable[..., PeerProcess], zookeeper: ZooKeeperServer, tenancy: str, size: int
) -> tuple[list[PeerProcess], Replica]:
    peers = [start_peer(vpeers=VPEERS, session_timeout=SESSION_TIMEOUT) for _ in range(size)]
    return peers, await_ring(zookeeper, tenancy, size, timeout=60)


def group_of(peer: PeerProcess, replica: Replica) -> str:
    """The group id a process runs under, from its own start line: the ring can be settled in
    the log before the process has applied its own join and said so."""
    return next(g for g in replica.groups if peer.runs(g))


def test_five_groups_form_one_ring(start_peer, zookeeper, tenancy):
    peers, replica = form_ring(start_peer, zookeeper, tenancy, 5)
    groups = {group_of(p, replica): p for p in peers}
    assert sorted(groups) == sorted(replica.groups)
    assert len(set(replica.pairs.values())) == 5
    wait_for(
        lambda: all(f"group {g} joined the ring" in p.output() for g, p in groups.items()),
        30,
        "every group to say it joined the ring",
    )


def test_kill_nine_of_one_group_closes_the_ring(start_peer, zookeeper, tenancy):
    peers, replica = form_ring(start_peer, zookeeper, tenancy, 5)
    victim = group_of(peers[2], replica)
    peers[2].kill()
    repaired = await_ring(zookeeper, tenancy, 4, timeout=REPAIR_DEADLINE)
    assert victim not in repaired.groups
    assert victim in repaired.left


def test_kill_nine_of_two_neighbours_closes_the_ring_transitively(start_peer, zookeeper, tenancy):
    peers, replica = form_ring(start_peer, zookeeper, tenancy, 5)
    by_group = {group_of(p, replica): p for p in peers}
    first = ring_cycle(replica)[1]
    second = replica.pairs[first]
    by_group[first].kill()
    by_group[second].kill()
    repaired = await_ring(zookeeper, tenancy, 3, timeout=REPAIR_DEADLINE)
    assert {first, second} <= set(repaired.left)
    assert set(repaired.groups) == set(by_group) - {first, second}


def test_sigterm_leaves_gracefully(start_peer, zookeeper, tenancy):
    peers, replica = form_ring(start_peer, zookeeper, tenancy, 3)
    leaver = group_of(peers[0], replica)
    peers[0].signal(signal.SIGTERM)
    assert peers[0].process.wait(timeout=30) == 0
    after = await_ring(zookeeper, tenancy, 2, timeout=30)
    assert leaver in after.left
    assert "leaving the cluster" in peers[0].output()


def test_sigterm_with_zookeeper_unreachable_stops_at_once(tmp_path, tenancy):
    """No leave can be written without ZooKeeper, and the group may be blocked waiting for a
    server: it exits promptly instead of hanging until it is killed."""
    own = ZooKeeperServer().start()
    try:
        peer = PeerProcess(own.address, tenancy, tmp_path, session_timeout=30)
        await_ring(own, tenancy, 1, timeout=60)
    finally:
        own.stop()
    try:
        peer.signal(signal.SIGTERM)
        assert peer.process.wait(timeout=20) != 0
        assert "is unreachable: stopping without leaving the ring" in peer.output()
    finally:
        peer.kill()


def log_positions(zookeeper: ZooKeeperServer, tenancy: str) -> list[int]:
    client = KazooClient(hosts=zookeeper.address)
    client.start(timeout=10)
    try:
        children = client.get_children(f"/onyx/{tenancy}/log")
    finally:
        client.stop()
        client.close()
    return sorted(int(name.removeprefix("entry-")) for name in children)


def test_gc_trims_the_log_and_a_later_group_boots_from_the_origin(start_peer, zookeeper, tenancy):
    form_ring(start_peer, zookeeper, tenancy, 3)
    before = log_positions(zookeeper, tenancy)
    store = api.connect(zookeeper.address, tenancy)
    try:
        result = api.gc(store, caller="test-gc")
        origin = store.origin()
    finally:
        store.close()
    after = log_positions(zookeeper, tenancy)
    assert result.deleted == len([p for p in before if p < result.position])
    assert min(after) == result.position
    assert origin is not None
    assert origin.version == result.position
    late = start_peer(vpeers=VPEERS, session_timeout=SESSION_TIMEOUT)
    await_ring(zookeeper, tenancy, 4, timeout=60)
    assert f"booted from origin at log position {result.position}" in late.output()


def test_expired_session_rejoins_with_a_fresh_id(start_peer, zookeeper, tenancy):
    peers, replica = form_ring(start_peer, zookeeper, tenancy, 3)
    sleeper = peers[1]
    old_id = group_of(sleeper, replica)
    sleeper.signal(signal.SIGSTOP)
    try:
        wait_for(
            lambda: old_id in read_replica(zookeeper, tenancy).left,
            REPAIR_DEADLINE,
            "the stopped group to be reported dead",
            interval=0.25,
        )
    finally:
        sleeper.signal(signal.SIGCONT)
    rejoined = await_ring(zookeeper, tenancy, 3, timeout=60)
    new_id = group_of(sleeper, rejoined)
    assert new_id != old_id
    assert old_id not in rejoined.groups
    assert sleeper.process.poll() is None
    assert "ZooKeeper session expired" in sleeper.output()
