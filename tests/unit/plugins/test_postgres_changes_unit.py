"""The PostgreSQL change input's pure parts: its params, LSNs, the add-tables filter as wal2json
reads it, wal2json's changes and a snapshot's values as segments, the checkpoint, and which of
the changes a slot gives again after a restart are new (every change once, whatever the cuts);
and the shared connection settings."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from peer.plugins import PluginError, load
from peer.plugins.params import parsed, secret_values
from peer.plugins.postgres.capture_params import CaptureParams
from peer.plugins.postgres.captured import (
    ChangePosition,
    RowChange,
    SlotReading,
    SnapshotDone,
    SnapshotRow,
    TransactionEnd,
)
from peer.plugins.postgres.changes import input
from peer.plugins.postgres.connect import Server, Unreachable, address, reason, transient
from peer.plugins.postgres.wal2json import (
    add_tables,
    key_text,
    lsn,
    lsn_text,
    segment,
    snapshot_value,
)
from tests.unit.plugins.plugin_fixtures import task

PLUGIN = "peer.plugins.postgres.changes:input"
BASE = {"dsn": "postgresql://cdc@db:5433/shop", "slot": "orders", "tables": ["public.orders"]}


# -- params ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "words"),
    [({"slot": "Orders"}, "slot must be a replication slot's name"),
     ({"tables": []}, "at least one table"),
     ({"tables": ["orders"]}, "'orders' must be schema.table"),
     ({"tables": ["a.b", "a.b"]}, "twice"),
     ({"stop_at_lsn": "soon"}, "stop_at_lsn must be 'current' or an LSN"),
     ({"batch": 0}, "batch must be in"),
     ({"timeout": 0}, "timeout must be in"),
     ({"dsn": "host=db port"}, "dsn is not a libpq connection string"),
     ({"secrets": {"password": "a-b"}}, "secrets.password must name a variable"),
     ({"secrets": {"Pass word": "x"}}, "is not a libpq keyword"),
     ({"snapshots": True}, "snapshots")],
)  # fmt: skip
def test_bad_params_are_refused_naming_the_param(change, words):
    with pytest.raises(ValueError, match=words):
        parsed(CaptureParams, {**BASE, **change})


def test_good_params_are_read_with_their_defaults():
    params = parsed(
        CaptureParams, {**BASE, "stop_at_lsn": "16/B374D848", "secrets": {"password": "X"}}
    )
    assert (params.snapshot, params.batch, params.timeout) == (False, 1000, 10.0)
    assert params.secrets == {"password": "X"}


def test_the_factory_checks_params_at_submit_and_refuses_more_than_one_peer():
    with pytest.raises(ValueError, match="slot"):
        input.check_params({**BASE, "slot": "-"})  # type: ignore[attr-defined]
    with pytest.raises(PluginError, match=r"task 't'.*one ordered sequence.*not 2"):
        load(task(PLUGIN, **BASE), 0, 2)
    with pytest.raises(PluginError, match=r"task 't'.*params: tables"):
        load(task(PLUGIN, **{**BASE, "tables": "public.orders"}), 0, 1)


# -- LSNs and the filter --------------------------------------------------------------------


@given(st.integers(0, 2**64 - 1))
def test_an_lsn_reads_back_from_its_text(value):
    assert lsn(lsn_text(value)) == value


def test_an_lsn_orders_as_the_server_does():
    assert lsn("16/B374D848") == (0x16 << 32) + 0xB374D848
    assert lsn("0/F") < lsn("0/10") < lsn("1/0")


def unescaped(option: str) -> list[tuple[str, str]]:
    """wal2json's reading of add-tables: names split on unescaped commas, then on the first
    unescaped dot, a backslash escaping the character after it."""
    tables, parts, current, escaped = [], [], "", False
    for c in option + ",":
        if escaped:
            current, escaped = current + c, False
        elif c == "\\":
            escaped = True
        elif c == "." and not parts:
            parts, current = [current], ""
        elif c == ",":
            tables.append((parts[0], current))
            parts, current = [], ""
        else:
            current += c
    return tables


names = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=8)


undotted = names.filter(lambda n: "." not in n)


@given(st.lists(st.tuples(undotted, undotted), min_size=1, max_size=4))
def test_add_tables_names_each_table_as_wal2json_reads_it(tables):
    assert unescaped(add_tables([f"{s}.{t}" for s, t in tables])) == tables


def test_add_tables_escapes_separators_and_wildcards():
    assert add_tables(["public.orders", "a b.*"]) == "public.orders,a\\ b.\\*"


# -- changes and values as segments ---------------------------------------------------------


def test_wal2json_changes_become_segments():
    insert = {"action": "I", "lsn": "0/10", "schema": "public", "table": "t",
              "columns": [{"name": "id", "value": 1}, {"name": "v", "value": None}]}  # fmt: skip
    update = {"action": "U", "lsn": "0/20", "schema": "public", "table": "t",
              "columns": [{"name": "id", "value": 2}],
              "identity": [{"name": "id", "value": 1}]}  # fmt: skip
    delete = {"action": "D", "lsn": "0/30", "schema": "s", "table": "t",
              "identity": [{"name": "id", "value": 2}]}  # fmt: skip
    truncate = {"action": "T", "lsn": "0/40", "schema": "s", "table": "t"}
    assert segment(insert) == {"op": "insert", "table": "public.t", "lsn": "0/10",
                               "row": {"id": 1, "v": None}, "before": None}  # fmt: skip
    assert segment(update) == {"op": "update", "table": "public.t", "lsn": "0/20",
                               "row": {"id": 2}, "before": {"id": 1}}  # fmt: skip
    assert segment(delete) == {"op": "delete", "table": "s.t", "lsn": "0/30", "row": None,
                               "before": {"id": 2}}  # fmt: skip
    assert segment(truncate) == {"op": "truncate", "table": "s.t", "lsn": "0/40", "row": None,
                                 "before": None}  # fmt: skip
    assert segment({"action": "M", "prefix": "p", "content": "c"}) is None


@pytest.mark.parametrize(
    ("oid", "text", "value"),
    [(23, "42", 42), (20, "-9007199254740993", -9007199254740993), (701, "0.1", 0.1),
     (1700, "1.50", 1.5), (1700, "NaN", None), (701, "-Infinity", None), (700, "Infinity", None),
     (16, "t", True), (16, "f", False), (17, "\\x0aff", "0aff"), (25, "NaN", "NaN"),
     (1114, "2024-01-02 03:04:05", "2024-01-02 03:04:05"), (1007, "{1,2}", "{1,2}"),
     (23, None, None)],
)  # fmt: skip
def test_a_snapshot_value_is_what_wal2json_writes_for_it(oid, text, value):
    assert snapshot_value(oid, text) == value


@given(st.integers() | st.booleans() | st.text() | st.floats(allow_nan=False, allow_infinity=False))
def test_a_key_value_reads_back_through_its_text(value):
    oid = {int: 20, bool: 16, str: 25, float: 701}[type(value)]
    text = key_text(oid, value)
    assert text is not None
    assert snapshot_value(oid, "t" if value is True else "f" if value is False else text) == value


def test_a_bytea_key_gets_its_hex_prefix_back():
    assert key_text(17, "0aff") == "\\x0aff"


# -- the checkpoint -------------------------------------------------------------------------

positions = st.builds(
    ChangePosition,
    st.integers(0, 2**64 - 1),
    st.integers(0, 10**6),
    st.none() | st.tuples(st.integers(0, 20), st.none() | st.lists(st.text(), max_size=3)),
    st.none() | st.integers(0, 2**64 - 1),
)


@given(positions)
def test_a_checkpoint_reads_back_as_the_position_it_was(position):
    assert ChangePosition.of(position.to_json()) == position


@pytest.mark.parametrize(
    "garbage",
    [None, [], {"lsn": "x"}, {"lsn": "0/1", "partial": -1, "snapshot": None, "stop": None},
     {"lsn": "0/1", "partial": 0, "snapshot": [0, [1]], "stop": None},
     {"lsn": "0/1", "partial": 0, "snapshot": None}],
)  # fmt: skip
def test_a_checkpoint_not_of_this_input_is_refused(garbage):
    with pytest.raises(ValueError, match="not a checkpoint of this input"):
        ChangePosition.of(garbage)


def test_the_position_moves_with_each_item_handed_out():
    position = ChangePosition(lsn=5, snapshot=(0, None))
    row = {"op": "insert"}
    assert position.passed(SnapshotRow(0, ["1"], row)) is row
    assert position.passed(TransactionEnd(9)) is None
    assert position.passed(RowChange(row)) is row
    assert (position.lsn, position.partial, position.snapshot) == (9, 1, (0, ["1"]))
    position.passed(SnapshotDone())
    assert position.snapshot is None


# -- what is new after a restart ------------------------------------------------------------


def rows_of(transactions: list[list[int]]) -> list[tuple[int, dict[str, Any]]]:
    """wal2json's output for transactions of those row ids, each ending 100 after the last,
    as (end, row) pairs: begin, changes, commit."""
    rows = []
    for number, ids in enumerate(transactions):
        end = 100 * (number + 1)
        rows.append((end, {"action": "B", "nextlsn": lsn_text(end)}))
        rows += [(end, {"action": "I", "lsn": lsn_text(end - 50 + i), "schema": "s",
                        "table": "t", "columns": [{"name": "id", "value": row}]})
                 for i, row in enumerate(ids)]  # fmt: skip
        rows.append((end, {"action": "C", "nextlsn": lsn_text(end)}))
    return rows


def handed(reading: SlotReading, rows: list[tuple[int, dict[str, Any]]], position: ChangePosition,
           limit: int | None = None) -> list[int]:  # fmt: skip
    """The ids a consumer takes, up to ``limit``, moving ``position`` as the input does."""
    taken: list[int] = []
    for _, row in rows:
        for item in reading.feed(row):
            if limit is not None and len(taken) == limit:
                return taken
            found = position.passed(item)
            if found is not None:
                taken.append(found["row"]["id"])
    return taken


transactions = st.lists(st.lists(st.integers(0, 10**6), max_size=5), min_size=1, max_size=8)


@given(transactions, st.data())
def test_after_a_restart_from_any_checkpoint_each_change_comes_once(txns, data):
    """A consumer stops anywhere, even inside a transaction, and checkpoints; the slot gives
    the changes again from any committed position up to the checkpoint's; the new reading
    hands out exactly the rest."""
    rows = rows_of(txns)
    every = [row for ids in txns for row in ids]
    cut = data.draw(st.integers(0, len(every)))
    first = ChangePosition()
    before = handed(SlotReading(0, 0, None), rows, first, limit=cut)
    again = data.draw(st.sampled_from([0, *(e for e, _ in rows if e <= first.lsn)]))
    restored = ChangePosition.of(first.to_json())
    after = handed(SlotReading(restored.lsn, restored.partial, None),
                   [(e, r) for e, r in rows if e > again], restored)  # fmt: skip
    assert before + after == every


@given(transactions, st.data())
def test_a_stream_cut_short_gives_its_transaction_again_whole(txns, data):
    """The connection lost mid-transaction: the reading's own position drops what it handed
    out of it, when the slot gives the transaction again."""
    rows = rows_of(txns)
    cut = data.draw(st.integers(0, len(rows)))
    reading, position = SlotReading(0, 0, None), ChangePosition()
    before = handed(reading, rows[:cut], position)
    reading.interrupted()
    after = handed(reading, [(e, r) for e, r in rows if e > reading.lsn], position)
    assert before + after == [row for ids in txns for row in ids]


def test_nothing_past_the_stop_is_new():
    rows = rows_of([[1], [2], [3]])
    assert handed(SlotReading(0, 0, stop=200), rows, ChangePosition()) == [1, 2]


def test_a_window_s_changes_go_through_its_projection():
    rows = rows_of([[1, 2], [3]])
    reading, position = SlotReading(0, 0, None), ChangePosition()
    taken = []

    def project(change: dict[str, Any]) -> dict[str, Any] | None:
        return change if change["row"]["id"] != 2 else None

    for _, row in rows:
        for item in reading.feed(row, window=100, project=project):
            found = position.passed(item)
            taken += [found["row"]["id"]] if found else []
    assert taken == [1, 3]


def test_skipping_to_a_snapshot_moves_the_reading_on_only():
    reading = SlotReading(50, 0, None)
    assert reading.skip_to(40) == []
    assert reading.skip_to(60) == [TransactionEnd(60)]
    assert (reading.lsn, reading.partial) == (60, 0)


# -- connecting -----------------------------------------------------------------------------


def test_secrets_come_from_the_member_s_environment_named_not_shown(monkeypatch):
    server = Server(dsn="postgresql://cdc@db:5433/shop", secrets={"password": "SHOP"})
    monkeypatch.setenv("ONYX_SECRET_SHOP", "s3cret")
    assert secret_values(task(PLUGIN), server.secrets) == {"password": "s3cret"}
    monkeypatch.delenv("ONYX_SECRET_SHOP")
    with pytest.raises(PluginError, match=r"secrets\.password names ONYX_SECRET_SHOP") as e:
        secret_values(task(PLUGIN), server.secrets)
    assert "s3cret" not in str(e.value)


def test_the_server_is_named_by_host_and_port_only():
    assert address(Server(dsn="postgresql://cdc@db:5433/shop")) == "db:5433"
    assert address(Server(dsn="host=db dbname=shop")) == "db:5432"


@pytest.mark.parametrize("dsn", ["postgresql://cdc:pw@db:5433/shop", "host=db password=pw"])
def test_a_password_in_the_dsn_is_refused_for_the_log_would_keep_it(dsn):
    with pytest.raises(ValueError, match="dsn holds a password") as refused:
        parsed(Server, {"dsn": dsn})
    assert "pw" not in str(refused.value)


def test_a_connection_failure_reads_as_what_libpq_said():
    refused = psycopg.OperationalError('connection failed: connection to server at "127.0.0.1",'
                                       ' port 1 failed: Connection refused\n\tIs the server '
                                       "running on that host?")  # fmt: skip
    login = psycopg.OperationalError('connection failed: connection to server at "h", port 5 '
                                     "failed: FATAL:  password authentication failed for "
                                     'user "u"')  # fmt: skip
    assert reason(refused) == "Connection refused"
    assert reason(login) == 'password authentication failed for user "u"'


def test_what_may_pass_when_tried_again():
    assert transient(Unreachable("t: down"))
    assert transient(psycopg.OperationalError("the connection is lost"))
    assert transient(psycopg.errors.AdminShutdown("terminating connection"))
    assert not transient(psycopg.errors.InsufficientPrivilege("no"))
    assert not transient(PluginError("t: wrong password"))
    assert not transient(ValueError("x"))
