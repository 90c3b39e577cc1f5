"""Spark as a source: a bounded input reading a data set Spark can read, and an unbounded one
watching a directory for new files.

Both split their data by file, as a file is the smallest piece of a data set that every peer names
alike without talking to the others, and its rows come back from Spark in the same order every
time it is read: so a position is a file and a count of rows handed out of it, and each peer reads
only its own files. Spark reads a whole file at once, in the group's Spark pool
(``peer.spark.session.submit``); ``poll`` never waits for it, returning ``[]`` while a file loads
and then handing out its rows, while the next file loads behind it. So a slot holds at most two
files' rows in memory, as Arrow, and hands them out as Arrow record batches, slices of what Spark
read: whatever needs rows makes them (``peer.runtime.columnar.rows``: timestamps become seconds,
dates ISO strings, decimals floats).

``input`` reads ``params.path`` (a file, directory or glob) or ``params.table`` (a catalog table
of files), in ``params.format`` (parquet by default; orc, json, csv, text) with
``params.options`` passed to Spark's reader (``header: "true"`` for CSV, say). Planning runs in
the pool as well, since starting Spark takes seconds: Spark lists the data set once, and
its files, sorted, are the splits; split i belongs to slot ``i % slots``. Every split is read with
one schema, ``task.schema`` when declared, otherwise the one Spark infers once for the whole
data set, so every split has the same columns. A directory is every split's ``basePath``, and a
table's location likewise, so the partition columns of a ``col=value`` layout (the one
``peer.plugins.parquet`` writes) survive reading one file at a time; for a glob over such a layout,
give ``options.basePath``. The checkpoint is ``[split index within this slot, rows handed out of
it]``: recovery never reads a finished split again, and reads the current one again but skips
the rows handed out already. That holds while the data set and the number of slots stay as they
were: a file added or removed shifts the indices.

``stream`` watches the directory ``params.path`` (local, as it lists it with ``os.scandir``)
every ``params.interval`` seconds (1.0) for files matching ``params.pattern`` (``*``). Names
starting with ``.`` or ``_`` are never read, so a writer makes a file under such a name and
renames it in once whole. A file belongs to slot ``crc32(name) % slots``; a slot reads its files
in name order, a file listed later after the ones it already has. The schema is declared, or
inferred from the first file read and kept for the rest. Its checkpoint is
``{"done": [names handed out], "current": [name, rows handed out] or None}``; ``done`` grows with
every file, as the directory is not consumed.

Neither source consumes what it reads, so a commit has nothing to acknowledge. Every error,
including Spark's from the pool (raised by the ``poll`` that finds it), is a PluginError naming
the task, the plugin and the path.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from peer.job.schema import SchemaError, parse
from peer.job.spec import Task
from peer.plugins import PluginError, Recovery, error, natural, param
from peer.runtime.checkpoints import Epoch
from peer.runtime.columnar import Batch, concat, from_table
from peer.spark.schema import arrow_schema, spark_ddl
from peer.spark.session import session, submit

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

FORMATS = ("parquet", "orc", "json", "csv", "text")
"""File formats whose files Spark reads one by one, each whole on its own."""
DEFAULT_FORMAT = "parquet"
_TABLE_NAME = re.compile(r"(`[^`]+`|\w+)(\.(`[^`]+`|\w+))*")
_REASON_LIMIT = 1000


def input(task: Task, slot: int, slots: int) -> SparkInput:
    """The factory named ``peer.spark.source:input``; returns at once, planning in the pool."""
    has_path, has_table = "path" in task.params, "table" in task.params
    if has_path == has_table:
        raise error(task, "give exactly one of params.path (files) and params.table (a table)")
    if has_path:
        path = param(task, "path", "a path string Spark can read", _is_text)
        source = _Source(path, None, _format(task, path, DEFAULT_FORMAT))
    else:
        name = param(task, "table", "a table name", _is_table_name)
        source = _Source(None, name, _format(task, name, None))
    source = replace(source, options=_options(task), schema=_declared(task))
    return SparkInput(task, submit(_plan, task, source, slot, slots))


def stream(task: Task, slot: int, slots: int) -> SparkStream:
    """The factory named ``peer.spark.source:stream``; lists and reads in the pool."""
    directory = param(task, "path", "a directory path string", _is_text)
    pattern = task.params.get("pattern", "*")
    if not _is_text(pattern):
        raise error(task, f"params.pattern must be a glob string, got {pattern!r}")
    interval = task.params.get("interval", 1.0)
    if isinstance(interval, bool) or not isinstance(interval, int | float) or interval <= 0:
        raise error(task, f"params.interval must be seconds > 0, got {interval!r}")
    reader = _Reader(_format(task, directory, DEFAULT_FORMAT), _options(task), _declared(task))
    watch = _Watch(directory, pattern, slot, slots)
    return SparkStream(task, reader, watch, float(interval))


@dataclass(frozen=True)
class _Source:
    """What ``input`` reads, checked but not yet looked at."""

    path: str | None
    table: str | None
    format: str | None
    """None for a table: its own format, from the catalog."""
    options: Mapping[str, str] | None = None
    schema: str | None = None
    """The declared schema as Spark DDL; None infers it."""


@dataclass(frozen=True)
class _Reader:
    """How Spark reads every split of a source, so that all of them agree."""

    format: str
    options: Mapping[str, str]
    schema: StructType | str | None
    """None only until a stream's first file fixes it."""


