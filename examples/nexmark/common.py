"""What the Nexmark queries share: the events read, the answers written.

Each query module has ``flow(events, out, **settings)``: the query as a job over ``events``
events of the generator (``settings`` are its other settings, peer.nexmark.config) writing
its answer exactly once as JSON lines under ``out``; ``COLUMNS``, the fields of an answer's
rows in the order of its ``SQL``, the query as Nexmark states it, for the oracle; and ``job``,
the query over ``EVENTS`` events into ``out/nexmark/<query>``, for ``onyx run``.

The events come as Arrow batches, and each query's first steps pick out what it needs there
(``engine: arrow`` fns, a filter and a projection in pyarrow.compute); only what they keep
becomes rows, for the windows and joins after them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from peer.job.flow import Flow, Stream

EVENTS = 100_000
"""How many events a query run with ``onyx run`` reads."""

INPUT_PEERS = 2

BATCH_DELAY = 0.002
"""Seconds a short poll of the events waits for more: making a batch of Arrow columns costs
about as much for ten events as for a hundred, so events that come at their time by the wall
clock are made a few milliseconds' worth at a time rather than a few at every step."""


def events(name: str, count: int, barrier_period: float | None = 1.0,
           **settings: Any) -> tuple[Flow, Stream]:  # fmt: skip
    """A flow named ``name`` and its input of ``count`` Nexmark events, read as Arrow batches
    (made a batch at a time, peer.nexmark.columns): a task whose fn takes rows is given each
    batch's rows, every kind's fields in each, null where its kind has none."""
    flow = Flow(name, barrier_period=barrier_period)
    read = flow.input("events", "peer.plugins.nexmark:input", events=count, format="arrow",
                      **settings, n_peers=INPUT_PEERS, batch_size=500,
                      max_batch_delay=BATCH_DELAY)  # fmt: skip
    return flow, read


def answer(stream: Stream, out: str) -> None:
    """Write what ``stream`` gives under ``out``, exactly once."""
    stream.output("write", "peer.plugins.jsonl:exactly_once_output", path=out, n_peers=1)


BID_FIELDS = ("auction", "bidder", "price", "channel", "url", "dateTime", "extra")


def of_kind(events: pa.RecordBatch, kind: str, fields: Sequence[str]) -> pa.RecordBatch:
    """The events of ``kind``, with only ``fields``."""
    return events.filter(pc.equal(events["kind"], kind)).select(list(fields))


def bid(events: pa.RecordBatch) -> pa.RecordBatch:
    """The bids, with a bid's fields."""
    return of_kind(events, "bid", BID_FIELDS)
