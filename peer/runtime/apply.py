"""What a task does to each batch: the apply part of its runner, chosen once by its engine.

A synchronous part's ``apply(batch)`` returns the batch to emit; an asynchronous one's
``submit(batch)`` returns a future of it, which the runner polls so the group's thread never
waits (a Spark task's batch runs in the group's Spark pool, peer.spark.function). Each engine
of peer.job.spec.ENGINES has its part in ``ENGINE_APPLIES``.

A Python task's ``fn`` takes one segment and returns a segment, a list of them, or None. When
the path names a class, each start makes a fresh instance, whose state lives as long as the
allocation; ``flush()`` (if any) runs when the input ends, ``snapshot()`` and
``restore(snapshots, keep)`` (if any) let its state survive failures like window state does.
A class of a keyed task may instead keep keyed state the engine owns (peer.state.keyed): it
asks for it in ``open(state)``, and each segment is applied with its group key made current.
Functions must not change the segments they are given. Segments that arrive as an Arrow record
batch are made into rows once, for the fn.

An Arrow task's fn (``engine: arrow``) takes a whole batch as Arrow: ``fn(batch)``, or ``fn(batch,
params)`` to be told the task's params, like a Spark task's. It takes a ``pyarrow.RecordBatch`` and
returns a RecordBatch, a Table, or a frame that has ``to_arrow()`` or exports the Arrow C stream
interface (``__arrow_c_stream__``), such as a polars DataFrame (``pl.from_arrow(batch)`` in, the
frame out: no copy either way). ``to_arrow()`` comes first, as it gives the common Arrow types
(polars' stream gives string views, which Spark and older readers do not take). Rows that arrive are
made into a RecordBatch once, in the task's declared schema or the one its first batch fixed
(peer.job.arrow_schema.BatchSchema); Arrow that arrives goes in as it is. What the fn returns
goes on as one record batch, so routing, windows and the next Arrow or Spark task take it
without making rows.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pyarrow as pa

from peer import context
from peer.code_marks import Mark
from peer.job.arrow_schema import BatchSchema
from peer.job.imports import resolve
from peer.job.spec import Task
from peer.spark.function import SparkFunction, task_fn
from peer.state.backends import Backend, MemoryBackend
from peer.state.keyed import KeyedState
from peer.values.columnar import Batch, Segment, collect, from_table, rows

KeyOf = Callable[[Segment], Any]


def function(path: str | None) -> Callable[[Segment], Any] | None:
    """The code a dotted path names: a fresh instance when it names a class."""
    if path is None:
        return None
    target = resolve(path)
    return target() if isinstance(target, type) else target


class Apply:
    """A synchronous apply part without state of its own: the batch as it came, by default."""

    def apply(self, batch: Any) -> Any:
        return batch

    def snapshot(self) -> Any:
        """What a checkpoint keeps of the part's state (None: it has none)."""
        return None

    def restore(self, snapshots: list[Any], mine: Callable[[Any], bool]) -> None:
        """Take back the state of every slot's snapshot, keeping the keys ``mine`` holds."""

    def flush(self) -> list[Segment]:
        """What the part still holds when the input ends."""
        return []


class PythonApply(Apply):
    """A Python fn applied to each segment; its state (if it keeps any) checkpointed."""

    def __init__(self, fn: Callable[[Segment], Any]) -> None:
        self.fn = fn
        self._snapshot = getattr(fn, "snapshot", None)
        self._restore = getattr(fn, "restore", None)
        self._flush = getattr(fn, "flush", None)

    def apply(self, batch: Batch) -> list[Segment]:
        return collect(list(map(self.fn, rows(batch))))

    def snapshot(self) -> Any:
        return self._snapshot() if self._snapshot is not None else None

    def restore(self, snapshots: list[Any], mine: Callable[[Any], bool]) -> None:
        if self._restore is not None:
            self._restore(snapshots, mine)

    def flush(self) -> list[Segment]:
        return collect([self._flush()]) if self._flush is not None else []


class KeyedPythonApply(PythonApply):
    """A Python fn class that keeps keyed state: each segment is applied with its group key
    made current, at the processing time and watermark of the start of its batch. The clock
    is read only when a state expires in processing time: in a job that recovers locally
    each read is logged."""

    def __init__(
        self, fn: Callable[[Segment], Any], key_of: KeyOf, state: KeyedState,
        watermark: Callable[[], float | None],
    ) -> None:  # fmt: skip
        super().__init__(fn)
        self.key_of, self.state, self.watermark = key_of, state, watermark
        self.now: Callable[[], float] = context.now if state.expires_in("processing") else _zero

    def apply(self, batch: Batch) -> list[Segment]:
        fn, key_of, at = self.fn, self.key_of, self.state.at
        watermark = self.watermark()
        self.state.tick(self.now(), -math.inf if watermark is None else watermark)
        out = []
        for segment in rows(batch):
            at(key_of(segment))
            out.append(fn(segment))
        return collect(out)


