"""PostgreSQL change data capture: the row changes of some tables, in commit order, read through
logical replication (the wal2json output plugin), exactly once; their rows first when asked.

Reading. The job's replication slot (``params.slot``, made at its first start) is where the
server keeps the changes for it. The input reads them through SQL, on a thread of its own, from
a temporary copy of that slot (``pg_copy_logical_replication_slot``), which it consumes as it
reads: the job's slot itself moves (``pg_replication_slot_advance``) only once an epoch commits,
up to that epoch's checkpoint, so it always holds every change a recovery may need again. After
a failure the copy is made anew from the job's slot, and the changes it gives again are skipped
up to the restored checkpoint. A whole transaction comes in one call, through a server-side
cursor, so a huge one never sits in memory whole; its changes may be handed out over several
polls and epochs. So a running input holds one replication slot more than the job's (two while
a snapshot starts: ``max_replication_slots``), and the job's slot keeps the server's WAL from the
last committed epoch on: a job without checkpoints (``barrier_period: null``) never moves it.

The checkpoint: ``{"lsn", "partial", "snapshot", "stop"}``. ``lsn`` is the end of the last
transaction handed out whole (every transaction that ends at or before it has been), ``partial``
how many changes of the next one have been: so a recovery hands out exactly what follows. The
server numbers transactions by where their commit records end, the same on every read.

The snapshot (``params.snapshot``, on a start without a checkpoint): each table's rows as
inserts, read in a REPEATABLE READ transaction that imported the snapshot a temporary replication
slot exported at its consistent point; the changes follow from that point, those before it being
in the rows. A table is read in the order of its key (its replica identity index, else its
primary key), so ``snapshot`` in the checkpoint, ``[table index, key of the last row handed
out]``, says how far it got. A snapshot is a moment that ends with its transaction, so one cut
short (a failure, the connection lost) goes on from a new one: first the changes made since
the old moment to the rows already handed out, then the rest of the rows as the new moment has
them. When nothing changed in between (the usual case), that is exactly what one snapshot would
have given; otherwise every row is still handed out once and each change to it once, its state
right at every point, though some changes to rows not yet read are folded into those rows.

Segments, one per row change, in commit order: ``{"op": "insert" | "update" | "delete" |
"truncate", "table": "schema.table", "lsn": the change's LSN ("16/B374D848"; a snapshot row's is
the snapshot's), "row": the new row (None for delete and truncate), "before": the replica
identity's columns of the old row (None for insert and truncate)}``. Values are as wal2json
writes them: numbers (smallint, integer, bigint, oid, real, double precision, numeric) as JSON
numbers (NaN and infinities as None; a numeric beyond a float's precision loses it), booleans as
booleans, bytea as hex without ``\\x``, NULL as None, everything else as the type's text output.
An update leaves out an unchanged TOASTed (large) value.

``stop_at_lsn`` bounds the input for tests and backfills: ``current`` is the server's WAL position
at the job's first start (kept in the checkpoint), and the input completes once every
transaction that ends at or before it is handed out.

The slot's changes are one ordered sequence, so the input runs on one peer. A transient failure
(the server restarting, the connection lost) while it reads is waited out, logged; one that will
not pass (no permission, a table or the slot dropped) kills the job naming the task and the
server. A server out of reach at a start kills a job that never committed (it most likely names
a wrong server), and rolls back one that has, after waiting ``timeout`` for it
(peer.plugins.out_of_reach).
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.string import TextLoader

from peer.job.spec import Task
from peer.plugins import PluginError, Recovery, checks_params, error, out_of_reach, where
from peer.plugins.params import parsed, settings
from peer.plugins.postgres.connect import (
    Server,
    Unreachable,
    address,
    connect,
    reason,
    transient,
)
from peer.values.epoch import Epoch

log = logging.getLogger(__name__)

PLUGIN = "wal2json"
_SLOT = re.compile(r"[a-z0-9_]{1,63}")
_TABLE = re.compile(r"[^.]+\.[^.]+")
_LSN = re.compile(r"[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}")
NUMBERS = frozenset({20, 21, 23, 26, 700, 701, 1700})
"""The types wal2json writes as JSON numbers: int8, int2, int4, oid, float4, float8, numeric."""
BOOL, BYTEA = 16, 17
_OPS = {"I": "insert", "U": "update", "D": "delete", "T": "truncate"}
_HINTS = {
    "42501": "the role needs the REPLICATION attribute (ALTER ROLE ... REPLICATION) and SELECT "
    "on the tables",
    "55000": "logical decoding needs wal_level = logical (set it and restart the server)",
}
"""What to do about a server error, by SQLSTATE."""


class Changes(Server, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """A change data capture input's params."""

    slot: str
    """The replication slot, stable for the life of the job; made at the first start."""
    tables: list[str]
    """The tables captured, ``schema.table`` as the catalog spells them."""
    snapshot: bool = False
    """On a start without a checkpoint, hand out each table's rows (as inserts) first."""
    stop_at_lsn: str | None = None
    """``current`` or an LSN: complete once every transaction that ends by it is handed out."""
    batch: int = 1000
    """Changes (or rows) read at a time, and how many may wait for a poll."""
    interval: float = 0.2
    """Seconds between reads when the last found nothing new."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not _SLOT.fullmatch(self.slot):
            raise ValueError(f"slot must be a replication slot's name, 1 to 63 of a-z, 0-9 and "
                             f"'_', got {self.slot!r}")  # fmt: skip
        if not self.tables:
            raise ValueError("tables must name at least one table, schema.table")
        for name in self.tables:
            if not _TABLE.fullmatch(name):
                raise ValueError(f"tables: {name!r} must be schema.table")
        if len(set(self.tables)) != len(self.tables):
            raise ValueError("tables must not name a table twice")
        if self.stop_at_lsn not in (None, "current") and not _LSN.fullmatch(self.stop_at_lsn):
            raise ValueError(f"stop_at_lsn must be 'current' or an LSN like 16/B374D848, got "
                             f"{self.stop_at_lsn!r}")  # fmt: skip
        if not 1 <= self.batch <= 100_000:
            raise ValueError(f"batch must be in 1..100000, got {self.batch!r}")
        if not 0 < self.interval <= 60:
            raise ValueError(f"interval must be in (0, 60] seconds, got {self.interval!r}")


# -- values -------------------------------------------------------------------------------------


def lsn(text: str) -> int:
    """An LSN's text form, ``16/B374D848``, as the number it stands for."""
    high, low = text.split("/")
    return int(high, 16) << 32 | int(low, 16)


