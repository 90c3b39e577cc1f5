"""Keyed state the engine keeps (peer.state.keyed) through real processes: each event with its
user's running count, published exactly once, checked against counts made here from the
events; in one `onyx run`, and with a group of the count task killed -9 once an epoch whose
snapshots add to earlier ones (a chain of what changed) has committed, so that its key groups
are restored from that chain; each on both state backends, memory and disk. On disk, every
slot's directory is gone once the job completes: the runners that close delete theirs, and
the group started after the kill deletes the one the killed group left."""

from __future__ import annotations

import json
import logging
import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
import yaml

from peer import api
from peer.cluster.local import LocalCluster
from peer.metrics import STATE_DISK_FAILURES
from peer.runtime.checkpoints import CheckpointStorage, Commits
from peer.runtime.snapshot import read as read_snapshot
from peer.values.epoch import Epoch
from tests.support import onyx, wait_for

pytestmark = pytest.mark.integration

EVENTS, USERS = 3_000, 400
"""Many more users than an epoch's events: each epoch changes a few of the counts a slot holds,
so its snapshots hold what changed."""


def keyed_job(tmp_path: Path, backend: str = "memory", fn: str = "RunningCount",
              peers: dict | None = None, read_peers: dict | None = None) -> Path:  # fmt: skip
    with (tmp_path / "events.jsonl").open("w") as f:
        for i in range(EVENTS):
            f.write(json.dumps({"user": f"u{(i * 7) % USERS}", "ts": i}) + "\n")
    job = {
        "workflow": [["read", "count"], ["count", "write"]],
        "catalog": [
            {"name": "read", "kind": "input", "plugin": "peer.plugins.jsonl:input",
             "params": {"path": str(tmp_path / "events.jsonl")}, **(read_peers or {"n_peers": 1}),
             "batch_size": 10},
            {"name": "count", "kind": "function", "fn": f"tests.integration.pacing:{fn}",
             "group_by_key": "user", "max_parallelism": 16, **(peers or {"n_peers": 2})},
            {"name": "write", "kind": "output", "plugin": "peer.plugins.jsonl:exactly_once_output",
             "params": {"path": str(tmp_path / "out")}, "n_peers": 1},
        ],
        "barrier_period": 0.2,
        "state_backend": backend,
    }  # fmt: skip
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def expected() -> list[tuple[str, int, int]]:
    """Each event's running count, one input reading in order: per user, 1, 2, 3, ..."""
    seen: dict[str, int] = {}
    rows = []
    for i in range(EVENTS):
        user = f"u{(i * 7) % USERS}"
        seen[user] = seen.get(user, 0) + 1
        rows.append((user, i, seen[user]))
    return sorted(rows)


def published(tmp_path: Path) -> list[tuple[str, int, int]]:
    rows = [json.loads(line) for f in (tmp_path / "out").glob("*.jsonl")
            for line in f.read_text().splitlines()]  # fmt: skip
    return sorted((r["user"], r["ts"], r["count"]) for r in rows)


