"""Spark as a source: a bounded input reading a data set Spark can read, and an unbounded one
watching a directory for new files.

Both split their data by file, as a file is the smallest piece of a data set that every peer names
alike without talking to the others, and its rows come back from Spark in the same order every
time it is read: so a position is a file and a count of rows handed out of it, and each peer reads
only its own files. Spark reads a whole file at once, in the group's Spark pool
(``peer.spark.session.submit``); ``poll`` never waits for it, returning ``[]`` while a file loads
and then handing out its rows, while the next file loads behind it. So a slot holds at most two
files' rows in memory, as Arrow, and hands them out as Arrow record batches, slices of what Spark
read: whatever needs rows makes them (``peer.values.columnar.rows``: timestamps become seconds,
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

A ``params.path`` on an object store (any URL fsspec opens that is not a local path: ``s3://``,
its endpoint and credentials the standard AWS environment variables) is listed and read by the
engine itself, with fsspec and pyarrow, not by Spark: Spark's Hadoop has no connector for it here,
and on a cluster its workers would have nothing to read it with. The splits and the checkpoint
are the same. The listing is Spark's: the file, every file under the directory, or what the glob
matches, names starting with ``_`` or ``.`` below it skipped; partition columns are read from the
``col=value`` directories below the directory (or ``options.basePath``), their types inferred as
Spark infers them (int, bigint, double, date, else string) unless declared. Without a declared
schema the first file's, with the partition columns, is every split's. The options followed are
``basePath``, and for CSV ``header`` (false unless given, as Spark's), ``sep`` (or ``delimiter``)
and ``inferSchema`` (without it every column is a string, as in Spark); any other is refused, lest
the files be read otherwise than asked. Every operation on the store is retried while it is out of
reach (``peer.storage.retried``); past that the StorageError rolls the job back. A local
path, a catalog table, and a URL fsspec cannot open here (``hdfs://``) are Spark's to read.

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
the task, the plugin and the path; a store out of reach is a StorageError naming them.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, overload
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.orc as porc
import pyarrow.parquet as pq

from peer.job.arrow_schema import arrow_schema, spark_ddl
from peer.job.schema import SchemaError, parse
from peer.job.spec import Task
from peer.plugins import PluginError, Recovery, error, natural, param, where
from peer.spark.session import session, submit
from peer.storage import StorageError, is_local, open_url, retried
from peer.values.columnar import Batch, concat, from_table
from peer.values.epoch import Epoch

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

FORMATS = ("parquet", "orc", "json", "csv", "text")
"""File formats whose files Spark reads one by one, each whole on its own."""
DEFAULT_FORMAT = "parquet"
STORE_OPTIONS = {
    "basePath": FORMATS,
    "header": ("csv",),
    "sep": ("csv",),
    "delimiter": ("csv",),
    "inferSchema": ("csv",),
}
"""The reader options the engine follows when it reads an object store itself, and for which
formats."""
PARTITION_TYPES = (pa.int32(), pa.int64(), pa.float64(), pa.date32())
"""What a partition value is taken for, the first that every value of its column fits, as Spark
infers it; else a string."""
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
"""The directory name a null partition value is written as."""
_TABLE_NAME = re.compile(r"(`[^`]+`|\w+)(\.(`[^`]+`|\w+))*")
_GLOB = re.compile(r"[*?\[]")
_LINE_END = re.compile(r"\r\n|\r|\n")
_REASON_LIMIT = 1000


def input(task: Task, slot: int, slots: int) -> SparkInput:
    """The factory named ``peer.spark.source:input``; returns at once, planning in the pool."""
    has_path, has_table = "path" in task.params, "table" in task.params
    if has_path == has_table:
        raise error(task, "give exactly one of params.path (files) and params.table (a table)")
    if has_path:
        path = param(task, "path", "a path string Spark can read", _is_text)
        source = _Source(path, False, _format(task, path, DEFAULT_FORMAT), store=_store(path))
    else:
        name = param(task, "table", "a table name", _is_table_name)
        source = _Source(name, True, _format(task, name, None))
    options = _options(task)
    if source.store is not None:
        options = _store_options(task, source.format or DEFAULT_FORMAT, options)
    source = replace(source, options=options, schema=_declared(task))
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
    kind = _format(task, directory, DEFAULT_FORMAT)
    reader = _Reader(kind, _options(task), _ddl(_declared(task)))
    watch = _Watch(directory, pattern, slot, slots)
    return SparkStream(task, reader, watch, float(interval))


@dataclass(frozen=True)
class _Store:
    """An object store's filesystem and the path on it that ``params.path`` names."""

    fs: Any
    path: str


