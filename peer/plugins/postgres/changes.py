"""PostgreSQL change data capture: the row changes of some tables, in commit order, read through
logical replication (the wal2json output plugin), exactly once; their rows first when asked.
This module starts it and is the input; its parts are the params (``capture_params``), the
reader's thread (``reader``), what it hands out and its checkpoint (``captured``), the tables and
their snapshot (``snapshot``) and wal2json's changes as segments (``wal2json``).

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

import logging
import time
from collections.abc import Mapping
from typing import Any

import psycopg

from peer.job.spec import Task
from peer.plugins import Recovery, checks_params, error, out_of_reach, where
from peer.plugins.params import parsed, settings
from peer.plugins.postgres.capture_params import CaptureParams
from peer.plugins.postgres.captured import ChangePosition, StopReached
from peer.plugins.postgres.connect import (
    Unreachable,
    address,
    connect,
)
from peer.plugins.postgres.reader import ChangeReader, failed
from peer.plugins.postgres.snapshot import CapturedTable, describe
from peer.plugins.postgres.wal2json import lsn, lsn_text
from peer.values.epoch import Epoch

log = logging.getLogger(__name__)

PLUGIN = "wal2json"


# -- starting ---------------------------------------------------------------------------------


def patiently(task: Task, params: CaptureParams, wait: bool) -> psycopg.Connection[Any]:
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

    def __init__(self, task: Task, params: CaptureParams, conn: psycopg.Connection[Any]) -> None:
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

    def __init__(self, task: Task, params: CaptureParams) -> None:
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
    parsed(CaptureParams, params)


@checks_params(_check)
def input(task: Task, slot: int, slots: int) -> ChangesInput:
    """The factory named ``peer.plugins.postgres.changes:input``: one peer reads the slot."""
    if slots != 1:
        raise error(task, f"a replication slot's changes are one ordered sequence, read by one "
                          f"peer: run the task on one (n_peers: 1), not {slots}")  # fmt: skip
    return ChangesInput(task, settings(task, CaptureParams))
