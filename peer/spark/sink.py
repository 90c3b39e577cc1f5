"""An exactly-once Parquet table sink: Hive-partitioned Parquet files that Spark reads as a table,
published whole epochs at a time, so a reader sees every row once and only once it is committed.

``params.path`` is the table's directory, and it belongs to one job: its staged names are its
allocation versions and epochs. ``params.partition_by`` (optional) lists fields to partition by,
as ``col=value`` directories the way Spark writes them; those fields leave the files and come
back as partition columns. Rows are ``task.schema`` when the task declares one; otherwise the
schema is inferred from the first batch and kept, also across restarts, in this slot's
checkpoint. Every batch goes through ``peer.spark.schema.to_table``, so a row that does not fit
fails at ``prepare`` with the field named, and a ``timestamp`` field (seconds since the epoch in a
segment) is a Spark timestamp in the files.

The two-phase commit follows ``peer.plugins.jsonl.exactly_once_output`` (see its docstring):

- ``prepare``/``write`` keep the current epoch's rows in memory, as Arrow tables.
- ``checkpoint(epoch)`` (phase one) writes them as Parquet into
  ``<path>/_staging/<version:012d>-<number:08d>-<slot:04d>.tmp/``, fsyncs every file and
  directory, and renames that to the same name without ``.tmp``: the epoch is sealed only once
  it is whole and durable, so a crash mid-write leaves a temp directory, never a half-sealed
  epoch. An epoch with no rows leaves nothing. Files are named
  ``<version>-<number>-<slot>-<i>.parquet``, unique to the epoch and slot.
- ``committed(epoch)`` (phase two) renames every file of this slot's sealed epochs up to
  ``epoch`` to the same relative path under ``<path>``, making partition directories as needed,
  then removes the emptied staged directory. A file already moved is no error.
- ``recover(recovery)`` settles every slot's staged directories as the JSON-lines sink settles
  its files: up to ``recovery.committed`` they are published (finishing one a crash left half
  published); those of an older allocation after it are deleted, and so are an older
  allocation's temp directories; the rest are left alone, as another peer may be writing them.

Spark and pyarrow skip paths starting with ``_`` or ``.``, so nothing under ``_staging`` is ever
read. An epoch spread over several partitions is published one file at a time: a reader listing
the table at that very moment may see part of a committed epoch (as with Spark's own file
committers), never any of an uncommitted one.

Why pyarrow and not a Spark write job: phase one runs in the barrier path, on the group's thread,
and must be durable before the peer acknowledges the barrier, so it has to be quick and cannot
start a Spark job per epoch per slot (nor wait for one). The files are the same Hive-partitioned
Parquet a Spark write makes, and Spark reads the directory as one table.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path, PurePath
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from peer.job.schema import Schema, SchemaError, parse
from peer.job.spec import Task
from peer.plugins import Epoch, PluginError, Recovery, error, param
from peer.plugins.files import fsync_directory, fsync_path, is_path, names, publish
from peer.spark.schema import arrow_schema, infer, spark_type, to_table

STAGING = "_staging"
TEMP = ".tmp"
_NAME = re.compile(r"(\d+)-(\d+)-(\d+)(\.tmp)?")


def output(task: Task, slot: int, slots: int) -> ParquetTableOutput:
    """The factory named ``peer.spark.sink:output``."""
    directory = Path(param(task, "path", "a directory path string", is_path))
    partition_by = _partition_by(task)
    schema = _declared(task)
    if schema is not None:
        _check_partitions(task, schema, partition_by)
    try:
        (directory / STAGING).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise error(task, f"cannot make {str(directory / STAGING)!r}: {e.strerror}") from e
    return ParquetTableOutput(task, directory, slot, partition_by, schema)


def staged_name(epoch: Epoch, slot: int) -> str:
    """The name of ``slot``'s staged directory of ``epoch``, and the stem of its files."""
    return f"{epoch.version:012d}-{epoch.number:08d}-{slot:04d}"


def staged_epoch(name: str) -> tuple[Epoch, bool] | None:
    """The epoch a staged directory is named for, and whether it is a temp one; None for a name
    this sink never makes."""
    match = _NAME.fullmatch(name)
    return None if match is None else (Epoch(int(match[1]), int(match[2])), bool(match[4]))


