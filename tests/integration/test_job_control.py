"""Following and controlling jobs as an operator does: `onyx job list`, `--json` on the job
commands, the exit codes of `onyx job wait`, and `onyx run` stopped with Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from peer import api
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
    submit(tmp_path, empty_cluster, "second")
    assert onyx("job", "kill", "second", *empty_cluster).returncode == 0

    text = onyx("job", "list", *empty_cluster)
    assert text.returncode == 0, text.stderr
    header, *rows = text.stdout.splitlines()
    assert header.split() == ["ID", "STATE", "PEERS", "COMMITTED"]
    assert [row.split() for row in rows] == [["first", "waiting", "0", "-"],
                                             ["second", "killed", "0", "-"]]  # fmt: skip

    listed = json.loads(onyx("job", "list", *empty_cluster, "--json").stdout)
    assert [(j["id"], j["state"], j["peers"], j["committed"]) for j in listed] == [
        ("first", "waiting", 0, None),
        ("second", "killed", 0, None),
    ]
    assert listed[0]["needs"] == 2


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
    assert result.stdout.strip() == "job doomed: killed"


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
