"""A Spark task's fn applied to one batch: segments in, a DataFrame through the fn, segments out.

The batch crosses into Spark as an Arrow table of the task's schema (declared in the catalog, or
inferred from the first batch and kept, so every batch of a task has the same columns), the fn
runs on Spark, and its result comes back through Arrow. The fn is ``fn(df)``, or
``fn(df, params)`` (a parameter named ``params``) to be told the task's params (a table to join
with, say), so one fn serves jobs that differ only in their data. All of it runs in the group's
Spark pool: ``submit`` returns a future the task's state machine polls, so a batch that takes
Spark a tenth of a second never stalls the group's other peers.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pyarrow as pa
from pyrsistent import thaw

from peer.job.imports import resolve
from peer.job.schema import SchemaError, parse
from peer.job.spec import Task
from peer.spark import schema as rows
from peer.spark.session import session, submit


class SparkFunction:
    """One start of a Spark task on a peer; holds the schema the first batch fixed."""

    def __init__(self, task: Task) -> None:
        self._task = task
        fn = resolve(task.fn)
        self._fn: Callable[[Any], Any] = (
            functools.partial(fn, params=thaw(task.params)) if _takes_params(fn) else fn
        )
        self._schema: pa.Schema | None = (
            None if task.schema is None else rows.arrow_schema(parse(task.schema))
        )

    def submit(self, batch: list[dict[str, Any]]) -> Future[list[dict[str, Any]]]:
        """The fn's output rows for ``batch``, computed in the Spark pool."""
        return submit(self._apply, batch)

    def _apply(self, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self._schema is None:
            self._schema = _inferred(batch)
        try:
            table = rows.to_table(batch, self._schema)
        except SchemaError as e:
            raise SchemaError(f"a segment does not fit the schema: {e}") from e
        result = self._fn(session().createDataFrame(table))
        if not hasattr(result, "toArrow"):
            raise TypeError(
                f"fn {self._task.fn!r} returned {type(result).__name__}, not a DataFrame"
            )
        return rows.to_rows(result.toArrow())


def _takes_params(fn: Callable[..., Any]) -> bool:
    try:
        return "params" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _inferred(batch: list[dict[str, Any]]) -> pa.Schema:
    try:
        return rows.infer(batch)
    except SchemaError as e:
        raise SchemaError(f"no schema declared and {e}") from e
