"""The Spark sources on a local[2] session: a bounded data set read by file across slots exactly
once, resumed from a checkpoint without a row twice or missed, a watched directory picking up
files renamed in, and bad inputs refused with the task and plugin named.

Every wait polls the plugin until a condition holds or a deadline passes: Spark reads in its pool,
so how long a file takes to arrive is the machine's business, never the test's."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
import zlib
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from peer import api
from peer.cluster.local import LocalCluster
from peer.job.load import from_dict
from peer.job.spec import Task
from peer.plugins import PluginError, load
from peer.values.columnar import rows as rows_of
from peer.values.epoch import Epoch

pytestmark = pytest.mark.integration

DEADLINE = 60.0
"""Seconds a wait may take before the test fails: far more than a local read ever needs."""
SIZES = (7, 10, 5, 12)
"""Rows in each Parquet file of the bounded data set, unequal so offsets land anywhere."""
EPOCH_SECONDS = 1_700_000_000
DECLARED = {"id": "bigint", "name": "string", "ts": "timestamp", "day": "date"}
INPUT = "peer.spark.source:input"
STREAM = "peer.spark.source:stream"


# -- data ------------------------------------------------------------------------------------


def row(i: int) -> dict[str, Any]:
    """Row ``i`` as a segment: a timestamp as seconds, a date as ISO, a decimal as a float."""
    return {
        "id": i,
        "name": f"n{i}",
        "ts": EPOCH_SECONDS + i * 1.5,
        "day": (dt.date(2024, 1, 1) + dt.timedelta(days=i)).isoformat(),
        "amount": i + 0.25,
    }


def arrow(ids: range) -> pa.Table:
    """The rows ``ids`` as Spark will find them in a file: real timestamps, dates, decimals."""
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"n{i}" for i in ids],
            "ts": pa.array(
                [dt.datetime.fromtimestamp(row(i)["ts"], dt.UTC) for i in ids],
                pa.timestamp("us", tz="UTC"),
            ),
            "day": pa.array([dt.date.fromisoformat(row(i)["day"]) for i in ids], pa.date32()),
            "amount": pa.array([Decimal(i) + Decimal("0.25") for i in ids], pa.decimal128(10, 2)),
        }
    )


def write_parquet(path: Path, ids: range) -> list[dict[str, Any]]:
    """Write rows ``ids`` to ``path`` by way of a hidden name renamed in, as writers should."""
    temp = path.parent / f".{path.name}.tmp"
    pq.write_table(arrow(ids), temp)
    os.rename(temp, path)
    return [row(i) for i in ids]


def parquet_set(directory: Path) -> list[list[dict[str, Any]]]:
    """A data set of ``SIZES`` files; each file's rows, in the files' name order."""
    directory.mkdir()
    files, start = [], 0
    for n, size in enumerate(SIZES):
        files.append(write_parquet(directory / f"part-{n:02d}.parquet", range(start, start + size)))
        start += size
    return files


def only(rows: list[dict[str, Any]], fields: list[str] | dict[str, str]) -> list[dict[str, Any]]:
    return [{field: r[field] for field in fields} for r in rows]


def by_id(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: r["id"])


# -- plugins ---------------------------------------------------------------------------------


def task(plugin: str = INPUT, schema: Any = None, **params: Any) -> Task:
    return Task(name="read", kind="input", plugin=plugin, schema=schema, params=params)


def take(plugin: Any, count: int, limit: int = 4) -> list[dict[str, Any]]:
    """Exactly ``count`` rows: each poll asks for no more than are still missing."""
    rows: list[dict[str, Any]] = []
    deadline = time.monotonic() + DEADLINE
    while len(rows) < count:
        assert time.monotonic() < deadline, f"{len(rows)} of {count} rows in {DEADLINE} s"
        batch = polled(plugin.poll(min(limit, count - len(rows))))
        rows += batch
        if not batch:
            time.sleep(0.01)
    return rows


def drain(plugin: Any, limit: int = 4) -> list[dict[str, Any]]:
    """Every row until a bounded input says it is completed."""
    rows: list[dict[str, Any]] = []
    deadline = time.monotonic() + DEADLINE
    while not plugin.completed():
        assert time.monotonic() < deadline, f"not completed in {DEADLINE} s, {len(rows)} rows"
        batch = polled(plugin.poll(limit))
        rows += batch
        if not batch:
            time.sleep(0.01)
    assert plugin.poll(limit) == []
    return rows


def polled(batch: Any) -> list[dict[str, Any]]:
    """The rows of what a poll gave: a record batch, or ``[]`` while nothing is ready."""
    assert isinstance(batch, pa.RecordBatch) or batch == [], batch
    return rows_of(batch)


def failure(plugin: Any) -> str:
    """The message of the PluginError that polling raises once the pool's work has failed."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        try:
            plugin.poll(4)
        except PluginError as e:
            return str(e)
        time.sleep(0.01)
    raise AssertionError(f"poll raised nothing in {DEADLINE} s")


