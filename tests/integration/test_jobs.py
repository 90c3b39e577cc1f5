"""Jobs on a real cluster: `onyx peer start` processes on a real ZooKeeper, segments between
them over Aeron UDP, jobs submitted, followed and killed through the CLI."""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import sys
from contextlib import ExitStack, closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from peer import api
from peer.log.replica import Replica
from tests.support import REPO, PeerProcess, assert_one_line_error, onyx, wait_for

pytestmark = pytest.mark.integration

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]


def write_lines(path: Path, count: int) -> collections.Counter[str]:
    """Lines of words whose exact counts the test knows."""
    expected: collections.Counter[str] = collections.Counter()
    with path.open("w") as f:
        for i in range(count):
            words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(1 + i % 5)]
            expected.update(words)
            f.write(json.dumps({"line": " ".join(words)}) + "\n")
    return expected


def wordcount_job(tmp_path: Path, lines: int, split: str = "examples.wordcount.words:split"):
    expected = write_lines(tmp_path / "lines.jsonl", lines)
    job = yaml.safe_load((REPO / "examples/wordcount/job.yaml").read_text())
    job["catalog"][0]["params"]["path"] = str(tmp_path / "lines.jsonl")
    job["catalog"][1]["fn"] = split
    job["catalog"][3]["params"]["path"] = str(tmp_path / "out" / "counts.jsonl")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path, expected


def counts(path: Path) -> dict[str, int]:
    """The last count written for each word: a restarted job may have written earlier ones."""
    result = {}
    for line in path.read_text().splitlines():
        doc = json.loads(line)
        result[doc["word"]] = doc["count"]
    return result


def cluster_args(zookeeper, tenancy) -> list[str]:
    return ["--zookeeper", zookeeper.address, "--tenancy", tenancy]


def await_peers(zookeeper, tenancy, count: int) -> None:
    store = api.connect(zookeeper.address, tenancy, create=True)
    try:
        wait_for(lambda: len(api.replica(store).peers) >= count, 60, f"{count} active peers")
    finally:
        store.close()


def test_word_count_over_two_processes_gives_exact_counts(start_peer, zookeeper, tenancy, tmp_path):
    start_peer(vpeers=2)
    start_peer(vpeers=2)
    await_peers(zookeeper, tenancy, 4)
    job, expected = wordcount_job(tmp_path, 2_000)
    submitted = onyx("job", "submit", str(job), *cluster_args(zookeeper, tenancy))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    waited = onyx("job", "wait", job_id, *cluster_args(zookeeper, tenancy), "--timeout", "120")
    assert waited.returncode == 0, waited.stderr
    assert waited.stdout.strip() == f"job {job_id}: completed"
    assert counts(tmp_path / "out" / "counts.jsonl") == expected
    listed = onyx("job", "checkpoints", job_id, *cluster_args(zookeeper, tenancy),
                  "--checkpoints", str(tmp_path / "checkpoints"))  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[-1].endswith("(latest: recovery starts here)")
    store = api.connect(zookeeper.address, tenancy, create=True)
    try:
        sites = set(api.replica(store).sites.values())
    finally:
        store.close()
    assert len(sites) == 2


@dataclass
class MidJob:
    """A slow word count running on three groups, and the group that holds its counter."""

    store: Any
    job_id: str
    expected: collections.Counter[str]
    before: Replica
    group: str
    process: PeerProcess
    others: list[PeerProcess]


@pytest.fixture
def mid_job(start_peer, zookeeper, tenancy, tmp_path, monkeypatch):
    def start(**options: Any) -> MidJob:
        marker = tmp_path / "started"
        monkeypatch.setenv("ONYX_TEST_STARTED", str(marker))
        processes = [start_peer(vpeers=2, **options) for _ in range(3)]
        await_peers(zookeeper, tenancy, 6)
        job, expected = wordcount_job(tmp_path, 3_000, "tests.integration.pacing:split_slowly")
        store = stores.enter_context(closing(api.connect(zookeeper.address, tenancy)))
        job_id = api.submit(store, job)
        wait_for(marker.exists, 60, "the job to start splitting")
        before = api.replica(store)
        group = before.group_of(before.allocations[job_id]["count"][0])
        process = next(p for p in processes if group in p.output())
        others = [p for p in processes if p is not process]
        return MidJob(store, job_id, expected, before, group, process, others)

    with ExitStack() as stores:
        yield start


