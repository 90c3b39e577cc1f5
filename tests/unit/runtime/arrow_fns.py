"""Arrow fns the Arrow task tests name by dotted path: whole batches in, Arrow out."""

from __future__ import annotations

from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc


def doubled(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.set_column(batch.schema.get_field_index("n"), "n", pc.multiply(batch["n"], 2))


def scaled(batch: pa.RecordBatch, params: dict[str, Any]) -> pa.Table:
    """A Table, told the task's params."""
    return pa.table({"n": pc.multiply(batch["n"], params["by"])})


def adults(batch: pa.RecordBatch) -> pl.DataFrame:
    """Through polars, zero-copy both ways."""
    return pl.from_arrow(batch).filter(pl.col("age") >= 18)


def schema_of(batch: pa.RecordBatch) -> pa.RecordBatch:
    """One row naming the batch's schema, to see what the fn was given."""
    return pa.RecordBatch.from_pylist([{"schema": str(batch.schema), "rows": batch.num_rows}])


def not_arrow(batch: pa.RecordBatch) -> Any:
    return batch.num_rows
