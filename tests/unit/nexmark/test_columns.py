"""Events made a batch at a time (peer.nexmark.columns) are the events made one at a time, in
their order, for any settings and any runs of event numbers."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.nexmark.columns import EVENT_SCHEMA, batch
from peer.nexmark.config import NexmarkConfig
from peer.nexmark.events import event
from tests.unit.nexmark.test_events import configs

sized = st.builds(
    NexmarkConfig,
    seed=st.integers(0, 2**64 - 1),
    hot_auction_ratio=st.integers(1, 5),
    hot_bidders_ratio=st.integers(1, 5),
    bid_proportion=st.integers(1, 50),
    avg_bid_byte_size=st.sampled_from([10, 32, 33, 100, 400]),
    out_of_order_group_size=st.sampled_from([1, 7, 100]),
)
runs = st.lists(st.tuples(st.integers(0, 10**7), st.integers(1, 200)), min_size=1, max_size=4)


def one_at_a_time(config: NexmarkConfig, numbers: list[range]) -> pa.RecordBatch:
    made = [event(config, number) for run in numbers for number in run]
    return pa.RecordBatch.from_pylist(made, schema=EVENT_SCHEMA)


def as_runs(spans: list[tuple[int, int]]) -> list[range]:
    """Ascending, apart runs, as a reading gives them."""
    out: list[range] = []
    at = 0
    for start, length in spans:
        at += start % 1000
        out.append(range(at, at + length))
        at += length + 1
    return out


@settings(max_examples=60)
@given(st.one_of(configs, sized), runs)
def test_a_batch_holds_the_events_made_one_at_a_time(config, spans):
    numbers = as_runs(spans)
    made = batch(config, numbers)
    assert made.schema == EVENT_SCHEMA
    assert made.equals(one_at_a_time(config, numbers))


def test_a_batch_of_bids_only_and_of_no_bids():
    config = NexmarkConfig(seed=3)
    bids = [range(10, 40)]  # ids 4 to 49 of each run of 50 are bids
    assert batch(config, bids).equals(one_at_a_time(config, bids))
    others = [range(50, 54)]  # a person and three auctions
    assert batch(config, others).equals(one_at_a_time(config, others))