@dataclass(frozen=True)
class _Source:
    """What ``input`` reads, checked but not yet looked at."""

    name: str
    """The path of the files, or the name of the table."""
    table: bool
    """Whether ``name`` is a catalog table's."""
    format: str | None
    """None for a table: its own format, from the catalog."""
    options: Mapping[str, str] | None = None
    schema: pa.Schema | None = None
    """The declared schema; None infers it."""
    store: _Store | None = None
    """Where the engine reads the path itself; None when Spark reads it."""


@dataclass(frozen=True)
class _Reader:
    """How Spark reads every split of a source, so that all of them agree."""

    format: str
    options: Mapping[str, str]
    schema: StructType | str | None
    """None only until a stream's first file fixes it."""

    def read(self, path: str) -> tuple[StructType, pa.Table]:
        """One whole file as Arrow, and the schema it was read with."""
        spark_reader = session().read.format(self.format).options(**self.options)
        if self.schema is not None:
            spark_reader = spark_reader.schema(self.schema)
        frame = spark_reader.load(path)
        return frame.schema, frame.toArrow()


@dataclass(frozen=True)
class _StoreReader:
    """How the engine reads every split of a data set on an object store, as Spark's reader
    would, so that all of them agree."""

    fs: Any
    format: str
    options: Mapping[str, str]
    """Lower-cased keys, as Spark's options are case-blind."""
    base: str | None
    """The directory whose ``col=value`` subdirectories hold partition columns, if any."""
    schema: pa.Schema
    partitions: frozenset[str]
    """The schema's columns taken from the directories, not from the files."""

    def read(self, url: str) -> tuple[pa.Schema, pa.Table]:
        """One whole file as Arrow, in the data set's schema."""
        data = _fetch(self.fs, url)
        fields = [field for field in self.schema if field.name not in self.partitions]
        table = _parse(self.format, data, self.options, pa.schema(fields))
        values = _partition_values(self.base, url)
        columns = {
            name: _partition_column(values.get(name), self.schema.field(name).type, len(table))
            for name in self.partitions
        }
        return self.schema, _conform(table, self.schema, columns)


