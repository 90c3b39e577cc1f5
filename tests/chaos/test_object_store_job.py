"""The exactly-once chaos job with everything on a real S3 server: its input file, its
checkpoints and its published output. The server is killed -9 while the job runs and started
again a while later; the job waits for it (its uploads retried, or rolled back to its last
commit if the store stays away too long), commits again once it is back, and publishes exactly
what a failure-free run on local directories publishes."""

from __future__ import annotations

import json
import uuid

import pytest

from peer import api
from peer.runtime.checkpoints import Commits
from tests.chaos.test_exactly_once import failure_free, job, progressed
from tests.support import ObjectStore, wait_for

pytestmark = pytest.mark.integration


def published_on_store(object_store: ObjectStore, path: str) -> list[str]:
    fs = object_store.filesystem()
    return sorted(
        json.dumps(json.loads(line), sort_keys=True)
        for f in fs.glob(f"{path}/*.jsonl")
        for line in fs.cat_file(f).decode().splitlines()
    )


@pytest.fixture
def reference(tmp_path, monkeypatch) -> list[str]:
    """The failure-free run's output, at full speed and on local directories; the members
    started after it are paced, so that the job runs long enough for the store to go and come.
    Its events are the test's too."""
    records = failure_free(tmp_path / "reference")
    monkeypatch.setenv("ONYX_TEST_PACE", "0.02")
    return records


@pytest.fixture
def client(zookeeper, tenancy):
    """A client on the test's tenancy."""
    store = api.connect(zookeeper.address, tenancy, create=True)
    yield store
    store.close()


def test_a_store_killed_mid_run_changes_nothing_in_the_published_output(
    reference, object_store, start_peer, client, tmp_path
):
    root = f"{ObjectStore.BUCKET}/{uuid.uuid4().hex}"
    events = tmp_path / "reference" / "events.jsonl"
    object_store.filesystem().put_file(str(events), f"{root}/events.jsonl")
    checkpoints = ["--checkpoints", f"s3://{root}/checkpoints"]
    groups = [start_peer(vpeers=3, extra=checkpoints) for _ in range(2)]
    store = client
    try:
        wait_for(lambda: len(api.replica(store).peers) >= 6, 60, "6 peers")
        spec = job(f"s3://{root}/events.jsonl", f"s3://{root}/out")  # type: ignore[arg-type]
        job_id = api.submit(store, spec)
        commits = Commits(store, job_id)
        progressed(store, commits, job_id)
        object_store.kill()
        wait_for(
            lambda: any("failed, trying again" in g.output() for g in groups),
            60,
            "a member to find the store gone",
        )
        object_store.start()
        final = api.wait(store, job_id, 600)
    finally:
        if object_store.process is not None and object_store.process.poll() is not None:
            object_store.start()  # the session's other tests need it
    assert final.state == "completed", [g.output()[-3000:] for g in groups]
    assert published_on_store(object_store, f"{root}/out") == reference
