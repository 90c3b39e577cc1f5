"""The PostgreSQL change input against a real PostgreSQL: changes whole and in commit order, a
restart from a checkpoint that repeats nothing and loses nothing, the slot moved on only to a
committed epoch, the snapshot first (and one cut short going on), a whole job whose output is
exactly the changes made, the server killed under a running job, and each bad input in one
clear message naming the task."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from peer.local_servers import LocalServerError, Postgres, postgres_bin
from peer.plugins import PluginError, Recovery, load
from peer.plugins.postgres.wal2json import lsn
from peer.values.epoch import Epoch
from tests.integration.test_run_failures import killed
from tests.postgres_support import SECRET, Database
from tests.support import REPO, free_port, onyx, wait_for
from tests.unit.plugins.plugin_fixtures import task

pytestmark = pytest.mark.integration

PLUGIN = "peer.plugins.postgres.changes:input"
E1, E2 = Epoch(1, 1), Epoch(1, 2)


@pytest.fixture
def start() -> Iterator[Callable[..., Any]]:
    """Start the input as a peer does (load, then recover); every one closed at the end."""
    started: list[Any] = []

    def start_input(params: dict[str, Any], checkpoint: Any = None,
                    committed: Epoch | None = None) -> Any:  # fmt: skip
        plugin = load(task(PLUGIN, name="read", **params), 0, 1)
        started.append(plugin)
        plugin.recover(Recovery(checkpoint, committed, Epoch(2 if committed else 1, 1)))
        return plugin

    yield start_input
    for plugin in started:
        plugin.close()


def drain(plugin: Any, limit: int = 7) -> list[dict[str, Any]]:
    """Everything a bounded input gives until it completes."""
    taken: list[dict[str, Any]] = []

    def done() -> bool:
        taken.extend(plugin.poll(limit))
        return plugin.completed()

    wait_for(done, 60, "the input to complete", interval=0.01)
    return taken


def take(plugin: Any, count: int, limit: int = 5) -> list[dict[str, Any]]:
    """Exactly ``count`` segments, polled at most ``limit`` at a time."""
    taken: list[dict[str, Any]] = []

    def enough() -> bool:
        taken.extend(plugin.poll(min(limit, count - len(taken))))
        return len(taken) == count

    wait_for(enough, 60, f"{count} segments", interval=0.01)
    return taken


def until(plugin: Any, last: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """What the input gives up to and with the first segment ``last`` holds for."""
    taken: list[dict[str, Any]] = []

    def came() -> bool:
        taken.extend(plugin.poll(3))
        return any(last(s) for s in taken)

    wait_for(came, 60, "the last segment", interval=0.01)
    (at,) = [i for i, s in enumerate(taken) if last(s)]
    assert at == len(taken) - 1, f"more came after the last: {taken[at + 1 :]}"
    return taken


def changes(segments: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(s["op"], s["row"], s["before"]) for s in segments]


def inserted(*rows: tuple[int, str]) -> list[tuple[Any, ...]]:
    return [("insert", {"id": i, "v": v}, None) for i, v in rows]


# -- reading ----------------------------------------------------------------------------------


def test_changes_come_whole_and_in_commit_order(db, start):
    table = db.table()
    slot = db.slot()
    db.run(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")
    late = psycopg.connect(db.server.dsn)
    late.execute(f"INSERT INTO {table} VALUES (10, 'began first, committed last')")
    db.run(f"UPDATE {table} SET v = 'aa' WHERE id = 1", f"DELETE FROM {table} WHERE id = 2",
           f"INSERT INTO {table} VALUES (3, 'c')")  # fmt: skip
    late.commit()
    late.close()
    db.run(f"UPDATE {table} SET id = 4 WHERE id = 3", f"TRUNCATE {table}")
    segments = drain(start(db.params(slot, [table], stop_at_lsn="current")))
    assert changes(segments) == [
        *inserted((1, "a"), (2, "b")),
        ("update", {"id": 1, "v": "aa"}, {"id": 1}),
        ("delete", None, {"id": 2}),
        *inserted((3, "c"), (10, "began first, committed last")),
        ("update", {"id": 4, "v": "c"}, {"id": 3}),
        ("truncate", None, None),
    ]
    assert {s["table"] for s in segments} == {table}
    positions = [lsn(s["lsn"]) for s in segments]
    assert positions[:5] == sorted(positions[:5])
    assert positions[5] < positions[2], "a change's LSN is where it was made, not committed"


def test_values_read_as_wal2json_writes_them_in_changes_and_in_the_snapshot(db, start):
    """The same row, once from the snapshot and once as a change, gives the same values."""
    table = db.table("id int PRIMARY KEY, f float8, n numeric, b bool, bin bytea, ts timestamp, "
                     "arr int[], c char(3), j jsonb, nan numeric")  # fmt: skip
    values = (
        "1.5, 12.50, true, '\\x0aff', '2024-01-02 03:04:05', '{1,2}', 'ab', '{\"k\": 1}', 'NaN'"
    )
    db.run(f"INSERT INTO {table} VALUES (1, {values})")
    slot = db.slot()
    db.run(f"INSERT INTO {table} VALUES (2, {values})")
    plugin = start(db.params(slot, [table], snapshot=True))
    first = take(plugin, 2)
    db.run(f"INSERT INTO {table} VALUES (3, {values})")
    (change,) = take(plugin, 1)
    rows = [s["row"] for s in [*first, change]]
    assert rows[0] == {"id": 1, "f": 1.5, "n": 12.5, "b": True, "bin": "0aff",
                       "ts": "2024-01-02 03:04:05", "arr": "{1,2}", "c": "ab ",
                       "j": '{"k": 1}', "nan": None}  # fmt: skip
    assert rows[1] == {**rows[0], "id": 2}
    assert rows[2] == {**rows[0], "id": 3}


def test_a_restart_from_a_checkpoint_repeats_nothing_and_loses_nothing(db, start):
    """The first reader stops inside a transaction, its checkpoint committed; it reads on past
    a checkpoint that never commits, and dies. The next hands out exactly the rest."""
    table = db.table()
    slot = db.slot()
    db.run(f"INSERT INTO {table} SELECT g, 'big' FROM generate_series(1, 25) g")
    for t in range(3):
        db.run(*(f"INSERT INTO {table} VALUES ({100 + 10 * t + i}, 'small')" for i in range(5)))
    params = db.params(slot, [table], stop_at_lsn="current", batch=4)
    first = start(params)
    before = take(first, 12)
    checkpoint = first.checkpoint(E1)
    assert checkpoint["partial"] == 12
    first.committed(E1)
    take(first, 20)
    first.checkpoint(E2)
    first.close()
    rest = drain(start(params, checkpoint, E1))
    ids = [s["row"]["id"] for s in before + rest]
    assert ids == [*range(1, 26), *(100 + 10 * t + i for t in range(3) for i in range(5))]


def test_committed_moves_the_slot_on_only_to_the_committed_epoch(db, start):
    table = db.table()
    slot = db.slot()
    for t in range(3):
        db.run(*(f"INSERT INTO {table} VALUES ({10 * t + i}, 'x')" for i in range(t + 2)))
    made = db.confirmed(slot)
    plugin = start(db.params(slot, [table], stop_at_lsn="current"))
    take(plugin, 3)
    first = lsn(plugin.checkpoint(E1)["lsn"])
    drain(plugin)
    second = lsn(plugin.checkpoint(E2)["lsn"])
    assert made < first < second
    assert db.confirmed(slot) == made, "nothing moves the slot before a commit"
    plugin.committed(E1)
    wait_for(lambda: db.confirmed(slot) != made, 30, "the slot to move on")
    assert db.confirmed(slot) == first
    plugin.committed(E2)
    wait_for(lambda: db.confirmed(slot) == second, 30, "the slot to move on to the second")


# -- the snapshot -----------------------------------------------------------------------------


def test_the_snapshot_comes_first_then_the_changes_none_twice(db, start):
    a, b = db.table(), db.table("id int PRIMARY KEY, v text")
    db.run(f"INSERT INTO {a} SELECT g, 'a' || g FROM generate_series(5, 1, -1) g",
           f"INSERT INTO {b} VALUES (2, 'b2'), (1, 'b1')")  # fmt: skip
    slot = db.slot(made=False)
    plugin = start(db.params(slot, [a, b], snapshot=True, batch=2))
    first = take(plugin, 1)  # the snapshot's moment is fixed once a row of it is out
    db.run(f"UPDATE {b} SET v = 'new' WHERE id = 1", f"DELETE FROM {a} WHERE id = 1")
    db.run(f"INSERT INTO {a} VALUES (99, 'last')")
    segments = first + until(plugin, lambda s: s["row"] == {"id": 99, "v": "last"})
    assert changes(segments) == [
        *inserted(*((i, f"a{i}") for i in range(1, 6)), (1, "b1"), (2, "b2")),
        ("update", {"id": 1, "v": "new"}, {"id": 1}),
        ("delete", None, {"id": 1}),
        *inserted((99, "last")),
    ]
    assert [s["table"] for s in segments[:7]] == [a] * 5 + [b] * 2
    assert len({s["lsn"] for s in segments[:7]}) == 1, "the rows are of one moment"


def test_a_snapshot_cut_short_goes_on_from_its_checkpoint(db, start):
    """Nothing changed in between: the rest is exactly what one snapshot would have given."""
    table = db.table()
    db.run(f"INSERT INTO {table} SELECT g, 'v' FROM generate_series(1, 9) g")
    slot = db.slot(made=False)
    params = db.params(slot, [table], snapshot=True, batch=2, stop_at_lsn="current")
    first = start(params)
    before = take(first, 4)
    checkpoint = first.checkpoint(E1)
    assert checkpoint["snapshot"] == [0, ["4"]]
    first.committed(E1)
    first.close()
    rest = drain(start(params, checkpoint, E1))
    assert changes(before + rest) == inserted(*((i, "v") for i in range(1, 10)))


def test_changes_made_while_a_snapshot_was_cut_short_reach_each_row_once(db, start):
    """The rows up to 4 were handed out before the failure; in between, rows on both sides of
    4 change. The rows handed out get their changes (an update that moves a row past 4 is its
    delete, one that moves a row below 4 an insert); the rest come as the new snapshot has
    them. Every row once, and the state the segments build is the table's."""
    a, b = db.table(), db.table()
    db.run(f"INSERT INTO {a} SELECT g, 'v' FROM generate_series(1, 10) g",
           f"INSERT INTO {b} VALUES (1, 'b')")  # fmt: skip
    slot = db.slot(made=False)
    params = db.params(slot, [a, b], snapshot=True, batch=2)
    first = start(params)
    before = take(first, 4)
    checkpoint = first.checkpoint(E1)
    first.committed(E1)
    first.close()
    for statement in (f"UPDATE {a} SET v = 'x' WHERE id = 2",
                      f"UPDATE {a} SET v = 'y' WHERE id = 7", f"DELETE FROM {a} WHERE id = 3",
                      f"DELETE FROM {a} WHERE id = 8", f"UPDATE {a} SET id = 11 WHERE id = 4",
                      f"UPDATE {a} SET id = 0 WHERE id = 9", f"INSERT INTO {a} VALUES (12, 'v')",
                      f"INSERT INTO {b} VALUES (2, 'b')"):  # fmt: skip
        db.run(statement)
    second = start(params, checkpoint, E1)
    after = until(second, lambda s: s["table"] == b and s["row"]["id"] == 2)
    assert changes(after) == [
        ("update", {"id": 2, "v": "x"}, {"id": 2}),
        ("delete", None, {"id": 3}),
        ("delete", None, {"id": 4}),
        ("insert", {"id": 0, "v": "v"}, None),
        *inserted(
            (5, "v"), (6, "v"), (7, "y"), (10, "v"), (11, "v"), (12, "v"), (1, "b"), (2, "b")
        ),
    ]
    assert replayed(before + after, a) == db.rows(a)


