"""PostgreSQL's changes to Kafka, exactly once, on `onyx peer start` processes while members are
killed with kill -9 and replaced: a read_committed reader of the topic sees every change once,
in commit order, as the test made them."""

from __future__ import annotations

import json
import random

import pytest

from peer import api
from tests.chaos.test_exactly_once import kill_members
from tests.integration.test_postgres_changes import PLUGIN, changes, workload
from tests.kafka_support import read_all, topic

pytestmark = pytest.mark.integration


def test_changes_reach_kafka_once_in_order_through_kills(db, kafka, cluster, tmp_path):
    """``db`` first: its secret is in the environment before the cluster's members start."""
    store = cluster[2]
    table, slot = db.table(), db.slot()
    made = workload(db, table, 40, 50)
    target = topic(kafka.bootstrap, 1)
    job = {
        "workflow": [["read", "step"], ["step", "write"]],
        "catalog": [
            {"name": "read", "kind": "input", "plugin": PLUGIN, "n_peers": 1,
             "params": db.params(slot, [table], stop_at_lsn="current", batch=50)},
            {"name": "step", "kind": "function", "fn": "tests.integration.pacing:pass_slowly",
             "n_peers": 1},
            {"name": "write", "kind": "output", "n_peers": 1,
             "plugin": "peer.plugins.kafka:exactly_once_output",
             "params": {"bootstrap": kafka.bootstrap, "topic": target,
                        "transactional_id": f"tx-{target}", "staging": str(tmp_path / "staging")}},
        ],
        "barrier_period": 0.3,
    }  # fmt: skip
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    job_id = api.submit(store, job)
    kill_members(cluster, job_id, 2, rng, seed)
    final = api.wait(store, job_id, 300)
    assert final.state == "completed", f"seed {seed}"
    got = [json.loads(value) for _, _, value, _ in read_all(kafka.bootstrap, target)]
    assert changes(got) == made, f"seed {seed}"
