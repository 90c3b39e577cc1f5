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
from peer.plugins.delivered import DeliveredOutput
from peer.plugins.params import parsed, settings
from peer.plugins.postgres.changes import input as changes
from peer.plugins.postgres.sink import PostgresOutputParams, TableDelivery


def _sink(params: Mapping[str, Any]) -> None:
    parsed(PostgresOutputParams, params)


@checks_params(_sink)
def output(task: Task, slot: int, slots: int) -> DeliveredOutput:
    """The factory named ``peer.plugins.postgres:output``: rows staged as the table's columns
    have them, each epoch delivered in a transaction of its own."""
    params = settings(task, PostgresOutputParams)
    table = TableDelivery(task, params)
    return DeliveredOutput(task, params.staging, slot, table, record=table.as_row)


__all__ = ["changes", "output"]
