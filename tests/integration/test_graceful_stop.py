"""SIGTERM to `onyx peer start` (systemd's stop, a rolling restart, an upgrade) is the graceful
leave of `onyx leave`, on real processes over a real ZooKeeper: a member working on a
checkpointed job keeps its work until the job commits the hand-over's pause (an epoch after
which its inputs read nothing), then exits and is removed, its process exits 0, its work moves
from that commit (a hand-over's restore, which redoes nothing: the job does not roll back, and
no restore counts as global), and the job's output is exact."""

from __future__ import annotations

import re
import signal

import pytest

from peer import api
from peer.log.entry import Transition
from peer.log.replica import Replica
from peer.runtime.checkpoints import Commits
from peer.runtime.placement import placements
from peer.values.epoch import Epoch
from tests.chaos.test_exactly_once import progressed
from tests.integration.test_job_control import paced_job, published
from tests.integration.test_metrics import Scrape
from tests.support import PeerProcess, free_port, onyx, wait_for

pytestmark = pytest.mark.integration

COUNT = 4000
"""Numbers through a slow step: seconds of work, half of it left when the member leaves."""


@pytest.fixture
def members(start_peer, zookeeper, tenancy):
    """Two members of three peers each, serving metrics, with the session timeout of a deployed
    member (it bounds the stop's leave); each with its metrics port, and a client."""
    ports = [free_port(), free_port()]
    started = [
        start_peer(vpeers=3, session_timeout=20.0,
                   extra=["--metrics-port", str(port), "--metrics-address", "127.0.0.1"])
        for port in ports
    ]  # fmt: skip
    store = api.connect(zookeeper.address, tenancy, create=True)
    wait_for(lambda: len(api.replica(store).peers) >= 6, 60, "6 peers")
    yield list(zip(started, ports, strict=True)), store
    store.close()


def commits_of(output: str, job_id: str) -> list[Epoch]:
    """The epochs of the job a coordinator's log says it committed, in order."""
    found = re.findall(rf"job {job_id}: epoch (\d+) of allocation (\d+) committed", output)
    return [Epoch(int(version), int(number)) for number, version in found]


@pytest.mark.parametrize("how", ["SIGTERM"])
def test_a_stopped_member_hands_its_work_over_as_onyx_leave_does(
    how, members, zookeeper, tenancy, tmp_path
):
    """The member of the job's coordinator leaves (the hardest one: the job's inputs and its
    commits move)."""
    (first, second), store = members
    job_id = api.submit(store, paced_job(tmp_path / "out", COUNT))
    commits = Commits(store, job_id)
    progressed(store, commits, job_id)
    current = api.replica(store)
    member = current.group_of(placements(current, {})[job_id].coordinator)
    (leaving, _), (staying, port) = (first, second) if first[0].runs(member) else (second, first)
    scrape = Scrape(port)
    globally_before = scrape.total("onyx_task_restores_total", onyx_job=job_id, scope="global")
    handed_before = scrape.total("onyx_task_restores_total", onyx_job=job_id, scope="handover")
    steps: list[tuple[str, Replica]] = []

    def record(t: Transition) -> None:
        if t.entry.position > current.version and t.diff is not None and t.kind is not None:
            steps.append((t.kind.name, t.new))

    before = commits.read()[0].committed
    leave(how, leaving, member, zookeeper, tenancy)
    api.follow(store, lambda r: member in r.left, 120, each=record)
    assert leaving.process.wait(60) == 0
    output = leaving.output()
    assert "has handed its work over and exits" in output
    assert "did not commit an epoch in time" not in output
    assert "leaving the cluster at once" not in output
    handed = commits_of(output[: output.index("has handed its work over")], job_id)
    assert handed[-1].version == before.version, "committed by the allocation it left"
    assert handed[-1] > before, "an epoch the job was in when the leave began"

    assert [kind for kind, _ in steps if kind.startswith("member-")] == [
        "member-leave", "member-exit"
    ]  # fmt: skip
    versions = {r.allocation_versions.get(job_id) for _, r in steps} - {None}
    assert versions == {before.version, moved(steps, job_id)}, "one reallocation: the exit"
    assert not [kind for kind, _ in steps if kind == "rollback-job"]
    final = api.wait(store, job_id, 300)
    assert final.state == "completed"
    assert sorted(published(tmp_path / "out")) == list(range(COUNT))
    assert member in api.replica(store).removed
    after_exit = next(r for kind, r in steps if kind == "member-exit")
    mine = [p for ps in after_exit.allocations[job_id].values() for p in ps]
    scrape = Scrape(port)
    handed_over = scrape.total("onyx_task_restores_total", onyx_job=job_id, scope="handover")
    globally = scrape.total("onyx_task_restores_total", onyx_job=job_id, scope="global")
    assert handed_over - handed_before == len(mine), "each task restored once, at the pause"
    assert globally == globally_before, "no rollback"
    assert staying.process.poll() is None


def leave(how: str, process: PeerProcess, member: str, zookeeper, tenancy: str) -> None:
    if how == "SIGTERM":
        process.signal(signal.SIGTERM)
        return
    result = onyx("leave", "--zookeeper", zookeeper.address, "--tenancy", tenancy, member)
    assert result.returncode == 0, result.stderr


def moved(steps: list[tuple[str, Replica]], job_id: str) -> int:
    """The job's allocation version once the leaving member has exited."""
    return next(r for kind, r in steps if kind == "member-exit").allocation_versions[job_id]