@dataclass(frozen=True)
class _Plan:
    reader: _Reader
    files: list[str]
    """This slot's splits, in order."""


@dataclass(frozen=True)
class _Watch:
    """The directory a stream lists, and which of its files are this slot's."""

    directory: str
    pattern: str
    slot: int
    slots: int


class SparkInput:
    """One slot of a bounded data set; its splits exist once the planning future is done."""

    def __init__(self, task: Task, plan: Future[_Plan]) -> None:
        self._task = task
        self._plan = plan
        self._start = (0, 0)
        self._splits: _Splits | None = None
        self._count = 0

    def recover(self, recovery: Recovery) -> None:
        self._start = (0, 0) if recovery.checkpoint is None else self._position(recovery.checkpoint)
        if self._splits is not None:
            self._splits.close()
            self._splits = None

    def poll(self, limit: int) -> Batch:
        splits = self._ready()
        return [] if splits is None else splits.poll(limit)

    def checkpoint(self, epoch: Epoch) -> list[int]:
        if self._splits is None:
            return list(self._start)
        return [self._count - len(self._splits.names), self._splits.offset]

    def completed(self) -> bool:
        return self._splits is not None and not self._splits.names

    def synced(self) -> bool:
        return True

    def committed(self, epoch: Epoch) -> None:
        """Nothing to acknowledge: the data set is read, not consumed."""

    def close(self) -> None:
        self._plan.cancel()
        if self._splits is not None:
            self._splits.close()

    def _ready(self) -> _Splits | None:
        """The splits, once planning is done; raises what planning raised."""
        if self._splits is None and self._plan.done():
            plan = self._plan.result()
            index, offset = self._start
            if index > len(plan.files) or (index == len(plan.files) and offset):
                raise error(
                    self._task,
                    f"checkpoint [{index}, {offset}] is past this slot's {len(plan.files)} "
                    "splits: has the data set or the number of peers changed?",
                )
            self._count = len(plan.files)
            self._splits = _Splits(self._task, plan.reader, str, plan.files[index:], offset=offset)
        return self._splits

    def _position(self, checkpoint: Any) -> tuple[int, int]:
        if not (
            isinstance(checkpoint, list | tuple)
            and len(checkpoint) == 2
            and all(natural(n) for n in checkpoint)
        ):
            raise error(self._task, f"checkpoint must be [split, rows], got {checkpoint!r}")
        return checkpoint[0], checkpoint[1]


