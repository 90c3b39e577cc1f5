"""A job stopped with a savepoint (peer.api.stop), on a group in this process: its commit record
is fenced by the commit that takes the savepoint, so nothing commits after it, and the job is
killed saying so. A stop whose savepoint does not come in time is taken back: the job runs on,
and commits."""

from __future__ import annotations

import pytest

from peer import api
from peer.cluster.local import LocalCluster
from peer.job.spec import JobError
from peer.runtime.checkpoints import STOPPED, Commits
from tests.support import wait_for

ENDLESS = {
    "id": "endless",
    "workflow": [["numbers", "drop"]],
    "catalog": [
        {"name": "numbers", "kind": "input", "plugin": "peer.plugins.memory:input",
         "params": {"count": 10**12}, "n_peers": 1, "batch_size": 100},
        {"name": "drop", "kind": "output", "plugin": "peer.plugins.null:output"},
    ],
    "barrier_period": 0.05,
}  # fmt: skip


@pytest.fixture
def running():
    """A group running the endless job, once the job has committed an epoch."""
    cluster = LocalCluster(groups=1, vpeers=3)
    cluster.start()
    cluster.await_ring(timeout=20)
    job_id = api.submit(cluster.reader, ENDLESS)
    wait_for(lambda: api.last_committed(cluster.reader, job_id), 30, "the job's first commit")
    yield cluster.reader, job_id
    cluster.stop()


def test_a_stop_fences_the_record_at_the_savepoint_and_kills_the_job(running):
    store, job_id = running
    kept = api.stop(store, job_id, "last", timeout=30)
    record, _ = Commits(store, job_id).read()
    assert record.owner == STOPPED
    assert record.committed == kept.epoch
    assert record.savepoints["last"] == kept
    final = api.wait(store, job_id, 30)
    assert final.state == "killed"
    assert final.reason == f"stopped with savepoint 'last' ({kept.epoch.describe()})"


def test_a_stop_that_times_out_is_taken_back_and_the_job_goes_on(running, monkeypatch):
    """The savepoint's wait gives up before any commit takes it: the stop is withdrawn, and
    the job goes on committing (peer.runtime.checkpoints' tests show the withdrawal's race)."""
    store, job_id = running
    taken = api.savepoint

    def impatient(*args, **kwargs):
        raise TimeoutError("gave up")

    monkeypatch.setattr(api, "savepoint", impatient)
    with pytest.raises(TimeoutError):
        api.stop(store, job_id, "never", timeout=0.1)
    record, _ = Commits(store, job_id).read()
    assert record.stop is None
    monkeypatch.setattr(api, "savepoint", taken)
    before = api.last_committed(store, job_id)
    wait_for(lambda: api.last_committed(store, job_id) > before, 30, "commits after the stop")
    assert Commits(store, job_id).read()[0].owner != STOPPED
    assert api.status(api.replica(store), job_id).state == "running"


def test_only_a_running_job_is_stopped(running):
    store, job_id = running
    with pytest.raises(JobError, match=r"^job 'nobody': no such job in this tenancy$"):
        api.stop(store, "nobody", "last", timeout=1)
    api.kill(store, job_id)
    api.wait(store, job_id, 30)
    with pytest.raises(JobError, match=r"^job 'endless': cannot stop a job that is killed$"):
        api.stop(store, job_id, "last", timeout=1)
