"""NATS to NATS, exactly once, as it fails in life: members running the job killed with kill -9
and replaced, and the server itself killed and started again mid-job. The output stream must
hold exactly what a failure-free run (`onyx run`) publishes, which is also the count computed
here: each window's count once, none lost, none twice."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from peer import api
from peer.local_servers import Nats
from tests.chaos.test_exactly_once import kill_members
from tests.count_workload import events, expected_counts
from tests.integration.test_nats import count_job, publish, stream, values
from tests.support import REPO, onyx, wait_for

pytestmark = pytest.mark.integration

EVENTS = 30_000


def nats_job(tmp_path: Path, url: str, source: str, target: str) -> dict:
    """The windowed count of tests.integration.test_nats, paced so that it runs long enough to
    be killed, with its input, count and output on up to two peers each. The input's watermark
    follows the events' times, so that windows close, and epochs are published, all along."""
    doc = yaml.safe_load(count_job(tmp_path, url, source, target).read_text())
    doc["catalog"][0]["assign_watermark_fn"] = "tests.chaos.columnar_fns:event_time"
    doc["catalog"][1]["max_peers"] = 2
    doc["catalog"][2]["max_peers"] = 2
    doc["barrier_period"] = 0.5
    return doc


@pytest.fixture(scope="module")
def source(nats) -> str:
    """The events, in a stream the module's runs all read."""
    name = stream(nats.url)
    publish(nats.url, f"{name}.events", events(EVENTS))
    return name


@pytest.fixture(scope="module")
def reference(nats, source, tmp_path_factory) -> list[str]:
    """What the job publishes without failures, in one process (`onyx run`)."""
    base = tmp_path_factory.mktemp("reference")
    target = stream(nats.url)
    path = base / "job.yaml"
    path.write_text(yaml.safe_dump(nats_job(base, nats.url, source, target)))
    result = onyx("run", str(path), timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    published = values(nats.url, target)
    assert published == expected_counts(EVENTS)
    return published


def test_members_killed_mid_job_change_nothing_a_reader_sees(nats, source, reference, cluster,
                                                             tmp_path):  # fmt: skip
    store = cluster[2]
    target = stream(nats.url)
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    job_id = api.submit(store, nats_job(tmp_path, nats.url, source, target))
    kill_members(cluster, job_id, 2, rng, seed)
    final = api.wait(store, job_id, 300)
    assert final.state == "completed", f"seed {seed}"
    assert values(nats.url, target) == reference, f"seed {seed}"


@pytest.fixture
def own_server():
    """A server of the test's own, to kill."""
    server = Nats().start()
    yield server
    server.stop()


def test_the_server_killed_and_started_again_mid_job_changes_nothing(own_server, tmp_path):
    """`onyx run` of the paced job while the server, its streams on disk, is killed with kill -9
    once the output has begun, then started again on the same port: the input makes its
    consumers again where it stood, and an epoch whose delivery failed is delivered again."""
    server = own_server
    source, target = stream(server.url), stream(server.url)
    publish(server.url, f"{source}.events", events(EVENTS // 3))
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(nats_job(tmp_path, server.url, source, target)))
    run = subprocess.Popen([sys.executable, "-m", "peer.cli", "run", str(path)], cwd=REPO,
                           env={**os.environ, "ONYX_TEST_PACE": "0.05"}, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)  # fmt: skip
    wait_for(lambda: any((tmp_path / "staging" / "_staging").glob("*")) or run.poll() is not None,
             120, "the job to stage its first epoch")  # fmt: skip
    assert run.poll() is None, "the job ended before the server was killed"
    server.kill()
    server.start()
    output, _ = run.communicate(timeout=300)
    assert run.returncode == 0, output
    assert values(server.url, target) == expected_counts(EVENTS // 3)
