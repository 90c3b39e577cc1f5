"""What ``onyx run`` shows of a Spark table a job wrote: one Spark SQL query over it, so a new
user sees the table is there and how to query it."""

from __future__ import annotations

from peer.job.spec import Task
from peer.spark.session import session

SINK = "peer.plugins.parquet:output"


def summary_query(task: Task) -> str:
    """Rows per partition of the table ``task`` writes (rows in all, if unpartitioned)."""
    table = f"parquet.`{task.params['path']}`"
    parts = ", ".join(f"`{name}`" for name in task.params.get("partition_by", ()))
    if not parts:
        return f"SELECT count(*) AS rows FROM {table}"
    return f"SELECT {parts}, count(*) AS rows FROM {table} GROUP BY {parts} ORDER BY {parts}"


def show(query: str, rows: int = 20) -> str:
    """The query's result as Spark prints a table."""
    frame = session().sql(query)
    return frame._jdf.showString(rows, 40, False)
