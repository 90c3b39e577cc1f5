"""Kafka to PostgreSQL, exactly once, with the database killed (kill -9) and started again while
the job runs: the table ends as the views produced make it, each page's count per minute once,
as a failure-free run leaves it."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest

from examples.kafka_postgres import produce as example
from peer.local_servers import Postgres
from tests.integration.test_postgres_sink import expected_views
from tests.kafka_support import produce, topic
from tests.support import REPO, wait_for

pytestmark = pytest.mark.integration

VIEWS = 20_000


@pytest.fixture
def database():
    """A PostgreSQL server of the test's own, to kill."""
    server = Postgres().start()
    yield server
    server.stop()


def test_the_database_killed_and_started_again_mid_job_changes_nothing(kafka, database, tmp_path):
    source = topic(kafka.bootstrap, 4)
    produce(kafka.bootstrap, source, example.views(VIEWS), key="page")
    with psycopg.connect(database.dsn, autocommit=True) as db:
        db.execute(example.TABLE)
    text = (REPO / "examples/kafka_postgres/job.yaml").read_text()
    for given, here in (("127.0.0.1:9092", kafka.bootstrap), ("page-views", source),
                        ("127.0.0.1:5433", f"127.0.0.1:{database.port}"),
                        ("examples.kafka_postgres.pipeline:view", "tests.chaos.pacing:pace"),
                        ("barrier_period: 1.0", "barrier_period: 0.3")):  # fmt: skip
        assert given in text
        text = text.replace(given, here)
    (tmp_path / "job.yaml").write_text(text)
    env = {**os.environ, "ONYX_SECRET_POSTGRES": "onyx", "ONYX_TEST_PACE": "0.01",
           "PYTHONPATH": str(REPO)}  # fmt: skip
    run = subprocess.Popen([sys.executable, "-m", "peer.cli", "run", str(tmp_path / "job.yaml")],
                           cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)  # fmt: skip
    wait_for(lambda: _rows(database) > 0 or run.poll() is not None, 120,
             "the job's first epoch in the table")  # fmt: skip
    assert run.poll() is None, "the job ended before the database was killed"
    database.kill()
    staged = tmp_path / "out/kafka_postgres/staging/_staging"
    # epochs the job committed pile up staged while the table is away: it ran on without it
    wait_for(lambda: len(list(staged.glob("*"))) >= 2 or run.poll() is not None, 120,
             "committed epochs to wait for the database")  # fmt: skip
    database.start()
    output, _ = run.communicate(timeout=300)
    assert run.returncode == 0, output
    assert "rolling the job back" in output, "a delivery met the database away"
    with psycopg.connect(database.dsn) as db:
        got = sorted(db.execute("SELECT page, minute, views FROM page_views_per_minute"))
    assert got == expected_views(VIEWS)


def _rows(database: Postgres) -> int:
    try:
        with psycopg.connect(database.dsn, connect_timeout=2) as db:
            row = db.execute("SELECT count(*) FROM page_views_per_minute").fetchone()
    except psycopg.OperationalError:
        return 0
    return 0 if row is None else int(row[0])