def test_a_snapshot_whose_connection_is_lost_goes_on_from_where_its_reader_was(db, start):
    """The reader's connections cut mid-snapshot (its snapshot's transaction with them): it
    connects again and reads on from a new snapshot, every row once."""
    table = db.table()
    db.run(f"INSERT INTO {table} SELECT g, 'v' FROM generate_series(1, 20) g")
    slot = db.slot(made=False)
    plugin = start(db.params(slot, [table], snapshot=True, batch=2, stop_at_lsn="current"))
    before = take(plugin, 3)
    cut = db.conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                          "WHERE application_name = 'onyx read'").fetchone()  # fmt: skip
    assert cut is not None
    assert cut[0] >= 2, "the reader's connection and its snapshot's"
    rest = drain(plugin)
    assert changes(before + rest) == inserted(*((i, "v") for i in range(1, 21)))


def replayed(segments: list[dict[str, Any]], table: str) -> dict[Any, dict[str, Any]]:
    """The rows of ``table`` that applying the segments in order leaves, keyed by id."""
    state: dict[Any, dict[str, Any]] = {}
    for s in (s for s in segments if s["table"] == table):
        if s["before"] is not None:
            state.pop(s["before"]["id"])
        if s["row"] is not None:
            assert s["row"]["id"] not in state, f"{s} twice"
            state[s["row"]["id"]] = s["row"]
    return state


