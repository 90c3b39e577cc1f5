"""Scheduling servers on a real cluster: `onyx scheduler serve` answers the allocations of two
`onyx peer start` members given `--scheduler-servers`, and when the server is stopped with a
request in flight and then killed, the members compute their allocations themselves and jobs
still run to the end with exact output."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_jobs import await_peers, cluster_args, counts, wordcount_job
from tests.support import REPO, assert_one_line_error, free_port, onyx, wait_for

pytestmark = pytest.mark.integration

ESTABLISHED = "01"


class SchedulerProcess:
    """One `onyx scheduler serve` on a free port of this machine, its stderr kept in a file."""

    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.log_path = log_dir / f"scheduler-{self.port}.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "peer.cli", "scheduler", "serve",
             "--listen", self.address],
            stdout=subprocess.DEVNULL, stderr=self.log_path.open("wb"), cwd=REPO,
        )  # fmt: skip
        wait_for(self.healthy, 30, f"the scheduling server on {self.address} to answer")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def get(self, path: str) -> str:
        with urllib.request.urlopen(f"http://{self.address}{path}", timeout=5) as response:
            return response.read().decode()

    def healthy(self) -> bool:
        try:
            return '"alive": true' in self.get("/healthz")
        except OSError:
            return self.process.poll() is not None

    def requests(self, outcome: str) -> float:
        pattern = rf'onyx_scheduler_requests_total\{{outcome="{outcome}"\}} (\S+)'
        return float(re.search(pattern, self.get("/metrics")).group(1))

    def connections_in(self) -> int:
        """Connections of other processes to this server that the kernel has accepted: with
        the server stopped, each is a request nobody answers."""
        port = f"{self.port:04X}"
        count = 0
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[2].endswith(f":{port}") and fields[3] == ESTABLISHED:
                count += 1
        return count

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def scheduler(tmp_path) -> Iterator[SchedulerProcess]:
    server = SchedulerProcess(tmp_path)
    yield server
    server.kill()


def run_job(zookeeper, tenancy, tmp_path: Path, name: str) -> None:
    """A word count of its own, to the end, with exact counts."""
    (tmp_path / name).mkdir()
    job, expected = wordcount_job(tmp_path / name, 300)
    submitted = onyx("job", "submit", str(job), *cluster_args(zookeeper, tenancy))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    waited = onyx("job", "wait", job_id, *cluster_args(zookeeper, tenancy), "--timeout", "60")
    assert waited.stdout.strip() == f"job {job_id}: completed", waited.stderr
    assert counts(tmp_path / name / "out" / "counts.jsonl") == expected


def test_members_take_allocations_from_a_server_and_compute_them_once_it_is_gone(
    scheduler, start_peer, zookeeper, tenancy, tmp_path
):
    extra = ["--scheduler-servers", scheduler.address, "--scheduler-timeout", "3"]
    members = [start_peer(vpeers=2, extra=extra) for _ in range(2)]
    await_peers(zookeeper, tenancy, 4)
    run_job(zookeeper, tenancy, tmp_path, "first")
    assert scheduler.requests("computed") >= 1
    assert scheduler.requests("refused") == 0

    scheduler.process.send_signal(signal.SIGSTOP)
    (tmp_path / "second").mkdir()
    job, expected = wordcount_job(tmp_path / "second", 300)
    submitted = onyx("job", "submit", str(job), *cluster_args(zookeeper, tenancy))
    assert submitted.returncode == 0, submitted.stderr
    wait_for(scheduler.connections_in, 10, "a member's request to the stopped server")
    scheduler.kill()
    job_id = submitted.stdout.strip()
    waited = onyx("job", "wait", job_id, *cluster_args(zookeeper, tenancy), "--timeout", "60")
    assert waited.stdout.strip() == f"job {job_id}: completed", waited.stderr
    assert counts(tmp_path / "second" / "out" / "counts.jsonl") == expected
    for member in members:
        assert member.process.poll() is None
        assert f"scheduling server {scheduler.address} failed" in member.output()


def test_a_server_stops_cleanly_on_sigterm(scheduler):
    scheduler.process.send_signal(signal.SIGTERM)
    assert scheduler.process.wait(timeout=10) == 0
    log = scheduler.log_path.read_text()
    assert f"scheduling server on {scheduler.address} stopped" in log
    assert "Traceback" not in log


def test_a_server_whose_port_is_taken_says_so(scheduler):
    result = onyx("scheduler", "serve", "--listen", scheduler.address, timeout=30)
    assert_one_line_error(result, 1, "cannot serve scheduling", scheduler.address)