def chained(commits: Commits) -> bool:
    """Whether the committed epoch's snapshots add to earlier ones."""
    record = commits.read()[0]
    return bool(record and record.committed and 0 < record.since < record.committed.number)


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_running_counts_in_keyed_state_over_two_groups(tmp_path, backend):
    job = keyed_job(tmp_path, backend)
    result = onyx("run", str(job), "--vpeers", "2", "--groups", "2", timeout=180)
    assert result.returncode == 0, result.stderr
    assert published(tmp_path) == expected()


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_keyed_state_survives_a_group_of_the_count_task_killed_mid_job(
    start_peer, zookeeper, tenancy, tmp_path, *, monkeypatch, backend
):
    monkeypatch.setenv("ONYX_TEST_PACE", "0.003")
    state = tmp_path / "state"
    extra = ["--auto-down-unreachable-after", "1", "--state-dir", str(state)]
    options = {"vpeers": 2, "extra": extra}
    groups = [start_peer(**options) for _ in range(3)]
    with closing(api.connect(zookeeper.address, tenancy, create=True)) as store:
        wait_for(lambda: len(api.replica(store).peers) >= 6, 60, "6 peers")
        job_id = api.submit(store, keyed_job(tmp_path, backend))
        commits = Commits(store, job_id)
        wait_for(lambda: chained(commits), 60, "a commit of snapshots that add to earlier ones")
        before = api.replica(store)
        victim = before.group_of(before.allocations[job_id]["count"][0])
        next(g for g in groups if g.runs(victim)).signal(signal.SIGKILL)
        groups.append(start_peer(**options))
        final = api.wait(store, job_id, 180)
    assert final.state == "completed"
    restored = f"restored task 'count' of job {job_id}"
    assert any(restored in g.output() for g in groups if not g.runs(victim)), "no restore"
    assert published(tmp_path) == expected()
    if backend == "disk":
        assert any(state.iterdir()), "the count task's slots held their state on disk"
        wait_for(lambda: not slot_directories(state), 30, "every slot's state directory deleted")


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_keyed_state_rescales_from_2_to_3_to_2_members_exactly(
    start_peer, zookeeper, tenancy, tmp_path, *, monkeypatch, backend
):
    """The count task runs on as many peers as the members have to spare (2 to 4): a third
    member makes the job grow at a pause, and one of the first two stopping (SIGTERM, a
    graceful leave) makes it shrink at another. Each time the count task's key groups are
    redistributed among its new slots, each reading the key groups it gained, and the output is
    exactly what one run without either would give."""
    monkeypatch.setenv("ONYX_TEST_PACE", "0.02")
    options = {"vpeers": 2, "extra": ["--state-dir", str(tmp_path / "state")]}
    first = [start_peer(**options) for _ in range(2)]
    with closing(api.connect(zookeeper.address, tenancy, create=True)) as store:
        wait_for(lambda: len(api.replica(store).peers) >= 4, 60, "4 peers")
        job = keyed_job(tmp_path, backend, peers={"min_peers": 1, "max_peers": 4})
        job_id = api.submit(store, job)

        def count_peers() -> int:
            return len(api.replica(store).allocations.get(job_id, {}).get("count", []))

        commits = Commits(store, job_id)
        wait_for(lambda: count_peers() == 2 and chained(commits), 60, "2 count peers, chained")
        third = start_peer(**options)
        wait_for(lambda: count_peers() == 4, 60, "the job grown to 4 count peers")
        first[0].signal(signal.SIGTERM)
        wait_for(lambda: count_peers() == 2 or api.status(api.replica(store), job_id).state
                 != "running", 60, "the job shrunk back to 2 count peers")  # fmt: skip
        final = api.wait(store, job_id, 180)
    assert final.state == "completed", final.reason
    restores = restore_scopes([*first, third], "count", job_id)
    assert restores.count("handover") >= 4 + 2, restores  # grown to 4 slots, then shrunk to 2
    assert "global" not in restores, "the job rolled back"
    assert published(tmp_path) == expected()