def lsn_text(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def add_tables(tables: list[str]) -> str:
    """wal2json's ``add-tables`` option: the tables, a backslash before each character it would
    read as a separator, an escape or a wildcard."""

    def escaped(name: str) -> str:
        return "".join("\\" + c if c in ",.\\*" or c.isspace() else c for c in name)

    return ",".join(".".join(escaped(part) for part in t.split(".", 1)) for t in tables)


def segment(change: Mapping[str, Any]) -> dict[str, Any] | None:
    """The segment a wal2json (format 2) change makes; None for what is not a row change."""
    op = _OPS.get(change.get("action", ""))
    if op is None:
        return None
    row = _values(change["columns"]) if op in ("insert", "update") else None
    before = _values(change.get("identity", [])) if op in ("update", "delete") else None
    return {"op": op, "table": f"{change['schema']}.{change['table']}", "lsn": change.get("lsn"),
            "row": row, "before": before}  # fmt: skip


def _values(columns: list[Mapping[str, Any]]) -> dict[str, Any]:
    return {c["name"]: c.get("value") for c in columns}


def snapshot_value(type_oid: int, text: str | None) -> Any:
    """A column's value from its type's text output, as wal2json would write it in a change."""
    if text is None:
        return None
    if type_oid in NUMBERS:
        if text.lstrip("+-")[:3].lower() in ("nan", "inf"):
            return None
        return json.loads(text)
    if type_oid == BOOL:
        return text == "t"
    if type_oid == BYTEA:
        return text[2:]
    return text


def key_text(type_oid: int, value: Any) -> str | None:
    """A key value from a change, as text its type's input reads (the inverse of wal2json's)."""
    if value is None or isinstance(value, str):
        return ("\\x" + value) if type_oid == BYTEA and value is not None else value
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


# -- what is handed out, and where that leaves the input ----------------------------------------


@dataclass(frozen=True)
class RowChange:
    """A row change, of a transaction whose end comes as a ``TransactionEnd``."""

    segment: dict[str, Any]


@dataclass(frozen=True)
class TransactionEnd:
    """Every transaction that ends at or before ``lsn`` is handed out."""

    lsn: int


@dataclass(frozen=True)
class SnapshotRow:
    """A snapshot row: table ``table``'s, its key ``key``."""

    table: int
    key: list[str]
    segment: dict[str, Any]


class SnapshotDone:
    """Every table's rows are handed out."""


class StopReached:
    """Every transaction up to the stop is handed out."""


Item = RowChange | TransactionEnd | SnapshotRow | SnapshotDone | StopReached


@dataclass
class ChangePosition:
    """Where the input is: what its checkpoint holds, moved on by each item handed out."""

    lsn: int = 0
    partial: int = 0
    snapshot: tuple[int, list[str] | None] | None = None
    """The snapshot under way: the table being read, and the key of its last row handed out."""
    stop: int | None = None

    def passed(self, item: Item) -> dict[str, Any] | None:
        """Move on past ``item``; the segment it hands out, if any."""
        if isinstance(item, RowChange):
            self.partial += 1
            return item.segment
        if isinstance(item, TransactionEnd):
            self.lsn, self.partial = item.lsn, 0
        elif isinstance(item, SnapshotRow):
            self.snapshot = (item.table, item.key)
            return item.segment
        elif isinstance(item, SnapshotDone):
            self.snapshot = None
        return None

    def to_json(self) -> dict[str, Any]:
        snapshot = None if self.snapshot is None else [self.snapshot[0], self.snapshot[1]]
        stop = None if self.stop is None else lsn_text(self.stop)
        return {"lsn": lsn_text(self.lsn), "partial": self.partial, "snapshot": snapshot,
                "stop": stop}  # fmt: skip

    @classmethod
    def of(cls, data: Any) -> ChangePosition:
        """A checkpoint read back; ValueError if it is not one this input wrote."""
        try:
            snapshot = data["snapshot"]
            if snapshot is not None:
                table, after = snapshot
                if not (isinstance(table, int) and table >= 0):
                    raise ValueError
                if after is not None and not all(isinstance(k, str) for k in after):
                    raise ValueError
                snapshot = (table, None if after is None else list(after))
            partial = data["partial"]
            if not (isinstance(partial, int) and partial >= 0):
                raise ValueError
            stop = None if data["stop"] is None else lsn(data["stop"])
            return cls(lsn(data["lsn"]), partial, snapshot, stop)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ValueError(f"not a checkpoint of this input: {data!r:.200}") from None


Projection = Callable[[dict[str, Any]], dict[str, Any] | None]


class SlotReading:
    """Which of the changes a slot gives are new: those after a position, ``(lsn, partial)``,
    which moves as they are taken. A slot gives whole transactions (begin, changes, commit), the
    begin saying where the commit ends; a transaction that ends at or before ``lsn`` was handed
    out, and of the first after it ``partial`` changes were. Past ``stop``, nothing is new. In a
    window (the changes up to a new snapshot, while the rows of an older one are handed out), a
    projection says what each change is to the rows already handed out."""

    def __init__(self, lsn: int, partial: int, stop: int | None) -> None:
        self.lsn, self.partial, self.stop = lsn, partial, stop
        self.end: int | None = None
        """The end of the transaction being taken; None between them, or in one skipped."""
        self.drop = 0
        self.project: Projection | None = None

    def feed(self, change: Mapping[str, Any], window: int | None = None,
             project: Projection | None = None) -> list[Item]:  # fmt: skip
        """What one row of the slot's output hands out."""
        action = change.get("action")
        if action == "B":
            self._begin(lsn(change["nextlsn"]), window, project)
            return []
        if action == "C":
            return self._commit()
        found = segment(change) if self.end is not None else None
        if found is not None and self.project is not None:
            found = self.project(found)
        if found is None:
            return []
        if self.drop:
            self.drop -= 1
            return []
        self.partial += 1
        return [RowChange(found)]

    def _begin(self, end: int, window: int | None, project: Projection | None) -> None:
        self.end = self.project = None
        windowed = window is not None and end <= window
        if end <= self.lsn or (not windowed and self.stop is not None and end > self.stop):
            return
        self.end, self.drop = end, self.partial
        self.project = project if windowed else None

    def _commit(self) -> list[Item]:
        end, self.end = self.end, None
        if end is None:
            return []
        self.lsn, self.partial = end, 0
        return [TransactionEnd(end)]

    def interrupted(self) -> None:
        """The slot's output was cut short: the transaction under way comes again whole."""
        self.end = self.project = None

    def skip_to(self, at: int) -> list[Item]:
        """Everything up to ``at`` is in a snapshot to be handed out instead."""
        if at <= self.lsn:
            return []
        self.lsn, self.partial = at, 0
        return [TransactionEnd(at)]


# -- the server: what the tables are, the slot, a snapshot ----------------------------------------


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

    def __init__(self, task: Task, params: Changes, tables: list[CapturedTable],
                 start: tuple[int, list[str] | None]) -> None:  # fmt: skip
        self.tables = tables
        self.table, self.after = start
        replication = connect(task, params, autocommit=True, replication="database")
        try:
            create = sql.SQL(_EXPORT).format(sql.Identifier(_temporary(params.slot, "snap")))
            _, point, exported, _ = replication.execute(create).fetchone() or (None, "0/0", "", "")
            self.at = lsn(point)
            self.conn = self._imported(task, params, exported)
        finally:
            replication.close()
        self.cursor: psycopg.ServerCursor[Any] | None = None

    @staticmethod
    def _imported(task: Task, params: Changes, exported: str) -> psycopg.Connection[Any]:
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


def _temporary(slot: str, what: str) -> str:
    """A temporary slot's name, the job's slot's with a random tail: one of its own for each
    connection, so that one left by a lost connection is never in the way."""
    return f"{slot[:46]}_{what}_{secrets.token_hex(4)}"


# -- the reader's thread ----------------------------------------------------------------------


class Handoff:
    """The items the reader's thread has read, in order, for ``poll`` to take; the thread reads
    on only while fewer than ``room`` wait."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.items: deque[Item] = deque()
        self.changed = threading.Condition()
        self.closed = False

    def put(self, items: list[Item]) -> None:
        if items:
            with self.changed:
                self.items.extend(items)

    def take(self, count: int) -> list[Item]:
        with self.changed:
            taken = [self.items.popleft() for _ in range(min(count, len(self.items)))]
            if taken:
                self.changed.notify_all()
        return taken

    def wait_room(self, timeout: float) -> bool:
        """Whether there is room (or the handoff closed) within ``timeout`` seconds."""
        with self.changed:
            return self.changed.wait_for(
                lambda: self.closed or len(self.items) < self.room, timeout
            )

    def close(self) -> None:
        with self.changed:
            self.closed = True
            self.changed.notify_all()


_GET_CHANGES = """
SELECT data FROM pg_logical_slot_get_changes(%s, %s::pg_lsn, %s, 'format-version', '2',
    'include-lsn', 'true', 'include-types', 'false', 'add-tables', %s)"""


class ChangeReader:
    """The thread that reads: the snapshot first when there is one, then the changes, from a
    temporary copy of the job's slot; it moves the job's slot on to each committed position.
    Its own position (``reading``, ``snapshot``) is what ``poll``'s will be once everything it
    handed over is taken, so a connection lost and made again goes on from there."""

    def __init__(
        self, task: Task, params: Changes, tables: list[CapturedTable], start: ChangePosition
    ) -> None:
        self.task, self.params, self.tables = task, params, tables
        self.handoff = Handoff(params.batch)
        self.failure: PluginError | None = None
        self.reading = SlotReading(start.lsn, start.partial, start.stop)
        self.snapshot = start.snapshot
        self.stop = start.stop
        self.target = self.advanced = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.conn: psycopg.Connection[Any] | None = None
        self.copy = ""
        self.stream: psycopg.ServerCursor[Any] | None = None
        self.streamed = 0
        self.snap: TableSnapshot | None = None
        self.window: int | None = None
        self.ended = False
        self.outage = 0
        self.thread = threading.Thread(target=self._run, name=f"onyx-cdc-{task.name}",
                                       daemon=True)  # fmt: skip

    def open(self) -> None:
        """Connect and copy the slot now, on the starting thread: a role that may not read
        the slot is named at the start, not at the first poll."""
        try:
            self._connect()
        except BaseException:
            self._disconnect()
            raise

    def start(self) -> None:
        self.thread.start()

    def advance(self, to: int) -> None:
        """The job's slot may move on to ``to``: an epoch that ends there committed."""
        with self.lock:
            self.target = max(self.target, to)

    def stop_reading(self, timeout: float) -> None:
        """Stop, moving the slot on to the last committed position first if it can."""
        self.stopping.set()
        self.handoff.close()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout)

    # -- the loop ---------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self.stopping.is_set():
                try:
                    self._step()
                    self.outage = 0
                except (psycopg.Error, Unreachable) as e:
                    if not transient(e):
                        raise
                    self._lost(e)
            self._last_advance()
        except PluginError as e:
            self.failure = e
        except psycopg.Error as e:
            self.failure = failed(self.task, self.params, e, "read the changes")
        except Exception as e:
            log.exception("%s: the change reader failed", self.task.name)
            self.failure = error(self.task, f"the change reader failed: {type(e).__name__}: {e}")
        finally:
            self._disconnect()

    def _step(self) -> None:
        if self.conn is None:
            self._connect()
        self._advance()
        if not self.handoff.wait_room(self.params.interval) or self.stopping.is_set():
            return
        if self.snapshot is not None:
            self._snapshot_step()
        elif not self.ended:
            if self._changes(self.stop):
                self.handoff.put([StopReached()])
                self.ended = True
        else:
            self.stopping.wait(self.params.interval)

    def _lost(self, e: BaseException) -> None:
        """The server out of reach or the connection lost: start again once it is back. Said
        when it happens, then once a minute or so while it lasts, so that a job waiting on a
        server that is gone for good says why it stands still."""
        if self.outage % 30 == 0:
            log.warning("%s: PostgreSQL at %s: %s; trying again", self.task.name,
                        address(self.params), e)  # fmt: skip
        self.outage += 1
        self._disconnect()
        self.stopping.wait(min(0.1 * 2**self.outage, 2.0))

    def _connect(self) -> None:
        """A connection of the reader's own, and on it the temporary copy of the job's slot
        that it consumes: the copy starts where the job's slot is."""
        self.conn = connect(self.task, self.params)
        self.copy = _temporary(self.params.slot, "read")
        self.conn.execute("SELECT pg_copy_logical_replication_slot(%s, %s, true)",
                          (self.params.slot, self.copy))  # fmt: skip
        self.conn.commit()

    def _disconnect(self) -> None:
        """Drop the connections: the temporary slot goes with its connection, and a snapshot
        under way with its transaction."""
        self.reading.interrupted()
        self.stream, self.window = None, None
        for held in (self.snap, self.conn):
            if held is not None:
                try:
                    held.close()
                except psycopg.Error as e:
                    log.debug("%s: closing: %s", self.task.name, e)
        self.snap = self.conn = None

    # -- the snapshot -----------------------------------------------------------------------

    def _snapshot_step(self) -> None:
        """A snapshot's rows, after (when it goes on from one cut short) the window of changes
        up to its moment."""
        assert self.snapshot is not None
        if self.snap is None:
            self.snap = TableSnapshot(self.task, self.params, self.tables, self.snapshot)
            table, after = self.snapshot
            if table == 0 and after is None:
                self.handoff.put(self.reading.skip_to(self.snap.at))
            else:
                self.window = self.snap.at
        if self.window is not None:
            if self._changes(self.window):
                self.handoff.put(self.reading.skip_to(self.window))
                self.window = None
            return
        rows, last = self.snap.read(self.params.batch)
        self.handoff.put(list(rows))
        if rows:
            self.snapshot = (rows[-1].table, rows[-1].key)
        if last:
            self.handoff.put([SnapshotDone()])
            self.snapshot = None
            self.snap.close()
            self.snap = None

    # -- the changes ------------------------------------------------------------------------

    def _changes(self, upto: int | None) -> bool:
        """Read on from the copy of the slot, a batch at a time; whether everything up to
        ``upto`` has been read. Waits ``interval`` when there was nothing new."""
        conn = self._connection()
        if self.stream is None:
            self.stream = conn.cursor(name="onyx_changes")
            upto_text = None if upto is None else lsn_text(upto)
            self.stream.execute(_GET_CHANGES, (self.copy, upto_text, self.params.batch,
                                               add_tables(self.params.tables)))  # fmt: skip
            self.streamed = 0
        rows = self.stream.fetchmany(self.params.batch)
        self.streamed += len(rows)
        project = None
        if self.window is not None and self.snapshot is not None:
            project = SnapshotWindow(conn, self.tables, *self.snapshot)
        for (data,) in rows:
            self.handoff.put(self.reading.feed(json.loads(data), self.window, project))
        if len(rows) == self.params.batch:
            return False
        self.stream.close()
        self.stream = None
        conn.commit()
        if upto is not None and self._read_up_to() >= upto:
            return True
        if self.streamed < self.params.batch:
            self.stopping.wait(self.params.interval)
        return False

    def _read_up_to(self) -> int:
        """How far the copy of the slot has been read."""
        conn = self._connection()
        found = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                             "WHERE slot_name = %s", (self.copy,)).fetchone()  # fmt: skip
        conn.commit()
        return lsn(found[0]) if found and found[0] else 0

    # -- moving the job's slot on -----------------------------------------------------------

    def _advance(self) -> None:
        with self.lock:
            target = self.target
        if target <= self.advanced or self.stream is not None:
            return
        conn = self._connection()
        try:
            conn.execute("SELECT pg_replication_slot_advance(slot_name, %s::pg_lsn) "
                         "FROM pg_replication_slots WHERE slot_name = %s "
                         "AND confirmed_flush_lsn < %s::pg_lsn",
                         (lsn_text(target), self.params.slot, lsn_text(target)))  # fmt: skip
            conn.commit()
        except psycopg.errors.ObjectInUse as e:
            conn.rollback()
            log.warning("%s: cannot move slot %r on yet: %s", self.task.name, self.params.slot,
                        reason(e))  # fmt: skip
            return
        self.advanced = target

    def _last_advance(self) -> None:
        """On the way out: the last committed position, if the connection is still good."""
        if self.conn is None:
            return
        try:
            if self.stream is not None:
                self.stream = None
                self.conn.rollback()
            self._advance()
        except psycopg.Error as e:
            log.warning("%s: slot %r not moved on at the close: %s", self.task.name,
                        self.params.slot, reason(e))  # fmt: skip

    def _connection(self) -> psycopg.Connection[Any]:
        if self.conn is None:
            raise psycopg.OperationalError("not connected")
        return self.conn


