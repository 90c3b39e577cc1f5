"""Commit records in a real ZooKeeper: the compare-and-set that commits checkpoint epochs and
fences a stale coordinator, between separate sessions as the coordinators of two allocations
would hold them."""

from __future__ import annotations

import pytest

from peer import api
from peer.log.store import StoreError
from peer.runtime.checkpoints import CommitRecord, Commits
from peer.values.epoch import Epoch

pytestmark = pytest.mark.integration

JOB = "job-1"


@pytest.fixture
def sessions(zookeeper, tenancy):
    opened = [api.connect(zookeeper.address, tenancy, create=True)]

    def session():
        opened.append(api.connect(zookeeper.address, tenancy))
        return opened[-1]

    yield opened[0], session
    for s in opened:
        s.close()


@pytest.fixture
def store(sessions):
    return sessions[0]


def test_a_missing_record_reads_as_none(store):
    assert store.read_commit(JOB) == (None, -1)


def test_a_record_is_created_only_if_absent(store):
    assert store.write_commit(JOB, b"first", -1) == 0
    assert store.write_commit(JOB, b"second", -1) is None
    assert store.read_commit(JOB) == (b"first", 0)


def test_a_record_is_set_only_at_the_expected_version(sessions):
    one, session = sessions
    two = session()
    one.write_commit(JOB, b"a", -1)
    assert two.write_commit(JOB, b"b", 0) == 1
    assert one.write_commit(JOB, b"c", 0) is None
    assert one.read_commit(JOB) == (b"b", 1)


def test_setting_a_record_that_is_gone_is_a_lost_race(store):
    assert store.write_commit(JOB, b"a", 3) is None
    assert store.read_commit(JOB) == (None, -1)


def test_delete_is_idempotent(store):
    store.write_commit(JOB, b"a", -1)
    store.delete_commit(JOB)
    store.delete_commit(JOB)
    assert store.read_commit(JOB) == (None, -1)
    assert store.write_commit(JOB, b"again", -1) == 0


def test_records_live_under_checkpoints_one_znode_per_job(store):
    for job in [JOB, "a/b", ".."]:
        store.write_commit(job, job.encode(), -1)
    children = store.client.get_children(f"/onyx/{store.tenancy}/checkpoints")
    assert sorted(children) == ["%2E.", "a%2Fb", JOB]
    assert [store.read_commit(job)[0] for job in [JOB, "a/b", ".."]] == [b"job-1", b"a/b", b".."]


def test_a_closed_session_is_a_store_error(zookeeper, store):
    closed = api.connect(zookeeper.address, store.tenancy)
    closed.close()
    with pytest.raises(StoreError, match=f"ZooKeeper at {zookeeper.address} failed"):
        closed.read_commit(JOB)
    with pytest.raises(StoreError, match=f"ZooKeeper at {zookeeper.address} failed"):
        closed.write_commit(JOB, b"a", -1)
    with pytest.raises(StoreError, match=f"ZooKeeper at {zookeeper.address} failed"):
        closed.delete_commit(JOB)


def test_a_newer_allocation_s_claim_fences_the_older_coordinator(sessions):
    first, session = sessions
    old, new = Commits(first, JOB), Commits(session(), JOB)
    assert old.claim(1) == CommitRecord(None, 1, {})
    assert old.commit(1, Epoch(1, 1), {"in": 2, "out": 1})
    claimed = CommitRecord(Epoch(1, 1), 2, {"in": 2, "out": 1}, (Epoch(1, 1),), floor=Epoch(1, 1))
    assert new.claim(2) == claimed
    assert not old.commit(1, Epoch(1, 2), {"in": 2, "out": 1})
    assert old.claim(1) is None
    assert new.commit(2, Epoch(2, 1), {"in": 1, "out": 1})
    assert Commits(session(), JOB).read() == (
        CommitRecord(
            Epoch(2, 1), 2, {"in": 1, "out": 1}, (Epoch(1, 1), Epoch(2, 1)), floor=Epoch(1, 1)
        ),
        3,
    )


def test_an_older_claim_after_a_newer_one_changes_nothing(sessions):
    first, session = sessions
    new, old = Commits(first, JOB), Commits(session(), JOB)
    new.claim(2)
    assert old.claim(1) is None
    assert not old.commit(1, Epoch(1, 1), {"in": 1})
    assert new.read() == (CommitRecord(None, 2, {}), 0)