class SparkStream:
    """One slot of a watched directory: lists it every ``interval`` seconds, in the pool."""

    def __init__(self, task: Task, reader: _Reader, watch: _Watch, interval: float) -> None:
        self._task = task
        self._reader = reader
        self._watch = watch
        self._interval = interval
        self._done: set[str] = set()
        self._splits = self._start([], 0)
        self._listing: Future[list[str]] | None = None
        self._next_listing = time.monotonic()

    def recover(self, recovery: Recovery) -> None:
        done, current = self._position(recovery.checkpoint)
        self._splits.close()
        self._done = set(done)
        names, offset = ([], 0) if current is None else ([current[0]], current[1])
        self._splits = self._start(names, offset)

    def poll(self, limit: int) -> Batch:
        self._list()
        return self._splits.poll(limit)

    def checkpoint(self, epoch: Epoch) -> dict[str, Any]:
        splits = self._splits
        current = [splits.names[0], splits.offset] if splits.names and splits.offset else None
        return {"done": sorted(self._done), "current": current}

    def completed(self) -> bool:
        return False

    def synced(self) -> bool:
        return True

    def committed(self, epoch: Epoch) -> None:
        """Nothing to acknowledge: the directory is read, not consumed."""

    def close(self) -> None:
        if self._listing is not None:
            self._listing.cancel()
        self._splits.close()

    def _start(self, names: list[str], offset: int) -> _Splits:
        def locate(name: str) -> str:
            return os.path.join(self._watch.directory, name)

        return _Splits(
            self._task, self._reader, locate, names, offset=offset, finished=self._done.add
        )

    def _list(self) -> None:
        """Take a finished listing's new files; start the next listing when it is due."""
        if self._listing is not None and self._listing.done():
            listed, self._listing = self._listing.result(), None
            self._splits.add(name for name in listed if name not in self._done)
        now = time.monotonic()
        if self._listing is None and now >= self._next_listing:
            self._listing = submit(_list_directory, self._task, self._watch)
            self._next_listing = now + self._interval

    def _position(self, checkpoint: Any) -> tuple[list[str], list[Any] | None]:
        if checkpoint is None:
            return [], None
        done = checkpoint.get("done") if isinstance(checkpoint, dict) else None
        current = checkpoint.get("current") if isinstance(checkpoint, dict) else None
        if not (
            isinstance(done, list)
            and all(_is_text(name) for name in done)
            and (current is None or _is_position(current))
        ):
            raise error(
                self._task,
                'checkpoint must be {"done": [file names], "current": [name, rows] or null}, '
                f"got {checkpoint!r}",
            )
        return done, current