def where(plugin: str = INPUT) -> str:
    return f"task 'read', plugin '{plugin}'"


# -- the bounded input -----------------------------------------------------------------------


@pytest.mark.parametrize("schema", [None, DECLARED], ids=["inferred", "declared"])
def test_two_slots_read_a_parquet_data_set_once_between_them(start, tmp_path, schema):
    files = parquet_set(tmp_path / "data")
    read = task(schema=schema, path=str(tmp_path / "data"))
    slots = [start(read, slot, 2) for slot in range(2)]
    rows = [drain(plugin) for plugin in slots]
    fields = schema or list(row(0))
    assert rows[0] == only(files[0] + files[2], fields)
    assert rows[1] == only(files[1] + files[3], fields)


def test_a_slot_without_splits_completes(start, tmp_path):
    parquet_set(tmp_path / "data")
    plugin = start(task(path=str(tmp_path / "data" / "part-00.parquet")), 1, 2)
    assert drain(plugin) == []
    assert plugin.checkpoint(Epoch(1, 1)) == [0, 0]


def test_a_csv_data_set_with_a_header_and_inferred_types(start, tmp_path):
    directory = tmp_path / "csv"
    directory.mkdir()
    expected = []
    for n in range(3):
        lines = [f"{n * 10 + i},w{n * 10 + i}" for i in range(4)]
        (directory / f"{n}.csv").write_text("\n".join(["id,word", *lines]) + "\n")
        expected += [{"id": n * 10 + i, "word": f"w{n * 10 + i}"} for i in range(4)]
    options = {"header": True, "inferSchema": "true"}
    read = task(path=str(directory / "*.csv"), format="csv", options=options)
    slots = [start(read, slot, 2) for slot in range(2)]
    assert by_id(drain(slots[0]) + drain(slots[1])) == expected


def test_a_json_data_set_with_a_declared_ddl_schema(start, tmp_path):
    directory = tmp_path / "json"
    directory.mkdir()
    for n in range(2):
        lines = [json.dumps({"id": n * 5 + i, "extra": True}) for i in range(5)]
        (directory / f"{n}.json").write_text("\n".join(lines) + "\n")
    plugin = start(task(schema="id bigint", path=str(directory), format="json"))
    assert drain(plugin) == [{"id": i} for i in range(10)]


def test_a_partitioned_directory_keeps_its_partition_column(start, spark, tmp_path):
    """Read one file at a time, a ``col=value`` layout still gives every row its column."""
    directory = tmp_path / "partitioned"
    data = spark.range(0, 40).selectExpr("id", "CAST(id % 3 AS INT) AS k")
    data.repartition(2).write.partitionBy("k").parquet(str(directory))
    expected = [{"id": i, "k": i % 3} for i in range(40)]
    for schema in (None, "id bigint, k int"):
        read = task(schema=schema, path=str(directory))
        slots = [start(read, slot, 3) for slot in range(3)]
        assert by_id([r for plugin in slots for r in drain(plugin)]) == expected


