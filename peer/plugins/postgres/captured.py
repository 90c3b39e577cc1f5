"""What change data capture hands out (row changes, transaction ends, snapshot rows, the
snapshot's and the stop's marks), where that leaves the input (its checkpoint), and which of
the changes a slot gives are new."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from peer.plugins.postgres.wal2json import lsn, lsn_text, segment


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