def test_a_group_killed_mid_job_leaves_its_tasks_to_the_survivors(mid_job, tmp_path):
    run = mid_job()
    run.process.signal(signal.SIGKILL)
    final = api.wait(run.store, run.job_id, 180)
    after = api.replica(run.store)
    assert final.state == "completed"
    assert run.group not in after.groups
    assert counts(tmp_path / "out" / "counts.jsonl") == run.expected


def test_a_job_too_big_for_the_cluster_waits_for_peers(start_peer, zookeeper, tenancy, tmp_path):
    start_peer(vpeers=2)
    await_peers(zookeeper, tenancy, 2)
    job, _ = wordcount_job(tmp_path, 10)
    submitted = onyx("job", "submit", str(job), "--id", "big", *cluster_args(zookeeper, tenancy))
    assert (submitted.returncode, submitted.stdout.strip()) == (0, "big")
    status = onyx("job", "status", "big", *cluster_args(zookeeper, tenancy))
    assert status.stdout.strip() == "job big: waiting for peers (needs at least 4)"
    killed = onyx("job", "kill", "big", *cluster_args(zookeeper, tenancy))
    assert killed.stdout.strip() == "job big: killed: an operator killed it"
    again = onyx("job", "submit", str(job), "--id", "big", *cluster_args(zookeeper, tenancy))
    assert again.returncode == 0
    after = onyx("job", "status", "big", *cluster_args(zookeeper, tenancy))
    assert after.stdout.strip() == "job big: killed: an operator killed it"


def test_status_of_a_job_nobody_submitted(zookeeper, tenancy, start_peer):
    start_peer(vpeers=1)
    await_peers(zookeeper, tenancy, 1)
    result = onyx("job", "status", "nope", *cluster_args(zookeeper, tenancy))
    assert_one_line_error(result, 1, "job 'nope'", "no such job")


def broken(tmp_path: Path, change) -> Path:
    job = yaml.safe_load((REPO / "examples/wordcount/job.yaml").read_text())
    change(job)
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


MISTAKES = {
    "unknown task": (
        lambda j: j["workflow"].append(["count", "nowhere"]),
        ["workflow edge 'count' -> 'nowhere'", "task 'nowhere' is not in the catalog"],
    ),
    "cycle": (
        lambda j: j["workflow"].append(["count", "split"]),
        ["workflow has a cycle", "'count' -> 'split' -> 'count'"],
    ),
    "input with incoming edges": (
        lambda j: j["workflow"].append(["split", "read"]),
        ["task 'read'", "an input task cannot have incoming edges"],
    ),
    "output with outgoing edges": (
        lambda j: j["workflow"].append(["write", "count"]),
        ["task 'write'", "an output task cannot have outgoing edges"],
    ),
    "fn that does not import": (
        lambda j: j["catalog"][1].update(fn="examples.wordcount.words:nothing"),
        ["task 'split'", "fn 'examples.wordcount.words:nothing' does not import"],
    ),
    "impossible peer count": (
        lambda j: j["catalog"][2].update(min_peers=3, max_peers=2),
        ["task 'count'", "max_peers"],
    ),
}


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_a_job_with_a_mistake_is_refused_at_submit(mistake, tmp_path, zookeeper, tenancy):
    change, words = MISTAKES[mistake]
    result = onyx("job", "submit", str(broken(tmp_path, change)), *cluster_args(zookeeper, tenancy))
    assert_one_line_error(result, 1, *words)
    store = api.connect(zookeeper.address, tenancy, create=True)
    try:
        assert not api.replica(store).jobs
    finally:
        store.close()


@pytest.mark.parametrize(("groups", "vpeers"), [("1", "4"), ("2", "3")])
def test_onyx_run_counts_words_in_one_process(tmp_path, groups, vpeers):
    job, expected = wordcount_job(tmp_path, 500)
    result = onyx("run", str(job), "--vpeers", vpeers, "--groups", groups, timeout=120)
    assert result.returncode == 0, result.stderr
    assert any(line.endswith(": completed") for line in result.stdout.splitlines())
    assert counts(tmp_path / "out" / "counts.jsonl") == expected


