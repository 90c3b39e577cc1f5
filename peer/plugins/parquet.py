"""An exactly-once Parquet table sink: Hive-partitioned Parquet files that Spark (or any Parquet
reader) reads as a table, published whole epochs at a time, so a reader sees every row once and
only once it is committed. It needs pyarrow, not Spark.

``params.path`` is the table's directory, and it belongs to one job. ``params.partition_by``
(optional) lists fields to partition by, as ``col=value`` directories the way Spark writes them;
those fields leave the files and come back as partition columns. Rows are ``task.schema`` when
the task declares one; otherwise the schema is inferred from the first batch and kept, also
across restarts, in this slot's checkpoint (``schema``, beside peer.plugins.staged's
``unpublished``). A batch is rows or an Arrow record batch: rows go through
``peer.job.arrow_schema.to_table``, an Arrow batch is cast column by column, never turned into rows;
either way a row that does not fit fails at ``prepare`` with the field named, and a
``timestamp`` field (seconds since the epoch in a segment) is a Spark timestamp in the files.

The commit is peer.plugins.staged's. ``prepare``/``write`` keep the open epoch's rows in memory
as Arrow tables; at the barrier that ends the epoch they are handed to the slot's sealing thread,
which writes them with ``pyarrow.dataset`` into the epoch's temp directory (files named
``<stem>-<i>.parquet`` under their partition directories, unique to the epoch and slot) before
sealing it. Nothing is written on the group's thread, and no Spark job runs per epoch.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from peer.job.arrow_schema import arrow_schema, infer, spark_type, to_table
from peer.job.schema import Schema, SchemaError, parse
from peer.job.spec import Task
from peer.plugins import Recovery, Sealing, error, param
from peer.plugins.files import is_path
from peer.plugins.staged import StagedEpochs, staged_epochs
from peer.values.columnar import Batch
from peer.values.epoch import Epoch


def output(task: Task, slot: int, slots: int) -> ParquetTableOutput:
    """The factory named ``peer.plugins.parquet:output``."""
    param(task, "path", "a directory path or an fsspec URL", is_path)
    partition_by = _partition_by(task)
    schema = _declared(task)
    if schema is not None:
        _check_partitions(task, schema, partition_by)
    return ParquetTableOutput(task, staged_epochs(task, slot), partition_by, schema)


class ParquetTableOutput:
    """One slot of the table: the open epoch's rows in memory, and its staged epochs."""

    def __init__(
        self,
        task: Task,
        epochs: StagedEpochs,
        partition_by: tuple[str, ...],
        schema: pa.Schema | None,
    ) -> None:
        self._task = task
        self._epochs = epochs
        self._partition_by = partition_by
        self._declared = schema is not None
        self._schema = schema
        self._prepared: list[pa.Table] = []
        self._written: list[pa.Table] = []

    def recover(self, recovery: Recovery) -> None:
        """The checkpoint carries an inferred schema, and the committed epochs that may still
        be staged."""
        if not self._declared:
            self._schema = self._kept(recovery.checkpoint)
        self._epochs.recover(recovery)
        self._prepared, self._written = [], []

    def prepare(self, segments: Batch) -> None:
        """Checks the rows against the schema now, so a bad row fails its own batch."""
        if len(segments):
            self._prepared.append(self._table(segments))

    def write(self) -> bool:
        """Rows wait in memory until the barrier: nothing touches the disk before phase one."""
        self._written.extend(self._prepared)
        self._prepared = []
        return True

    def synced(self) -> bool:
        """Whether every seal and publish is done: rows in memory wait for their seal."""
        return self._epochs.synced()

    def checkpoint(self, epoch: Epoch) -> Sealing:
        """Hand ``epoch``'s rows to be sealed in the background and go on to the next epoch; the
        position holds the inferred schema, if any, so that a restart keeps writing the same
        table."""
        if self._prepared:
            rows = sum(table.num_rows for table in self._prepared)
            raise error(
                self._task,
                f"checkpoint at {epoch.describe()} with {rows} rows prepared but not written: "
                "write() must finish before the barrier",
            )
        tables, self._written = self._written, []
        finish = partial(self._write_parquet, tables) if tables else None
        durable = self._epochs.seal(epoch, finish)
        kept: dict[str, Any] = self._epochs.position()
        if not self._declared and self._schema is not None:
            kept["schema"] = [list(pair) for pair in _pairs(self._schema)]
        return Sealing(kept or None, durable)

    def committed(self, epoch: Epoch) -> None:
        self._epochs.committed(epoch)

    def drained(self) -> Future[None]:
        """Done once every seal and publish asked for so far is."""
        return self._epochs.drained()

    def close(self) -> None:
        """Drops the unsealed rows: the epoch is written again after recovery."""
        self._prepared, self._written = [], []
        self._epochs.close()

    # -- schema -----------------------------------------------------------------------------

    def _table(self, segments: Batch) -> pa.Table:
        try:
            if isinstance(segments, pa.RecordBatch):
                if self._schema is None:
                    self._schema = self._checked(arrow_schema(_pairs(segments.schema)))
                return conform(segments, self._schema)
            if self._schema is None:
                self._schema = self._checked(arrow_schema(_pairs(infer(segments))))
            return to_table(segments, self._schema)
        except SchemaError as e:
            raise error(self._task, str(e)) from e

    def _checked(self, schema: pa.Schema) -> pa.Schema:
        """A first batch's schema, through its Spark types: a restart that reads it back from
        the checkpoint gets the very same Arrow types."""
        _check_partitions(self._task, schema, self._partition_by)
        return schema

    def _kept(self, checkpoint: Any) -> pa.Schema | None:
        """The inferred schema the checkpoint keeps; None before the first row."""
        if not isinstance(checkpoint, dict | None):
            got = f"{checkpoint!r:.200}"
            raise error(self._task, f"checkpoint must be {{'schema': pairs, ...}}, got {got}")
        if checkpoint is None or "schema" not in checkpoint:
            return None
        try:
            schema = arrow_schema(parse(checkpoint["schema"]))
        except SchemaError as e:
            raise error(self._task, f"checkpoint schema {e}") from e
        _check_partitions(self._task, schema, self._partition_by)
        return schema

    # -- on the sealing thread ------------------------------------------------------------------

    def _write_parquet(self, tables: list[pa.Table], temp: Path, stem: str) -> None:
        """The epoch's rows as Parquet files under ``temp``, Hive-partitioned."""
        try:
            ds.write_dataset(
                pa.concat_tables(tables),
                temp,
                format="parquet",
                partitioning=self._partitioning(),
                basename_template=f"{stem}-{{i}}.parquet",
                existing_data_behavior="error",
                use_threads=False,
            )
        except (OSError, pa.ArrowException) as e:
            raise error(self._task, f"writing {str(temp)!r} failed: {e}") from e

    def _partitioning(self) -> ds.Partitioning | None:
        """Hive-style ``col=value`` directories, a null as ``__HIVE_DEFAULT_PARTITION__``, as
        Spark writes them."""
        if not self._partition_by or self._schema is None:
            return None
        fields = [self._schema.field(name) for name in self._partition_by]
        return ds.partitioning(pa.schema(fields), flavor="hive")


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.Table:
    """An Arrow batch as a table of ``schema``, column by column: a field the batch lacks is
    null, a column the schema lacks or one that does not cast is a SchemaError naming it, and
    a number in a timestamp field is seconds since the epoch, as in a segment."""
    extra = [name for name in batch.schema.names if name not in schema.names]
    if extra:
        raise SchemaError(f"field {extra[0]!r} is not in the schema ({', '.join(schema.names)})")
    columns = [_column(batch, f) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def _column(batch: pa.RecordBatch, field: pa.Field) -> pa.Array:
    index = batch.schema.get_field_index(field.name)
    if index < 0:
        return pa.nulls(batch.num_rows, field.type)
    column = batch.column(index)
    try:
        if pa.types.is_timestamp(field.type) and _is_number(column.type):
            seconds = pc.cast(column, pa.float64())
            micros = pc.cast(pc.round(pc.multiply(seconds, 1_000_000)), pa.int64(), safe=False)
            return pc.cast(micros, field.type)
        return pc.cast(column, field.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        kind = spark_type(field.type)
        raise SchemaError(f"field {field.name!r} must hold {kind} values: {e}") from e


def _is_number(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_floating(kind)


def _partition_by(task: Task) -> tuple[str, ...]:
    if "partition_by" not in task.params:
        return ()
    what = "a list of distinct field names"
    return tuple(param(task, "partition_by", what, _is_names))


def _is_names(value: object) -> bool:
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and all(isinstance(name, str) and name for name in value)
        and len(set(value)) == len(value)
    )


def _declared(task: Task) -> pa.Schema | None:
    if task.schema is None:
        return None
    try:
        return arrow_schema(parse(task.schema))
    except SchemaError as e:
        raise error(task, f"schema {e}") from e


def _check_partitions(task: Task, schema: pa.Schema, partition_by: tuple[str, ...]) -> None:
    """Every partition field is in the schema, and at least one field stays in the files."""
    for name in partition_by:
        if name not in schema.names:
            fields = ", ".join(schema.names)
            raise error(task, f"params.partition_by field {name!r} is not in the schema ({fields})")
    if len(partition_by) == len(schema):
        raise error(task, "params.partition_by names every field: one must stay in the files")


def _pairs(schema: pa.Schema) -> Schema:
    """An Arrow schema as ``(field, Spark type)`` pairs, the form ``parse`` reads back."""
    return tuple((f.name, _spark_type(f)) for f in schema)


def _spark_type(field: pa.Field) -> str:
    try:
        return spark_type(field.type)
    except SchemaError as e:
        raise SchemaError(f"field {field.name!r}: {e}") from e
