"""The change data capture's reader: a thread of the input's own that reads the slot's changes
(and first the snapshot) through SQL and hands them to ``poll`` through a bounded queue, waiting
out a server that goes away."""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from typing import Any

import psycopg

from peer.job.spec import Task
from peer.plugins import PluginError, error
from peer.plugins.postgres.capture_params import CaptureParams
from peer.plugins.postgres.captured import (
    ChangePosition,
    Item,
    SlotReading,
    SnapshotDone,
    StopReached,
)
from peer.plugins.postgres.connect import (
    Unreachable,
    address,
    connect,
    reason,
    transient,
)
from peer.plugins.postgres.snapshot import (
    CapturedTable,
    SnapshotWindow,
    TableSnapshot,
    temporary_slot,
)
from peer.plugins.postgres.wal2json import add_tables, lsn, lsn_text

log = logging.getLogger(__name__)

_HINTS = {
    "42501": "the role needs the REPLICATION attribute (ALTER ROLE ... REPLICATION) and SELECT "
    "on the tables",
    "55000": "logical decoding needs wal_level = logical (set it and restart the server)",
}
"""What to do about a server error, by SQLSTATE."""


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
        self, task: Task, params: CaptureParams, tables: list[CapturedTable], start: ChangePosition
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
        self.copy = temporary_slot(self.params.slot, "read")
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


def failed(task: Task, params: CaptureParams, e: psycopg.Error, doing: str) -> PluginError:
    """A server error as one line: the server, what failed, what it said, what to do."""
    hint = _HINTS.get(e.sqlstate or "")
    said = f"{reason(e)}: {hint}" if hint else reason(e)
    return error(task, f"PostgreSQL at {address(params)}: cannot {doing}: {said}")
