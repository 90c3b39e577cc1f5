"""The exactly-once PostgreSQL output against a real server: a committed epoch's rows appear at
once with its marker, an uncommitted one's never; an epoch delivered again is skipped if it
committed and done whole if it did not; upserts keep each key's last row; the README's
Kafka-to-PostgreSQL example gives the counts computed here; and every bad input ends in one
clear message naming the task."""

from __future__ import annotations

import collections
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from examples.kafka_postgres import produce as example
from peer.plugins import PluginError, load
from peer.values.epoch import Epoch
from tests.integration.test_run_failures import killed
from tests.kafka_support import produce, topic
from tests.support import REPO, onyx, wait_for
from tests.unit.plugins.plugin_fixtures import recovery, task

pytestmark = pytest.mark.integration

_tables = itertools.count()


@pytest.fixture
def table(postgres) -> str:
    name = f"t_{os.getpid()}_{next(_tables)}"
    with psycopg.connect(postgres.dsn, autocommit=True) as db:
        db.execute(f"CREATE TABLE {name} (k text PRIMARY KEY, n bigint, doc jsonb)")
    return name


def dsn_without_password(postgres) -> str:
    return f"postgresql://onyx@127.0.0.1:{postgres.port}/postgres"


@pytest.fixture(autouse=True)
def password(monkeypatch):
    monkeypatch.setenv("ONYX_SECRET_TEST_PG", "onyx")


@pytest.fixture
def wrong_password(monkeypatch):
    monkeypatch.setenv("ONYX_SECRET_WRONG_PG", "not-the-password")


def sink(postgres, table: str, staging: Path, **params: Any) -> Any:
    given = {"dsn": dsn_without_password(postgres), "secrets": {"password": "TEST_PG"},
             "table": table, "staging": str(staging), **params}  # fmt: skip
    t = task("peer.plugins.postgres:output", kind="output", name="w", **given)
    return load(t, 0, 1)


def rows(postgres, table: str) -> list[tuple]:
    with psycopg.connect(postgres.dsn) as db:
        return sorted(db.execute(f"SELECT k, n, doc FROM {table}").fetchall())


def commit(out: Any, epoch: Epoch) -> dict:
    sealing = out.checkpoint(epoch)
    sealing.durable.result(60)
    out.committed(epoch)
    out.drained().result(60)
    assert out.synced()
    return sealing.position


def test_committed_epochs_appear_whole_and_uncommitted_ones_never(postgres, table, tmp_path):
    out = sink(postgres, table, tmp_path / "staging")
    out.recover(recovery())
    out.prepare([{"k": "a", "n": 1, "doc": {"x": [1, 2]}}, {"k": "b", "n": 2}])
    out.write()
    commit(out, Epoch(1, 1))
    out.prepare([{"k": "c", "n": 3}])
    out.write()
    out.checkpoint(Epoch(1, 2)).durable.result(60)  # sealed, never committed
    assert rows(postgres, table) == [("a", 1, {"x": [1, 2]}), ("b", 2, None)]
    out.close()


def test_an_epoch_delivered_again_is_skipped_once_it_committed(postgres, table, tmp_path):
    """A crash after the epoch's transaction committed but before its staged copy was deleted:
    the recovery delivers it again and writes nothing twice."""
    staging = tmp_path / "staging"
    first = sink(postgres, table, staging)
    first.recover(recovery())
    first.prepare([{"k": "a", "n": 1}])
    first.write()
    sealing = first.checkpoint(Epoch(1, 1))
    sealing.durable.result(60)
    (stem,) = sealing.position["unpublished"]
    staged = list((staging / "_staging" / stem).iterdir())
    kept = {p.name: p.read_bytes() for p in staged}
    first.committed(Epoch(1, 1))
    first.drained().result(60)
    first.close()
    (staging / "_staging" / stem).mkdir()  # the staged copy as the crash left it
    for name, data in kept.items():
        (staging / "_staging" / stem / name).write_bytes(data)
    again = sink(postgres, table, staging)
    again.recover(recovery(sealing.position, Epoch(1, 1), version=2))
    assert rows(postgres, table) == [("a", 1, None)]
    assert not (staging / "_staging" / stem).exists()
    again.close()


def test_an_epoch_whose_transaction_never_committed_is_written_whole(postgres, table, tmp_path):
    """A crash before the epoch's transaction committed (here: the server refused it, a row
    breaking the table's key): nothing of it is in the table; once the table takes it, the
    recovery writes all of it."""
    staging = tmp_path / "staging"
    with psycopg.connect(postgres.dsn, autocommit=True) as db:
        db.execute(f"INSERT INTO {table} (k, n) VALUES ('b', 0)")
    first = sink(postgres, table, staging)
    first.recover(recovery())
    first.prepare([{"k": "a", "n": 1}, {"k": "b", "n": 2}])
    first.write()
    sealing = first.checkpoint(Epoch(1, 1))
    sealing.durable.result(60)
    first.committed(Epoch(1, 1))
    first.drained().result(60)
    with pytest.raises(PluginError, match=f"cannot be written to table '{table}'"):
        first.synced()
    assert rows(postgres, table) == [("b", 0, None)], "none of the epoch, not half"
    first.close()
    with psycopg.connect(postgres.dsn, autocommit=True) as db:
        db.execute(f"DELETE FROM {table}")
    again = sink(postgres, table, staging)
    again.recover(recovery(sealing.position, Epoch(1, 1), version=2))
    assert rows(postgres, table) == [("a", 1, None), ("b", 2, None)]
    again.close()


