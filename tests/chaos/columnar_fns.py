"""The columnar chaos job's code: Arrow fns over whole batches, the input's event time (paced like
the other chaos jobs: ONYX_TEST_PACE seconds per hundred rows, the workload's pace, not a wait for
anything), and the row a closed window becomes."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tests.chaos.pacing import PACE


def purchases(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch without the bots' rows: pyarrow compute on the whole batch, no rows made."""
    return batch.filter(pc.not_equal(batch["kind"], "bot"))


def priced(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Each purchase's user, time and price in cents, on the whole batch."""
    cents = pc.multiply(batch["quantity"], batch["price_cents"])
    return pa.RecordBatch.from_arrays(
        [batch["user"], batch["ts"], cents], names=["user", "ts", "cents"]
    )


def event_time(row: dict[str, Any]) -> float:
    """The input's watermark follows the rows' times: the files are in time order. The input is
    paced here, every hundredth row, as the input is where rows enter: a pace further down would
    fill the inboxes, and every barrier would wait behind them."""
    if PACE and row["ts"] % 100 == 0:
        time.sleep(PACE)
    return row["ts"]


def spend(event: dict[str, Any]) -> dict[str, Any]:
    """One row of the table per user and closed window: what the user spent in it."""
    return {
        "user": event["key"],
        "start": int(event["start"]),
        "end": int(event["end"]),
        "cents": event["value"],
    }
