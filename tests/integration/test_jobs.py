"""Jobs on a real cluster: `onyx peer start` processes on a real ZooKeeper, segments between
them over Aeron UDP, jobs submitted, followed and killed through the CLI."""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack, closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from peer import api
from peer.job.load import YamlLoader
from peer.log.entry import Transition
from peer.log.replica import Replica
from peer.values.epoch import Epoch
from tests.support import REPO, PeerProcess, assert_one_line_error, onyx, wait_for

pytestmark = pytest.mark.integration

BARRIER_PERIOD = 0.25
"""Seconds between the mid-job word count's checkpoints: several epochs commit in its run."""
PAUSE = 2.0
"""Seconds a group is stopped for, well under the auto-down time: a long GC, say."""
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
    job = yaml.load((REPO / "examples/wordcount/job.yaml").read_text(), Loader=YamlLoader)
    job["catalog"][0]["params"]["path"] = str(tmp_path / "lines.jsonl")
    job["catalog"][1]["fn"] = split
    job["catalog"][3]["params"]["path"] = str(tmp_path / "out" / "counts.jsonl")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path, expected


def paced_job(tmp_path: Path, lines: int) -> tuple[Path, collections.Counter[str]]:
    """The word count, paced, checkpointed every BARRIER_PERIOD s, into the exactly-once sink
    (see ``published``). Its input sends small batches: a barrier travels behind the data in
    flight, and with the default batches all of it would be, so only the last epoch would
    commit; with small ones epochs commit all through the run."""
    path, expected = wordcount_job(tmp_path, lines, "tests.integration.pacing:split_slowly")
    job = yaml.safe_load(path.read_text())
    job["barrier_period"] = BARRIER_PERIOD
    job["catalog"][0]["batch_size"] = 10
    job["catalog"][3]["plugin"] = "peer.plugins.jsonl:exactly_once_output"
    job["catalog"][3]["params"] = {"path": str(tmp_path / "out" / "published")}
    path.write_text(yaml.safe_dump(job))
    return path, expected


def counts(path: Path) -> dict[str, int]:
    """The last count written for each word: a restarted job may have written earlier ones."""
    result = {}
    for line in path.read_text().splitlines():
        doc = json.loads(line)
        result[doc["word"]] = doc["count"]
    return result


def published(tmp_path: Path) -> list[tuple[str, int]]:
    """Every count the exactly-once sink published, in word order: a word published twice, by
    an epoch replayed after a failure, shows up twice, so this must equal the expected counts'
    items exactly."""
    out = tmp_path / "out" / "published"
    docs = [json.loads(line) for f in out.glob("*.jsonl") for line in f.read_text().splitlines()]
    return sorted((doc["word"], doc["count"]) for doc in docs)


def cluster_args(zookeeper, tenancy) -> list[str]:
    return ["--zookeeper", zookeeper.address, "--tenancy", tenancy]


def run_word_count(zookeeper, tenancy, tmp_path: Path, members: Sequence[Any] = (),
                   lines: int = 1_000) -> str:  # fmt: skip
    """The word count submitted and waited for with the command line, as a user runs it: it
    completes with exactly its input's counts, and each of ``members`` (PeerProcess) still
    runs, with no traceback in its log. The job's id."""
    job, expected = wordcount_job(tmp_path, lines)
    submitted = onyx("job", "submit", str(job), *cluster_args(zookeeper, tenancy))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    waited = onyx("job", "wait", job_id, *cluster_args(zookeeper, tenancy), "--timeout", "60")
    assert waited.returncode == 0, waited.stderr + "".join(m.output() for m in members)
    assert waited.stdout.strip() == f"job {job_id}: completed"
    assert counts(tmp_path / "out" / "counts.jsonl") == expected
    for member in members:
        assert member.process.poll() is None, member.output()
        assert "Traceback" not in member.output()
    return job_id


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
    """A paced word count (``paced_job``) running on three groups, and the group that holds its
    counter."""

    store: Any
    job_id: str
    expected: collections.Counter[str]
    before: Replica
    group: str
    process: PeerProcess
    others: list[PeerProcess]


@pytest.fixture
def mid_job(start_peer, zookeeper, tenancy, tmp_path, monkeypatch):
    def start(lines: int = 3_000, **options: Any) -> MidJob:
        marker = tmp_path / "started"
        monkeypatch.setenv("ONYX_TEST_STARTED", str(marker))
        processes = [start_peer(vpeers=2, **options) for _ in range(3)]
        await_peers(zookeeper, tenancy, 6)
        job, expected = paced_job(tmp_path, lines)
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