class ParquetTableOutput:
    """One slot of the table: the current epoch's rows in memory, and the epochs it sealed but
    has not yet published with the files each holds."""

    def __init__(
        self,
        task: Task,
        directory: Path,
        slot: int,
        partition_by: tuple[str, ...],
        schema: pa.Schema | None,
    ) -> None:
        self._task = task
        self._directory = directory
        self._staging = directory / STAGING
        self._slot = slot
        self._partition_by = partition_by
        self._declared = schema is not None
        self._schema = schema
        self._epoch: Epoch | None = None
        self._prepared: list[pa.Table] = []
        self._written: list[pa.Table] = []
        self._sealed: list[tuple[Epoch, list[str]]] = []

    def recover(self, recovery: Recovery) -> None:
        """Settle what failures left in ``_staging`` and start writing ``recovery.start``; the
        checkpoint only carries an inferred schema, as the directory says all the rest."""
        if not self._declared:
            self._schema = self._kept(recovery.checkpoint)
        self._settle(recovery)
        self._epoch = recovery.start
        self._prepared, self._written, self._sealed = [], [], []

    def prepare(self, segments: list[Any]) -> None:
        """Checks the rows against the schema now, so a bad row fails its own batch."""
        if segments:
            self._prepared.append(self._table(segments))

    def write(self) -> bool:
        """Rows wait in memory until the barrier: nothing touches the disk before phase one."""
        self._written.extend(self._prepared)
        self._prepared = []
        return True

    def synced(self) -> bool:
        """Nothing is on disk between barriers, so there is nothing to sync."""
        return True

    def checkpoint(self, epoch: Epoch) -> dict[str, Any] | None:
        """Seal ``epoch``'s rows, durably, and go on to the next epoch; the position is the
        inferred schema, if any, so that a restart keeps writing the same table."""
        if epoch != self._writing():
            writing = self._writing().describe()
            raise self._error(f"checkpoint at {epoch.describe()} while writing {writing}")
        if self._prepared:
            rows = sum(table.num_rows for table in self._prepared)
            raise self._error(
                f"checkpoint at {epoch.describe()} with {rows} rows prepared but not written: "
                "write() must finish before the barrier"
            )
        self._seal(epoch)
        self._epoch = Epoch(epoch.version, epoch.number + 1)
        if self._declared or self._schema is None:
            return None
        return {"schema": [list(pair) for pair in _pairs(self._schema)]}

    def committed(self, epoch: Epoch) -> None:
        """Publish, oldest first, every epoch this slot sealed up to ``epoch``."""
        ready = [(sealed, files) for sealed, files in self._sealed if sealed <= epoch]
        if not ready:
            return
        touched: set[Path] = set()
        for sealed, files in ready:
            touched |= self._publish(staged_name(sealed, self._slot), files)
        self._sealed = self._sealed[len(ready) :]
        self._sync(touched)

    def close(self) -> None:
        """Drops the unsealed rows: the epoch is written again after recovery."""
        self._prepared, self._written = [], []

    # -- schema -----------------------------------------------------------------------------

    def _table(self, segments: list[Any]) -> pa.Table:
        try:
            if self._schema is None:
                self._schema = self._inferred(segments)
            return to_table(segments, self._schema)
        except SchemaError as e:
            raise self._error(str(e)) from e

    def _inferred(self, segments: list[Any]) -> pa.Schema:
        """The first batch's schema, through its Spark types: a restart that reads it back from
        the checkpoint gets the very same Arrow types."""
        schema = arrow_schema(_pairs(infer(segments)))
        _check_partitions(self._task, schema, self._partition_by)
        return schema

    def _kept(self, checkpoint: Any) -> pa.Schema | None:
        if checkpoint is None:
            return None
        if not isinstance(checkpoint, dict) or "schema" not in checkpoint:
            raise self._error(f"checkpoint must be {{'schema': pairs}}, got {checkpoint!r:.200}")
        try:
            schema = arrow_schema(parse(checkpoint["schema"]))
        except SchemaError as e:
            raise self._error(f"checkpoint schema {e}") from e
        _check_partitions(self._task, schema, self._partition_by)
        return schema

    # -- phase one --------------------------------------------------------------------------

    def _writing(self) -> Epoch:
        if self._epoch is None:
            raise self._error("used before recover(): there is no epoch to write to")
        return self._epoch

    def _seal(self, epoch: Epoch) -> None:
        """Write the epoch to a temp directory, make it durable, and rename it sealed. Whatever
        an earlier start left under either name for this epoch and slot was never committed (a
        committed epoch is never started again), so it goes first."""
        name = staged_name(epoch, self._slot)
        temp, sealed = self._staging / (name + TEMP), self._staging / name
        _remove_tree(self._task, temp)
        _remove_tree(self._task, sealed)
        table = pa.concat_tables(self._written) if self._written else None
        self._written = []
        if table is None or table.num_rows == 0:
            return
        self._write_parquet(table, temp, name)
        files = _files(temp)
        _fsync_tree(self._task, temp, files)
        try:
            os.rename(temp, sealed)
        except OSError as e:
            raise self._error(f"cannot seal {str(temp)!r}: {e.strerror}") from e
        fsync_directory(self._task, self._staging)
        self._sealed.append((epoch, files))

    def _write_parquet(self, table: pa.Table, temp: Path, name: str) -> None:
        try:
            ds.write_dataset(
                table,
                temp,
                format="parquet",
                partitioning=self._partitioning(),
                basename_template=f"{name}-{{i}}.parquet",
                existing_data_behavior="error",
                use_threads=False,
            )
        except (OSError, pa.ArrowException) as e:
            raise self._error(f"writing {str(temp)!r} failed: {e}") from e

    def _partitioning(self) -> ds.Partitioning | None:
        """Hive-style ``col=value`` directories, a null as ``__HIVE_DEFAULT_PARTITION__``, as
        Spark writes them."""
        if not self._partition_by or self._schema is None:
            return None
        fields = [self._schema.field(name) for name in self._partition_by]
        return ds.partitioning(pa.schema(fields), flavor="hive")

    # -- phase two and recovery -------------------------------------------------------------

    def _settle(self, recovery: Recovery) -> None:
        """The jsonl sink's rules, for every slot's staged directories, oldest first."""
        touched: set[Path] = set()
        settled = False
        for name in sorted(names(self._task, self._staging)):
            parsed = staged_epoch(name)
            if parsed is None:
                continue
            epoch, temp = parsed
            committed = recovery.committed is not None and epoch <= recovery.committed
            if committed and not temp:
                touched |= self._publish(name, _files(self._staging / name))
            elif epoch.version < recovery.start.version:
                _remove_tree(self._task, self._staging / name)
            else:
                continue
            settled = True
        if settled:
            self._sync(touched)

    def _publish(self, name: str, files: list[str]) -> set[Path]:
        """Move a sealed epoch's files into the table and remove its emptied directory; the
        directories the files went to, for syncing."""
        staged = self._staging / name
        for relative in files:
            self._move(staged / relative, self._directory / relative)
        _remove_empty(self._task, staged)
        return {self._directory / parent for relative in files for parent in _parents(relative)}

    def _move(self, staged: Path, published: Path) -> None:
        try:
            published.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise self._error(f"cannot make {str(published.parent)!r}: {e.strerror}") from e
        publish(self._task, staged, published)

    def _sync(self, published: set[Path]) -> None:
        """Make renames, new directories and deletions durable, deepest directories first."""
        for directory in _deepest_first(published | {self._directory}):
            fsync_directory(self._task, directory)
        fsync_directory(self._task, self._staging)

    def _error(self, message: str) -> PluginError:
        return error(self._task, message)


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
    return tuple((f.name, spark_type(f.type)) for f in schema)


