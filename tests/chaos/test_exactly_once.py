"""Exactly-once under kill -9: a keyed stream through a windowed count into the exactly-once
sink, on `onyx peer start` processes over a real ZooKeeper and Aeron, with peer groups killed
at random moments and replaced. The published output must equal a failure-free run's."""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path

import pytest
import yaml

from peer import api
from peer.runtime.checkpoints import Commits
from peer.runtime.placement import placements
from tests.support import onyx, wait_for

pytestmark = pytest.mark.integration

EVENTS = 100_000
USERS = 50


def write_events(path: Path) -> None:
    with path.open("w") as f:
        for i in range(EVENTS):
            f.write(json.dumps({"user": f"u{(i * 7) % USERS}", "ts": i}) + "\n")


def job(events: Path, out: Path, backend: str = "memory") -> dict:
    """The count's windows keep their slots in the keyed state, on ``backend``."""
    return {
        "workflow": [["read", "count"], ["count", "write"]],
        "catalog": [
            {"name": "read", "kind": "input", "plugin": "peer.plugins.jsonl:input",
             "params": {"path": str(events)}, "n_peers": 1},
            {"name": "count", "kind": "function", "fn": "tests.chaos.pacing:pace",
             "group_by_key": "user", "max_peers": 2},
            {"name": "write", "kind": "output", "plugin": "peer.plugins.jsonl:exactly_once_output",
             "params": {"path": str(out)}, "max_peers": 2},
        ],
        "windows": [{"id": "visits", "task": "count", "type": "fixed", "aggregation": "count",
                     "key": "ts", "range": 5000}],
        "triggers": [{"window": "visits", "on": "segment", "threshold": 20},
                     {"window": "visits", "on": "watermark"}],
        "barrier_period": 0.5,
        "state_backend": backend,
    }  # fmt: skip


def published(out: Path) -> list[str]:
    """Every published record, as sorted canonical JSON: the sink's file names hold epochs,
    which differ between runs; the records must not."""
    return sorted(
        json.dumps(json.loads(line), sort_keys=True)
        for f in out.glob("*.jsonl")
        for line in f.read_text().splitlines()
    )


def failure_free(base: Path) -> list[str]:
    """The job without failures, in one process (`onyx run`), its events written to
    ``base/events.jsonl``: what every run with failures must publish."""
    base.mkdir(parents=True, exist_ok=True)
    write_events(base / "events.jsonl")
    (base / "job.yaml").write_text(yaml.safe_dump(job(base / "events.jsonl", base / "out")))
    result = onyx("run", str(base / "job.yaml"), "--vpeers", "5", timeout=600)
    assert result.returncode == 0, result.stderr
    records = published(base / "out")
    assert len(records) > EVENTS // 20
    return records


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> list[str]:
    return failure_free(tmp_path_factory.mktemp("reference"))


@pytest.mark.parametrize(
    ("victims", "modes", "backend"),
    [("random", "classic", "memory"), ("coordinator", "at scale", "memory"),
     ("random", "classic", "disk")],
    indirect=["modes"],
)  # fmt: skip
def test_three_kills_change_nothing_in_the_published_output(
    victims, modes, backend, reference, cluster, *, tmp_path
):
    groups, replace, store = cluster
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    write_events(tmp_path / "events.jsonl")
    job_id = api.submit(store, job(tmp_path / "events.jsonl", tmp_path / "out", backend))
    commits = Commits(store, job_id)
    for kill in range(3):
        progressed(store, commits, job_id)
        time.sleep(rng.uniform(0, 1))  # a random moment of the run, not a wait for anything
        current = api.replica(store)
        assert job_id in current.jobs, f"seed {seed}: the job ended before kill {kill + 1}"
        victim_group = pick(current, job_id, victims, rng)
        next(g for g in groups if g.runs(victim_group)).signal(signal.SIGKILL)
        replace()
    final = api.wait(store, job_id, 300)
    assert final.state == "completed", f"seed {seed}"
    assert published(tmp_path / "out") == reference, f"seed {seed}"
    if modes:
        replacements = [g.output() for g in groups[3:]]
        assert all(", aided by group " in o for o in replacements), "replacements joined directly"


def progressed(store, commits: Commits, job_id: str) -> None:
    """Wait until the job's current allocation has committed an epoch: it has recovered and
    moved on since the last kill (or the job is over)."""

    def moved_on() -> bool:
        replica = api.replica(store)
        if job_id not in replica.jobs:
            return True
        record, _ = commits.read()
        version = replica.allocation_versions.get(job_id)
        return bool(record and record.committed and record.committed.version == version)

    wait_for(moved_on, 120, "the job to commit an epoch on its current allocation", interval=0.2)


