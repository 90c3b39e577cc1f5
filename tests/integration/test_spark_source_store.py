"""The Spark source on a real S3 server (SeaweedFS), which Spark itself cannot read here: the engine
lists and reads the data set with fsspec and pyarrow, and gives the same rows, split the same way
between slots, as Spark's own reader gives for the same files on local disk (Hive-partitioned
Parquet and ORC data sets that Spark wrote, CSV with and without a header, JSON lines, text); it
resumes from a checkpoint in the middle of a split, names a missing path in one line, waits for a
store out of reach and then rolls the job back, and the clickstream example's input and pages
table on the store give the same views and cleaned rows as on disk."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import s3fs

from examples.clickstream import generate, pipeline
from peer import storage
from peer.job.spec import Task
from peer.plugins import PluginError, load
from peer.storage import StorageError
from peer.values.columnar import from_table
from peer.values.columnar import rows as rows_of
from peer.values.epoch import Epoch
from tests.integration.test_spark_source import arrow, drain, failure, take, task, where
from tests.support import ObjectStore

pytestmark = pytest.mark.integration

SIZES = (7, 10, 5, 12)
"""Rows in each Parquet file, unequal so that offsets land anywhere."""


@pytest.fixture
def upload(object_store: ObjectStore, prefix: str) -> Any:
    """Copy every file under a directory (hidden ones too) to the store, under this test's
    prefix and the directory's name; the URL of the copy."""

    def copy(directory: Path) -> str:
        fs = object_store.filesystem()
        for path in sorted(p for p in directory.rglob("*") if p.is_file()):
            fs.put_file(str(path), f"{prefix}/{directory.name}/{path.relative_to(directory)}")
        return f"s3://{prefix}/{directory.name}"

    return copy


def slots_read(start: Any, read: Task, slots: int) -> list[list[dict[str, Any]]]:
    """Each slot's rows, in the order it hands them out."""
    return [drain(start(read, slot, slots)) for slot in range(slots)]


def alike(start: Any, local: str, url: str, slots: int = 2, **params: Any) -> list[dict]:
    """The rows each slot reads from the store are those it reads with Spark from local disk:
    the same splits, in the same order, with the same columns and values. All of them."""
    on_disk = slots_read(start, task(path=local, **params), slots)
    on_store = slots_read(start, task(path=url, **params), slots)
    assert on_store == on_disk
    return [row for rows in on_store for row in rows]


# -- reading what Spark reads ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["parquet", "orc"])
def test_a_partitioned_data_set_spark_wrote_reads_as_spark_reads_it(
    start, spark, upload, tmp_path, kind
):
    """Spark's own layout: ``k=*/day=*`` directories, a ``_SUCCESS`` file and hidden checksums,
    and a staging directory that must be skipped as Spark skips it."""
    directory = tmp_path / "events"
    data = spark.range(0, 60).selectExpr(
        "id", "CAST(id % 3 AS INT) AS k", "date_add(DATE'2024-01-01', CAST(id % 2 AS INT)) AS day"
    )
    data.repartition(2).write.partitionBy("k", "day").format(kind).save(str(directory))
    (directory / "_staging").mkdir()
    (directory / "_staging" / "part-0.parquet").write_text("never read: it is staged")
    url = upload(directory)
    expected = [
        {"id": i, "k": i % 3, "day": (dt.date(2024, 1, 1) + dt.timedelta(i % 2)).isoformat()}
        for i in range(60)
    ]
    for schema in (None, {"id": "bigint", "k": "int", "day": "date"}):
        rows = alike(start, str(directory), url, slots=3, schema=schema, format=kind)
        assert sorted(rows, key=lambda r: r["id"]) == expected


@pytest.mark.parametrize(
    ("options", "first"),
    [
        ({}, {"_c0": "id", "_c1": "word", "_c2": "score"}),
        ({"header": True}, {"id": "0", "word": None, "score": "0.5"}),
        (
            {"HEADER": "true", "inferSchema": True, "sep": ";"},
            {"id": 0, "word": None, "score": 0.5},
        ),
    ],
    ids=["no-header", "header", "header-inferred"],
)
def test_csv_reads_as_spark_reads_it(start, upload, tmp_path, options, first):
    """Spark's header is false unless given: without it the header line is a row, and columns
    are ``_c0``...; every column is a string unless types are inferred; an empty field is null."""
    sep = options.get("sep", ",")
    directory = tmp_path / "words"
    directory.mkdir()
    for n in range(3):
        lines = [sep.join(["id", "word", "score"])]
        lines += [sep.join([str(n * 10 + i), f"w{i}" if i else "", f"{i}.5"]) for i in range(4)]
        (directory / f"{n}.csv").write_text("\n".join(lines) + "\n")
    url = upload(directory)
    rows = alike(start, str(directory), url, format="csv", options=options)
    assert rows[0] == first
    assert len(rows) == 3 * (4 if options else 5)


def test_json_lines_read_as_spark_reads_them(start, upload, tmp_path):
    """Inferred (a time stays text, as Spark infers none), and declared (a date and a time
    parsed, a field the schema lacks ignored, one a line lacks null)."""
    directory = tmp_path / "json"
    directory.mkdir()
    for n in range(3):
        lines = [
            {"id": n * 5 + i, "at": f"2024-01-0{i + 1}T10:00:00Z", "day": f"2024-02-0{i + 1}"}
            | ({"extra": True} if i % 2 else {})
            for i in range(5)
        ]
        (directory / f"{n}.json").write_text("".join(json.dumps(line) + "\n" for line in lines))
    url = upload(directory)
    rows = alike(start, str(directory / "*.json"), f"{url}/*.json", format="json")
    assert rows[0] == {"at": "2024-01-01T10:00:00Z", "day": "2024-02-01", "extra": None, "id": 0}
    assert list(rows[0]) == ["at", "day", "extra", "id"]
    declared = {"id": "bigint", "at": "timestamp", "day": "date", "missing": "string"}
    rows = alike(start, str(directory), url, format="json", schema=declared)
    at = dt.datetime(2024, 1, 1, 10, tzinfo=dt.UTC).timestamp()
    assert rows[0] == {"id": 0, "at": at, "day": "2024-02-01", "missing": None}


