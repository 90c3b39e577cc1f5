"""The in-flight log: per-channel seqs, sends, suppression, commits, rewinds and the budget."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.causal.inflight import InFlightLog, LogLost
from peer.messaging.messages import Barrier

SEATS = (1, 2, 3)


def drain(log: InFlightLog, seat: int) -> list[tuple[int, Any]]:
    """Send ``seat`` everything it has not been sent, as a sender would."""
    out = []
    while (unsent := log.next_unsent(seat)) is not None:
        out.append(unsent)
        log.sent(seat, unsent[0])
    return out


class Streams:
    """What was recorded for each seat, by seq: the reference the log is checked against."""

    def __init__(self, log: InFlightLog) -> None:
        self.log = log
        self.items: dict[int, dict[int, Any]] = {s: {} for s in SEATS}

    def record(self, seat: int, item: Any, nbytes: int) -> int:
        seq = self.log.record(seat, item, nbytes)
        assert seq == len(self.items[seat]) + 1
        self.items[seat][seq] = item
        return seq

    def barrier(self, epoch: int) -> None:
        for seat in SEATS:
            self.record(seat, Barrier(epoch), 1)

    def after(self, seat: int, epoch: int) -> list[tuple[int, Any]]:
        items = self.items[seat]
        at = max((q for q, i in items.items() if i == Barrier(epoch)), default=0)
        return [(q, items[q]) for q in sorted(items) if q > at]


script = st.lists(
    st.one_of(
        st.tuples(st.just("item"), st.sampled_from(SEATS), st.integers(0, 40)),
        st.tuples(st.just("send"), st.sampled_from(SEATS), st.integers(0, 5)),
        st.tuples(st.just("barrier"), st.just(0), st.just(0)),
    ),
    max_size=80,
)


def run(log: InFlightLog, ops: list[tuple[str, int, int]]) -> tuple[Streams, dict, int]:
    """Record items and barriers and send some of each channel; what each seat got."""
    streams, got, epoch = Streams(log), {s: [] for s in SEATS}, 0
    for op, seat, n in ops:
        if op == "item":
            streams.record(seat, ("x", seat, n), n)
        elif op == "barrier":
            epoch += 1
            streams.barrier(epoch)
        else:
            for _ in range(n):
                unsent = log.next_unsent(seat)
                if unsent is None:
                    break
                got[seat].append(unsent)
                log.sent(seat, unsent[0])
    return streams, got, epoch


@settings(max_examples=200, deadline=None)
@given(script, st.integers(1, 200))
def test_every_item_goes_out_once_in_seq_order_whatever_the_budget(ops, budget):
    """Seqs are contiguous per channel and an unsent item is never dropped, even when the
    budget overflows and sent items go."""
    log = InFlightLog(budget)
    streams, got, _ = run(log, ops)
    for seat in SEATS:
        got[seat].extend(drain(log, seat))
        assert got[seat] == sorted(streams.items[seat].items())
    assert log.unsent_bytes == 0
    assert log.channels() == []


@settings(max_examples=200, deadline=None)
@given(script, st.sampled_from(SEATS), st.integers(0, 30))
def test_suppressed_seqs_are_never_sent(ops, seat, upto):
    log = InFlightLog(10**6)
    log.suppress(seat, upto)
    streams, got, _ = run(log, ops)
    got[seat].extend(drain(log, seat))
    assert got[seat] == [(q, i) for q, i in sorted(streams.items[seat].items()) if q > upto]


@settings(max_examples=200, deadline=None)
@given(script, st.data())
def test_a_rewind_resends_exactly_what_followed_the_barrier(ops, data):
    log = InFlightLog(10**6)
    streams, _, epoch = run(log, ops)
    for seat in SEATS:
        drain(log, seat)
    committed = data.draw(st.integers(0, epoch), label="committed")
    log.committed(committed)
    after = data.draw(st.integers(0, epoch), label="after")
    seat = data.draw(st.sampled_from(SEATS), label="seat")
    if after < committed:
        with pytest.raises(LogLost, match=f"seat {seat}'s items after epoch {after}"):
            log.rewind(seat, after)
        return
    log.rewind(seat, after)
    assert drain(log, seat) == streams.after(seat, after)


def test_a_commit_drops_only_what_was_sent():
    log = InFlightLog(10**6)
    log.record(1, "a", 5)
    log.record(1, Barrier(1), 1)
    log.record(1, "b", 7)
    log.committed(1)
    assert (log.nbytes, log.unsent_bytes) == (13, 13)
    drain(log, 1)
    log.committed(1)
    assert log.nbytes == 7
    log.rewind(1, 1)
    assert drain(log, 1) == [(3, "b")]


def test_past_the_budget_sent_items_go_and_the_log_is_lost_until_a_later_barrier_commits():
    log = InFlightLog(10)
    log.record(1, "a", 6)
    drain(log, 1)
    log.record(1, Barrier(1), 1)
    log.record(1, "b", 6)
    assert (log.lost, log.overflows, log.nbytes) == (True, 1, 7)
    with pytest.raises(LogLost, match="seat 1 cannot get again what followed epoch 1"):
        log.rewind(1, 1)
    drain(log, 1)
    log.committed(1)
    assert log.lost, "Barrier(1) came before the loss"
    log.record(1, Barrier(2), 1)
    log.record(2, Barrier(2), 1)
    log.record(1, "c", 1)
    drain(log, 1)
    drain(log, 2)
    log.committed(2)
    assert not log.lost
    log.rewind(1, 2)
    assert drain(log, 1) == [(5, "c")]


def test_unsent_items_are_kept_past_the_budget_and_block_the_sender():
    log = InFlightLog(10)
    for n in range(5):
        log.record(1, n, 4)
    assert (log.lost, log.nbytes, log.unsent_bytes) == (False, 20, 20)
    assert log.blocked()
    assert log.channels() == [1]
    assert [item for _, item in drain(log, 1)] == [0, 1, 2, 3, 4]
    assert not log.blocked()


def test_numbering_goes_on_from_restored_counts():
    log = InFlightLog(100)
    log.record(1, "a", 1)
    restored = InFlightLog(100)
    restored.restore(log.counts())
    assert restored.record(1, "b", 1) == 2
    assert restored.record(2, "c", 1) == 1
    assert restored.counts() == {1: 2, 2: 1}
    with pytest.raises(ValueError, match="holds items"):
        restored.restore({1: 5})


def test_after_a_restore_and_its_commit_a_rewind_resends_everything_held():
    log = InFlightLog(100)
    log.restore({1: 4})
    log.committed(3)
    log.record(1, "e", 1)
    drain(log, 1)
    log.rewind(1, 3)
    assert drain(log, 1) == [(5, "e")]
    with pytest.raises(LogLost, match="last commit: epoch 3"):
        log.rewind(1, 2)


def test_sending_past_what_was_recorded_is_refused():
    log = InFlightLog(100)
    log.record(1, "a", 1)
    with pytest.raises(ValueError, match="seq 2 for seat 1 is past the 1 items recorded"):
        log.sent(1, 2)


@settings(max_examples=200, deadline=None)
@given(script, st.sets(st.sampled_from(SEATS)), st.integers(1, 200))
def test_a_seat_in_the_senders_process_holds_only_what_it_has_not_been_sent(ops, near, budget):
    """Whatever the budget, a seat not kept gets every item once, in order, as a kept one
    does; the log holds nothing of it once sent, so it never overflows for it."""
    log = InFlightLog(budget)
    for seat in near:
        log.keep(seat, False)
    streams, got, _ = run(log, ops)
    if near == set(SEATS):
        assert log.nbytes == log.unsent_bytes
        assert (log.overflows, log.lost) == (0, False)
    for seat in SEATS:
        got[seat].extend(drain(log, seat))
        assert got[seat] == sorted(streams.items[seat].items())
    if near == set(SEATS):
        assert log.nbytes == 0


def test_a_seat_not_kept_cannot_be_rewound():
    log = InFlightLog(100)
    log.keep(1, False)
    log.record(1, "a", 5)
    assert (log.nbytes, log.unsent_bytes) == (5, 5), "unsent items wait in the log"
    drain(log, 1)
    log.record(1, Barrier(1), 1)
    drain(log, 1)
    assert log.nbytes == 0
    with pytest.raises(LogLost, match="seat 1's peer ran in this process"):
        log.rewind(1, 0)


def test_a_seat_taken_over_by_a_peer_of_this_process_gets_what_was_kept_then_keeps_nothing():
    log = InFlightLog(100)
    log.record(1, Barrier(1), 1)
    log.record(1, "a", 5)
    drain(log, 1)
    log.keep(1, False)  # the seat's new peer runs here
    log.rewind(1, 1)
    assert drain(log, 1) == [(2, "a")]
    log.record(1, "b", 5)
    assert drain(log, 1) == [(3, "b")]
    assert log.nbytes == 0
