"""The inbox's part in local recovery: what ``take`` consumed is logged, ``take_exact`` consumes
the same again, ``received`` counts what came and ``rekey`` hands a sender's seat over."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.messaging.messages import END, Barrier, Batch, Watermark
from peer.runtime.inbox import BarrierSkipped, Inbox

SOURCES = (1, 2, 3)

items = st.one_of(
    st.lists(st.integers(0, 99), min_size=1, max_size=4).map(
        lambda r: Batch([{"n": n} for n in r])
    ),
    st.lists(st.integers(0, 99), min_size=1, max_size=4).map(
        lambda r: Batch(pa.RecordBatch.from_pydict({"n": r}))
    ),
    st.floats(0, 1000).map(Watermark),
    st.just(END),
    st.integers(1, 3).map(Barrier),
)
puts = st.lists(st.tuples(st.sampled_from(SOURCES), items), max_size=40)


def state(inbox: Inbox) -> tuple[Any, ...]:
    return (
        {s: list(q) for s, q in inbox.queues.items()},
        inbox.watermarks,
        inbox.ended,
        inbox.consumed,
        inbox.received,
    )


def rows(batch: Any) -> Any:
    return batch if isinstance(batch, list) else ("arrow", batch.to_pylist())


def aligned(inbox: Inbox) -> Barrier | None:
    """The aligned barrier; None too where the drawn barriers skip one (this test draws any
    epochs in any order, which a real sender never sends)."""
    try:
        return inbox.aligned()
    except BarrierSkipped:
        return None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(puts, st.integers(1, 8), st.booleans()), max_size=8))
def test_take_exact_redoes_what_take_logged(rounds):
    """Whatever came and whatever the limits, consuming each logged take again gives the same
    batches and leaves the inbox as the first one was."""
    live, replay = Inbox(frozenset(SOURCES)), Inbox(frozenset(SOURCES))
    for sends, limit, release in rounds:
        for source, item in sends:
            live.put(source, item)
            replay.put(source, item)
        taken = live.take(limit)
        assert all(n > 0 for _, n in live.last_take)
        again = replay.take_exact(live.last_take)
        assert again is not None
        assert rows(again) == rows(taken)
        assert replay.last_take == live.last_take
        assert state(replay) == state(live)
        if release and aligned(live) is not None:
            live.release()
            replay.release()


def test_take_exact_waits_for_enough_items_before_any_barrier():
    inbox = Inbox(frozenset({1, 2}))
    inbox.put(1, Batch([{"a": 1}]))
    inbox.put(2, Batch([{"b": 1}]))
    inbox.put(2, Barrier(1))
    inbox.put(2, Batch([{"b": 2}]))
    before = state(inbox)
    assert inbox.take_exact([(1, 2)]) is None
    assert inbox.take_exact([(2, 2)]) is None
    assert inbox.take_exact([(1, 1), (2, 1), (1, 1)]) is None
    assert state(inbox) == before
    assert inbox.take_exact([(2, 1), (1, 1)]) == [{"b": 1}, {"a": 1}]
    assert inbox.consumed == {1: 1, 2: 1}


def test_received_counts_every_item_put_on_a_restored_base():
    inbox = Inbox(frozenset({1, 2}))
    inbox.put(1, Batch([{"a": 1}]))
    inbox.put(1, Barrier(1))
    inbox.put(9, Batch([{"stale": 1}]))
    inbox.restore_received({1: 10, 2: 4})
    inbox.restore_received({1: 10, 2: 5})
    inbox.put(2, END)
    assert inbox.received == {1: 12, 2: 6}


def test_rekey_hands_a_senders_queue_and_state_to_its_replacement():
    inbox = Inbox(frozenset({1, 2, 3}))
    inbox.put(2, Watermark(5.0))
    inbox.put(2, Batch([{"a": 1}]))
    inbox.put(2, END)
    inbox.put(2, Batch([{"late": 1}]))
    inbox.take(1)
    before = state(inbox)
    inbox.rekey(2, 7)
    assert list(inbox.queues) == [1, 7, 3]
    assert inbox.sources == frozenset({1, 3, 7})
    assert state(inbox) == tuple(_renamed(part) for part in before)
    inbox.put(7, Batch([{"b": 1}]))
    inbox.put(2, Batch([{"gone": 1}]))
    assert inbox.received == {1: 0, 7: 5, 3: 0}


def _renamed(part: Any) -> Any:
    if isinstance(part, dict):
        return {7 if k == 2 else k: v for k, v in part.items()}
    return {7 if k == 2 else k for k in part}
