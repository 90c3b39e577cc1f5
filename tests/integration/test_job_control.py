"""Following and controlling jobs as an operator does: `onyx job list`, `--json` on the job
commands, the exit codes of `onyx job wait`, and `onyx run` stopped with Ctrl-C."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest
import yaml

from peer import api
from peer.plugins.jsonl import published_epoch
from peer.runtime.checkpoints import Commits
from peer.values.epoch import Epoch
from tests.support import REPO, assert_one_line_error, free_port, onyx, wait_for

pytestmark = pytest.mark.integration

ENDLESS = {
    "workflow": [["numbers", "drop"]],
    "catalog": [
        {"name": "numbers", "kind": "input", "plugin": "peer.plugins.memory:input",
         "params": {"count": 10**12}, "n_peers": 1, "batch_size": 100},
        {"name": "drop", "kind": "output", "plugin": "peer.plugins.null:output"},
    ],
    "barrier_period": 0.5,
}  # fmt: skip
"""A job that runs for as long as anyone cares to wait: a trillion numbers into nothing."""


def write_job(tmp_path: Path, name: str = "endless.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(ENDLESS))
    return path


@pytest.fixture
def empty_cluster(zookeeper, tenancy):
    """A tenancy with no group: every job submitted to it waits for peers."""
    api.connect(zookeeper.address, tenancy, create=True).close()
    return ["--zookeeper", zookeeper.address, "--tenancy", tenancy]


def submit(tmp_path: Path, cluster: list[str], job_id: str) -> None:
    result = onyx("job", "submit", str(write_job(tmp_path)), "--id", job_id, *cluster, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"id": job_id}


def test_list_shows_every_job_with_its_state(empty_cluster, tmp_path):
    submit(tmp_path, empty_cluster, "first")
    named = {**ENDLESS, "name": "nightly counts"}
    (tmp_path / "named.yaml").write_text(yaml.safe_dump(named))
    assert onyx("job", "submit", str(tmp_path / "named.yaml"), "--id", "second",
                *empty_cluster).returncode == 0  # fmt: skip
    assert onyx("job", "kill", "second", *empty_cluster).returncode == 0

    text = onyx("job", "list", *empty_cluster)
    assert text.returncode == 0, text.stderr
    header, *rows = text.stdout.splitlines()
    assert header.split() == ["ID", "NAME", "STATE", "PEERS", "COMMITTED", "AGE"]
    assert rows[0].split() == ["first", "-", "waiting", "0", "-", rows[0].split()[-1]]
    assert rows[1].split()[:1] + rows[1].split()[3:-1] == ["second", "killed", "0", "-"]
    assert "nightly counts" in rows[1]
    assert all(re.fullmatch(r"\d+[smhd]", row.split()[-1]) for row in rows)

    listed = json.loads(onyx("job", "list", *empty_cluster, "--json").stdout)
    assert [(j["id"], j["name"], j["state"], j["peers"], j["committed_epoch"]) for j in listed] == [
        ("first", None, "waiting", 0, None),
        ("second", "nightly counts", "killed", 0, None),
    ]
    assert listed[0]["needs"] == 2
    assert listed[1]["reason"] == "an operator killed it"
    assert all(time.time() - 120 < j["submitted"] <= time.time() for j in listed)


def test_status_and_kill_answer_in_json(empty_cluster, tmp_path):
    submit(tmp_path, empty_cluster, "job-a")
    status = json.loads(onyx("job", "status", "job-a", *empty_cluster, "--json").stdout)
    assert (status["id"], status["state"], status["needs"]) == ("job-a", "waiting", 2)
    killed = json.loads(onyx("job", "kill", "job-a", *empty_cluster, "--json").stdout)
    assert killed["state"] == "killed"


def test_wait_exits_3_when_its_timeout_passes_first(empty_cluster, tmp_path):
    submit(tmp_path, empty_cluster, "stuck")
    result = onyx("job", "wait", "stuck", *empty_cluster, "--timeout", "0.5")
    assert_one_line_error(result, 3, "job 'stuck' has not finished", "gave up after 0.5 s")


def test_wait_exits_1_for_a_killed_job(empty_cluster, tmp_path):
    submit(tmp_path, empty_cluster, "doomed")
    assert onyx("job", "kill", "doomed", *empty_cluster).returncode == 0
    result = onyx("job", "wait", "doomed", *empty_cluster)
    assert result.returncode == 1, result.stderr
    assert result.stdout.strip() == "job doomed: killed: an operator killed it"


def test_wait_exits_4_when_the_cluster_cannot_be_reached():
    address = f"127.0.0.1:{free_port()}"
    result = onyx("job", "wait", "x", "--zookeeper", address, "--tenancy", "t",
                  "--connect-timeout", "1")  # fmt: skip
    assert_one_line_error(result, 4, "cannot reach ZooKeeper", address)


def test_wait_for_an_unknown_job_is_an_error(empty_cluster):
    assert_one_line_error(onyx("job", "wait", "nobody", *empty_cluster), 1, "'nobody'", "no such")


def test_ctrl_c_stops_onyx_run_cleanly(tmp_path):
    """SIGINT while the job runs: the job is killed, every group leaves, exit 130, and nothing
    on stderr (no traceback)."""
    run = subprocess.Popen(
        [sys.executable, "-m", "peer.cli", "run", str(write_job(tmp_path))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        lines: list[str] = []
        wait_for(lambda: lines.append(run.stdout.readline()) or "running" in lines[-1], 60,
                 "the job running")  # fmt: skip
        run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=60)
    finally:
        run.kill()
    assert run.returncode == 130, err
    assert err == ""
    assert "interrupted: stopping the local cluster" in out
    assert ": killed" in out
    assert "every group left gracefully" in out


def paced_job(out: Path, count: int, resume_from: object = None) -> dict:
    """``count`` numbers through a slow step into the exactly-once sink: it runs for seconds,
    and its published files are named for the epochs that committed them."""
    job = {
        "workflow": [["numbers", "pass"], ["pass", "write"]],
        "catalog": [
            {"name": "numbers", "kind": "input", "plugin": "peer.plugins.memory:input",
             "params": {"count": count}, "n_peers": 1, "batch_size": 20},
            {"name": "pass", "kind": "function", "fn": "tests.integration.pacing:pass_slowly"},
            {"name": "write", "kind": "output", "plugin": "peer.plugins.jsonl:exactly_once_output",
             "params": {"path": str(out)}, "n_peers": 1},
        ],
        "barrier_period": 0.2,
    }  # fmt: skip
    if resume_from is not None:
        job["resume_from"] = resume_from
    return job


def published(out: Path, up_to: Epoch | None = None) -> list[int]:
    """The numbers in the sink's published files, of epochs up to ``up_to`` if given."""
    numbers = []
    for path in sorted(out.glob("*.jsonl")):
        if up_to is None or published_epoch(path.name) <= up_to:
            numbers += [json.loads(line)["n"] for line in path.read_text().splitlines()]
    return numbers