class ArrowApply(Apply):
    """One start of an Arrow task on a peer; holds the schema its first batch fixed."""

    def __init__(self, task: Task) -> None:
        self._task = task
        self._fn = task_fn(task)
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


class AsyncApply(Apply, ABC):
    """An apply part whose batches run elsewhere: ``submit`` replaces ``apply``."""

    @abstractmethod
    def submit(self, batch: Any, mark: Mark) -> Future[Any]:
        """The batch to emit, computed elsewhere, whose thread enters ``mark`` around the task's
        code (peer.code_marks)."""


class SparkApply(AsyncApply):
    """A Spark task's fn, run on a DataFrame of the batch in the group's Spark pool."""

    def __init__(self, task: Task) -> None:
        self.function = SparkFunction(task)

    def submit(self, batch: Any, mark: Mark) -> Future[Any]:
        return self.function.submit(batch, mark)


def _zero() -> float:
    return 0.0


class Keys:
    """What a keyed task's parts need to keep keyed state: the group key of a segment (None
    for a join's task, whose rows are keyed by their side, peer.state.joins), the
    task's number of key groups, the task's watermark, and the slot's keyed state, which the
    fn and the windows share, made on ``backend`` (peer.state.backends) once one asks."""

    def __init__(
        self, key_of: KeyOf | None, key_groups: int, watermark: Callable[[], float | None],
        backend: Callable[[], Backend] = MemoryBackend, snapshotted: bool = True,
    ) -> None:  # fmt: skip
        self.key_of, self.key_groups, self.watermark = key_of, key_groups, watermark
        self.backend = backend
        self.snapshotted = snapshotted
        """Whether the job takes snapshots: a state that is never snapshotted notes no
        changes."""
        self._state: KeyedState | None = None

    def state(self) -> KeyedState:
        """The slot's keyed state, made on the backend the first time a part asks."""
        if self._state is None:
            self._state = KeyedState(self.key_groups, self.backend(), self.snapshotted)
        return self._state

    def made(self) -> KeyedState:
        """The keyed state a part asked for, or one in memory that holds nothing: snapshots,
        restores and closes go the same way whether or not a part keeps any."""
        return self._state if self._state is not None else KeyedState(self.key_groups)


def python_apply(task: Task, keys: Keys | None) -> Apply:
    """The fn's part; one whose class has ``open`` keeps keyed state, given to ``open`` here."""
    fn = function(task.fn)
    if fn is None:
        return Apply()
    opens = getattr(fn, "open", None)
    if opens is None:
        return PythonApply(fn)
    if keys is None or keys.key_of is None:
        raise ValueError(f"task {task.name!r}: its fn keeps keyed state (its class has open), "
                         "so the task needs group_by_key or group_by_fn")  # fmt: skip
    state = keys.state()
    opens(state)
    return KeyedPythonApply(fn, keys.key_of, state, keys.watermark)


ENGINE_APPLIES: dict[str, Callable[[Task, Keys | None], Apply]] = {
    "python": python_apply,
    "arrow": lambda task, keys: ArrowApply(task),
    "spark": lambda task, keys: SparkApply(task),
}
"""Each engine's apply part, made from its task (and its keys, for a keyed task)."""


def apply_for(task: Task, keys: Keys | None = None) -> Apply:
    """The task's apply part, a chain's when it runs chained tasks (their fns after its own);
    an engine without one is refused, naming the task."""
    head = _engine_apply(task, keys)
    if not task.chained:
        return head
    rest = [_engine_apply(member, None) for member in task.chained]
    return ChainApply(rest if type(head) is Apply else [head, *rest])  # an input without a fn


def _engine_apply(task: Task, keys: Keys | None) -> Apply:
    make = ENGINE_APPLIES.get(task.engine)
    if make is None:
        raise ValueError(f"task {task.name!r}: engine {task.engine!r} has no apply step here")
    return make(task, keys)


class ChainApply(Apply):
    """The fns of a chain (peer.job.chains), each applied to what the one before returned; the
    chain's state is each part's, in order. A batch that a part empties goes no further."""

    def __init__(self, parts: list[Apply]) -> None:
        self.parts = parts

    def apply(self, batch: Any) -> Any:
        for part in self.parts:
            if not len(batch):
                return batch
            batch = part.apply(batch)
        return batch

    def snapshot(self) -> Any:
        states = [part.snapshot() for part in self.parts]
        return None if all(state is None for state in states) else states

    def restore(self, snapshots: list[Any], mine: Callable[[Any], bool]) -> None:
        for index, part in enumerate(self.parts):
            part.restore([None if s is None else s[index] for s in snapshots], mine)

    def flush(self) -> list[Segment]:
        """Each part's flush, through the parts after it."""
        out: Any = []
        for part in self.parts:
            applied = part.apply(out) if out else []
            out = [*rows(applied), *part.flush()]
        return out
