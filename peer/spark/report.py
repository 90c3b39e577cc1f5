"""What ``onyx run`` shows of a Spark table a job wrote: one Spark SQL query over it, so a new
user sees the table is there and how to query it. A table on an object store, which Spark's
Hadoop has no connector for here, is read through fsspec and handed to Spark as a view named for
its task; the query is the same."""

from __future__ import annotations

import fsspec
import pyarrow.dataset as ds

from peer.job.spec import Task
from peer.spark.session import session
from peer.storage import is_local

SINK = "peer.plugins.parquet:output"


def summary_query(task: Task) -> str:
    """Rows per partition of the table ``task`` writes (rows in all, if unpartitioned)."""
    table = _table(task)
    parts = ", ".join(f"`{name}`" for name in task.params.get("partition_by", ()))
    if not parts:
        return f"SELECT count(*) AS rows FROM {table}"
    return f"SELECT {parts}, count(*) AS rows FROM {table} GROUP BY {parts} ORDER BY {parts}"


def _table(task: Task) -> str:
    """How the query names the table: its path for Spark to read, or a view of it."""
    path = task.params["path"]
    fs, root = fsspec.url_to_fs(path)
    if is_local(fs):
        return f"parquet.`{path}`"
    files = ds.dataset(root, filesystem=fs, format="parquet", partitioning="hive",
                       exclude_invalid_files=True)  # fmt: skip
    session().createDataFrame(files.to_table()).createOrReplaceTempView(task.name)
    return f"`{task.name}`"


def show(query: str, rows: int = 20) -> str:
    """The query's result as Spark prints a table."""
    frame = session().sql(query)
    return frame._jdf.showString(rows, 40, False)