def test_text_reads_as_spark_reads_it(start, upload, tmp_path):
    directory = tmp_path / "text"
    directory.mkdir()
    (directory / "a.txt").write_text("one\ntwo\r\n\nthree\n")
    (directory / "b.txt").write_text("four")
    url = upload(directory)
    rows = alike(start, str(directory), url, slots=1, format="text")
    assert [row["value"] for row in rows] == ["one", "two", "", "three", "four"]


# -- positions and failures ----------------------------------------------------------------------


@pytest.fixture
def parquet_set(object_store: ObjectStore, prefix: str) -> tuple[str, list[list[dict]]]:
    """A data set of ``SIZES`` files written straight to the store: its URL, and each file's
    rows in the files' name order."""
    fs = object_store.filesystem()
    files, first = [], 0
    for n, size in enumerate(SIZES):
        table = arrow(range(first, first + size))
        with fs.open(f"{prefix}/data/part-{n:02d}.parquet", "wb") as f:
            pq.write_table(table, f)
        files.append(rows_of(from_table(table)))
        first += size
    return f"s3://{prefix}/data", files


@pytest.mark.parametrize(
    ("layout", "count", "position"),
    [((0, 1), 3, [0, 3]), ((0, 1), 20, [2, 3]), ((1, 2), 14, [1, 4])],
    ids=["first-split", "later-split", "second-slot"],
)
def test_a_new_start_resumes_in_the_middle_of_a_split(start, parquet_set, layout, count, position):
    """``layout`` is (slot, slots)."""
    slot, slots = layout
    url, files = parquet_set
    mine = [row for file in files[slot::slots] for row in file]
    read = task(path=url)
    first = start(read, slot, slots)
    before = take(first, count)
    checkpoint = json.loads(json.dumps(first.checkpoint(Epoch(1, 3))))
    assert checkpoint == position
    first.close()
    assert before + drain(start(read, slot, slots, checkpoint)) == mine


def one_line(message: str, *words: str) -> None:
    assert "\n" not in message, message
    assert message.startswith(where()), message
    for word in words:
        assert word in message, message


def test_a_missing_path_is_named_in_one_line(start, prefix):
    url = f"s3://{prefix}/nowhere"
    one_line(failure(start(task(path=url))), f"cannot read {url!r}", "no such file")


def test_an_unreadable_file_is_named_in_one_line(start, object_store, parquet_set):
    url, _ = parquet_set
    object_store.filesystem().pipe_file(f"{url}/part-99.parquet", b"not parquet")
    plugin = start(task(path=url, schema={"id": "bigint"}))
    one_line(failure(plugin), f"reading '{url}/part-99.parquet' failed")


def test_an_option_the_engine_does_not_follow_is_refused_at_once(prefix):
    with pytest.raises(PluginError) as refused:
        load(task(path=f"s3://{prefix}/x", format="json", options={"multiLine": True}), 0, 1)
    one_line(str(refused.value), "'multiLine'", "basePath")


@pytest.fixture
def fresh_clients() -> Iterator[None]:
    """A client reads its endpoint when it is made, and fsspec keeps one per set of options:
    a test that moves the endpoint makes its own, and leaves none behind."""
    s3fs.S3FileSystem.clear_instance_cache()
    yield
    s3fs.S3FileSystem.clear_instance_cache()


def test_a_store_out_of_reach_is_waited_for_then_rolls_the_job_back(
    start, prefix, monkeypatch, fresh_clients
):
    """A StorageError, which rolls the job back, not a PluginError, which would kill it."""
    monkeypatch.setattr(storage, "RETRY_SECONDS", 1.0)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    plugin = start(task(path=f"s3://{prefix}/data"))
    with pytest.raises(StorageError, match=r"task 'read'.*for 1 s") as raised:
        take(plugin, 1)
    one_line(str(raised.value), f"s3://{prefix}/data")


# -- the clickstream example ---------------------------------------------------------------------


def test_the_clickstream_input_on_the_store_cleans_as_on_disk(start, spark, prefix, tmp_path):
    """The generator writes the same input to the store as to disk; the source reads the same
    views from both; Spark's and Arrow's cleaning steps join them with the pages table on the
    store as with the one on disk."""
    url = f"s3://{prefix}/clickstream"
    generate.write(tmp_path, 5_000, 100, 3, 7)
    generate.write(url, 5_000, 100, 3, 7)
    views = alike(start, str(tmp_path / "events"), f"{url}/events")
    assert len(views) == 5_000
    batch = from_table(ds.dataset(tmp_path / "events").to_table())
    frame = spark.createDataFrame(pa.Table.from_batches([batch]))
    on_disk = pipeline.clean(frame, {"pages": str(tmp_path / "pages.csv")}).toArrow()
    on_store = pipeline.clean(frame, {"pages": f"{url}/pages.csv"}).toArrow()
    assert on_disk.num_rows > 0.9 * batch.num_rows
    assert on_store.to_pylist() == on_disk.to_pylist()
    arrow_clean = pipeline.clean_arrow(batch, {"pages": f"{url}/pages.csv"})
    assert arrow_clean.to_pylist() == on_disk.to_pylist()
