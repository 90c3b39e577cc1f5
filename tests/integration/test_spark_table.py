"""The Parquet table sink as Spark sees it: after commits, ``spark.read.parquet`` on the table
directory gives exactly the committed rows, with the partition columns back and timestamps as
Spark timestamps; what is staged and not yet committed stays out of sight."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import LongType, StringType, TimestampType

from peer.job.spec import Task
from peer.plugins import Recovery
from peer.plugins.parquet import ParquetTableOutput, output
from peer.values.epoch import Epoch

pytestmark = pytest.mark.integration

SCHEMA = {"user": "string", "country": "string", "n": "bigint", "ts": "timestamp"}


def sink(directory: Path, slot: int, committed: Epoch | None, version: int) -> ParquetTableOutput:
    params = {"path": str(directory), "partition_by": ["country"]}
    task = Task(
        "write", "output", plugin="peer.plugins.parquet:output", schema=SCHEMA, params=params
    )
    plugin = output(task, slot, 2)
    plugin.recover(Recovery(None, committed, Epoch(version, 1)))
    return plugin


def event(n: int) -> dict[str, Any]:
    return {
        "user": f"u{n}",
        "country": ("de", "fr", "jp")[n % 3],
        "n": n,
        "ts": 1_700_000_000.5 + n,
    }


def put(plugin: ParquetTableOutput, *numbers: int) -> None:
    plugin.prepare([event(n) for n in numbers])
    assert plugin.write()


def seal(plugin: ParquetTableOutput, epoch: Epoch) -> None:
    """Seal ``epoch`` and wait until it is durable, as a peer does before acknowledging it."""
    plugin.checkpoint(epoch).durable.result()


def commit(plugin: ParquetTableOutput, epoch: Epoch) -> None:
    """Publish up to ``epoch`` and wait until that is done."""
    plugin.committed(epoch)
    plugin.drained().result()


def table(spark: Any, directory: Path) -> list[dict[str, Any]]:
    """The table's rows as Spark reads them, timestamps as seconds since the epoch (a collected
    timestamp would be in the driver's local time zone)."""
    frame = spark.read.parquet(str(directory))
    rows = frame.selectExpr("user", "country", "n", "cast(ts as double) as ts").collect()
    return sorted((row.asDict() for row in rows), key=lambda r: r["n"])


def test_spark_reads_exactly_the_committed_epochs(spark, tmp_path):
    zero, one = sink(tmp_path, 0, None, 1), sink(tmp_path, 1, None, 1)
    put(zero, 0, 1, 2)
    put(one, 3, 4)
    seal(zero, Epoch(1, 1))
    seal(one, Epoch(1, 1))
    put(zero, 5)
    put(one, 6)
    seal(zero, Epoch(1, 2))
    seal(one, Epoch(1, 2))
    put(zero, 7)  # the open epoch, never sealed
    commit(zero, Epoch(1, 1))
    commit(one, Epoch(1, 1))
    assert table(spark, tmp_path) == [event(n) for n in range(5)]
    commit(zero, Epoch(1, 2))
    commit(one, Epoch(1, 2))
    assert table(spark, tmp_path) == [event(n) for n in range(7)]


def test_the_table_has_partition_columns_and_spark_timestamps(spark, tmp_path):
    plugin = sink(tmp_path, 0, None, 1)
    put(plugin, 0, 1, 2)
    seal(plugin, Epoch(1, 1))
    commit(plugin, Epoch(1, 1))
    types = {f.name: f.dataType for f in spark.read.parquet(str(tmp_path)).schema.fields}
    assert types == {
        "user": StringType(),
        "n": LongType(),
        "ts": TimestampType(),
        "country": StringType(),
    }
    countries = spark.read.parquet(str(tmp_path)).where("country = 'fr'").select("n").collect()
    assert [row.n for row in countries] == [1]


def test_after_a_crash_spark_sees_the_recovered_table_once(spark, tmp_path):
    first = sink(tmp_path, 0, None, 1)
    put(first, 0, 1)
    seal(first, Epoch(1, 1))
    put(first, 2)
    seal(first, Epoch(1, 2))
    first.close()  # epoch 1 committed, nobody heard; epoch 2 sealed, never committed
    second = sink(tmp_path, 0, Epoch(1, 1), 2)
    assert table(spark, tmp_path) == [event(0), event(1)]
    put(second, 2, 3)
    seal(second, Epoch(2, 1))
    commit(second, Epoch(2, 1))
    assert table(spark, tmp_path) == [event(n) for n in range(4)]
