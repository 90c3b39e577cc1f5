"""A rolling restart under a running job: every member in turn is stopped with SIGTERM (as
systemd stops a unit) and a fresh one started in its place, on `onyx peer start` processes over
a real ZooKeeper. The keyed, windowed chaos job, with local recovery and standbys, publishes
exactly what a failure-free run publishes, every stopped member exits 0, and the job never rolls
back: no task of any member restores with scope global (each stop is a hand-over: the job
stands still at a pause's commit and moves from there)."""

from __future__ import annotations

import signal

import pytest

from peer import api
from peer.runtime.checkpoints import Commits
from tests.chaos.test_exactly_once import failure_free, job, progressed, published
from tests.integration.test_metrics import Scrape
from tests.support import free_port, wait_for

pytestmark = pytest.mark.integration

MEMBERS = 3


@pytest.fixture
def reference(tmp_path, monkeypatch) -> list[str]:
    """The failure-free run's output, at full speed; the members started after it are paced,
    so that the job outlasts three stops. Its events are the test's too."""
    records = failure_free(tmp_path / "reference")
    monkeypatch.setenv("ONYX_TEST_PACE", "0.02")
    return records


def standing_job(events, out) -> dict:
    spec = job(events, out)
    spec["local_recovery"] = True
    for task in spec["catalog"]:
        if task["name"] == "count":
            task["standby"] = True
    return spec


def test_a_rolling_restart_rolls_no_job_back_and_changes_nothing_in_the_output(
    reference, start_peer, zookeeper, tenancy, tmp_path
):
    events = tmp_path / "reference" / "events.jsonl"

    def member():
        port = free_port()
        extra = ["--metrics-port", str(port), "--metrics-address", "127.0.0.1"]
        return start_peer(vpeers=3, session_timeout=20.0, extra=extra), port

    members = [member() for _ in range(MEMBERS)]
    store = api.connect(zookeeper.address, tenancy, create=True)
    try:
        wait_for(lambda: len(api.replica(store).peers) >= 3 * MEMBERS, 60, "every peer")
        job_id = api.submit(store, standing_job(events, tmp_path / "out"))
        commits = Commits(store, job_id)
        globally = 0.0
        for turn in range(MEMBERS):
            progressed(store, commits, job_id)
            assert job_id in api.replica(store).jobs, f"the job ended before stop {turn + 1}"
            process, port = members.pop(0)
            globally += Scrape(port).total("onyx_task_restores_total", scope="global")
            process.signal(signal.SIGTERM)
            assert process.process.wait(60) == 0, process.output()[-3000:]
            members.append(member())
            wait_for(lambda: len(api.replica(store).peers) >= 3 * MEMBERS, 60, "every peer")
        final = api.wait(store, job_id, 600)
        assert final.state == "completed"
        globally += sum(
            Scrape(port).total("onyx_task_restores_total", scope="global") for _, port in members
        )
    finally:
        store.close()
    assert published(tmp_path / "out") == reference
    assert globally == 0, "no member restored a task with scope global: nothing rolled back"
