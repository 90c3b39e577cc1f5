"""NATS to PostgreSQL, exactly once, on `onyx peer start` processes while members are killed with
kill -9 and replaced: the table holds each window's count once (appended, so a row written twice
would show), as computed here."""

from __future__ import annotations

import json
import random

import psycopg
import pytest

from peer import api
from tests.chaos.test_exactly_once import kill_members
from tests.chaos.test_nats_kill import nats_job
from tests.count_workload import events, expected_counts
from tests.integration.test_nats import publish, stream

pytestmark = pytest.mark.integration

EVENTS = 20_000
COLUMNS = '"window" text, key text, start bigint, "end" bigint, value bigint'


def test_members_killed_mid_job_change_nothing_in_the_table(db, nats, cluster, tmp_path):
    """``db`` first: its secret is in the environment before the cluster's members start."""
    store = cluster[2]
    source, table = stream(nats.url), db.table(COLUMNS)
    publish(nats.url, f"{source}.events", events(EVENTS))
    job = nats_job(tmp_path, nats.url, source, "unused")
    job["catalog"][2] |= {"plugin": "peer.plugins.postgres:output", "params": {
        "dsn": db.dsn, "secrets": {"password": "CDC_TEST"}, "table": table,
        "staging": str(tmp_path / "staging")}}  # fmt: skip
    seed = random.randrange(1 << 30)
    job_id = api.submit(store, job)
    kill_members(cluster, job_id, 2, random.Random(seed), seed)
    final = api.wait(store, job_id, 300)
    assert final.state == "completed", f"seed {seed}"
    with psycopg.connect(db.server.dsn) as connection:
        found = connection.execute(f'SELECT "window", key, start, "end", value FROM {table}')
        rows = sorted(
            json.dumps(dict(zip(("window", "key", "start", "end", "value"), row, strict=True)),
                       sort_keys=True)
            for row in found
        )  # fmt: skip
    assert rows == expected_counts(EVENTS), f"seed {seed}"