def test_onyx_run_refuses_a_job_its_cluster_is_too_small_for(tmp_path):
    job, _ = wordcount_job(tmp_path, 5)
    result = onyx("run", str(job), "--vpeers", "3", "--groups", "1", timeout=120)
    assert_one_line_error(result, 1, "needs at least 4 virtual peers", "has 3", "--vpeers")


def test_a_group_paused_for_less_than_the_auto_down_time_is_unreachable_not_down(mid_job, tmp_path):
    """Unreachable is not down: while the group is stopped the others log it unreachable, and
    once it runs again reachable; nothing is reallocated, its job keeps its allocation version
    and ends with exact counts."""
    run = mid_job(session_timeout=60.0, extra=["--auto-down-unreachable-after", "60"])
    version = run.before.allocation_versions[run.job_id]
    said = f"member {run.group} is unreachable"
    run.process.signal(signal.SIGSTOP)
    try:
        wait_for(lambda: any(said in p.output() for p in run.others), 60, "an unreachable log")
    finally:
        run.process.signal(signal.SIGCONT)
    back = f"member {run.group} is reachable again"
    wait_for(lambda: any(back in p.output() for p in run.others), 60, "a reachable-again log")
    during = api.replica(run.store)
    final = api.wait(run.store, run.job_id, 180)
    assert run.group in during.groups
    assert during.allocation_versions.get(run.job_id, version) == version
    assert final.state == "completed"
    assert counts(tmp_path / "out" / "counts.jsonl") == run.expected


def test_a_stopped_group_is_downed_by_the_leader_and_comes_back_fresh(mid_job, tmp_path):
    """Its ZooKeeper session outlives the pause, so only the membership's heartbeats can
    notice: it becomes unreachable, the leader downs it once the auto-down time has passed, the
    job moves on without it, and the group, once resumed, reads of its own departure and joins
    again under a new id."""
    run = mid_job(session_timeout=60.0, extra=["--auto-down-unreachable-after", "1"])
    groups = len(run.before.groups)
    run.process.signal(signal.SIGSTOP)
    downed = api.follow(run.store, lambda r: run.group not in r.groups, 60)
    run.process.signal(signal.SIGCONT)
    final = api.wait(run.store, run.job_id, 180)
    back = api.follow(run.store, lambda r: len(r.groups) == groups, 60)
    assert run.group in downed.left
    assert final.state == "completed"
    assert run.group not in back.groups
    assert counts(tmp_path / "out" / "counts.jsonl") == run.expected


def test_groups_attached_to_one_standalone_media_driver(start_peer, zookeeper, tenancy, tmp_path):
    """As on a real machine: `onyx media-driver` runs alone, the groups attach to its directory."""
    directory = tmp_path / "aeron"
    driver = subprocess.Popen(
        [sys.executable, "-m", "peer.cli", "media-driver", "--dir", str(directory)],
        cwd=REPO, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for((directory / "cnc.dat").exists, 30, "the media driver to start")
        for _ in range(2):
            start_peer(vpeers=2, extra=["--aeron-dir", str(directory)])
        await_peers(zookeeper, tenancy, 4)
        job, expected = wordcount_job(tmp_path, 500)
        submitted = onyx("job", "submit", str(job), *cluster_args(zookeeper, tenancy))
        waited = onyx("job", "wait", submitted.stdout.strip(), *cluster_args(zookeeper, tenancy))
        assert waited.returncode == 0, waited.stderr
        assert counts(tmp_path / "out" / "counts.jsonl") == expected
    finally:
        driver.send_signal(signal.SIGTERM)
        driver.wait(30)
    assert driver.returncode == 0, driver.stderr.read()


def test_a_group_given_a_directory_without_a_driver_says_so(zookeeper, tenancy, tmp_path):
    result = onyx(
        "peer", "start", *cluster_args(zookeeper, tenancy), "--aeron-dir", str(tmp_path / "none")
    )
    assert_one_line_error(result, 1, "no media driver", str(tmp_path / "none"))


def test_a_bad_mtu_is_refused_in_one_line(zookeeper, tenancy):
    result = onyx("peer", "start", *cluster_args(zookeeper, tenancy), "--mtu", "1000")
    assert_one_line_error(result, 1, "MTU 1000")
