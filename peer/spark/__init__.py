"""Spark in the engine: the group's SparkSession, batches as DataFrames, a Spark source and an
exactly-once Parquet sink.

Spark does the heavy data work; the peers coordinate, stream and snapshot. Nothing here may block
a group's thread: every Spark call runs in the group's Spark pool (``peer.spark.session.submit``)
and the task state machine polls its future.
"""