@pytest.mark.parametrize(
    ("layout", "count", "position"),
    [
        ((0, 1), 3, [0, 3]),  # in the middle of the first split
        ((0, 1), 7, [1, 0]),  # at the boundary between the first two splits
        ((0, 1), 20, [2, 3]),  # in the middle of a later split
        ((0, 1), 34, [4, 0]),  # at the end of the data
        ((1, 2), 14, [1, 4]),  # slot 1 of 2 reads files 1 and 3: 10 rows, then 4 of 12
    ],
)
def test_a_new_start_resumes_at_the_checkpoint(start, tmp_path, layout, count, position):
    """``layout`` is (slot, slots)."""
    slot, slots = layout
    files = parquet_set(tmp_path / "data")
    mine = [r for rows in files[slot::slots] for r in rows]
    read = task(path=str(tmp_path / "data"))
    first = start(read, slot, slots)
    before = take(first, count)
    checkpoint = json.loads(json.dumps(first.checkpoint(Epoch(1, 3))))
    assert checkpoint == position
    first.close()
    after = drain(start(read, slot, slots, checkpoint))
    assert before + after == mine


def test_a_checkpoint_is_kept_until_planning_is_done(start, tmp_path):
    parquet_set(tmp_path / "data")
    plugin = start(task(path=str(tmp_path / "data")), checkpoint=[2, 1])
    assert plugin.checkpoint(Epoch(2, 1)) == [2, 1]


@pytest.fixture
def catalog(spark) -> Iterator[list[str]]:
    """Tables a test makes, dropped after it."""
    tables: list[str] = []
    yield tables
    for name in tables:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


def test_a_catalog_table_is_read_with_its_own_format_and_options(start, spark, catalog, tmp_path):
    directory = tmp_path / "table"
    directory.mkdir()
    for n in range(3):
        lines = [f"{n * 10 + i};w{n * 10 + i}" for i in range(3)]
        (directory / f"{n}.csv").write_text("\n".join(["id;word", *lines]) + "\n")
    catalog.append("source_words")
    spark.sql(
        "CREATE TABLE source_words (id INT, word STRING) USING csv "
        f"OPTIONS (header 'true', sep ';') LOCATION '{directory}'"
    )
    read = task(table="source_words")
    slots = [start(read, slot, 2) for slot in range(2)]
    expected = [{"id": n * 10 + i, "word": f"w{n * 10 + i}"} for n in range(3) for i in range(3)]
    assert by_id(drain(slots[0]) + drain(slots[1])) == expected


def test_a_job_reads_a_data_set_through_the_source(spark, tmp_path):
    """The task runtime drives the input: two peers, barriers every 0.1 s, a JSON-lines sink."""
    files = parquet_set(tmp_path / "data")
    out = tmp_path / "out.jsonl"
    job = from_dict(
        {
            "workflow": [["read", "out"]],
            "catalog": [
                {
                    "name": "read",
                    "kind": "input",
                    "plugin": INPUT,
                    "n_peers": 2,
                    "batch_size": 4,
                    "schema": DECLARED,
                    "params": {"path": str(tmp_path / "data")},
                },
                {
                    "name": "out",
                    "kind": "output",
                    "plugin": "peer.plugins.jsonl:output",
                    "params": {"path": str(out)},
                },
            ],
            "barrier_period": 0.1,
        }
    )
    cluster = LocalCluster(groups=1, vpeers=3)
    cluster.start()
    try:
        cluster.await_ring(30)
        job_id = api.submit(cluster.reader, job)
        assert api.wait(cluster.reader, job_id, 120).state == "completed"
    finally:
        cluster.stop()
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert by_id(written) == only([r for rows in files for r in rows], DECLARED)


# -- the stream ------------------------------------------------------------------------------


