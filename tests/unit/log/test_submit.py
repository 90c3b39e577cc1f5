"""What a client writes to the log for jobs, on the embedded store: submit with the job's hash
(the same job again is a no-op, another job under a known id is refused), kill with a reason,
and the status that shows both; and the entry limit that holds for the embedded store as for
ZooKeeper."""

from __future__ import annotations

import time

import pytest

from peer import api
from peer.job.spec import JobError
from peer.log.entries.jobs import SUBMIT_JOB
from peer.log.entry import Entry
from peer.log.store import StoreError
from peer.log.stores.memory import MemoryLog
from peer.values.limits import MAX_ENTRY_BYTES
from tests.unit.job import wordcount


@pytest.fixture
def store():
    return MemoryLog().session()


def job(**changes) -> dict:
    return {**wordcount.document(), **changes}


def test_submit_carries_the_hash_and_status_the_name(store):
    job_id = api.submit(store, job(name="word count"))
    replica = api.replica(store)
    [entry] = store.read(-1)
    assert entry.args["hash"] == replica.hashes[job_id] == api.load(job(name="word count")).digest()
    status = api.status(replica, job_id)
    assert (status.state, status.name, status.reason) == ("waiting", "word count", None)


def test_the_same_job_again_is_a_no_op_that_returns_the_id(store):
    assert api.submit(store, job()) == "wc"
    assert api.submit(store, job()) == "wc"
    assert store.tail() == 0


def test_another_job_under_a_known_id_is_refused_naming_the_id(store):
    api.submit(store, job())
    with pytest.raises(JobError, match=r"^job 'wc': this id belongs to a job with other content"):
        api.submit(store, job(barrier_period=5))
    assert store.tail() == 0


def test_a_finished_job_still_guards_its_id(store):
    api.submit(store, job())
    api.kill(store, "wc")
    with pytest.raises(JobError, match=r"^job 'wc': this id belongs to a job with other content"):
        api.submit(store, job(name="changed"))
    assert api.submit(store, job()) == "wc"


def test_a_submission_that_lost_the_race_for_its_id_is_told(store):
    """Another submitter's job took the id between this one's check and its write."""
    other = api.load(job(name="other"))
    rival = SUBMIT_JOB.entry(id="wc", job=other.to_dict(), hash=other.digest())
    real_append = store.append

    def racing_append(entry: Entry) -> int:
        real_append(rival)
        return real_append(entry)

    store.append = racing_append
    with pytest.raises(JobError, match=r"^job 'wc': this id belongs to a job with other content"):
        api.submit(store, job())


def test_an_operators_kill_says_so(store):
    api.submit(store, job())
    api.kill(store, "wc")
    status = api.status(api.replica(store), "wc")
    assert (status.state, status.reason) == ("killed", "an operator killed it")


def test_a_kill_gives_its_own_reason(store):
    before = time.time()
    api.submit(store, job(name="n"))
    after = time.time()
    api.kill(store, "wc", "maintenance window")
    status = api.status(api.replica(store), "wc")
    assert before <= status.submitted <= after
    assert status == api.JobStatus(
        "wc", "killed", reason="maintenance window", name="n", submitted=status.submitted
    )


def test_a_submit_job_entry_over_the_limit_is_refused_before_writing(store, monkeypatch):
    """The job alone fits; with its id the entry does not."""
    doc = job(metadata={"pad": ""})
    base = len(SUBMIT_JOB.entry(id="x", job=doc, hash="0" * 64).encode())
    doc["metadata"]["pad"] = "p" * (MAX_ENTRY_BYTES - base)
    long_id = "i" * 2000
    with pytest.raises(JobError, match=rf"^job '{long_id}': its submit-job entry is 1,04"):
        api.submit(store, doc, long_id)
    assert store.tail() == -1


def test_the_embedded_store_refuses_an_oversize_entry_as_zookeeper_would(store):
    entry = Entry("kill-job", {"id": "j", "reason": "r" * MAX_ENTRY_BYTES})
    size = len(entry.encode())
    with pytest.raises(StoreError) as caught:
        store.append(entry)
    assert str(caught.value) == (
        f"kill-job entry for 'j' is {size:,} bytes, {size - MAX_ENTRY_BYTES:,} bytes over the "
        f"limit of {MAX_ENTRY_BYTES:,} of a log entry (ZooKeeper's jute.maxbuffer)"
    )
    assert store.tail() == -1