# -- whole jobs -------------------------------------------------------------------------------


def job(tmp_path: Path, params: dict[str, Any], paced: bool = False) -> Path:
    catalog = [
        {"name": "read", "kind": "input", "plugin": PLUGIN, "params": params, "n_peers": 1},
        {"name": "write", "kind": "output", "plugin": "peer.plugins.jsonl:exactly_once_output",
         "params": {"path": str(tmp_path / "out")}, "n_peers": 1},
    ]  # fmt: skip
    workflow = [["read", "write"]]
    if paced:
        catalog.insert(1, {"name": "step", "kind": "function", "n_peers": 1,
                           "fn": "tests.integration.pacing:pass_slowly"})  # fmt: skip
        workflow = [["read", "step"], ["step", "write"]]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"workflow": workflow, "catalog": catalog,
                                    "barrier_period": 0.2}))  # fmt: skip
    return path


def published(out: Path) -> list[dict[str, Any]]:
    """The published segments in epoch order: the files' names sort so."""
    return [json.loads(line) for f in sorted(out.glob("*.jsonl"))
            for line in f.read_text().splitlines()]  # fmt: skip


def workload(db: Database, table: str, transactions: int, size: int) -> list[tuple[Any, ...]]:
    """Transactions of inserts, updates and deletes; the changes they make, in commit order."""
    made: list[tuple[Any, ...]] = []
    for t in range(transactions):
        ids = range(t * size, (t + 1) * size)
        statements = [f"INSERT INTO {table} VALUES ({i}, 'v{i}')" for i in ids]
        made += inserted(*((i, f"v{i}") for i in ids))
        if t:
            gone, changed = (t - 1) * size, (t - 1) * size + 1
            statements += [f"DELETE FROM {table} WHERE id = {gone}",
                           f"UPDATE {table} SET v = 'u' WHERE id = {changed}"]  # fmt: skip
            made += [("delete", None, {"id": gone}),
                     ("update", {"id": changed, "v": "u"}, {"id": changed})]  # fmt: skip
        db.run(*statements)
    return made