def test_a_savepoint_is_kept_and_a_new_job_resumes_from_it(empty_cluster, start_peer, tmp_path):
    """A running job's savepoint; the job is killed later; a new job resuming from the
    savepoint publishes exactly what the first had not by then, each number once."""
    cluster = empty_cluster
    storage = ["--checkpoints", str(tmp_path / "checkpoints")]
    start_peer(vpeers=3)
    first, second = tmp_path / "first", tmp_path / "second"
    (tmp_path / "first.yaml").write_text(yaml.safe_dump(paced_job(first, 3000)))
    submitted = onyx("job", "submit", str(tmp_path / "first.yaml"), "--id", "first", *cluster)
    assert submitted.returncode == 0, submitted.stderr
    wait_for(lambda: published(first), 60, "the first job's first published epoch")

    taken = onyx("job", "savepoint", "first", "--name", "half", *cluster, *storage, "--json")
    assert taken.returncode == 0, taken.stderr
    kept = json.loads(taken.stdout)
    epoch = Epoch(kept["version"], kept["epoch"])
    wait_for(lambda: len(published(first)) > len(published(first, epoch)), 60,
             "an epoch committed after the savepoint")  # fmt: skip
    assert onyx("job", "kill", "first", *cluster).returncode == 0

    listed = json.loads(onyx("job", "checkpoints", "first", *cluster, *storage, "--json").stdout)
    assert listed["savepoints"] == [{"name": "half", **{k: kept[k] for k in ("version", "epoch")}}]

    resume = {"job": "first", "savepoint": "half"}
    (tmp_path / "second.yaml").write_text(yaml.safe_dump(paced_job(second, 3000, resume)))
    assert onyx("job", "submit", str(tmp_path / "second.yaml"), "--id", "second",
                *cluster).returncode == 0  # fmt: skip
    assert onyx("job", "wait", "second", *cluster, "--timeout", "120").returncode == 0
    before, after = published(first, epoch), published(second)
    assert before
    assert sorted(before + after) == list(range(3000))

    disposed = onyx("job", "savepoint", "first", "--dispose", "half", *cluster, *storage)
    assert disposed.returncode == 0, disposed.stderr
    again = onyx("job", "savepoint", "first", "--dispose", "half", *cluster, *storage)
    assert_one_line_error(again, 1, "job 'first' has no savepoint 'half'")


