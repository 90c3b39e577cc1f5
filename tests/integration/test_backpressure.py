"""A job whose fn is far slower than its input, across two `onyx peer start` processes over a real
ZooKeeper and Aeron: its epochs commit while the input outruns the fn, and each barrier reaching
the slow task waits behind only the few batches its debloated credit lets queue there, where the
edge's fixed window is 64 (read from the slow group's own metrics)."""

from __future__ import annotations

import urllib.request
from contextlib import closing
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from peer import api
from peer.runtime.checkpoints import Commits
from tests.support import free_port, wait_for

pytestmark = pytest.mark.integration

EPOCHS = 5
QUEUED = "onyx_barrier_queued_batches"


def job(count: int) -> dict[str, Any]:
    """in (group a) -> slow (group b: 3 ms a segment, 60 ms a batch of 20) -> out (a); the slow
    task's senders may have 0.2 s of its work in flight: three batches."""
    return {
        "workflow": [["in", "slow"], ["slow", "out"]],
        "catalog": [
            {"name": "in", "kind": "input", "plugin": "peer.plugins.memory:input",
             "params": {"count": count}, "batch_size": 20, "required_tags": ["a"],
             "n_peers": 1},
            {"name": "slow", "kind": "function", "fn": "tests.integration.pacing:pass_slowly",
             "batch_size": 20, "required_tags": ["b"], "n_peers": 1},
            {"name": "out", "kind": "output", "plugin": "peer.plugins.null:output",
             "required_tags": ["a"], "n_peers": 1},
        ],
        "barrier_period": 0.5,
        "debloat_target": 0.2,
    }  # fmt: skip


def queued_at_barriers(port: int, job_id: str) -> dict[float, float]:
    """The slow task's histogram of batches queued ahead of a barrier: count by upper bound."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    wanted = {"onyx_job": job_id, "task": "slow"}
    return {
        float(sample.labels["le"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == f"{QUEUED}_bucket" and wanted.items() <= sample.labels.items()
    }


def test_a_back_pressured_job_commits_with_few_batches_ahead_of_each_barrier(
    start_peer, zookeeper, tenancy
):
    port = free_port()
    metrics = ["--metrics-port", str(port), "--metrics-address", "127.0.0.1"]
    start_peer(vpeers=2, extra=["--tags", "a"])
    start_peer(vpeers=1, extra=["--tags", "b", *metrics])
    with closing(api.connect(zookeeper.address, tenancy, create=True)) as store:
        wait_for(lambda: len(api.replica(store).peers) == 3, 60, "three active peers")
        job_id = api.submit(store, job(count=20_000))
        commits = Commits(store, job_id)

        def committed() -> int:
            record = commits.read()[0]
            return record.committed.number if record and record.committed else 0

        wait_for(lambda: committed() >= EPOCHS, 120, f"{EPOCHS} committed epochs")
        buckets = wait_for(
            lambda: (b := queued_at_barriers(port, job_id)) and b[float("inf")] >= EPOCHS and b,
            30,
            "the slow task's barriers in its metrics",
        )
        api.kill(store, job_id)
    assert buckets[8.0] == buckets[float("inf")], f"barriers behind more than 8 batches: {buckets}"