def test_a_stream_picks_up_files_renamed_in_and_resumes_from_its_checkpoint(start, tmp_path):
    directory = tmp_path / "incoming"
    directory.mkdir()
    read = task(STREAM, path=str(directory), pattern="*.parquet", interval=0.05)
    a = write_parquet(directory / "a.parquet", range(0, 5))
    first = start(read)
    assert take(first, 5) == a
    (directory / "_notes.parquet").write_text("never read: the name starts with _")
    b = write_parquet(directory / "b.parquet", range(5, 11))
    assert take(first, 6) == b
    c = write_parquet(directory / "c.parquet", range(11, 19))
    assert take(first, 3) == c[:3]
    checkpoint = json.loads(json.dumps(first.checkpoint(Epoch(1, 3))))
    assert checkpoint == {"done": ["a.parquet", "b.parquet"], "current": ["c.parquet", 3]}
    assert not first.completed()
    first.close()

    second = start(read, checkpoint=checkpoint)
    d = write_parquet(directory / "d.parquet", range(19, 23))
    assert take(second, 5 + 4) == c[3:] + d
    assert second.checkpoint(Epoch(2, 1)) == {
        "done": ["a.parquet", "b.parquet", "c.parquet", "d.parquet"],
        "current": None,
    }


def test_stream_slots_share_a_directory_by_file_name(start, tmp_path):
    """JSON files, the schema inferred from each slot's first file and kept."""
    directory = tmp_path / "incoming"
    directory.mkdir()
    read = task(STREAM, path=str(directory), format="json", interval=0.05)
    slots = [start(read, slot, 2) for slot in range(2)]
    owned: list[list[dict[str, Any]]] = [[], []]
    for n in range(8):
        name = f"{n:02d}.json"
        rows = [{"id": n * 10 + i, "word": f"w{i}"} for i in range(3)]
        (directory / f".{name}").write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.rename(directory / f".{name}", directory / name)
        owned[zlib.crc32(name.encode()) % 2] += rows
    assert all(owned), "the file names should give both slots some files"
    for plugin, expected in zip(slots, owned, strict=True):
        assert take(plugin, len(expected)) == expected


# -- bad inputs ------------------------------------------------------------------------------


def test_a_missing_path_fails_at_poll_naming_task_plugin_and_path(start, tmp_path):
    path = str(tmp_path / "nowhere")
    message = failure(start(task(path=path)))
    assert message.startswith(where())
    assert path in message


def test_an_unreadable_file_fails_at_poll_naming_it(start, tmp_path):
    parquet_set(tmp_path / "data")
    (tmp_path / "data" / "part-99.parquet").write_text("not parquet")
    plugin = start(task(schema=DECLARED, path=str(tmp_path / "data")))
    message = failure(plugin)
    assert message.startswith(where())
    assert "part-99.parquet" in message


def test_a_missing_stream_directory_fails_at_poll(start, tmp_path):
    path = str(tmp_path / "nowhere")
    message = failure(start(task(STREAM, path=path)))
    assert message.startswith(where(STREAM))
    assert path in message


@pytest.mark.parametrize(
    ("plugin", "params", "words"),
    [
        (INPUT, {"path": "/data", "format": "avro"}, ["'/data'", "'avro'", "params.format"]),
        (INPUT, {"path": "/data", "table": "t"}, ["exactly one", "params.path", "params.table"]),
        (INPUT, {}, ["exactly one"]),
        (INPUT, {"table": "t; DROP TABLE x"}, ["params.table"]),
        (INPUT, {"path": "/data", "options": ["header"]}, ["params.options"]),
        (STREAM, {"path": "/data", "format": "delta"}, ["'/data'", "'delta'"]),
        (STREAM, {"path": "/data", "interval": 0}, ["params.interval"]),
        (STREAM, {}, ["params.path"]),
    ],
)
def test_bad_params_are_refused_at_once(plugin, params, words):
    with pytest.raises(PluginError) as refused:
        load(task(plugin, **params), 0, 1)
    assert str(refused.value).startswith(where(plugin))
    for word in words:
        assert word in str(refused.value)


def test_a_bad_schema_is_refused_at_once():
    with pytest.raises(PluginError, match=r"'read'.*field 'id' has type 'number'"):
        load(task(schema={"id": "number"}, path="/data"), 0, 1)


@pytest.mark.parametrize(
    ("plugin", "checkpoint"),
    [(INPUT, [1]), (INPUT, {"done": []}), (STREAM, [0, 1]), (STREAM, {"done": [1]})],
)
def test_a_malformed_checkpoint_is_refused(start, plugin, checkpoint):
    with pytest.raises(PluginError, match="checkpoint must be"):
        start(task(plugin, path="/data"), checkpoint=checkpoint)
