"""A batch is a list of rows or an Arrow record batch: the helpers that let code take either.

Rows are plain segments (JSON-like dicts). An Arrow batch comes from a Spark source, a Spark
task or an Arrow fn and goes on as Arrow wherever nothing needs its rows: routing reads only its
key columns, windows only the columns their aggregation reads. Where rows are needed, ``rows``
makes them once, as plain as segments that travel as msgpack: a timestamp is seconds since the
epoch (a float, UTC), a date an ISO string and a decimal a float, so a row reads the same whether
it was made from Arrow or came as a segment, and a key hashes the same either way.
"""

from __future__ import annotations

import reprlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from types import NoneType
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

Segment = Any
"""One row: a JSON-like value (a dict, for most tasks)."""

type Batch = list[Segment] | pa.RecordBatch
"""What the runtime moves between tasks: rows, or an Arrow record batch."""


def collect(results: list[Any]) -> list[Segment]:
    """What fns returned, flattened: a segment, a list of segments, or None for none.

    Most fns return one segment for each: then the results are the batch as they are, which
    the types of the results tell at C speed, without a Python step per segment."""
    kinds = set(map(type, results))
    if NoneType not in kinds and not any(issubclass(kind, list) for kind in kinds):
        return results
    out: list[Segment] = []
    append, extend = out.append, out.extend
    for result in results:
        if isinstance(result, list):
            extend(result)
        elif result is not None:
            append(result)
    return out


@dataclass(frozen=True, slots=True)
class Late:
    """A row behind the watermark that a window or a join sends to the side output ``to`` (a
    task downstream of its own), and to no other task (peer.runtime.routing.LateRouter)."""

    to: str
    segment: Segment


@dataclass(slots=True)
class Sided:
    """What a join's task takes at once: each batch with the side it came from (0 for the
    join's left task, 1 for its right), in the order taken, which a replay takes again."""

    parts: list[tuple[int, Batch]]

    def __len__(self) -> int:
        return sum(len(batch) for _, batch in self.parts)


_MICROS = 1_000_000
_SHOWN = reprlib.Repr(maxlevel=2, maxstring=40, maxother=40, maxdict=8, maxlist=8)
"""A segment as a message shows it: enough to recognise, never the whole of a large one."""


class SchemaViolation(ValueError):
    """A segment that lacks a field its receiving task groups by, or whose group key has no key
    group (JSON cannot hold it): grouped under no key it would reach a peer that does not own
    its group, so the job cannot go on. The message names the task, the field or the key, and
    the segment where it can; the runner that meets it adds the job."""


def rows(batch: Batch) -> list[Any]:
    """The batch's rows: a list as it is, an Arrow batch's rows as plain segments."""
    if isinstance(batch, list):
        return batch
    if any(_needs_plain(f.type) for f in batch.schema):
        batch = pa.RecordBatch.from_arrays(
            [plain(column) for column in batch.columns], names=batch.schema.names
        )
    return batch.to_pylist()