def test_a_savepoint_of_a_finished_job_is_refused(empty_cluster, tmp_path):
    submit(tmp_path, empty_cluster, "over")
    assert onyx("job", "kill", "over", *empty_cluster).returncode == 0
    result = onyx("job", "savepoint", "over", *empty_cluster, "--checkpoints", str(tmp_path))
    assert_one_line_error(result, 1, "job 'over': no savepoint of a job that is killed")


def test_resuming_from_a_savepoint_nobody_took_is_refused_at_submit(empty_cluster, tmp_path):
    job = paced_job(tmp_path / "out", 10, {"job": "ghost", "savepoint": "never"})
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    result = onyx("job", "submit", str(tmp_path / "job.yaml"), "--id", "hopeful", *empty_cluster)
    assert_one_line_error(result, 1, "job 'hopeful'", "savepoint 'never' of job 'ghost'",
                          "does not exist")  # fmt: skip


@pytest.mark.parametrize("resume", [{"job": "counted", "savepoint": "kept"}, "counted"],
                         ids=["savepoint", "last-commit"])  # fmt: skip
def test_resuming_keyed_state_under_other_key_groups_is_refused_at_submit(
    zookeeper, tenancy, empty_cluster, tmp_path, resume
):
    """State kept in 128 key groups cannot be read by a job that splits its keys into 64: the
    submit says so, naming the job, the task and both numbers."""
    with closing(api.connect(zookeeper.address, tenancy)) as store:
        commits = Commits(store, "counted")
        assert commits.claim(1) is not None
        commits.request_savepoint("kept")
        slots = {"numbers": 1, "pass": 2, "write": 1}
        assert commits.commit(1, Epoch(1, 3), slots, groups={"pass": 128}) is not None
    job = paced_job(tmp_path / "out", 10, resume)
    job["catalog"][1]["group_by_key"] = "n"
    job["max_parallelism"] = 64
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    result = onyx("job", "submit", str(tmp_path / "job.yaml"), "--id", "regrouped", *empty_cluster)
    assert_one_line_error(result, 1, "job 'regrouped', task 'pass'", "max_parallelism is 64",
                          "has 128 key groups")  # fmt: skip
    job["max_parallelism"] = 128
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    same = onyx("job", "submit", str(tmp_path / "job.yaml"), "--id", "regrouped", *empty_cluster)
    assert same.returncode == 0, same.stderr