# -- starting ---------------------------------------------------------------------------------


def failed(task: Task, params: Changes, e: psycopg.Error, doing: str) -> PluginError:
    """A server error as one line: the server, what failed, what it said, what to do."""
    hint = _HINTS.get(e.sqlstate or "")
    said = f"{reason(e)}: {hint}" if hint else reason(e)
    return error(task, f"PostgreSQL at {address(params)}: cannot {doing}: {said}")


def patiently(task: Task, params: Changes, wait: bool) -> psycopg.Connection[Any]:
    """A connection; with ``wait`` (the job has committed, so its server was right and may be
    restarting), waiting up to ``timeout`` for a server out of reach to come back."""
    deadline = time.monotonic() + params.timeout
    while True:
        try:
            return connect(task, params, autocommit=True)
        except Unreachable:
            if not wait or time.monotonic() >= deadline:
                raise
            time.sleep(min(0.5, max(deadline - time.monotonic(), 0.01)))


class SlotStart:
    """What ``recover`` checks and makes before the reader starts: the server can decode, the
    tables exist and can be captured, the slot exists (made on a first start) for this job
    alone, and has lost nothing the checkpoint needs. Whether the role may use slots is the
    server's to say (a managed server may grant it otherwise than by the REPLICATION
    attribute): making the slot, or the reader's copy of it, fails if it may not."""

    def __init__(self, task: Task, params: Changes, conn: psycopg.Connection[Any]) -> None:
        self.task, self.params, self.conn = task, params, conn

    def position(
        self, restored: ChangePosition | None
    ) -> tuple[ChangePosition, list[CapturedTable]]:
        self._can_decode()
        snapshot = restored.snapshot if restored is not None else None
        reads = snapshot is not None or (restored is None and self.params.snapshot)
        tables = [describe(self.task, self.conn, t, reads) for t in self.params.tables]
        if snapshot is not None and snapshot[0] >= len(tables):
            raise error(self.task, f"the checkpoint's snapshot is at table {snapshot[0]}, of "
                                   f"{len(tables)} in params.tables")  # fmt: skip
        confirmed = self._slot(restored)
        if restored is not None:
            if confirmed > restored.lsn:
                raise error(self.task, f"slot {self.params.slot!r} was moved on past the "
                                       f"checkpoint ({lsn_text(confirmed)} > "
                                       f"{lsn_text(restored.lsn)}) by another reader: the "
                                       "changes in between are lost to this job")  # fmt: skip
            return restored, tables
        start = (0, None) if self.params.snapshot else None
        return ChangePosition(confirmed, 0, start, self._stop()), tables

    def _can_decode(self) -> None:
        level = self._one("SHOW wal_level")
        if level != "logical":
            raise error(self.task, f"PostgreSQL at {address(self.params)} has wal_level "
                                   f"{level!r}: logical decoding needs wal_level = logical (set "
                                   "it and restart the server)")  # fmt: skip

    def _slot(self, restored: ChangePosition | None) -> int:
        """Where the job's slot stands, made now if it is missing on a first start."""
        name = self.params.slot
        found = self._find()
        if found is None:
            if restored is not None:
                raise error(self.task, f"slot {name!r} does not exist: the changes after the "
                                       "job's checkpoint went with it")  # fmt: skip
            made = self.conn.execute("SELECT lsn::text FROM pg_create_logical_replication_slot"
                                     "(%s, %s)", (name, PLUGIN)).fetchone()  # fmt: skip
            return lsn(made[0]) if made else 0
        plugin, database, confirmed, _ = found
        if plugin != PLUGIN or database != self._one("SELECT current_database()"):
            raise error(self.task, f"slot {name!r} is {plugin!r}'s in database {database!r}: "
                                   f"the input reads a {PLUGIN} slot of the dsn's")  # fmt: skip
        self._unused()
        return lsn(confirmed) if confirmed else 0

    def _find(self) -> tuple[str, str, str | None, int | None] | None:
        found = self.conn.execute(
            "SELECT plugin::text, database::text, confirmed_flush_lsn::text, active_pid "
            "FROM pg_replication_slots WHERE slot_name = %s AND slot_type = 'logical'",
            (self.params.slot,),
        ).fetchone()
        return None if found is None else (found[0], found[1], found[2], found[3])

    def _unused(self) -> None:
        """A slot read by another connection is another reader's: wait ``timeout`` for it to
        let go (a reader of this job's that is closing), then refuse."""
        deadline = time.monotonic() + self.params.timeout
        while True:
            found = self._find()
            pid = found[3] if found else None
            if pid is None:
                return
            if time.monotonic() >= deadline:
                raise error(self.task, f"slot {self.params.slot!r} is in use by another "
                                       f"connection (PID {pid}): one reader at a time")  # fmt: skip
            time.sleep(0.1)

    def _stop(self) -> int | None:
        stop = self.params.stop_at_lsn
        if stop == "current":
            return lsn(self._one("SELECT pg_current_wal_lsn()::text"))
        return None if stop is None else lsn(stop)

    def _one(self, query: str) -> Any:
        found = self.conn.execute(query).fetchone()
        return None if found is None else found[0]


