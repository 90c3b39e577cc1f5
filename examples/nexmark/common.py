"""What the Nexmark queries share: the events read, the answers written.

Each query module has ``flow(events, out, **settings)``: the query as a job over ``events``
events of the generator (``settings`` are its other settings, peer.nexmark.config) writing
its answer exactly once as JSON lines under ``out``; ``COLUMNS``, the fields of an answer's
rows in the order of its ``SQL``, the query as Nexmark states it, for the oracle; and ``job``,
the query over ``EVENTS`` events into ``out/nexmark/<query>``, for ``onyx run``."""

from __future__ import annotations

from typing import Any

from peer.job.flow import Flow, Stream

EVENTS = 100_000
"""How many events a query run with ``onyx run`` reads."""

INPUT_PEERS = 2


def events(name: str, count: int, barrier_period: float | None = 1.0,
           **settings: Any) -> tuple[Flow, Stream]:  # fmt: skip
    """A flow named ``name`` and its input of ``count`` Nexmark events, read as Arrow batches
    (made a batch at a time, peer.nexmark.columns): a task whose fn takes rows is given each
    batch's rows, every kind's fields in each, null where its kind has none."""
    flow = Flow(name, barrier_period=barrier_period)
    read = flow.input("events", "peer.plugins.nexmark:input", events=count, format="arrow",
                      **settings, n_peers=INPUT_PEERS, batch_size=500)  # fmt: skip
    return flow, read


def answer(stream: Stream, out: str) -> None:
    """Write what ``stream`` gives under ``out``, exactly once."""
    stream.output("write", "peer.plugins.jsonl:exactly_once_output", path=out, n_peers=1)


def bid(event: dict[str, Any]) -> dict[str, Any] | None:
    """The event if it is a bid."""
    return event if event["kind"] == "bid" else None
