"""Arrow fns and a Python fn the Arrow job tests name by dotted path."""

from __future__ import annotations

from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc


def adults(batch: pa.RecordBatch, params: dict[str, Any]) -> pl.DataFrame:
    """Through polars: people of at least ``params.age``."""
    return pl.from_arrow(batch).filter(pl.col("age") >= params["age"])


def upper(batch: pa.RecordBatch) -> pa.Table:
    index = batch.schema.get_field_index("name")
    return pa.Table.from_batches([batch.set_column(index, "name", pc.utf8_upper(batch["name"]))])


def tagged(segment: dict[str, Any]) -> dict[str, Any]:
    """A Python fn after an Arrow one: it gets rows."""
    assert isinstance(segment, dict), segment
    return {**segment, "tag": f"{segment['city']}-{segment['age']}"}
