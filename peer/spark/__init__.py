"""Spark in the engine: the group's SparkSession, batches as DataFrames and a Spark source (the
exactly-once Parquet table sink Spark reads needs only pyarrow: peer.plugins.parquet).

Spark does the heavy data work; the peers coordinate, stream and snapshot. Nothing here may block
a group's thread: every Spark call runs in the group's Spark pool (``peer.spark.session.submit``)
and the task state machine polls its future.
"""
