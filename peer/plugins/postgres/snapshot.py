"""The tables change data capture reads, as the server describes them, and their snapshot:
each table's rows in the order of its key, on the snapshot a temporary replication slot exported,
cut and resumed at a key."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.string import TextLoader

from peer.job.spec import Task
from peer.plugins import error
from peer.plugins.postgres.capture_params import CaptureParams
from peer.plugins.postgres.captured import SnapshotRow
from peer.plugins.postgres.connect import (
    connect,
)
from peer.plugins.postgres.wal2json import key_text, lsn, lsn_text, snapshot_value


@dataclass(frozen=True)
class CapturedTable:
    """A captured table as the catalog has it."""

    name: str
    oid: int
    columns: list[tuple[str, int]]
    """Each column's name and type."""
    key: list[tuple[str, int, str]]
    """The columns a snapshot reads it in the order of: name, type, type as SQL."""

    def identifier(self) -> sql.Identifier:
        return sql.Identifier(*self.name.split(".", 1))


_DESCRIBE = """
SELECT c.oid::int, c.relkind::text, c.relreplident::text, i.indexrelid::int,
       has_table_privilege(c.oid, 'SELECT')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_index i ON i.indrelid = c.oid
    AND CASE WHEN c.relreplident = 'i' THEN i.indisreplident ELSE i.indisprimary END
WHERE n.nspname = %s AND c.relname = %s"""
_COLUMNS = """
SELECT attname::text, atttypid::int FROM pg_attribute
WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum"""
_KEY = """
SELECT a.attname::text, a.atttypid::int, format_type(a.atttypid, a.atttypmod)
FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indexrelid = %s ORDER BY k.ord"""


def describe(task: Task, conn: psycopg.Connection[Any], name: str, snapshot: bool) -> CapturedTable:
    """Table ``name`` as the catalog has it; a PluginError if it cannot be captured (it does not
    exist, or its updates and deletes would not say which row) or, for a snapshot, read."""
    schema, relname = name.split(".", 1)
    found = conn.execute(_DESCRIBE, (schema, relname)).fetchone()
    if found is None:
        raise error(task, f"table {name!r} does not exist (tables are schema.table, as the "
                          "catalog spells them)")  # fmt: skip
    oid, kind, identity, index, readable = found
    if kind != "r":
        raise error(task, f"{name!r} is not a table (a view, or a partitioned table: name its "
                          "partitions)")  # fmt: skip
    if identity == "n" or (identity == "d" and index is None):
        raise error(task, f"table {name!r} has no replica identity, so its updates and deletes "
                          "could not be captured: give it a primary key, or REPLICA IDENTITY "
                          "FULL")  # fmt: skip
    if snapshot and index is None:
        raise error(task, f"table {name!r} needs a primary key for the snapshot to read it in "
                          "order")  # fmt: skip
    if snapshot and not readable:
        raise error(task, f"the role may not read table {name!r} (SELECT), which the snapshot "
                          "reads")  # fmt: skip
    columns = [(c, t) for c, t in conn.execute(_COLUMNS, (oid,)).fetchall()]
    key = [(c, t, s) for c, t, s in conn.execute(_KEY, (index,)).fetchall()] if index else []
    return CapturedTable(name, oid, columns, key)


_EXPORT = "CREATE_REPLICATION_SLOT {} TEMPORARY LOGICAL wal2json (SNAPSHOT 'export')"