# -- the input --------------------------------------------------------------------------------


class ChangesInput:
    """The row changes of ``params.tables``, exactly once: the position in the checkpoint, and
    the slot moved on only to a committed one."""

    def __init__(self, task: Task, params: Changes) -> None:
        self.task, self.params = task, params
        self.reader: ChangeReader | None = None
        self.position = ChangePosition()
        self.positions: dict[Epoch, int] = {}
        """The ``lsn`` at each barrier not yet committed."""
        self.ended = False

    def recover(self, recovery: Recovery) -> None:
        self.close()
        restored = None
        if recovery.checkpoint is not None:
            try:
                restored = ChangePosition.of(recovery.checkpoint)
            except ValueError as e:
                raise error(self.task, str(e)) from None
        try:
            position, tables = self._start(restored, recovery.committed is not None)
            start = ChangePosition(position.lsn, position.partial, position.snapshot,
                                   position.stop)  # fmt: skip
            reader = ChangeReader(self.task, self.params, tables, start)
            reader.open()
        except Unreachable as e:
            said = str(e).removeprefix(f"{where(self.task)}: ")
            raise out_of_reach(self.task, recovery, said) from None
        except psycopg.Error as e:
            raise failed(self.task, self.params, e, "start reading") from None
        self.position, self.positions, self.ended = position, {}, False
        self.reader = reader
        reader.start()

    def _start(self, restored: ChangePosition | None,
               wait: bool) -> tuple[ChangePosition, list[CapturedTable]]:  # fmt: skip
        conn = patiently(self.task, self.params, wait)
        try:
            return SlotStart(self.task, self.params, conn).position(restored)
        finally:
            conn.close()

    def poll(self, limit: int) -> list[Any]:
        reader = self._reader()
        if reader.failure is not None:
            raise reader.failure
        out: list[Any] = []
        while len(out) < limit:
            items = reader.handoff.take(limit - len(out))
            if not items:
                break
            for item in items:
                self.ended = self.ended or isinstance(item, StopReached)
                handed = self.position.passed(item)
                if handed is not None:
                    out.append(handed)
        return out

    def checkpoint(self, epoch: Epoch) -> dict[str, Any]:
        self.positions[epoch] = self.position.lsn
        return self.position.to_json()

    def completed(self) -> bool:
        return self.ended and not self._reader().handoff.items

    def synced(self) -> bool:
        """The slot is told only of committed epochs (``committed``): nothing to wait for."""
        return True

    def committed(self, epoch: Epoch) -> None:
        """The slot may let go of every change up to the committed epoch's position."""
        done = sorted(e for e in self.positions if e <= epoch)
        if not done or self.reader is None:
            return
        at = self.positions[done[-1]]
        for e in done:
            del self.positions[e]
        self.reader.advance(at)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.stop_reading(self.params.timeout)
            self.reader = None

    def _reader(self) -> ChangeReader:
        if self.reader is None:
            raise error(self.task, "used before recover(): not reading")
        return self.reader


def _check(params: Mapping[str, Any]) -> None:
    parsed(Changes, params)


@checks_params(_check)
def input(task: Task, slot: int, slots: int) -> ChangesInput:
    """The factory named ``peer.plugins.postgres.changes:input``: one peer reads the slot."""
    if slots != 1:
        raise error(task, f"a replication slot's changes are one ordered sequence, read by one "
                          f"peer: run the task on one (n_peers: 1), not {slots}")  # fmt: skip
    return ChangesInput(task, settings(task, Changes))
