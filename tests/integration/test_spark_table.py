"""The Parquet table sink as Spark sees it: after commits, ``spark.read.parquet`` on the table
directory gives exactly the committed rows, with the partition columns back and timestamps as
Spark timestamps; what is staged and not yet committed stays out of sight."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import LongType, StringType, TimestampType

from peer.job.spec import Task
from peer.plugins import Epoch, Recovery
from peer.spark.sink import ParquetTableOutput, output

pytestmark = pytest.mark.integration

SCHEMA = {"user": "string", "country": "string", "n": "bigint", "ts": "timestamp"}


def sink(directory: Path, slot: int, committed: Epoch | None, version: int) -> ParquetTableOutput:
    params = {"path": str(directory), "partition_by": ["country"]}
    task = Task("write", "output", plugin="peer.spark.sink:output", schema=SCHEMA, params=params)
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
    zero.checkpoint(Epoch(1, 1))
    one.checkpoint(Epoch(1, 1))
    put(zero, 5)
    put(one, 6)
    zero.checkpoint(Epoch(1, 2))
    one.checkpoint(Epoch(1, 2))
    put(zero, 7)  # the open epoch, never sealed
    zero.committed(Epoch(1, 1))
    one.committed(Epoch(1, 1))
    assert table(spark, tmp_path) == [event(n) for n in range(5)]
    zero.committed(Epoch(1, 2))
    one.committed(Epoch(1, 2))
    assert table(spark, tmp_path) == [event(n) for n in range(7)]


def test_the_table_has_partition_columns_and_spark_timestamps(spark, tmp_path):
    plugin = sink(tmp_path, 0, None, 1)
    put(plugin, 0, 1, 2)
    plugin.checkpoint(Epoch(1, 1))
    plugin.committed(Epoch(1, 1))
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
    first.checkpoint(Epoch(1, 1))
    put(first, 2)
    first.checkpoint(Epoch(1, 2))
    first.close()  # epoch 1 committed, nobody heard; epoch 2 sealed, never committed
    second = sink(tmp_path, 0, Epoch(1, 1), 2)
    assert table(spark, tmp_path) == [event(0), event(1)]
    put(second, 2, 3)
    second.checkpoint(Epoch(2, 1))
    second.committed(Epoch(2, 1))
    assert table(spark, tmp_path) == [event(n) for n in range(4)]