class TableSnapshot:
    """The tables' rows as of one moment, ``at``, consistent with the slot: read in a REPEATABLE
    READ transaction that imported the snapshot a temporary replication slot exported at its
    consistent point. Each table is read in its key's order, from after a key."""

    def __init__(self, task: Task, params: CaptureParams, tables: list[CapturedTable],
                 start: tuple[int, list[str] | None]) -> None:  # fmt: skip
        self.tables = tables
        self.table, self.after = start
        replication = connect(task, params, autocommit=True, replication="database")
        try:
            create = sql.SQL(_EXPORT).format(sql.Identifier(temporary_slot(params.slot, "snap")))
            _, point, exported, _ = replication.execute(create).fetchone() or (None, "0/0", "", "")
            self.at = lsn(point)
            self.conn = self._imported(task, params, exported)
        finally:
            replication.close()
        self.cursor: psycopg.ServerCursor[Any] | None = None

    @staticmethod
    def _imported(task: Task, params: CaptureParams, exported: str) -> psycopg.Connection[Any]:
        """A connection whose transaction sees the exported snapshot (while its exporter
        waits)."""
        conn = connect(task, params)
        try:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(exported)))
        except BaseException:
            conn.close()
            raise
        return conn

    def read(self, count: int) -> tuple[list[SnapshotRow], bool]:
        """Up to ``count`` rows more, and whether they were the last."""
        while self.table < len(self.tables):
            if self.cursor is None:
                self.cursor = self._cursor()
            rows = self.cursor.fetchmany(count)
            if len(rows) == count:
                return self._rows(rows), False
            self.cursor.close()
            self.cursor = None
            made = self._rows(rows)
            self.table, self.after = self.table + 1, None
            if made:
                return made, self.table == len(self.tables)
        return [], True

    def _cursor(self) -> psycopg.ServerCursor[Any]:
        table = self.tables[self.table]
        columns = sql.SQL(", ").join(sql.Identifier(c) for c, _ in table.columns)
        key = sql.SQL(", ").join(sql.Identifier(c) for c, _, _ in table.key)
        query = sql.SQL("SELECT {} FROM {}").format(columns, table.identifier())
        if self.after is not None:
            typed = sql.SQL(", ").join(sql.SQL("%s::" + t) for _, _, t in table.key)
            query += sql.SQL(" WHERE ROW({}) > ROW({})").format(key, typed)
        cursor = self.conn.cursor(name=f"onyx_snapshot_{self.table}")
        cursor.execute(query + sql.SQL(" ORDER BY {}").format(key), self.after)
        for described in cursor.description or []:
            cursor.adapters.register_loader(described.type_code, TextLoader)
        return cursor

    def _rows(self, rows: list[tuple[Any, ...]]) -> list[SnapshotRow]:
        table = self.tables[self.table]
        names = [c for c, _ in table.columns]
        places = [names.index(c) for c, _, _ in table.key]
        at = lsn_text(self.at)
        made = []
        for values in rows:
            row = {c: snapshot_value(t, v) for (c, t), v in zip(table.columns, values, strict=True)}
            key = [values[p] for p in places]
            segment = {"op": "insert", "table": table.name, "lsn": at, "row": row, "before": None}
            made.append(SnapshotRow(self.table, key, segment))
        if made:
            self.after = made[-1].key
        return made

    def close(self) -> None:
        self.conn.close()


class SnapshotWindow:
    """What each change up to a new snapshot is to the rows an older one handed out (tables
    before ``table``, and its rows up to key ``after``): kept, cut to the half that concerns
    them (an update that moves a row in or out), or dropped (the new snapshot's rows have it)."""

    def __init__(self, conn: psycopg.Connection[Any], tables: list[CapturedTable], table: int,
                 after: list[str] | None) -> None:  # fmt: skip
        self.conn, self.tables, self.table, self.after = conn, tables, table, after
        self.index = {t.name: i for i, t in enumerate(tables)}

    def __call__(self, change: dict[str, Any]) -> dict[str, Any] | None:
        index = self.index.get(change["table"], len(self.tables))
        if index != self.table or change["op"] == "truncate":
            return change if index <= self.table else None
        old = change["before"] is not None and self._handed(change["before"])
        new = change["row"] is not None and self._handed(change["row"])
        op = change["op"]
        if (old and new) or (old and op == "delete") or (new and op == "insert"):
            return change
        if old and op == "update":
            return {**change, "op": "delete", "row": None}
        if new and op == "update":
            return {**change, "op": "insert", "before": None}
        return None

    def _handed(self, values: Mapping[str, Any]) -> bool:
        """Whether the row of these values is among those handed out: its key at most
        ``after``, as the server orders keys."""
        if self.after is None:
            return False
        key = self.tables[self.table].key
        mine = [key_text(t, values.get(c)) for c, t, _ in key]
        typed = sql.SQL(", ").join(sql.SQL("%s::" + t) for _, _, t in key)
        query = sql.SQL("SELECT ROW({0}) <= ROW({0})").format(typed)
        found = self.conn.execute(query, [*mine, *self.after]).fetchone()
        return bool(found and found[0])


def temporary_slot(slot: str, what: str) -> str:
    """A temporary slot's name, the job's slot's with a random tail: one of its own for each
    connection, so that one left by a lost connection is never in the way."""
    return f"{slot[:46]}_{what}_{secrets.token_hex(4)}"