class _Splits:
    """The files a slot has still to hand out, in order. The first is handed out from ``offset``
    once Spark has read it, while the one after it loads; both sources keep their place here."""

    def __init__(
        self,
        task: Task,
        reader: _Reader,
        locate: Callable[[str], str],
        names: list[str],
        *,
        offset: int = 0,
        finished: Callable[[str], None] = lambda name: None,
    ) -> None:
        self._task = task
        self._reader = reader
        self._locate = locate
        self._finished = finished
        self.names = names
        self.offset = offset
        self._table: pa.Table | None = None
        self._loads: dict[str, Future[tuple[StructType, pa.Table]]] = {}

    def poll(self, limit: int) -> Batch:
        """Up to ``limit`` rows from the loaded files, going on to the next file if it is ready:
        one record batch, or ``[]`` for none yet."""
        parts: list[pa.RecordBatch] = []
        count = 0
        while self.names and count < limit and (table := self._loaded()) is not None:
            part = from_table(table.slice(self.offset, limit - count))
            if part.num_rows:
                parts.append(part)
            count += part.num_rows
            self.offset += part.num_rows
            if self.offset >= table.num_rows:
                self._finish()
        self._load_ahead()
        return concat(parts)

    def add(self, names: Iterable[str]) -> None:
        """Queue newly listed files in name order, behind the one being handed out."""
        new = set(names).difference(self.names)
        if new:
            self.names = self.names[:1] + sorted(new.union(self.names[1:]))

    def close(self) -> None:
        for load in self._loads.values():
            load.cancel()
        self._loads.clear()
        self._table = None

    def _loaded(self) -> pa.Table | None:
        """The first file's rows once loaded; raises what reading it raised."""
        if self._table is None:
            load = self._loads.get(self.names[0])
            if load is None or not load.done():
                return None
            schema, table = load.result()
            if table.num_rows < self.offset:
                raise error(
                    self._task,
                    f"{self.names[0]!r} has {table.num_rows} rows, fewer than the "
                    f"{self.offset} handed out before: has it changed?",
                )
            if self._reader.schema is None:
                self._reader = replace(self._reader, schema=schema)
            self._table = table
        return self._table

    def _finish(self) -> None:
        name = self.names.pop(0)
        self._loads.pop(name, None)
        self._table, self.offset = None, 0
        self._finished(name)

    def _load_ahead(self) -> None:
        """Load the first file, and the next once the first is in: two at most."""
        keep = self.names[:2]
        for name in [name for name in self._loads if name not in keep]:
            self._loads.pop(name).cancel()
        for name in keep[: 2 if self._table is not None else 1]:
            if name not in self._loads:
                path = self._locate(name)
                self._loads[name] = submit(_read, self._task, self._reader, path)


def _read(task: Task, reader: _Reader, path: str) -> tuple[StructType, pa.Table]:
    """One whole file as Arrow, and the schema it was read with; runs in the pool."""
    try:
        spark_reader = session().read.format(reader.format).options(**reader.options)
        if reader.schema is not None:
            spark_reader = spark_reader.schema(reader.schema)
        frame = spark_reader.load(path)
        return frame.schema, frame.toArrow()
    except Exception as e:
        raise error(task, f"reading {path!r} failed: {_reason(e)}") from e


def _plan(task: Task, source: _Source, slot: int, slots: int) -> _Plan:
    """Start Spark, list the data set and fix its schema; runs in the pool."""
    what = repr(source.path) if source.table is None else f"table {source.table}"
    try:
        spark = session()
        if source.path is not None:
            reader, files = _plan_path(spark, source.path, source)
        else:
            reader, files = _plan_table(task, spark, source)
    except PluginError:
        raise
    except Exception as e:
        raise error(task, f"cannot read {what}: {_reason(e)}") from e
    return _Plan(reader, sorted(files)[slot::slots])


def _plan_path(spark: SparkSession, path: str, source: _Source) -> tuple[_Reader, list[str]]:
    """The files Spark finds at ``path``, read with a directory as their ``basePath``."""
    kind, options = source.format or DEFAULT_FORMAT, dict(source.options or {})
    spark_reader = spark.read.format(kind).options(**options)
    if source.schema is not None:
        spark_reader = spark_reader.schema(source.schema)
    frame = spark_reader.load(path)
    if "basePath" not in options and _is_directory(spark, path):
        options["basePath"] = path
    return _Reader(kind, options, source.schema or frame.schema), frame.inputFiles()