def test_a_savepoint_in_memory_resumes_on_disk_on_more_peers_exactly(
    start_peer, zookeeper, tenancy, tmp_path, *, monkeypatch
):
    """Savepoints hold keyed state in one form whatever the backend: a job stopped with a
    savepoint while counting in memory on 2 peers resumes on the disk backend on 3, each of
    those reading the key groups it owns now, and the output is exactly one run's."""
    monkeypatch.setenv("ONYX_TEST_PACE", "0.01")
    options = {"vpeers": 3, "extra": ["--state-dir", str(tmp_path / "state")]}
    for _ in range(2):
        start_peer(**options)
    with closing(api.connect(zookeeper.address, tenancy, create=True)) as store:
        wait_for(lambda: len(api.replica(store).peers) >= 6, 60, "6 peers")
        first = api.submit(store, keyed_job(tmp_path, "memory"), job_id="first")
        wait_for(lambda: chained(Commits(store, first)), 60, "a chained commit")
        kept = api.stop(store, first, "moved", 60)
        resumed = yaml.safe_load(keyed_job(tmp_path, "disk", peers={"n_peers": 3}).read_text())
        resumed["resume_from"] = {"job": first, "savepoint": "moved"}
        final = api.wait(store, api.submit(store, resumed, job_id="second"), 180)
    assert final.state == "completed", final.reason
    assert kept.slots["count"] == 2
    assert published(tmp_path) == expected()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB filesystem of its own (a tmpfs), unmounted at the end."""
    where = tmp_path / "small"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)], check=True)
    yield where
    subprocess.run(["umount", "--lazy", str(where)], check=True)


ENDLESS = {
    "workflow": [["numbers", "drop"]],
    "catalog": [
        {"name": "numbers", "kind": "input", "plugin": "peer.plugins.memory:input",
         "params": {"count": 10**12}, "n_peers": 1, "batch_size": 100},
        {"name": "drop", "kind": "output", "plugin": "peer.plugins.null:output", "n_peers": 1},
    ],
    "barrier_period": 0.2,
}  # fmt: skip


def test_a_full_state_disk_kills_its_job_and_the_group_s_other_job_goes_on(tmp_path, small_disk):
    """A job whose slots' state on disk fills their filesystem is killed, its reason naming the
    task and the full disk; the group and its other job go on, and every slot's directory is
    deleted."""
    cluster = LocalCluster(groups=1, vpeers=6, state_dir=small_disk)
    cluster.start()
    try:
        cluster.await_ring(30)
        other = api.submit(cluster.reader, ENDLESS)
        wait_for(lambda: api.status(cluster.replica(), other).state == "running", 30, "running")
        filling = api.submit(cluster.reader, keyed_job(tmp_path, "disk", fn="KeepsEverything"))
        final = api.wait(cluster.reader, filling, 120)
        assert final.state == "killed"
        for words in ("task 'count'", "StateStoreError: keyed state on disk in", str(small_disk),
                      "No space left on device"):  # fmt: skip
            assert words in final.reason, final.reason
        assert api.status(cluster.replica(), other).state == "running"
        wait_for(lambda: not slot_directories(small_disk), 30, "every slot's directory deleted")
        failed = [STATE_DISK_FAILURES.labels(op)._value.get() for op in ("write", "snapshot")]
        assert sum(failed) > 0, "a write, or the flush of a barrier's frozen copy"
        api.kill(cluster.reader, other)
    finally:
        cluster.stop()


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_a_growing_job_s_slots_keep_the_key_groups_they_held_in_their_process(
    tmp_path, caplog, *, monkeypatch, backend
):
    """In one process, a keyed job on 2 count slots grows to 4 at a pause once another job
    leaves it peers. Old slot 0 held key groups 0 to 7 of 16, old slot 1 8 to 15: new slot 0
    keeps 0 to 3 and new slot 2 keeps 8 to 11 of the state they held (each the heir of an old
    slot, peer.runtime.state_shelf), reading from checkpoint storage only the key groups that
    moved to them. The output is exactly one run's."""
    monkeypatch.setenv("ONYX_TEST_PACE", "0.003")
    caplog.set_level(logging.INFO, logger="peer.runtime.task")
    cluster = LocalCluster(groups=1, vpeers=6, checkpoints=str(tmp_path / "checkpoints"),
                           state_dir=tmp_path / "state")  # fmt: skip
    cluster.start()
    try:
        cluster.await_ring(30)
        other = api.submit(cluster.reader, ENDLESS)
        wait_for(lambda: api.status(cluster.replica(), other).state == "running", 30, "running")
        job = keyed_job(tmp_path, backend, peers={"min_peers": 1, "max_peers": 4})
        job_id = api.submit(cluster.reader, job)

        def count_peers() -> int:
            return len(cluster.replica().allocations.get(job_id, {}).get("count", []))

        commits = Commits(cluster.reader, job_id)
        wait_for(lambda: count_peers() == 2 and chained(commits), 60, "2 count peers, chained")
        api.kill(cluster.reader, other)
        final = api.wait(cluster.reader, job_id, 180)
    finally:
        cluster.stop()
    assert final.state == "completed", final.reason
    kept = re.findall(rf"keeps key groups (\d+) to (\d+) of task 'count' of job {job_id}",
                      caplog.text)  # fmt: skip
    assert sorted(kept) == [("0", "3"), ("8", "11")], caplog.text
    assert published(tmp_path) == expected()