@dataclass(frozen=True)
class _Plan:
    reader: _Reader | _StoreReader
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
    once it is read, while the one after it loads; both sources keep their place here."""

    def __init__(
        self,
        task: Task,
        reader: _Reader | _StoreReader,
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
        self._loads: dict[str, Future[tuple[Any, pa.Table]]] = {}

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


def _read(task: Task, reader: _Reader | _StoreReader, path: str) -> tuple[Any, pa.Table]:
    """One whole file as Arrow, and the schema it was read with; runs in the pool."""
    with _failing(task, f"reading {path!r} failed"):
        return reader.read(path)


def _plan(task: Task, source: _Source, slot: int, slots: int) -> _Plan:
    """List the data set and fix its schema, with Spark (starting it) or, on an object store,
    in the engine; runs in the pool."""
    what = f"table {source.name}" if source.table else repr(source.name)
    reader: _Reader | _StoreReader
    with _failing(task, f"cannot read {what}"):
        if source.store is not None:
            reader, files = _plan_store(source.store, source)
        elif source.table:
            reader, files = _plan_table(task, session(), source)
        else:
            reader, files = _plan_path(session(), source.name, source)
    return _Plan(reader, sorted(files)[slot::slots])


@contextlib.contextmanager
def _failing(task: Task, doing: str) -> Iterator[None]:
    """Any failure as one line naming the task and what it was doing: a PluginError, or a
    StorageError for a store out of reach, which rolls the job back instead of killing it."""
    try:
        yield
    except PluginError:
        raise
    except StorageError as e:
        raise StorageError(f"{where(task)}: {doing}: {e}") from e
    except FileNotFoundError as e:
        raise error(task, f"{doing}: there is no such file or directory") from e
    except Exception as e:
        raise error(task, f"{doing}: {_reason(e)}") from e


def _plan_path(spark: SparkSession, path: str, source: _Source) -> tuple[_Reader, list[str]]:
    """The files Spark finds at ``path``, read with a directory as their ``basePath``."""
    kind, options = source.format or DEFAULT_FORMAT, dict(source.options or {})
    schema = _ddl(source.schema)
    spark_reader = spark.read.format(kind).options(**options)
    if schema is not None:
        spark_reader = spark_reader.schema(schema)
    frame = spark_reader.load(path)
    if "basePath" not in options and _is_directory(spark, path):
        options["basePath"] = path
    return _Reader(kind, options, schema or frame.schema), frame.inputFiles()


def _plan_table(task: Task, spark: SparkSession, source: _Source) -> tuple[_Reader, list[str]]:
    """A table's files, read with its own format and options (``params.options`` on top)."""
    name = source.name
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
    return _Reader(provider, options, _ddl(source.schema) or frame.schema), frame.inputFiles()


