"""A Spark task's fn applied to one batch: a batch in, a DataFrame through the fn, Arrow out.

The batch crosses into Spark as an Arrow table of the task's schema (declared in the catalog, or
fixed by the first batch and kept, so every batch of a task has the same columns; an Arrow batch
needs no conversion), the fn runs on Spark, and its result comes back as one Arrow record batch,
never as rows: what comes next takes Arrow (peer.values.columnar). The fn is ``fn(df)``, or
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

from peer.code_marks import NO_MARK, Mark
from peer.job.arrow_schema import BatchSchema
from peer.job.imports import resolve
from peer.job.spec import Task
from peer.spark.session import session, submit
from peer.values.columnar import Batch, from_table


class SparkFunction:
    """One start of a Spark task on a peer; holds the schema the first batch fixed."""

    def __init__(self, task: Task) -> None:
        self._task = task
        self._fn = task_fn(task)
        self._schema = BatchSchema(task.schema)

    def submit(self, batch: Batch, mark: Mark = NO_MARK) -> Future[pa.RecordBatch]:
        """The fn's output for ``batch``, computed in the Spark pool; the pool's thread enters
        ``mark`` while the fn runs (peer.code_marks)."""
        return submit(self._apply, batch, mark)

    def _apply(self, batch: Batch, mark: Mark) -> pa.RecordBatch:
        table = pa.Table.from_batches([self._schema.batch(batch)])
        frame = session().createDataFrame(table)
        with mark:
            result = self._fn(frame)
        if not hasattr(result, "toArrow"):
            raise TypeError(
                f"fn {self._task.fn!r} returned {type(result).__name__}, not a DataFrame"
            )
        return from_table(result.toArrow())


def task_fn(task: Task) -> Callable[[Any], Any]:
    """The fn of a task that takes its batches whole (an Arrow or a Spark task), told its params
    if it takes them. Such a task is a function task, which validation gives a fn: one without
    is refused, naming it."""
    if task.fn is None:
        raise ValueError(f"task {task.name!r} has no fn")
    return with_params(resolve(task.fn), task)


def with_params(fn: Callable[..., Any], task: Task) -> Callable[[Any], Any]:
    """``fn`` told the task's params when it has a parameter named ``params``."""
    return functools.partial(fn, params=thaw(task.params)) if _takes_params(fn) else fn


def _takes_params(fn: Callable[..., Any]) -> bool:
    try:
        return "params" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
