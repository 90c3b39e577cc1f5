"""A change data capture input's params, checked when the job is submitted."""

from __future__ import annotations

import re

from peer.plugins.postgres.connect import (
    Server,
)
from peer.plugins.postgres.wal2json import LSN_TEXT

_SLOT = re.compile(r"[a-z0-9_]{1,63}")
_TABLE = re.compile(r"[^.]+\.[^.]+")


class CaptureParams(Server, kw_only=True, frozen=True, forbid_unknown_fields=True):
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
    """CaptureParams (or rows) read at a time, and how many may wait for a poll."""
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
        if self.stop_at_lsn not in (None, "current") and not LSN_TEXT.fullmatch(self.stop_at_lsn):
            raise ValueError(f"stop_at_lsn must be 'current' or an LSN like 16/B374D848, got "
                             f"{self.stop_at_lsn!r}")  # fmt: skip
        if not 1 <= self.batch <= 100_000:
            raise ValueError(f"batch must be in 1..100000, got {self.batch!r}")
        if not 0 < self.interval <= 60:
            raise ValueError(f"interval must be in (0, 60] seconds, got {self.interval!r}")
