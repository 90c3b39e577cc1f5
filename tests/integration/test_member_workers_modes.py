"""A member with workers in the coordination modes built for large clusters: it joins a running
cluster directly, each of its peers announced at its worker's site, and it computes allocations
in the background beside a classic group; either way a word count gives exactly the counts of
its input. Real processes, a real ZooKeeper, real Aeron."""

from __future__ import annotations

from contextlib import closing

import pytest

from peer import api
from peer.log.replica import invariant_violations
from tests.integration.test_jobs import (
    await_peers,
    run_word_count,
)
from tests.integration.test_join_direct import joined_directly
from tests.integration.test_member_workers import workers_of
from tests.integration.test_seed_nodes import await_ring, group_id
from tests.support import wait_for

pytestmark = pytest.mark.integration

LINES = 1_000


def test_a_member_with_workers_joins_directly_with_each_peer_at_its_workers_site(
    start_peer, zookeeper, tenancy, tmp_path
):
    first = start_peer(vpeers=2, extra=["--join-direct"])
    await_ring(zookeeper, tenancy, 1)
    member = start_peer(vpeers=2, extra=["--join-direct", "--workers", "2"])
    joined = joined_directly(member)
    member_id = group_id(member)
    assert joined.group(2) == group_id(first)
    await_peers(zookeeper, tenancy, 4)
    sites = set(workers_of(member))
    assert len(sites) == 2
    with closing(api.connect(zookeeper.address, tenancy)) as store:
        replica = api.replica(store)
    peers = sorted(replica.group_peers[member_id])
    assert {replica.site_of(p, member_id) for p in peers} == sites, "one peer in each worker"
    assert invariant_violations(replica) == []
    run_word_count(zookeeper, tenancy, tmp_path, [first, member])


def test_a_member_with_workers_allocating_in_the_background_runs_beside_a_classic_group(
    start_peer, zookeeper, tenancy, tmp_path
):
    classic = start_peer(vpeers=2)
    member = start_peer(vpeers=2, extra=["--async-allocation", "--workers", "2"])
    await_peers(zookeeper, tenancy, 4)
    wait_for(lambda: len(workers_of(member)) == 2, 30, "both workers to listen")
    run_word_count(zookeeper, tenancy, tmp_path, [classic, member])
    assert "allocations computed in the background" in member.output()
    assert "allocations computed in the background" not in classic.output()
