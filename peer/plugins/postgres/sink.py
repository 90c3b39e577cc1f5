"""A PostgreSQL output, exactly once: each committed epoch's rows written in one transaction
together with a marker row, so that an epoch delivered again is skipped.

A slot stages each epoch's rows (peer.plugins.delivered) in ``params.staging`` and seals them
at the epoch's barrier. Once the epoch commits, its rows go to the table in one transaction that
also inserts ``(<staging>/<stem>)`` into the marker table (``params.markers``, made if missing);
a delivery first looks for its marker and, found, does nothing. So a delivery cut short (the
transaction never committed) is done again whole, and one that committed is never done twice,
whatever a crash interrupts. Readers see an epoch's rows all at once, at its commit.

Two modes: ``append`` copies the rows in (COPY, the fastest way in); ``upsert`` copies them into
a temporary table, then inserts them with ``ON CONFLICT (key) DO UPDATE``, the last row of an
epoch for a key winning, so the table holds each key's latest row (it needs a unique index on
the key). A row's fields are the table's columns, by name: a field the table lacks is an error
naming it, a column the row lacks is written NULL (or its default, for a column no row names).
JSON objects and arrays go to json or jsonb columns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any, Literal

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from peer.job.spec import Task
from peer.plugins import Recovery, error, out_of_reach, where
from peer.plugins.delivered import records
from peer.plugins.postgres.connect import Server, Unreachable, connect
from peer.storage import StorageError

log = logging.getLogger(__name__)

RETRY = 0.2
"""Seconds between connections tried while the server is out of reach mid-job."""


class PostgresOutputParams(Server, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """A PostgreSQL output's params."""

    table: str
    """The table written, ``name`` or ``schema.name``."""
    staging: str
    """The directory or object store URL where each epoch's rows wait for its commit."""
    mode: Literal["append", "upsert"] = "append"
    key: list[str] = []
    """Upsert only: the columns of the table's unique key."""
    markers: str = "onyx_delivered_epochs"
    """The table of delivered epochs' markers, made if missing."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.table:
            raise ValueError("table must name a table")
        if self.mode == "upsert" and not self.key:
            raise ValueError("mode upsert needs key: the columns of the table's unique key")
        if self.mode == "append" and self.key:
            raise ValueError("key is for mode upsert")


def qualified(name: str) -> sql.Identifier:
    """``schema.name`` or ``name`` as a quoted identifier."""
    return sql.Identifier(*name.split(".", 1))


class TableDelivery:
    """A slot's connection, the table's columns, and the transaction each epoch goes in."""

    def __init__(self, task: Task, settings: PostgresOutputParams) -> None:
        self.task, self.settings = task, settings
        self.connection: psycopg.Connection[Any] | None = None
        self.columns: list[str] = []
        self.known: frozenset[str] = frozenset()

    def start(self, recovery: Recovery) -> None:
        """Connect, read the table's columns, check the key, make the marker table."""
        self.close()
        s = self.settings
        self.connection = self._connect(recovery)
        self.columns = self._columns()
        self.known = frozenset(self.columns)
        missing = [k for k in s.key if k not in self.known]
        if missing:
            raise error(self.task, f"key {missing} names no column of table {s.table!r} "
                                   f"(its columns: {self.columns})")  # fmt: skip
        self._execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (epoch text PRIMARY KEY, "
                              "rows bigint NOT NULL, at timestamptz NOT NULL DEFAULT now())")
                      .format(qualified(s.markers)))  # fmt: skip

    def _connect(self, recovery: Recovery) -> psycopg.Connection[Any]:
        """A connection; a server out of reach is waited for up to ``timeout`` once the job
        has committed (it may be restarting), then named (peer.plugins.out_of_reach)."""
        deadline = time.monotonic() + self.settings.timeout
        while True:
            try:
                return connect(self.task, self.settings, autocommit=True)
            except Unreachable as e:
                if recovery.committed is None or time.monotonic() > deadline:
                    raise out_of_reach(self.task, recovery, str(e).removeprefix(
                        f"{where(self.task)}: ")) from None  # fmt: skip
                time.sleep(RETRY)

    def as_row(self, segment: Any) -> list[Any]:
        """A segment as the table's row, its values in column order."""
        if not isinstance(segment, dict):
            raise error(self.task, f"a row for table {self.settings.table!r} must be an object, "
                                   f"got {segment!r:.120}")  # fmt: skip
        extra = segment.keys() - self.known
        if extra:
            names = ", ".join(map(repr, sorted(extra)))
            raise error(self.task, f"table {self.settings.table!r} has no column {names}: "
                                   f"{segment!r:.120}")  # fmt: skip
        return [segment.get(column) for column in self.columns]

    def deliver(self, name: str, files: dict[str, bytes], resumed: bool) -> None:
        """The epoch's rows and its marker in one transaction, unless its marker is there."""
        found = [list(row) for row in records(files)]
        mark = f"{self.settings.staging.rstrip('/')}/{name}"
        connection = self._connection()
        try:
            with connection.transaction():
                if self._delivered(mark):
                    return
                self._write([[_adapted(v) for v in row] for row in found])
                insert = sql.SQL("INSERT INTO {} (epoch, rows) VALUES (%s, %s)")
                self._execute(insert.format(qualified(self.settings.markers)), (mark, len(found)))
        except psycopg.OperationalError as e:
            raise StorageError(f"{where(self.task)}: epoch {name} not written to "
                               f"{self.settings.table!r}: {_first_line(e)}") from None  # fmt: skip
        except psycopg.Error as e:
            table = self.settings.table
            raise error(self.task, f"epoch {name} cannot be written to table {table!r}: "
                                   f"{_first_line(e)}") from None  # fmt: skip

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    # -- the table ------------------------------------------------------------------------------

    def _columns(self) -> list[str]:
        table = self.settings.table
        schema, _, name = table.rpartition(".")
        query = ("SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
                 "AND NOT attisdropped ORDER BY attnum")  # fmt: skip
        try:
            cursor = self._connection().execute(
                "SELECT to_regclass(%s) IS NOT NULL", (qualified_text(schema, name),)
            )
            exists = cursor.fetchone()
            if not exists or not exists[0]:
                raise error(self.task, f"table {table!r} does not exist")
            found = self._connection().execute(query, (qualified_text(schema, name),)).fetchall()
        except psycopg.Error as e:
            raise error(self.task, f"cannot read table {table!r}: {_first_line(e)}") from None
        return [row[0] for row in found]

    def _delivered(self, mark: str) -> bool:
        query = sql.SQL("SELECT 1 FROM {} WHERE epoch = %s").format(
            qualified(self.settings.markers)
        )
        return self._connection().execute(query, (mark,)).fetchone() is not None

    def _write(self, found: Sequence[list[Any]]) -> None:
        if not found:
            return
        s = self.settings
        columns = sql.SQL(", ").join(map(sql.Identifier, self.columns))
        if s.mode == "append":
            self._copy(qualified(s.table), columns, found)
            return
        index = [self.columns.index(k) for k in s.key]
        latest = {tuple(row[i] for i in index): row for row in found}
        staged = sql.Identifier("onyx_upsert")
        self._execute(sql.SQL("CREATE TEMPORARY TABLE {} (LIKE {}) ON COMMIT DROP")
                      .format(staged, qualified(s.table)))  # fmt: skip
        self._copy(staged, columns, list(latest.values()))
        keys = sql.SQL(", ").join(map(sql.Identifier, s.key))
        rest = [c for c in self.columns if c not in s.key]
        update = (sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(
            sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c))
            for c in rest)) if rest else sql.SQL("DO NOTHING"))  # fmt: skip
        upsert = sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} ON CONFLICT ({}) {}")
        self._execute(upsert.format(qualified(s.table), columns, columns, staged, keys, update))

    def _copy(
        self, table: sql.Composable, columns: sql.Composable, found: Sequence[list[Any]]
    ) -> None:
        statement = sql.SQL("COPY {} ({}) FROM STDIN").format(table, columns)
        with self._connection().cursor() as cursor, cursor.copy(statement) as copy:
            for row in found:
                copy.write_row(row)

    def _execute(self, statement: sql.Composed, params: Sequence[Any] = ()) -> None:
        self._connection().execute(statement, params)

    def _connection(self) -> psycopg.Connection[Any]:
        if self.connection is None:
            raise error(self.task, "used before recover(): not connected")
        return self.connection


def qualified_text(schema: str, name: str) -> str:
    """A table's name as to_regclass reads it, each part quoted."""
    parts = [schema, name] if schema else [name]
    return ".".join('"' + part.replace('"', '""') + '"' for part in parts)


def _adapted(value: Any) -> Any:
    """JSON objects and arrays as jsonb; everything else as psycopg adapts it."""
    return Jsonb(value) if isinstance(value, dict | list) else value


def _first_line(e: psycopg.Error) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
