"""Allocations computed in the background on a real cluster: two `onyx peer start
--async-allocation` members (or one of them and a classic one) on a real ZooKeeper, segments
over Aeron, run a job to its exact output, and the log replays to the job's completion."""

from __future__ import annotations

import pytest

from peer import api
from peer.log import subscriber
from tests.integration.test_jobs import (
    await_peers,
    run_word_count,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("classic", [0, 1], ids=["both-async", "mixed"])
def test_members_allocating_in_the_background_run_a_job_to_exact_counts(
    start_peer, zookeeper, tenancy, tmp_path, classic
):
    """Both members in the mode, and one of them classic: a mixed cluster agrees too."""
    modes = [[], ["--async-allocation"]] if classic else [["--async-allocation"]] * 2
    members = [start_peer(vpeers=2, extra=extra) for extra in modes]
    await_peers(zookeeper, tenancy, 4)
    job_id = run_word_count(zookeeper, tenancy, tmp_path, members, lines=2_000)
    store = api.connect(zookeeper.address, tenancy, create=True)
    try:
        replica = subscriber.catch_up(store)
    finally:
        store.close()
    assert replica.finished[job_id] == "completed"
    assert replica.key_version("allocations") > 0
    for member, extra in zip(members, modes, strict=True):
        background = "allocations computed in the background" in member.output()
        assert background == bool(extra)