def slot_directories(state: Path) -> list[Path]:
    return [slot for process in state.iterdir() for slot in process.iterdir()]


def test_an_input_that_splits_its_share_rescales_from_2_to_3_to_2_members_exactly(
    start_peer, zookeeper, tenancy, tmp_path, *, monkeypatch
):
    """The file input runs on as many peers as the members have to spare (1 to 3): a third
    member gives it more at a pause, and one of the first two stopping gives it fewer at
    another. Each time its new slots take the positions of the splits they own now from the
    old slots that held them, and every event is counted once. Several readers hand a user's
    events to the count in another order than one reader would, so the check is each event
    once, with each user's counts 1 to n."""
    monkeypatch.setenv("ONYX_TEST_PACE", "0.02")
    # A leave hands over within half the session timeout: the pause's barrier waits behind the
    # events the count has queued, seconds of them at this pace.
    options = {"vpeers": 2, "session_timeout": 20.0}
    first = [start_peer(**options) for _ in range(2)]
    with closing(api.connect(zookeeper.address, tenancy, create=True)) as store:
        wait_for(lambda: len(api.replica(store).peers) >= 4, 60, "4 peers")
        job = keyed_job(tmp_path, read_peers={"min_peers": 1, "max_peers": 3})
        size = (tmp_path / "events.jsonl").stat().st_size
        job_id = api.submit(store, job)

        def readers() -> int:
            return len(api.replica(store).allocations.get(job_id, {}).get("read", []))

        def running() -> bool:
            return api.status(api.replica(store), job_id).state == "running"

        wait_for(lambda: readers() == 1 and chained(Commits(store, job_id)), 60, "a commit")
        third = start_peer(**options)
        wait_for(lambda: readers() == 3, 60, "the input grown to 3 peers")
        grown = wait_for(lambda: committed_on(Commits(store, job_id), "read", 3), 60,
                         "a commit of 3 readers")  # fmt: skip
        assert any(offset < size for slot in range(3)
                   for _, offset in reader_positions(tmp_path, tenancy, job_id, grown, slot)), \
            "the input had read its whole file before it grew"  # fmt: skip
        first[0].signal(signal.SIGTERM)
        wait_for(lambda: readers() == 1 or not running(), 60, "the input shrunk to 1 peer")
        final = api.wait(store, job_id, 180)
    assert final.state == "completed", final.reason
    restores = restore_scopes([*first, third], "read", job_id)
    assert restores.count("handover") >= 3 + 1, restores  # grown to 3 slots, then shrunk to 1
    assert "global" not in restores, "the job rolled back"
    rows = published(tmp_path)
    assert sorted(ts for _, ts, _ in rows) == list(range(EVENTS))
    counts: dict[str, list[int]] = {}
    for user, _, count in rows:
        counts.setdefault(user, []).append(count)
    assert all(sorted(c) == list(range(1, len(c) + 1)) for c in counts.values())


def committed_on(commits: Commits, task: str, slots: int) -> Epoch | None:
    """The committed epoch, if ``task`` ran on ``slots`` slots in it."""
    record = commits.read()[0]
    if record is None or record.committed is None or record.slots.get(task) != slots:
        return None
    return record.committed


def reader_positions(tmp_path: Path, tenancy: str, job_id: str, epoch: Epoch, slot: int):
    """The [lines read, byte offset] of each split that slot of the input owned at ``epoch``."""
    storage = CheckpointStorage(str(tmp_path / "checkpoints"), tenancy)
    try:
        return read_snapshot(storage.get(job_id, epoch, "read", slot))[0].plugin
    finally:
        storage.close()


def restore_scopes(peers: list, task: str, job_id: str) -> list[str]:
    """The scope of each restore of ``task`` the peers logged, in their order."""
    logs = "".join(p.output() for p in peers)
    return re.findall(rf"restored task '{task}' of job {job_id} from .*, scope (\w+)", logs)