def _files(root: Path) -> list[str]:
    """Every file under ``root``, as paths relative to it; none if it is gone."""
    return sorted(
        os.path.relpath(os.path.join(directory, name), root)
        for directory, _, names in os.walk(root)
        for name in names
    )


def _parents(relative: str) -> list[PurePath]:
    """The directories between the table's root and a file, deepest first, root included."""
    return list(PurePath(relative).parents)


def _fsync_tree(task: Task, root: Path, files: list[str]) -> None:
    """Make a freshly written tree durable: its files, then its directories."""
    for relative in files:
        fsync_path(task, root / relative)
    for directory in _deepest_first({root / p for relative in files for p in _parents(relative)}):
        fsync_directory(task, directory)


def _deepest_first(directories: set[Path]) -> list[Path]:
    return sorted(directories, key=lambda d: (-len(d.parts), str(d)))


def _remove_tree(task: Task, path: Path) -> None:
    """Delete a staged or temp directory; what is already gone, another peer deleted."""

    def failed(function: Any, name: str, exc: BaseException) -> None:
        if not isinstance(exc, FileNotFoundError):
            reason = exc.strerror if isinstance(exc, OSError) else exc
            raise error(task, f"cannot delete {name!r}: {reason}") from exc

    shutil.rmtree(path, onexc=failed)


def _remove_empty(task: Task, root: Path) -> None:
    """Remove a published epoch's directories, deepest first. Only empty ones: a file left
    behind means something was not published, and must not be lost."""
    for directory, _, _ in os.walk(root, topdown=False):
        try:
            os.rmdir(directory)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise error(task, f"cannot remove published {directory!r}: {e.strerror}") from e
