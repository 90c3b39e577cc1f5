"""An Arrow task's apply step (``engine: arrow``): its fn takes a whole batch as Arrow.

The fn is ``fn(batch)``, or ``fn(batch, params)`` to be told the task's params, like a Spark
task's. It takes a ``pyarrow.RecordBatch`` and returns a RecordBatch, a Table, or a frame that has
``to_arrow()`` or exports the Arrow C stream interface (``__arrow_c_stream__``), such as a polars
DataFrame (``pl.from_arrow(batch)`` in, the frame out: no copy either way). ``to_arrow()`` comes
first, as it gives the common Arrow types (polars' stream gives string views, which Spark and
older readers do not take). Rows that
arrive are made into a RecordBatch once, in the task's declared schema or the one its first
batch fixed (peer.spark.schema.BatchSchema); Arrow that arrives goes in as it is. What the fn
returns goes on as one record batch, so routing, windows and the next Arrow or Spark task take
it without making rows.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from peer.job.imports import resolve
from peer.job.spec import Task
from peer.runtime.columnar import Batch, from_table
from peer.spark.function import with_params
from peer.spark.schema import BatchSchema


class ArrowApply:
    """One start of an Arrow task on a peer; holds the schema its first batch fixed."""

    def __init__(self, task: Task) -> None:
        self._task = task
        self._fn = with_params(resolve(task.fn), task)
        self._schema = BatchSchema(task.schema)

    def apply(self, batch: Batch) -> pa.RecordBatch:
        """The fn's output for ``batch``, as one record batch."""
        return self._record_batch(self._fn(self._schema.batch(batch)))

    def _record_batch(self, result: Any) -> pa.RecordBatch:
        if isinstance(result, pa.RecordBatch):
            return result
        if isinstance(result, pa.Table):
            return from_table(result)
        if hasattr(result, "to_arrow"):
            result = result.to_arrow()
            if isinstance(result, pa.RecordBatch | pa.Table):
                return self._record_batch(result)
        if hasattr(result, "__arrow_c_stream__"):
            return from_table(pa.RecordBatchReader.from_stream(result).read_all())
        raise TypeError(
            f"fn {self._task.fn!r} returned {type(result).__name__}, not a RecordBatch, a "
            "Table or a frame that converts to Arrow"
        )
