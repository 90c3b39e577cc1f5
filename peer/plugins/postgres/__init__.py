"""PostgreSQL: an exactly-once output (peer.plugins.postgres.sink) and change data capture
(peer.plugins.postgres.changes), reaching their server through peer.plugins.postgres.connect.

- ``peer.plugins.postgres:output``: each committed epoch's rows in one transaction with a
  marker row, appended (COPY) or upserted by a declared key.
- ``peer.plugins.postgres:changes``: the row changes of some tables through logical replication,
  in commit order, exactly once; their rows first when asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from peer.job.spec import Task
from peer.plugins import checks_params
from peer.plugins.params import parsed, settings
from peer.plugins.postgres.changes import input as changes
from peer.plugins.postgres.sink import PostgresOutput, PostgresOutputParams


def _sink(params: Mapping[str, Any]) -> None:
    parsed(PostgresOutputParams, params)


@checks_params(_sink)
def output(task: Task, slot: int, slots: int) -> PostgresOutput:
    """The factory named ``peer.plugins.postgres:output``."""
    return PostgresOutput(task, settings(task, PostgresOutputParams), slot)


__all__ = ["changes", "output"]
