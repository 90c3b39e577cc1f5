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


WORDS: list[Any] = []
"""Where ``note_marks`` finds the worker's words (the test puts them here)."""
MARKS: list[list[int]] = []


def note_marks(df: DataFrame) -> DataFrame:
    """Note the code marks as the fn runs: the pool's thread's word must hold the task's."""
    MARKS.append([int(v) for v in WORDS[0]])
    return df