def kill_members(cluster, job_id: str, kills: int, rng: random.Random, seed: int) -> None:
    """``kills`` times: once the job has committed on its current allocation, at a random
    moment, kill -9 a member running it and start a replacement (the cluster fixture's)."""
    groups, replace, store = cluster
    commits = Commits(store, job_id)
    for kill in range(kills):
        progressed(store, commits, job_id)
        time.sleep(rng.uniform(0, 1))  # a random moment of the run, not a wait for anything
        current = api.replica(store)
        assert job_id in current.jobs, f"seed {seed}: the job ended before kill {kill + 1}"
        victim = pick(current, job_id, "random", rng)
        next(g for g in groups if g.runs(victim)).signal(signal.SIGKILL)
        replace()


def pick(replica, job_id: str, victims: str, rng: random.Random) -> str:
    allocation = replica.allocations[job_id]
    if victims == "coordinator":
        return replica.group_of(placements(replica, {})[job_id].coordinator)
    working = sorted({replica.group_of(p) for ps in allocation.values() for p in ps})
    return rng.choice(working)


@pytest.mark.parametrize(("modes", "pace"), [("at scale", 0.05)], indirect=["modes"])
def test_a_member_leaving_gracefully_and_coming_back_changes_nothing_in_the_output(
    reference, cluster, zookeeper, tenancy, tmp_path
):
    """`onyx leave` of a member all of whose peers work on the job: it keeps its work until
    the job commits the epoch it was in (its allocation does not change on the leave, only on
    the exit), then it exits cleanly, and the job goes on on fewer peers. A member comes back,
    as in a rolling restart: the job grows back only at a grow-job, standing still at a commit.
    No peer restores with scope global, and the published output equals a failure-free run's."""
    groups, replace, store = cluster
    write_events(tmp_path / "events.jsonl")
    job_id = api.submit(store, job(tmp_path / "events.jsonl", tmp_path / "out"))
    progressed(store, Commits(store, job_id), job_id)
    current = api.replica(store)
    leaving = busiest(current, job_id)
    process = next(g for g in groups if g.runs(leaving))
    seen: dict[int, tuple[str, int | None]] = {}

    def record(t) -> None:
        """By position: each follow plays the log again from where the store boots it."""
        if t.diff is not None and t.kind.name in ("member-leave", "member-exit", "grow-job"):
            seen[t.entry.position] = (t.kind.name, t.new.allocation_versions.get(job_id))

    def steps() -> list[tuple[str, int | None]]:
        return [seen[position] for position in sorted(seen)]

    result = onyx("leave", "--zookeeper", zookeeper.address, "--tenancy", tenancy, leaving)
    assert result.returncode == 0, result.stderr
    api.follow(store, lambda r: leaving in r.removed, 120, each=record)
    assert process.process.wait(60) == 0
    assert "has handed its work over and exits" in process.output()
    assert "did not commit an epoch in time" not in process.output()
    assert [kind for kind, _ in steps()] == ["member-leave", "member-exit"]
    assert steps()[0][1] == current.allocation_versions[job_id], "the leave moved nothing"
    shrunk = api.replica(store)
    assert job_id in shrunk.jobs, "the job ended before the member came back"
    assert size(shrunk, job_id) < size(current, job_id), "the job went on on fewer peers"
    replace()
    back = api.follow(
        store,
        lambda r: job_id not in r.jobs or size(r, job_id) == size(current, job_id),
        120,
        each=record,
    )
    assert job_id in back.jobs, "the job ended before it grew back"
    assert [kind for kind, _ in steps()] == ["member-leave", "member-exit", "grow-job"]
    assert steps()[-1][1] == back.allocation_versions[job_id], "grow-job grew the job"
    final = api.wait(store, job_id, 300)
    assert final.state == "completed"
    assert published(tmp_path / "out") == reference
    restores = "\n".join(g.output() for g in groups)
    assert "scope handover" in restores
    assert "scope global" not in restores


def busiest(replica, job_id: str) -> str:
    """A group all of whose peers work on the job: its leave shrinks the job."""
    working = {p for ps in replica.allocations[job_id].values() for p in ps}
    return next(g for g in sorted(replica.groups) if set(replica.group_peers.get(g, ())) <= working)


def size(replica, job_id: str) -> int:
    return sum(len(ps) for ps in replica.allocations.get(job_id, {}).values())