def _plan_table(task: Task, spark: SparkSession, source: _Source) -> tuple[_Reader, list[str]]:
    """A table's files, read with its own format and options (``params.options`` on top)."""
    name = source.table
    described = spark.sql(f"DESCRIBE TABLE EXTENDED {name} AS JSON").first()
    details = json.loads(described[0]) if described else {}
    provider, location = details.get("provider"), details.get("location")
    if provider not in FORMATS or not location:
        kind = f"{details.get('type', 'unknown')} of provider {provider!r}"
        raise error(task, f"table {name} is a {kind}, not files in one of {', '.join(FORMATS)}")
    if source.format is not None and source.format != provider:
        raise error(task, f"params.format is {source.format!r} but table {name} is {provider}")
    options = {**details.get("storage_properties", {}), **(source.options or {})}
    options.pop("path", None)
    options.setdefault("basePath", location)
    hidden = [key for key, value in options.items() if "(redacted)" in value]
    if hidden:
        raise error(task, f"the catalog hides table {name}'s option {hidden[0]!r}: give it in "
                    "params.options")  # fmt: skip
    frame = spark.table(name)
    return _Reader(provider, options, source.schema or frame.schema), frame.inputFiles()


def _is_directory(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` is a directory (not a file, not a glob) on the file system Spark reads
    it from, whatever its scheme."""
    context = spark.sparkContext
    hadoop_path = context._jvm.org.apache.hadoop.fs.Path(path)
    filesystem = hadoop_path.getFileSystem(context._jsc.hadoopConfiguration())
    return bool(
        filesystem.exists(hadoop_path) and filesystem.getFileStatus(hadoop_path).isDirectory()
    )


def _list_directory(task: Task, watch: _Watch) -> list[str]:
    """This slot's readable files in the watched directory, sorted; runs in the pool."""
    try:
        with os.scandir(watch.directory) as entries:
            names = [entry.name for entry in entries if entry.is_file()]
    except OSError as e:
        raise error(task, f"cannot list {watch.directory!r}: {e.strerror}") from e
    return sorted(
        name
        for name in names
        if name[0] not in "._"
        and fnmatch.fnmatchcase(name, watch.pattern)
        and zlib.crc32(name.encode()) % watch.slots == watch.slot
    )


def _format(task: Task, where: str, default: str | None) -> str | None:
    value = task.params.get("format", default)
    if value is not None and value not in FORMATS:
        raise error(
            task, f"params.format {value!r} for {where!r} is not one of {', '.join(FORMATS)}"
        )
    return value


def _options(task: Task) -> dict[str, str]:
    """Spark's reader options as strings: booleans as Spark spells them."""
    options = task.params.get("options", {})
    if not isinstance(options, Mapping) or not all(
        isinstance(key, str) and isinstance(value, str | int | float | bool)
        for key, value in options.items()
    ):
        raise error(task, f"params.options must map option names to values, got {options!r}")
    return {
        key: str(value).lower() if isinstance(value, bool) else str(value)
        for key, value in options.items()
    }


def _declared(task: Task) -> str | None:
    """The declared schema as Spark DDL, or None to infer it."""
    if task.schema is None:
        return None
    try:
        return spark_ddl(arrow_schema(parse(task.schema)))
    except SchemaError as e:
        raise error(task, f"schema {e}") from e


def _reason(e: BaseException) -> str:
    """What a Spark error says, without the JVM's stack or the query plan: the first line of a
    Python-side error; the head line of each exception in a JVM error's chain of causes."""
    lines = str(e).split("JVM stacktrace:")[0].strip().splitlines() or [type(e).__name__]
    if lines[0].startswith("An error occurred while calling"):
        heads = [
            line.removeprefix(": ").removeprefix("Caused by: ")
            for line in lines[1:]
            if line.startswith((": ", "Caused by: ")) and "in awaitResult" not in line
        ]
        lines = ["; caused by ".join(heads) or lines[0]]
    reason = lines[0].strip()
    return reason if len(reason) <= _REASON_LIMIT else reason[:_REASON_LIMIT] + "..."


def _is_text(value: object) -> bool:
    return isinstance(value, str) and value != ""


def _is_table_name(value: object) -> bool:
    return isinstance(value, str) and _TABLE_NAME.fullmatch(value) is not None


def _is_position(value: object) -> bool:
    return (
        isinstance(value, list | tuple)
        and len(value) == 2
        and _is_text(value[0])
        and natural(value[1])
    )
