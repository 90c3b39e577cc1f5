"""DataFrame functions the Spark task tests name by dotted path."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def adults(df: DataFrame) -> DataFrame:
    return df.filter(F.col("age") >= 18).withColumn("name", F.upper("name"))


def identity(df: DataFrame) -> DataFrame:
    return df


def not_a_frame(df: DataFrame) -> Any:
    return df.count()