def test_a_job_publishes_exactly_the_changes_made(db, tmp_path):
    table = db.table()
    slot = db.slot()
    made = workload(db, table, 60, 5)
    before = db.confirmed(slot)
    path = job(tmp_path, db.params(slot, [table], stop_at_lsn="current", batch=50))
    result = onyx("run", str(path), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert changes(published(tmp_path / "out")) == made
    assert db.confirmed(slot) > before, "the committed epochs moved the slot on"


def test_the_server_killed_under_a_running_job_changes_nothing_in_its_output(tmp_path, monkeypatch):
    """kill -9 of PostgreSQL while the job reads, and a start: the reader waits it out and
    goes on from where it was; the output is still exactly the changes."""
    monkeypatch.setenv(f"ONYX_SECRET_{SECRET}", Postgres.PASSWORD)
    server = Postgres().start()
    db = Database(server)
    running: subprocess.Popen[str] | None = None
    try:
        table = db.table()
        slot = db.slot()
        made = workload(db, table, 30, 100)
        params = db.params(slot, [table], stop_at_lsn="current", batch=50)
        running = subprocess.Popen(
            [sys.executable, "-m", "peer.cli", "run", str(job(tmp_path, params, paced=True))],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        wait_for(lambda: list((tmp_path / "out").glob("*.jsonl")), 120, "a published epoch")
        db.conn.close()
        server.kill()
        wait_for(lambda: started(server), 60, "the server to start again")
        db.conn = psycopg.connect(server.dsn, autocommit=True)
        output, _ = running.communicate(timeout=300)
        assert running.returncode == 0, output
        assert "trying again" in output, "the reader lost its server while the job ran"
        assert changes(published(tmp_path / "out")) == made
    finally:
        if running is not None and running.poll() is None:
            running.kill()
            running.wait(30)
        db.conn.close()
        server.stop()  # its slots and WAL with it


def started(server: Postgres) -> bool:
    """Started, or not yet: the killed server's last processes may still hold its shared
    memory, or be removing their files, a moment after it, and a start then fails."""
    try:
        server.start()
    except (LocalServerError, FileNotFoundError):  # a file the old processes were removing
        return False
    return True


# -- bad input --------------------------------------------------------------------------------


def test_an_unreachable_server_is_named(db, tmp_path):
    port = free_port()
    params = {**db.params("s_none", ["public.t"]), "dsn": f"postgresql://onyx@127.0.0.1:{port}/x",
              "timeout": 1}  # fmt: skip
    killed(onyx("run", str(job(tmp_path, params)), timeout=120), "task 'read'",
           f"127.0.0.1:{port}", "cannot connect")  # fmt: skip


def test_a_wrong_password_is_named_not_shown(db, tmp_path, monkeypatch):
    monkeypatch.setenv("ONYX_SECRET_CDC_WRONG", "not-the-password")
    params = {**db.params("s_none", ["public.t"]), "secrets": {"password": "CDC_WRONG"}}
    result = onyx("run", str(job(tmp_path, params)), timeout=120)
    killed(result, "task 'read'", f"127.0.0.1:{db.server.port}", "password authentication failed")
    assert "not-the-password" not in result.stdout + result.stderr


def test_a_missing_table_is_named(db, tmp_path):
    params = db.params(db.slot(made=False), ["public.no_such_table"])
    killed(onyx("run", str(job(tmp_path, params)), timeout=120), "task 'read'",
           "table 'public.no_such_table' does not exist")  # fmt: skip


def test_a_role_that_may_not_use_slots_is_named(db, tmp_path, monkeypatch):
    role = f"r_{uuid.uuid4().hex[:10]}"
    db.conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
    monkeypatch.setenv("ONYX_SECRET_CDC_ROLE", "pw")
    try:
        dsn = db.dsn.replace(f"{Postgres.USER}@", f"{role}@")
        params = {**db.params(db.slot(made=False), [db.table()]), "dsn": dsn,
                  "secrets": {"password": "CDC_ROLE"}}  # fmt: skip
        killed(onyx("run", str(job(tmp_path, params)), timeout=120), "task 'read'",
               f"127.0.0.1:{db.server.port}", "replication role to use replication slots",
               "needs the REPLICATION attribute")  # fmt: skip
    finally:
        db.conn.execute(f"DROP ROLE {role}")


def test_a_role_that_may_not_read_an_existing_slot_is_named_at_the_start(db, start, monkeypatch):
    role = f"r_{uuid.uuid4().hex[:10]}"
    db.conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
    monkeypatch.setenv("ONYX_SECRET_CDC_ROLE", "pw")
    try:
        dsn = db.dsn.replace(f"{Postgres.USER}@", f"{role}@")
        params = {**db.params(db.slot(), [db.table()]), "dsn": dsn,
                  "secrets": {"password": "CDC_ROLE"}}  # fmt: skip
        with pytest.raises(PluginError, match=r"task 'read'.*cannot start reading: must be "
                                              r"superuser or replication role"):  # fmt: skip
            start(params)
    finally:
        db.conn.execute(f"DROP ROLE {role}")


def test_a_table_without_a_replica_identity_is_named(db, start):
    table = db.table("id int, v text")
    with pytest.raises(PluginError, match=r"task 'read'.* has no replica identity"):
        start(db.params(db.slot(made=False), [table]))


def test_a_slot_in_use_by_another_reader_is_named(db, start):
    slot = db.slot()
    table = db.table()
    receiver = subprocess.Popen(
        [str(postgres_bin() / "pg_recvlogical"), "-d", db.server.dsn, "--slot", slot, "--start",
         "-f", "/dev/null"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for(lambda: db.conn.execute("SELECT active FROM pg_replication_slots WHERE "
                                         "slot_name = %s", (slot,)).fetchone() == (True,),
                 30, "pg_recvlogical to hold the slot")  # fmt: skip
        with pytest.raises(PluginError, match=rf"task 'read'.*slot '{slot}' is in use by another "
                                              r"connection \(PID \d+\)"):  # fmt: skip
            start({**db.params(slot, [table]), "timeout": 1})
    finally:
        receiver.terminate()
        receiver.wait(30)


def test_a_server_without_logical_decoding_is_named(tmp_path, monkeypatch, start):
    monkeypatch.setenv(f"ONYX_SECRET_{SECRET}", Postgres.PASSWORD)
    server = Postgres(settings={"wal_level": "replica"}).start()
    try:
        db = Database(server)
        params = db.params("s_none", [db.table()])
        with pytest.raises(PluginError, match=r"task 'read'.*wal_level 'replica'.*logical"):
            start(params)
        db.conn.close()
    finally:
        server.stop()