def test_upserts_keep_each_keys_last_row(postgres, table, tmp_path):
    out = sink(postgres, table, tmp_path / "staging", mode="upsert", key=["k"])
    out.recover(recovery())
    out.prepare([{"k": "a", "n": 1}, {"k": "b", "n": 1}, {"k": "a", "n": 2}])
    out.write()
    commit(out, Epoch(1, 1))
    out.prepare([{"k": "b", "n": 5}, {"k": "c", "n": 1}])
    out.write()
    commit(out, Epoch(1, 2))
    assert rows(postgres, table) == [("a", 2, None), ("b", 5, None), ("c", 1, None)]
    out.close()


@pytest.mark.parametrize(
    ("params", "words"),
    [({"table": "no_such_table"}, ["table 'no_such_table' does not exist"]),
     ({"mode": "upsert", "key": ["nope"]}, ["key ['nope']", "no column"]),
     ({"dsn": "postgresql://onyx@127.0.0.1:1/postgres"}, ["127.0.0.1:1"]),
     ({"secrets": {"password": "WRONG_PG"}}, ["password authentication failed"])],
)  # fmt: skip
@pytest.mark.usefixtures("wrong_password")
def test_a_bad_start_is_named(postgres, table, tmp_path, params, words):
    given = {"table": table} | params
    out = sink(postgres, given.pop("table"), tmp_path / "staging", **given)
    with pytest.raises(PluginError) as failure:
        out.recover(recovery())
    for word in words:
        assert word in str(failure.value)
    assert "not-the-password" not in str(failure.value)


def test_a_field_the_table_lacks_is_named(postgres, table, tmp_path):
    out = sink(postgres, table, tmp_path / "staging")
    out.recover(recovery())
    with pytest.raises(PluginError, match=f"table '{table}' has no column 'colour'"):
        out.prepare([{"k": "a", "colour": "red"}])
    out.close()


# -- the README's example ---------------------------------------------------------------------


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory PostgreSQL's own user may enter (the test's tmp_path sits under one only
    root may)."""
    made = Path(tempfile.mkdtemp(prefix="onyx-servers-"))
    made.chmod(0o755)
    yield made
    shutil.rmtree(made, ignore_errors=True)


def test_the_readmes_kafka_to_postgres_example_counts_every_view(tmp_path, open_dir):
    """The three commands as the README gives them, on the ports it names: the table holds
    each page's views per minute, as counted here from the views produced. PostgreSQL runs as
    its own user, which must be able to enter the servers' directory."""
    servers = subprocess.Popen(
        [sys.executable, "-m", "peer.cli", "servers", "kafka", "postgres", "--dir",
         str(open_dir)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        lines: list[str] = []
        wait_for(lambda: _ready(servers, lines), 120, "the servers to start")
        produced = subprocess.run(
            [sys.executable, "-m", "examples.kafka_postgres.produce", "--views", "20000"],
            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
            text=True, timeout=120, check=False,
        )  # fmt: skip
        assert produced.returncode == 0, produced.stderr
        job = REPO / "examples/kafka_postgres/job.yaml"
        run = subprocess.run(
            [sys.executable, "-m", "peer.cli", "run", str(job)], cwd=tmp_path,
            env={**os.environ, "ONYX_SECRET_POSTGRES": "onyx", "PYTHONPATH": str(REPO)},
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert run.returncode == 0, run.stdout + run.stderr
        with psycopg.connect("postgresql://onyx:onyx@127.0.0.1:5433/postgres") as db:
            got = sorted(db.execute("SELECT page, minute, views FROM page_views_per_minute"))
        assert got == expected_views(20000)
    finally:
        servers.send_signal(signal.SIGTERM)
        servers.wait(60)


def _ready(servers: subprocess.Popen[str], lines: list[str]) -> bool:
    assert servers.poll() is None, "".join(lines) + (
        servers.stdout.read() if servers.stdout else ""
    )
    assert servers.stdout is not None
    lines.append(servers.stdout.readline())
    return lines[-1].startswith("running until")


def expected_views(count: int) -> list[tuple[str, int, int]]:
    """The example's views counted per page and minute: the oracle of the job."""
    counts = collections.Counter((v["page"], v["ts"] - v["ts"] % 60000)
                                 for v in example.views(count))  # fmt: skip
    return sorted((page, minute, views) for (page, minute), views in counts.items())


def test_an_unreachable_database_kills_the_job_naming_it(kafka, tmp_path, monkeypatch):
    monkeypatch.setenv("ONYX_SECRET_POSTGRES", "pw-not-to-show")
    source = topic(kafka.bootstrap, 1)
    produce(kafka.bootstrap, source, [{"page": "p", "ts": 1}])
    text = (REPO / "examples/kafka_postgres/job.yaml").read_text()
    for given, here in (("127.0.0.1:9092", kafka.bootstrap), ("page-views", source),
                        ("127.0.0.1:5433", "127.0.0.1:1"),
                        ("out/kafka_postgres/staging", str(tmp_path / "staging"))):  # fmt: skip
        assert given in text
        text = text.replace(given, here)
    path = tmp_path / "job.yaml"
    path.write_text(text)
    line = killed(onyx("run", str(path), timeout=120), "task 'counts'", "127.0.0.1:1")
    assert "pw-not-to-show" not in line