def plain(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A column as segments hold its values: timestamps as float seconds, dates as ISO
    strings, decimals as floats; any other column as it is."""
    kind = column.type
    if pa.types.is_timestamp(kind):
        micros = pc.cast(pc.cast(column, pa.timestamp("us", tz="UTC")), pa.int64())
        return pc.divide(pc.cast(micros, pa.float64()), float(_MICROS))
    if pa.types.is_date(kind):
        return pc.cast(column, pa.string())
    if pa.types.is_decimal(kind):
        return pc.cast(column, pa.float64())
    return column


def _needs_plain(kind: pa.DataType) -> bool:
    return pa.types.is_timestamp(kind) or pa.types.is_date(kind) or pa.types.is_decimal(kind)


def values(batch: pa.RecordBatch, name: str) -> list[Any]:
    """One field's value in every row, as ``rows`` would give it: None throughout when the
    batch has no such column (as ``segment.get`` gives for a missing field)."""
    column = column_of(batch, name)
    if column is None:
        return [None] * batch.num_rows
    return plain(column).to_pylist()


def column_of(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    """The column ``name`` as ``rows`` reads it (the last of that name), or None."""
    index = _index(batch, name)
    return None if index is None else batch.column(index)


def _index(batch: pa.RecordBatch, name: str) -> int | None:
    """The column ``name`` is read from; with duplicate names the last, as in ``rows``."""
    names = batch.schema.names
    for index in range(len(names) - 1, -1, -1):
        if names[index] == name:
            return index
    return None


def select(batch: pa.RecordBatch, names: Sequence[str]) -> pa.RecordBatch:
    """The batch with only those of ``names`` it has, keeping its row count."""
    indices = [i for n in dict.fromkeys(names) if (i := _index(batch, n)) is not None]
    return batch.select(indices)


def take(batch: Batch, indices: Sequence[int] | pa.Array) -> Batch:
    """The rows at ``indices``, in that order, in the batch's own kind."""
    if isinstance(batch, list):
        return [batch[i] for i in indices]
    return batch.take(pa.array(indices, pa.int64()) if isinstance(indices, Sequence) else indices)


def concat(batches: Sequence[Batch]) -> Batch:
    """One batch of every row of ``batches`` in order: Arrow when all are Arrow of one schema,
    rows otherwise (rows from different sources need no common schema)."""
    if len(batches) == 1 and isinstance(batches[0], list):
        return batches[0]
    arrow = [b for b in batches if isinstance(b, pa.RecordBatch)]
    if arrow and len(arrow) == len(batches):
        schema = arrow[0].schema
        if all(b.schema.equals(schema) for b in arrow[1:]):
            return arrow[0] if len(arrow) == 1 else from_table(pa.Table.from_batches(arrow))
    return list(chain.from_iterable(map(rows, batches)))


def from_table(table: pa.Table) -> pa.RecordBatch:
    """A table as one record batch: its only batch as it is, more combined, none empty."""
    batches = table.to_batches()
    if len(batches) == 1:
        return batches[0]
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=table.schema)
    return table.combine_chunks().to_batches()[0]


@dataclass(frozen=True, slots=True)
class FieldKey:
    """A group key read from fields: one field's value, or the list of several fields' values.
    It reads an Arrow batch's columns without making rows. A field may hold null, but a segment
    (or a batch) without it is refused: a SchemaViolation naming ``task``, whose key it is. The
    lookup is the one a present field needs; only a missing one pays for the message."""

    fields: str | tuple[str, ...]
    task: str = field(default="", compare=False)

    def __call__(self, segment: Any) -> Any:
        try:
            if isinstance(self.fields, str):
                return segment[self.fields]
            return [segment[f] for f in self.fields]
        except KeyError as e:
            raise self.lacking(e.args[0], segment) from None

    def lacking(self, name: str, segment: Any) -> SchemaViolation:
        return SchemaViolation(
            f"task {self.task!r} groups by {name!r}, which segment {_SHOWN.repr(segment)} lacks"
        )

    @property
    def names(self) -> tuple[str, ...]:
        return (self.fields,) if isinstance(self.fields, str) else self.fields

    def distinct(self, batch: pa.RecordBatch) -> tuple[list[Any], pa.Array]:
        """The batch's keys as ``(keys, index)``: row i's key is ``keys[index[i]]``. A single
        column of strings, integers or booleans is dictionary-encoded, so each distinct key is
        read once; values Arrow and JSON tell apart differently (``-0.0`` and ``0.0``, lists)
        are read row by row."""
        if isinstance(self.fields, str) and (i := _index(batch, self.fields)) is not None:
            column = batch.column(i)
            if _encodable(column.type):
                encoded = pc.dictionary_encode(column, null_encoding="encode")
                return encoded.dictionary.to_pylist(), encoded.indices
        keys = self.of(batch)
        return keys, pa.array(range(len(keys)), pa.int64())

    def check(self, batch: pa.RecordBatch) -> None:
        """Refuse a batch without one of the key's columns as its rows would be refused: by
        the first such field, in the first row."""
        missing = [name for name in self.names if _index(batch, name) is None]
        if missing and batch.num_rows:
            raise self.lacking(missing[0], rows(batch.slice(0, 1))[0])

    def of(self, batch: pa.RecordBatch) -> list[Any]:
        """Every row's key, equal to what ``self(row)`` gives for each of ``rows(batch)``."""
        self.check(batch)
        if isinstance(self.fields, str):
            return values(batch, self.fields)
        columns = [values(batch, f) for f in self.fields]
        return [list(key) for key in zip(*columns, strict=True)]


def _encodable(kind: pa.DataType) -> bool:
    """Types whose Arrow equality is the equality of their canonical JSON."""
    return (
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_integer(kind)
        or pa.types.is_boolean(kind)
    )
