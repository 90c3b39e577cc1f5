"""The inbox: per-sender order, alignment on barriers, watermarks min-merged, the end."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from peer.messaging.messages import END, Barrier, Batch, Watermark
from peer.runtime.inbox import BarrierSkipped, Inbox


def test_a_barrier_holds_back_only_what_its_sender_sent_after_it():
    inbox = Inbox(frozenset({1, 2}))
    inbox.put(1, Batch([{"a": 1}]))
    inbox.put(1, Barrier(1))
    inbox.put(1, Batch([{"a": 2}]))
    inbox.put(2, Batch([{"b": 1}]))
    assert sorted(s["a" if "a" in s else "b"] for s in inbox.take(10)) == [1, 1]
    assert inbox.aligned() is None
    inbox.put(2, Batch([{"b": 2}]))
    inbox.put(2, Barrier(1))
    assert inbox.take(10) == [{"b": 2}]
    assert inbox.aligned() == Barrier(1)
    inbox.release()
    assert inbox.take(10) == [{"a": 2}]


def test_barriers_of_different_epochs_do_not_align_they_tell_of_a_skipped_barrier():
    """Barriers are released together, so senders held at different ones mean one of them
    skipped a barrier: waiting would wait for ever, so the runner is told (and rolls back)."""
    inbox = Inbox(frozenset({1, 2, 3}))
    inbox.put(1, Barrier(1))
    assert inbox.aligned() is None
    inbox.put(2, Barrier(2))
    with pytest.raises(BarrierSkipped, match="epochs 1 and 2"):
        inbox.aligned()


def test_watermarks_are_the_minimum_once_every_sender_has_one():
    inbox = Inbox(frozenset({1, 2}))
    inbox.put(1, Watermark(10.0))
    inbox.take(10)
    assert inbox.watermark() is None
    inbox.put(2, Watermark(4.0))
    inbox.put(1, Watermark(12.0))
    inbox.take(10)
    assert inbox.watermark() == 4.0


def test_drained_once_every_sender_ended_and_all_is_taken():
    inbox = Inbox(frozenset({1, 2}))
    inbox.put(1, Batch([{"x": 1}]))
    inbox.put(1, END)
    inbox.put(2, END)
    assert not inbox.drained()
    assert inbox.take(10) == [{"x": 1}]
    assert inbox.drained()


def test_items_from_a_peer_that_is_not_upstream_are_ignored():
    inbox = Inbox(frozenset({1}))
    inbox.put(9, Batch([{"x": 1}]))
    assert inbox.take(10) == []


@given(st.lists(st.tuples(st.sampled_from([1, 2, 3]), st.integers(0, 2)), max_size=60))
def test_every_segment_is_taken_once_and_never_across_a_barrier(sends):
    """Each sender sends numbered segments and a barrier after every third: what is taken
    before an alignment is exactly what was sent before the barriers."""
    inbox = Inbox(frozenset({1, 2, 3}))
    sent = {1: 0, 2: 0, 3: 0}
    for source, _ in sends:
        inbox.put(source, Batch([(source, sent[source])]))
        sent[source] += 1
    for source in (1, 2, 3):
        inbox.put(source, Barrier(1))
        inbox.put(source, Batch([(source, "after")]))
    before = []
    while batch := inbox.take(2):
        before.extend(batch)
    assert sorted(before) == sorted((s, i) for s in sent for i in range(sent[s]))
    assert inbox.aligned() == Barrier(1)
    inbox.release()
    assert sorted(inbox.take(10)) == [(1, "after"), (2, "after"), (3, "after")]


def test_arrow_batches_of_one_schema_are_taken_as_one_arrow_batch():
    inbox = Inbox(frozenset({1, 2}))
    inbox.put(1, Batch(pa.RecordBatch.from_pydict({"n": [1, 2]})))
    inbox.put(2, Batch(pa.RecordBatch.from_pydict({"n": [3]})))
    taken = inbox.take(10)
    assert isinstance(taken, pa.RecordBatch)
    assert sorted(taken.column("n").to_pylist()) == [1, 2, 3]
    assert inbox.returned({1: 1, 2: 1}) == {1: 1, 2: 1}


def test_a_single_arrow_batch_is_taken_as_it_came():
    inbox = Inbox(frozenset({1}))
    batch = pa.RecordBatch.from_pydict({"n": [1, 2]})
    inbox.put(1, Batch(batch))
    assert inbox.take(10) is batch


def test_rows_and_arrow_taken_together_become_rows():
    inbox = Inbox(frozenset({1}))
    inbox.put(1, Batch([{"n": 1}]))
    inbox.put(1, Batch(pa.RecordBatch.from_pydict({"n": [2]})))
    inbox.put(1, Batch(pa.RecordBatch.from_pydict({"m": ["x"]})))
    assert inbox.take(10) == [{"n": 1}, {"n": 2}, {"m": "x"}]
