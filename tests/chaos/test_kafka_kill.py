"""Kafka to Kafka, exactly once, as it fails in life: members running the job killed with kill -9
and replaced, and the broker itself killed and started again mid-job. A read_committed reader of
the output topic must see exactly what a failure-free run (`onyx run`) writes, which is also the
count computed here."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from peer import api
from tests.chaos.test_exactly_once import kill_members
from tests.count_workload import events, expected_counts
from tests.integration.test_kafka import count_job
from tests.kafka_support import produce, topic, values
from tests.support import REPO, wait_for

pytestmark = pytest.mark.integration

EVENTS = 30_000


def kafka_job(tmp_path: Path, bootstrap: str, source: str, target: str) -> dict:
    """The windowed count of tests.integration.test_kafka, paced so that it runs long enough to
    be killed, with its input on two peers and its count and output on up to two."""
    path = count_job(tmp_path, bootstrap, source, target, reading={"event_time": "ts"})
    doc = yaml.safe_load(path.read_text())
    doc["catalog"][1]["max_peers"] = 2
    doc["catalog"][2]["max_peers"] = 2
    doc["barrier_period"] = 0.5
    return doc


def test_members_killed_mid_job_change_nothing_a_reader_sees(kafka, cluster, tmp_path):
    store = cluster[2]
    source, target = topic(kafka.bootstrap, 4), topic(kafka.bootstrap, 3)
    produce(kafka.bootstrap, source, events(EVENTS), key="user")
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    job_id = api.submit(store, kafka_job(tmp_path, kafka.bootstrap, source, target))
    kill_members(cluster, job_id, 2, rng, seed)
    final = api.wait(store, job_id, 300)
    assert final.state == "completed", f"seed {seed}"
    assert values(kafka.bootstrap, target) == expected_counts(EVENTS), f"seed {seed}"


def test_the_broker_killed_and_started_again_mid_job_changes_nothing(kafka_on_s3, tmp_path):
    """`onyx run` of the paced job while the broker, its log in the object store, is killed
    with kill -9 once the output has begun, then started again on the same port."""
    broker = kafka_on_s3
    source, target = topic(broker.bootstrap, 2), topic(broker.bootstrap, 2)
    produce(broker.bootstrap, source, events(EVENTS // 3), key="user")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(kafka_job(tmp_path, broker.bootstrap, source, target)))
    run = subprocess.Popen([sys.executable, "-m", "peer.cli", "run", str(path)], cwd=REPO,
                           env={**os.environ, "ONYX_TEST_PACE": "0.05"}, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)  # fmt: skip
    wait_for(lambda: any((tmp_path / "staging" / "_staging").glob("*")) or run.poll() is not None,
             120, "the job to stage its first epoch")  # fmt: skip
    assert run.poll() is None, "the job ended before the broker was killed"
    broker.kill()
    broker.start()
    output, _ = run.communicate(timeout=300)
    assert run.returncode == 0, output
    assert values(broker.bootstrap, target) == expected_counts(EVENTS // 3)
