"""The Nexmark queries answered by an independent engine: DuckDB's SQL over the same events,
made by the same generator, as tables ``person``, ``auction`` and ``bid`` with the reference's
columns (times as milliseconds since the epoch)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import duckdb
import pyarrow as pa

from peer.nexmark.config import NexmarkConfig
from peer.nexmark.events import event

KINDS = ("person", "auction", "bid")


def tables(config: NexmarkConfig, count: int) -> duckdb.DuckDBPyConnection:
    """A database holding the first ``count`` events, a table per kind."""
    rows: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    for number in range(count):
        made = event(config, number)
        rows[made.pop("kind")].append(made)
    database = duckdb.connect()
    for kind, held in rows.items():
        if held:
            database.register(f"{kind}_rows", pa.Table.from_pylist(held))
            database.execute(f"CREATE TABLE {kind} AS SELECT * FROM {kind}_rows")
    return database


def answer(sql: str, config: NexmarkConfig, count: int) -> list[tuple[Any, ...]]:
    """The rows ``sql`` gives over the first ``count`` events."""
    return [tuple(row) for row in tables(config, count).execute(sql).fetchall()]


def rows(written: Iterable[dict[str, Any]], columns: Iterable[str]) -> list[tuple[Any, ...]]:
    """Rows written as JSON objects, as tuples of ``columns``."""
    order = tuple(columns)
    return [tuple(row[column] for column in order) for row in written]