def test_a_group_killed_mid_job_is_downed_by_the_leader_and_its_tasks_move(mid_job, tmp_path):
    """Its ZooKeeper session outlives the test, so only the membership's heartbeats can notice
    the kill: the others mark it unreachable, the leader (the first of them by id) downs it
    once the shipped auto-down time has passed, the job's next allocation leaves its peers out,
    and the sink publishes every count once."""
    run = mid_job(session_timeout=60.0)
    peers = set(run.before.group_peers[run.group])
    leader = min(set(run.before.groups) - {run.group})
    run.process.signal(signal.SIGKILL)
    downed = api.follow(run.store, lambda r: run.group not in r.groups, 30)
    final = api.wait(run.store, run.job_id, 180)
    assert all(f"member {run.group} is unreachable" in p.output() for p in run.others)
    logs = "".join(p.output() for p in run.others)
    unreachable = logs.find(f"group {leader}: member {run.group} is unreachable")
    assert 0 <= unreachable < logs.find(f"group {leader} downs member {run.group}")
    allocation = api.status(downed, run.job_id).allocation
    assert downed.allocation_versions[run.job_id] != run.before.allocation_versions[run.job_id]
    assert any(allocation.values())
    assert not peers & {peer for task in allocation.values() for peer in task}
    assert final.state == "completed"
    assert published(tmp_path) == sorted(run.expected.items())


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
    job = yaml.load((REPO / "examples/wordcount/job.yaml").read_text(), Loader=YamlLoader)
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
    """Unreachable is not down: the group holding the job's counter is stopped for about
    PAUSE s; the others log it unreachable, and reachable again once it runs. Nothing is
    reallocated: the job keeps its one allocation version from submission to completion, its
    committed epochs go on rising from the last one before the stop, and the sink publishes
    every count once."""
    run = mid_job(6_000, session_timeout=60.0, extra=["--auto-down-unreachable-after", "60"])
    version = run.before.allocation_versions[run.job_id]
    before = wait_for(lambda: api.last_committed(run.store, run.job_id), 60, "a committed epoch")
    assert pause(run) == "running"
    back = f"member {run.group} is reachable again"
    wait_for(lambda: all(back in p.output() for p in run.others), 60, "reachable-again logs")
    after = wait_for(lambda: committed_after(run.store, run.job_id, before), 60,
                     f"an epoch committed after {before.describe()}")  # fmt: skip
    final, versions = allocation_versions(run.store, run.job_id, 180)
    assert final.state == "completed"
    assert versions == {version}
    assert after.version == version
    assert published(tmp_path) == sorted(run.expected.items())


def pause(run: MidJob) -> str:
    """Stop the group for PAUSE s, or until the others have all logged it unreachable if that
    takes longer; the job's state while it was stopped."""
    said = f"member {run.group} is unreachable"
    stopped = time.monotonic()
    run.process.signal(signal.SIGSTOP)
    try:
        wait_for(lambda: all(said in p.output() for p in run.others), 60, "unreachable logs")
        state = api.status(api.replica(run.store), run.job_id).state
        time.sleep(max(0.0, PAUSE - (time.monotonic() - stopped)))  # the pause's length
    finally:
        run.process.signal(signal.SIGCONT)
    return state


def committed_after(store: Any, job_id: str, epoch: Epoch) -> Epoch | None:
    """The job's last committed epoch if it comes after ``epoch``."""
    committed = api.last_committed(store, job_id)
    return committed if committed is not None and committed > epoch else None


def allocation_versions(store: Any, job_id: str, timeout: float) -> tuple[api.JobStatus, set[int]]:
    """The job's status once it has finished, and every allocation version it had, read by
    playing the whole log."""
    versions: set[int] = set()

    def note(transition: Transition) -> None:
        if (version := transition.new.allocation_versions.get(job_id)) is not None:
            versions.add(version)

    final = api.follow(store, lambda r: api.status(r, job_id).finished, timeout, each=note)
    return api.status(final, job_id), versions


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
    assert published(tmp_path) == sorted(run.expected.items())


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
    assert_one_line_error(result, 2, "--mtu", "'1000' is not a multiple of 32 from 1408")


def test_a_job_that_does_not_touch_an_unreachable_member_goes_on_to_the_end(
    start_peer, zookeeper, tenancy, tmp_path
):
    """Unreachable holds up only what touches the member: a job whose tasks all need a tag the
    stopped group lacks completes, exactly, while that group is still stopped and not down."""
    patient = ["--auto-down-unreachable-after", "60"]
    tagged = [
        start_peer(vpeers=2, session_timeout=60.0, extra=[*patient, "--tags", "near"])
        for _ in range(2)
    ]
    stopped = start_peer(vpeers=2, session_timeout=60.0, extra=patient)
    await_peers(zookeeper, tenancy, 6)
    path, expected = wordcount_job(tmp_path, 2_000)
    job = yaml.safe_load(path.read_text())
    for task in job["catalog"]:
        task["required_tags"] = ["near"]
    path.write_text(yaml.safe_dump(job))
    store = api.connect(zookeeper.address, tenancy)
    try:
        group = next(g for g in api.replica(store).groups if g in stopped.output())
        stopped.signal(signal.SIGSTOP)
        try:
            said = f"member {group} is unreachable"
            wait_for(lambda: all(said in p.output() for p in tagged), 60, "an unreachable log")
            job_id = api.submit(store, path)
            final = api.wait(store, job_id, 120)
            during = api.replica(store)
        finally:
            stopped.signal(signal.SIGCONT)
    finally:
        store.close()
    assert final.state == "completed"
    assert group in during.groups, "the stopped group was downed"
    assert counts(tmp_path / "out" / "counts.jsonl") == expected
