"""`onyx peer start --seed-nodes`: a new group asks a running one for the cluster, or, with a
seed nobody listens on, says so and learns the cluster from ZooKeeper. Real processes, a real
ZooKeeper, real Aeron."""

from __future__ import annotations

import re

import pytest

from peer import api
from peer.log.replica import Replica, ring_settled
from peer.log.store import StoreError
from tests.support import PeerProcess, ZooKeeperServer, free_port, wait_for

pytestmark = pytest.mark.integration

VPEERS = 2
DEADLINE = 60.0
"""Generous: a loaded two-core machine may take some seconds to start a group."""


def ring(zookeeper: ZooKeeperServer, tenancy: str, size: int) -> Replica | None:
    """The replica once it holds a settled ring of ``size`` groups."""
    try:
        store = api.connect(zookeeper.address, tenancy)
    except StoreError:
        return None
    try:
        replica = api.replica(store)
    except StoreError:  # the first group has not created the tenancy yet
        return None
    finally:
        store.close()
    return replica if ring_settled(replica, size, VPEERS) else None


def await_ring(zookeeper: ZooKeeperServer, tenancy: str, size: int) -> Replica:
    return wait_for(lambda: ring(zookeeper, tenancy, size), DEADLINE,
                    f"a settled ring of {size} groups", interval=0.25)  # fmt: skip


def group_id(peer: PeerProcess) -> str:
    return wait_for(lambda: re.search(r"group (\S+) starting with", peer.output()), DEADLINE,
                    "the group's first log line").group(1)  # fmt: skip


def line_with(peer: PeerProcess, words: str) -> str | None:
    return next((line for line in peer.output().splitlines() if words in line), None)


def test_a_group_given_a_seed_learns_the_cluster_from_it(start_peer, zookeeper, tenancy):
    first = start_peer(vpeers=VPEERS)
    [site] = await_ring(zookeeper, tenancy, 1).sites.values()
    second = start_peer(vpeers=VPEERS, extra=["--seed-nodes", site])
    learned = wait_for(lambda: line_with(second, "learned the cluster from seed node"), DEADLINE,
                       "the new group's welcome from its seed")  # fmt: skip
    assert f"group {group_id(second)} learned the cluster from seed node {site} " in learned
    assert f"(member {group_id(first)}): 1 member" in learned
    assert line_with(second, "did not answer") is None
    assert set(await_ring(zookeeper, tenancy, 2).groups) == {group_id(first), group_id(second)}


def test_a_seed_nobody_listens_on_is_reported_and_the_group_joins_through_zookeeper(
    start_peer, zookeeper, tenancy
):
    first = start_peer(vpeers=VPEERS)
    await_ring(zookeeper, tenancy, 1)
    silent = f"127.0.0.1:{free_port()}"
    second = start_peer(vpeers=VPEERS, extra=["--seed-nodes", silent])
    warning = wait_for(lambda: line_with(second, f"seed node {silent} did not answer"), DEADLINE,
                       "the warning about the silent seed")  # fmt: skip
    assert "learning the cluster from ZooKeeper" in warning
    assert set(await_ring(zookeeper, tenancy, 2).groups) == {group_id(first), group_id(second)}
    assert line_with(second, "learned the cluster from seed node") is None
