"""Determinant events, a task's own log, the copies downstreams hold and the deltas between."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.causal.determinants import (
    BARRIER,
    CLOCK,
    RANDOM,
    TAKE,
    TICK,
    Deltas,
    DeterminantLog,
    Holdings,
    event,
)

readings = st.floats(allow_nan=False, allow_infinity=False)
takes = st.lists(st.tuples(st.integers(0, 50), st.integers(1, 9)), max_size=3).map(tuple)
events = st.one_of(
    st.tuples(st.just(TAKE), takes),
    st.tuples(st.sampled_from([CLOCK, RANDOM, TICK]), readings),
)


def wire(value: Any) -> Any:
    """``value`` as it comes out of msgpack on another peer: tuples become lists."""
    return msgpack.unpackb(msgpack.packb(value))


@given(st.one_of(events, st.tuples(st.just(BARRIER), st.integers(0, 10**6))))
def test_an_event_survives_msgpack(original):
    assert event(wire(original)) == original


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        ([TAKE], "pair"),
        ([9, 1.0], "kind"),
        ([True, 1.0], "kind"),
        ([TAKE, [[1, 0]]], "items >= 1"),
        ([TAKE, [[-1, 2]]], "seat >= 0"),
        ([TAKE, 3], "not a list of"),
        ([CLOCK, "now"], "finite number"),
        ([RANDOM, float("nan")], "finite number"),
        ([BARRIER, 1.5], "epoch"),
        ([BARRIER, -1], "epoch"),
        ("xx", "pair"),
    ],
)
def test_a_malformed_event_is_refused_naming_what_is_wrong(raw, names):
    with pytest.raises(ValueError, match=names):
        event(raw)


def test_a_log_drops_through_the_committed_barrier_and_keeps_absolute_offsets():
    log = DeterminantLog(5, [[CLOCK, 1.0], [BARRIER, 1], [CLOCK, 2.0], [BARRIER, 2]])
    assert log.barrier_offset(1) == 7
    assert log.barrier_offset(3) is None
    log.committed(3)
    assert (log.start, log.end) == (9, 9)
    log.append((TICK, 3.0))
    assert log.since(9) == [(TICK, 3.0)]


def test_a_log_commit_without_its_barrier_drops_nothing():
    log = DeterminantLog(0, [(CLOCK, 1.0), (BARRIER, 4)])
    log.committed(2)
    assert (log.start, log.since(0)) == (0, [(CLOCK, 1.0), (BARRIER, 4)])


@pytest.mark.parametrize("offset", [2, 7, -1])
def test_since_outside_the_log_names_offset_and_range(offset):
    log = DeterminantLog(3, [(CLOCK, 1.0), (CLOCK, 2.0)])
    with pytest.raises(ValueError, match=rf"offset {offset} is outside the log's \[3, 5\]"):
        log.since(offset)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("event"), events),
        st.sampled_from(["barrier", "send", "commit sender", "commit receiver"]).map(
            lambda op: (op, None)
        ),
    ),
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_deltas_reassemble_the_senders_log_whatever_the_interleaving(script):
    """A barrier's determinant goes out with the barrier (on the next send), so an epoch
    commits only after its barrier was sent; either side may commit first."""
    log, deltas, held = DeterminantLog(), Deltas(own=7, depth=1), Holdings(depth=1)
    epoch = sent_epoch = 0
    for op, value in script:
        if op == "event":
            log.append(value)
        elif op == "barrier":
            epoch += 1
            log.append((BARRIER, epoch))
            held.receive(wire(deltas.for_downstream(3, log, held)))
            sent_epoch = epoch
        elif op == "send":
            held.receive(wire(deltas.for_downstream(3, log, held)))
        elif op == "commit sender":
            log.committed(sent_epoch)
        else:
            held.committed(sent_epoch)
    held.receive(wire(deltas.for_downstream(3, log, held)))
    copy = held.recall(7)
    if log.end == 0:
        assert copy is None
        return
    start, copied = copy
    assert start + len(copied) == log.end
    common = max(start, log.start)
    assert copied[common - start :] == log.since(common)
    log.committed(sent_epoch)
    held.committed(sent_epoch)
    assert held.recall(7) == (log.start, log.since(log.start))


def test_nothing_new_sends_no_delta():
    log, deltas, held = DeterminantLog(), Deltas(own=1, depth=1), Holdings(depth=1)
    log.append((CLOCK, 1.0))
    assert deltas.for_downstream(2, log, held) == [[1, 0, 1, [(CLOCK, 1.0)]]]
    assert deltas.for_downstream(2, log, held) == []
    assert deltas.for_downstream(3, log, held) == [[1, 0, 1, [(CLOCK, 1.0)]]]


def test_after_a_commit_a_mark_below_the_log_resumes_at_its_start():
    log, deltas, held = DeterminantLog(), Deltas(own=1, depth=1), Holdings(depth=1)
    log.append((CLOCK, 1.0))
    log.append((BARRIER, 1))
    log.append((CLOCK, 2.0))
    log.committed(1)
    assert deltas.for_downstream(2, log, held) == [[1, 2, 1, [(CLOCK, 2.0)]]]


def test_a_gap_breaks_the_copy_until_a_commit_drops_through_a_barrier_it_holds():
    held = Holdings(depth=1)
    held.add(1, 0, 1, [(CLOCK, 1.0)])
    held.add(1, 3, 1, [[CLOCK, 4.0], [BARRIER, 1], [CLOCK, 5.0]])
    assert held.recall(1) is None
    held.committed(1)
    assert held.recall(1) == (5, [(CLOCK, 5.0)])


def test_an_overlap_from_a_second_path_is_skipped():
    held = Holdings(depth=2)
    held.add(1, 0, 2, [(CLOCK, 1.0), (CLOCK, 2.0)])
    held.add(1, 1, 1, [(CLOCK, 2.0), (CLOCK, 3.0)])
    held.add(1, 0, 2, [(CLOCK, 1.0)])
    assert held.recall(1) == (0, [(CLOCK, 1.0), (CLOCK, 2.0), (CLOCK, 3.0)])
    assert held.hops(1) == 1


def test_a_malformed_delta_adds_nothing():
    held = Holdings(depth=1)
    bad = [[1, 0, 1, [[CLOCK, 1.0]]], [2, 0, 0, [[CLOCK, 1.0]]]]
    with pytest.raises(ValueError, match="hops 0"):
        held.receive(bad)
    assert held.origins() == []
    with pytest.raises(ValueError, match="not \\[origin, offset, hops, events\\]"):
        held.receive([[1, 0, 1]])


def test_a_delta_from_further_than_the_depth_is_not_kept():
    held = Holdings(depth=1)
    held.add(1, 0, 2, [(CLOCK, 1.0)])
    assert held.origins() == []
    assert held.recall(1) is None


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 4),
    st.lists(st.tuples(st.integers(0, 4), events), min_size=1, max_size=40),
)
def test_logs_travel_down_a_chain_as_far_as_the_depth(depth, script):
    """Tasks 0 -> 1 -> 2 -> 3 -> 4: task k holds task j's log iff 0 < k - j <= depth, at
    hops k - j, equal to j's own log."""
    n = 5
    logs = [DeterminantLog() for _ in range(n)]
    held = [Holdings(depth) for _ in range(n)]
    deltas = [Deltas(k, depth) for k in range(n)]
    for k, value in script:
        logs[k].append(value)
        for sender in range(n - 1):
            held[sender + 1].receive(wire(deltas[sender].for_downstream(
                sender + 1, logs[sender], held[sender])))  # fmt: skip
    for k in range(n):
        expected = [j for j in range(n) if 0 < k - j <= depth and logs[j].end]
        assert held[k].origins() == expected
        for j in expected:
            assert held[k].hops(j) == k - j
            assert held[k].recall(j) == (0, logs[j].since(0))


def test_seen_restarts_the_delta_where_the_downstream_holds_to():
    log, deltas, held = DeterminantLog(), Deltas(own=1, depth=1), Holdings(depth=1)
    for value in (1.0, 2.0, 3.0):
        log.append((CLOCK, value))
    deltas.for_downstream(2, log, held)
    deltas.seen(2, 1, 1)
    assert deltas.for_downstream(2, log, held) == [[1, 1, 1, [(CLOCK, 2.0), (CLOCK, 3.0)]]]
