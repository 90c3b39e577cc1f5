"""PostgreSQL: an exactly-once output (peer.plugins.postgres.sink), reaching its server through
peer.plugins.postgres.connect.

- ``peer.plugins.postgres:output``: each committed epoch's rows in one transaction with a
  marker row, appended (COPY) or upserted by a declared key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from peer.job.spec import Task
from peer.plugins import checks_params
from peer.plugins.params import parsed, settings
from peer.plugins.postgres.sink import PostgresOutput, PostgresOutputParams


def _sink(params: Mapping[str, Any]) -> None:
    parsed(PostgresOutputParams, params)


@checks_params(_sink)
def output(task: Task, slot: int, slots: int) -> PostgresOutput:
    """The factory named ``peer.plugins.postgres:output``."""
    return PostgresOutput(task, settings(task, PostgresOutputParams), slot)
