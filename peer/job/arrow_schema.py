"""Rows as segments and as Arrow tables: the bridge a batch of rows crosses into a Spark or Arrow
task, and a Spark source's or task's Arrow crosses where something needs rows.

A schema is declared in a catalog entry as a mapping of field to Spark type name (or as a Spark
DDL string of flat fields, ``"user string, ts timestamp"``), or inferred from the first batch and
kept (``BatchSchema``). Segments travel between peers as msgpack, so a row's values there are
plain: a timestamp is seconds since the epoch (a float, UTC) and a date is an ISO string; Arrow
and Spark see the real types. A segment with a field the schema lacks, or a value of the wrong
type, is an error naming the field: a batch never loses a field silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from peer.job.schema import Schema, SchemaError, parse
from peer.values.columnar import Batch, from_table, rows

_ARROW = {
    "string": pa.string(),
    "bigint": pa.int64(),
    "int": pa.int32(),
    "smallint": pa.int16(),
    "double": pa.float64(),
    "float": pa.float32(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "date": pa.date32(),
}
_MICROS = 1_000_000


def arrow_schema(schema: Schema) -> pa.Schema:
    return pa.schema([(name, _ARROW[kind]) for name, kind in schema])


def spark_ddl(schema: pa.Schema) -> str:
    """The Spark DDL of an Arrow schema this module made or inferred."""
    return ", ".join(f"`{f.name}` {spark_type(f.type)}" for f in schema)


def spark_type(kind: pa.DataType) -> str:
    """The Spark type name of an Arrow type this module made or inferred."""
    for name, arrow in _ARROW.items():
        if arrow == kind:
            return name
    if pa.types.is_timestamp(kind):
        return "timestamp"
    if pa.types.is_large_string(kind):
        return "string"
    raise SchemaError(f"Arrow type {kind} has no Spark type here")


def infer(rows: list[Mapping[str, Any]]) -> pa.Schema:
    """The schema of a first batch, to keep for every later one. Floats are seconds since the
    epoch only when declared as timestamps: inference sees plain numbers and strings."""
    if not rows:
        raise SchemaError("cannot infer a schema from an empty batch")
    _check_rows(rows)
    try:
        inferred = pa.Table.from_pylist(list(rows)).schema
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise SchemaError(f"cannot infer a schema from the first batch: {e}") from e
    for f in inferred:
        if pa.types.is_null(f.type):
            raise SchemaError(
                f"field {f.name!r} is null in every row of the first batch, so "
                "its type cannot be inferred: declare a schema"
            )
        if pa.types.is_nested(f.type):
            raise SchemaError(f"field {f.name!r} holds {f.type}: only flat fields are supported")
    return inferred


def to_table(rows: list[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    """The rows as a table of ``schema``: a field missing from a row is null, a field the schema
    lacks or a value of another type is a SchemaError naming it."""
    _check_rows(rows)
    extra = set().union(*rows) - set(schema.names)
    if extra:
        names = ", ".join(schema.names)
        raise SchemaError(f"field {sorted(extra)[0]!r} is not in the schema ({names})")
    return pa.table([_column(f, [row.get(f.name) for row in rows]) for f in schema], schema=schema)


def _check_rows(rows: Iterable[Any]) -> None:
    for row in rows:
        if not isinstance(row, Mapping):
            raise SchemaError(f"segment {row!r:.100} is not a mapping of field to value")


def _column(field: pa.Field, values: list[Any]) -> pa.Array:
    try:
        if pa.types.is_timestamp(field.type):
            seconds = pa.array(values, pa.float64())
            micros = pc.cast(pc.round(pc.multiply(seconds, _MICROS)), pa.int64(), safe=False)
            return pc.cast(micros, field.type)
        if pa.types.is_date(field.type):
            return pc.cast(pa.array(values, pa.string()), field.type)
        if pa.types.is_integer(field.type):
            _refuse_floats(field, values)
        return pa.array(values, field.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
        kind = spark_type(field.type)
        raise SchemaError(f"field {field.name!r} must hold {kind} values: {e}") from e


def _refuse_floats(field: pa.Field, values: list[Any]) -> None:
    """Arrow would truncate a float into an integer column without a word."""
    value = next((v for v in values if isinstance(v, float)), None)
    if value is not None:
        kind = spark_type(field.type)
        raise SchemaError(f"field {field.name!r} must hold {kind} values, not {value!r}")


def to_rows(table: pa.Table) -> list[dict[str, Any]]:
    """The table's rows as plain segments (see the module's note on timestamps and dates)."""
    return [row for batch in table.to_batches() for row in rows(batch)]


class BatchSchema:
    """The schema a task's batches are given as Arrow: the declared one, or the first batch's
    (inferred from its rows, or an Arrow batch's own), kept so every batch has its columns."""

    def __init__(self, declared: object | None) -> None:
        self.declared = None if declared is None else arrow_schema(parse(declared))
        self.kept = self.declared

    def batch(self, batch: Batch) -> pa.RecordBatch:
        """``batch`` as Arrow: rows in the kept schema; an Arrow batch as it is, or in the
        declared schema when there is one. A SchemaError names the field that does not fit."""
        if isinstance(batch, pa.RecordBatch):
            self.kept = self.kept or batch.schema
            return batch if self.declared is None else conform(batch, self.declared)
        if self.kept is None:
            try:
                self.kept = infer(batch)
            except SchemaError as e:
                raise SchemaError(f"no schema declared and {e}") from e
        try:
            return from_table(to_table(batch, self.kept))
        except SchemaError as e:
            raise SchemaError(f"a segment does not fit the schema: {e}") from e


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """An Arrow batch in ``schema``: its columns in the schema's order and types, a missing one
    null; a column the schema lacks, or one that does not cast, is a SchemaError naming it."""
    if batch.schema.equals(schema):
        return batch
    extra = [name for name in batch.schema.names if name not in schema.names]
    if extra:
        raise SchemaError(f"field {extra[0]!r} is not in the schema ({', '.join(schema.names)})")
    columns = []
    for f in schema:
        index = batch.schema.get_field_index(f.name)
        if index < 0:
            columns.append(pa.nulls(batch.num_rows, f.type))
            continue
        try:
            columns.append(pc.cast(batch.column(index), f.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            kind = batch.schema.field(index).type
            raise SchemaError(f"field {f.name!r} holds {kind}, which is not {f.type}: {e}") from e
    return pa.RecordBatch.from_arrays(columns, schema=schema)