def test_stop_with_a_savepoint_then_resume_equals_an_uninterrupted_run(
    empty_cluster, start_peer, tmp_path
):
    """`onyx job stop --savepoint`: nothing the job publishes is of an epoch after the
    savepoint's, and a new job resuming from it into the same directory publishes the rest:
    every number once, as the job run without a stop does."""
    cluster = empty_cluster
    start_peer(vpeers=3)
    out = tmp_path / "out"
    (tmp_path / "first.yaml").write_text(yaml.safe_dump(paced_job(out, 3000)))
    submitted = onyx("job", "submit", str(tmp_path / "first.yaml"), "--id", "first", *cluster)
    assert submitted.returncode == 0, submitted.stderr
    wait_for(lambda: published(out), 60, "the first job's first published epoch")

    stopped = onyx("job", "stop", "first", "--savepoint", "last", *cluster, "--json", timeout=90)
    assert stopped.returncode == 0, stopped.stderr
    kept = json.loads(stopped.stdout)
    assert (kept["job"], kept["savepoint"], kept["state"]) == ("first", "last", "stopped")
    epoch = Epoch(kept["version"], kept["epoch"])
    status = json.loads(onyx("job", "status", "first", *cluster, "--json").stdout)
    assert status["state"] == "killed"
    assert "stopped with savepoint 'last'" in status["reason"]
    assert published(out) == published(out, epoch), "nothing published after the savepoint"
    assert 0 < len(published(out)) < 3000

    resume = {"job": "first", "savepoint": "last"}
    (tmp_path / "second.yaml").write_text(yaml.safe_dump(paced_job(out, 3000, resume)))
    assert onyx("job", "submit", str(tmp_path / "second.yaml"), "--id", "second",
                *cluster).returncode == 0  # fmt: skip
    assert onyx("job", "wait", "second", *cluster, "--timeout", "120").returncode == 0
    assert sorted(published(out)) == list(range(3000))


def test_stop_refuses_what_it_cannot_stop_in_one_line(empty_cluster, start_peer, tmp_path):
    """A job not running, a name not allowed or taken, and a savepoint that does not come in
    time (the job commits once an hour): one line each, and the job goes on."""
    cluster = empty_cluster
    submit(tmp_path, cluster, "idle")
    assert_one_line_error(onyx("job", "stop", "idle", *cluster), 1,
                          "job 'idle'", "cannot stop a job that is waiting")  # fmt: skip
    assert onyx("job", "kill", "idle", *cluster).returncode == 0
    assert_one_line_error(onyx("job", "stop", "idle", *cluster), 1,
                          "job 'idle'", "cannot stop a job that is killed")  # fmt: skip
    assert_one_line_error(onyx("job", "stop", "nobody", *cluster), 1,
                          "job 'nobody'", "no such job")  # fmt: skip

    start_peer(vpeers=2)
    hourly = {**ENDLESS, "barrier_period": 3600}
    (tmp_path / "hourly.yaml").write_text(yaml.safe_dump(hourly))
    assert onyx("job", "submit", str(tmp_path / "hourly.yaml"), "--id", "slow",
                *cluster).returncode == 0  # fmt: skip
    with closing(api.connect(cluster[1], cluster[3])) as store:
        wait_for(lambda: api.last_committed(store, "slow"), 60, "the job's first commit")
    bad = onyx("job", "stop", "slow", "--savepoint", "no good", *cluster)
    assert_one_line_error(bad, 1, "job 'slow'", "savepoint name 'no good'", "letters, digits")
    late = onyx("job", "stop", "slow", "--savepoint", "late", "--timeout", "1", *cluster)
    assert_one_line_error(late, 3, "job 'slow'", "savepoint 'late' not committed yet",
                          "the job goes on")  # fmt: skip
    taken = onyx("job", "stop", "slow", "--savepoint", "late", *cluster)
    assert_one_line_error(taken, 1, "job 'slow' already has a savepoint 'late'")
    status = json.loads(onyx("job", "status", "slow", *cluster, "--json").stdout)
    assert status["state"] == "running"