def _is_directory(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` is a directory (not a file, not a glob) on the file system Spark reads
    it from, whatever its scheme."""
    context = spark.sparkContext
    jvm = context._jvm
    if jvm is None:
        raise RuntimeError("Spark's JVM is not running")
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    filesystem = hadoop_path.getFileSystem(context._jsc.hadoopConfiguration())
    return bool(
        filesystem.exists(hadoop_path) and filesystem.getFileStatus(hadoop_path).isDirectory()
    )


def _store(path: str) -> _Store | None:
    """The object store ``path`` is on, for the engine to read; None for a local path, and for a
    URL no fsspec library here opens (an OSError for ``hdfs://`` without libhdfs), which Spark's
    Hadoop may read."""
    try:
        fs, at = open_url(path)
    except (ValueError, OSError):
        return None
    return None if is_local(fs) else _Store(fs, at)


def _store_options(task: Task, kind: str, options: Mapping[str, str]) -> dict[str, str]:
    """``options`` keyed in lower case, as Spark's are case-blind. One the engine does not follow
    for ``kind`` is refused, lest the files be read otherwise than asked."""
    spelled = {name.lower(): name for name in STORE_OPTIONS}
    for key in options:
        if kind not in STORE_OPTIONS.get(spelled.get(key.lower(), ""), ()):
            followed = ", ".join(name for name, kinds in STORE_OPTIONS.items() if kind in kinds)
            raise error(task, f"params.options {key!r} is not followed for {kind} on an object "
                        f"store: only {followed}")  # fmt: skip
    return {key.lower(): value for key, value in options.items()}


def _plan_store(store: _Store, source: _Source) -> tuple[_StoreReader, list[str]]:
    """The files at ``params.path`` on an object store, and the schema every split is read with:
    the declared one, or the first file's with the partition columns."""
    fs, kind, options = store.fs, source.format or DEFAULT_FORMAT, dict(source.options or {})
    files, directory = _list_store(store)
    base = options.get("basepath", store.path if directory else None)
    base = None if base is None else fs.unstrip_protocol(fs._strip_protocol(base))
    values = [_partition_values(base, url) for url in files]
    names = list(dict.fromkeys(name for found in values for name in found))
    schema = source.schema
    if schema is None:
        first = _parse(kind, _fetch(fs, files[0]), options, None).schema if files else []
        data = [field for field in first if field.name not in names]
        inferred = [_partition_type([found.get(name) for found in values]) for name in names]
        schema = pa.schema(data + list(zip(names, inferred, strict=True)))
    partitions = frozenset(names).intersection(schema.names)
    return _StoreReader(fs, kind, options, base, schema, partitions), files


def _list_store(store: _Store) -> tuple[list[str], bool]:
    """The data set's files as URLs, as Spark lists them: the file, every file under the
    directory, or what the glob matches (a directory it matches, every file under it), with names
    starting with ``_`` or ``.`` below it skipped; and whether the path is a directory. The
    listing is fresh: one cached by an earlier read could miss files the other peers see."""
    fs, path = store.fs, store.path
    glob = _GLOB.search(path)

    def listing() -> list[str]:
        fs.invalidate_cache()
        roots = fs.glob(path) if glob else [path]
        return [file for root in roots for file in fs.find(root)]

    found = retried("read", fs.unstrip_protocol(path), listing)
    if not found:
        raise FileNotFoundError(path)
    top = path[: path.rfind("/", 0, glob.start()) + 1] if glob else path
    files = sorted(
        fs.unstrip_protocol(file)
        for file in set(found)
        if not any(name.startswith(("_", ".")) for name in file[len(top) :].split("/"))
    )
    return files, not glob and found != [path]


def _fetch(fs: Any, url: str) -> bytes:
    """A whole file of the store, retried while the store is out of reach; read before it is
    parsed, so that a bad file fails at once, not after the retries."""
    return retried("read", url, lambda: fs.cat_file(url))


def _partition_values(base: str | None, url: str) -> dict[str, str | None]:
    """The ``col=value`` directories between ``base`` and a file, unescaped as Spark writes
    them."""
    below = None if base is None else base.rstrip("/") + "/"
    if below is None or not url.startswith(below):
        return {}
    directories = url[len(below) :].split("/")[:-1]
    pairs = [directory.partition("=") for directory in directories if "=" in directory]
    return {
        unquote(name): None if value == NULL_PARTITION else unquote(value)
        for name, _, value in pairs
    }


def _partition_type(values: list[str | None]) -> pa.DataType:
    """The type of a partition column's values, as Spark infers it."""
    present = pa.array([value for value in values if value is not None], pa.string())
    for kind in PARTITION_TYPES if len(present) else ():
        with contextlib.suppress(pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pc.cast(present, kind)
            return kind
    return pa.string()


def _partition_column(value: str | None, kind: pa.DataType, rows: int) -> pa.Array:
    """A file's partition value, for each of its rows."""
    return pa.repeat(pa.scalar(value, pa.string()).cast(kind), rows)


def _parse(
    kind: str, data: bytes, options: Mapping[str, str], schema: pa.Schema | None
) -> pa.Table:
    """A file's rows, read with ``schema`` (its data columns) or, for the first file without
    one, as they are; ``_conform`` makes them the data set's."""
    if kind == "parquet":
        return pq.read_table(pa.BufferReader(data))
    if kind == "orc":
        return porc.read_table(pa.BufferReader(data))
    if kind == "json":
        return _json(data, schema)
    if kind == "csv":
        return _csv(data, options, schema)
    return _text(data)


def _json(data: bytes, schema: pa.Schema | None) -> pa.Table:
    """JSON lines; with a schema, its fields alone, as Spark reads them. Without one, the fields
    in name order and a time as text, as Spark infers them."""
    if schema is None:
        inferred = sorted(pjson.read_json(pa.BufferReader(data)).schema, key=lambda f: f.name)
        text = [f.with_type(pa.string()) if pa.types.is_timestamp(f.type) else f for f in inferred]
        return _json(data, pa.schema(text))
    explicit = pa.schema([_as_text(field) for field in schema])
    parse = pjson.ParseOptions(explicit_schema=explicit, unexpected_field_behavior="ignore")
    return pjson.read_json(pa.BufferReader(data), parse_options=parse)


def _csv(data: bytes, options: Mapping[str, str], schema: pa.Schema | None) -> pa.Table:
    """CSV as Spark reads it: a header line only if ``header`` is true, else columns named
    ``_c0``, ``_c1``...; without a schema, every column a string unless ``inferSchema`` is true;
    an empty field null. A schema's columns are taken by position, as Spark takes them."""
    header = options.get("header", "false").lower() == "true"
    parse = pcsv.ParseOptions(delimiter=options.get("sep", options.get("delimiter", ",")))
    if schema is None:
        read = pcsv.ReadOptions(autogenerate_column_names=not header)
        found = pcsv.open_csv(pa.BufferReader(data), read_options=read, parse_options=parse).schema
        names = found.names if header else [f"_c{i}" for i in range(len(found))]
        infer = options.get("inferschema", "false").lower() == "true"
        types = {} if infer else dict.fromkeys(names, pa.string())
    else:
        names, types = schema.names, {field.name: _as_text(field).type for field in schema}
    read = pcsv.ReadOptions(column_names=names, skip_rows=int(header))
    convert = pcsv.ConvertOptions(column_types=types, null_values=[""], strings_can_be_null=True)
    return pcsv.read_csv(
        pa.BufferReader(data), read_options=read, parse_options=parse, convert_options=convert
    )


def _text(data: bytes) -> pa.Table:
    """A row for each line, in a ``value`` column, as Spark reads text: the last line's end
    begins no line after it."""
    lines = _LINE_END.split(data.decode("utf-8", "replace"))
    if lines[-1] == "":
        lines.pop()
    return pa.table({"value": pa.array(lines, pa.string())})


def _as_text(field: pa.Field) -> pa.Field:
    """How a text format's reader is asked for a column: a date or a zoned time as a string, for
    ``_cast``, as Arrow's JSON reader parses no date and its CSV reader no zoned time without its
    offset."""
    zoned = pa.types.is_timestamp(field.type) and field.type.tz is not None
    return field.with_type(pa.string()) if zoned or pa.types.is_date(field.type) else field


def _conform(table: pa.Table, schema: pa.Schema, given: Mapping[str, pa.Array]) -> pa.Table:
    """A file's rows in the data set's schema, as Spark reads a file with one: its columns in
    order, a column the file lacks null, one the schema lacks dropped; ``given`` (the partition
    columns) as they are."""

    def column(field: pa.Field) -> pa.Array | pa.ChunkedArray:
        if field.name in given:
            return given[field.name]
        if field.name in table.column_names:
            return _cast(table.column(field.name), field.type)
        return pa.nulls(len(table), field.type)

    return pa.Table.from_arrays([column(field) for field in schema], schema=schema)


def _cast(column: pa.ChunkedArray, kind: pa.DataType) -> pa.ChunkedArray:
    """A column as ``kind``; a time without an offset is UTC's, as Spark's session reads it."""
    if pa.types.is_string(column.type) and pa.types.is_timestamp(kind) and kind.tz is not None:
        with contextlib.suppress(pa.ArrowInvalid):
            return column.cast(kind)
        return column.cast(pa.timestamp(kind.unit)).cast(kind)
    return column.cast(kind)


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


@overload
def _format(task: Task, where: str, default: str) -> str: ...
@overload
def _format(task: Task, where: str, default: None) -> str | None: ...
def _format(task: Task, where: str, default: str | None) -> str | None:
    """``params.format``, one of FORMATS; ``default`` when it is missing or null, as a stream's
    reader needs a format to hand Spark."""
    value = task.params.get("format")
    if value is None:
        return default
    if value not in FORMATS:
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


def _declared(task: Task) -> pa.Schema | None:
    """The declared schema, or None to infer it."""
    if task.schema is None:
        return None
    try:
        return arrow_schema(parse(task.schema))
    except SchemaError as e:
        raise error(task, f"schema {e}") from e


def _ddl(schema: pa.Schema | None) -> str | None:
    """A declared schema as Spark's reader takes it."""
    return None if schema is None else spark_ddl(schema)


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
