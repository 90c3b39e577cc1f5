"""The logged emitter: everything goes through the in-flight log and on credit from there, and
the task reads no more while anything waits for a peer's credit; a takeover pauses the channel
until the new peer asks, and then it gets again exactly what followed the barrier it restored;
a replacement's own emitter sends nothing its downstream has."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from peer.causal.inflight import InFlightLog
from peer.messaging.codec import encode_rows
from peer.messaging.frame import Packed, pack
from peer.messaging.messages import Barrier, Batch, Determinants
from peer.runtime.logged_emit import MARKER_BYTES, ROW_BYTES, LoggedEmitter, Wiring
from peer.runtime.routing import Route, Router

SEATS = {"d0": 10, "d1": 11, "n1": 11}


def emitter(sent: list[tuple[str, Any]], window: int = 2, deltas=lambda seat: []) -> LoggedEmitter:
    """Ungrouped batches take turns between d0 and d1."""
    return LoggedEmitter(
        wiring(Router([Route("down", ("d0", "d1"))]), sent),
        lambda peer: window,
        log=InFlightLog(1 << 20),
        deltas=deltas,
    )


def wiring(router: Router, sent: list[tuple[str, Any]]) -> Wiring:
    return Wiring(router, lambda to, m: sent.append((to, m)), lambda peer: False, SEATS)


def batches(sent: list[tuple[str, Any]], to: str) -> list[Any]:
    return [m.batch for t, m in sent if t == to and isinstance(m, Batch)]


def test_a_peer_without_credit_holds_back_its_channel_and_the_task_reads_no_more():
    """What cannot go waits in the log, and the emitter is blocked while anything waits: what
    queues behind a barrier is what credit allows, not the log's budget."""
    sent: list[tuple[str, Any]] = []
    e = emitter(sent)
    for n in range(4):
        e.emit([{"n": n}])
    assert not e.blocked(), "each peer took its window"
    e.emit([{"n": 4}])
    assert e.blocked(), "d0 has no credit for what waits"
    e.emit([{"n": 5}])
    e.broadcast(Barrier(1))
    assert batches(sent, "d0") == [[{"n": 0}], [{"n": 2}]]
    assert batches(sent, "d1") == [[{"n": 1}], [{"n": 3}]]
    e.credit("d1", 2)
    assert batches(sent, "d1")[2:] == [[{"n": 5}]]
    assert [m for to, m in sent if to == "d1"][-1] == Barrier(1)
    assert e.blocked(), "d0 still waits for credit"
    e.credit("d0", 1)
    assert [m for to, m in sent if to == "d0"][-2:] == [Batch([{"n": 4}]), Barrier(1)], (
        "a marker takes no credit"
    )
    assert not e.blocked()


def test_a_channel_paused_for_a_replacement_does_not_block_the_others():
    sent: list[tuple[str, Any]] = []
    e = emitter(sent, window=100)
    e.credits[11] = 0
    e.emit([{"n": 0}])
    e.emit([{"n": 1}])
    assert e.blocked()
    e.rewire(wiring(Router([Route("down", ("d0", "n1"))]), sent))
    assert not e.blocked(), "n1 will ask for what waits"
    e.emit([{"n": 2}])
    e.emit([{"n": 3}])
    assert batches(sent, "d0") == [[{"n": 0}], [{"n": 2}]]


def test_determinants_go_ahead_of_each_message():
    sent: list[tuple[str, Any]] = []
    e = emitter(sent, deltas=lambda seat: [[seat, 0, 1, [(1, 2.0)]]])
    e.emit([{"n": 0}])
    e.broadcast(Barrier(1))
    kinds = [(to, type(m).__name__) for to, m in sent]
    assert kinds == [("d0", "Determinants"), ("d0", "Batch"), ("d0", "Determinants"),
                     ("d0", "Barrier"), ("d1", "Determinants"), ("d1", "Barrier")]  # fmt: skip
    assert sent[0][1] == Determinants([[10, 0, 1, [(1, 2.0)]]])


@settings(max_examples=100, deadline=None)
@given(before=st.integers(0, 5), after=st.integers(0, 5), unsent=st.integers(0, 3))
def test_a_new_peer_in_a_seat_gets_again_what_followed_the_barrier(before, after, unsent):
    """d1 dies with some of its batches unsent; n1 takes its seat over and asks from epoch 1:
    it gets every batch routed to the seat after the barrier, sent or not, in order, and what
    came while the channel was paused, once."""
    sent: list[tuple[str, Any]] = []
    e = emitter(sent, window=100)
    emits = [[{"n": n}] for n in range(before + after + unsent)] + [[{"n": "paused"}]]
    for n in range(before):
        e.emit(emits[n])
    e.broadcast(Barrier(1))
    for n in range(before, before + after):
        e.emit(emits[n])
    e.credits[11] = 0  # d1 stopped taking: what follows waits in the log
    for n in range(before + after, before + after + unsent):
        e.emit(emits[n])
    e.rewire(wiring(Router([Route("down", ("d0", "n1"))]), sent))
    e.emit(emits[-1])
    assert [m for to, m in sent if to == "n1"] == [], "paused until the new peer asks"
    e.replay_from("n1", 1)
    expected = [Batch(b) for i, b in enumerate(emits) if i >= before and i % 2 == 1]
    assert [m for to, m in sent if to == "n1"] == expected


def test_an_emitter_made_while_a_seat_is_recovering_sends_its_peer_everything_once():
    """The emitter is made under the allocation a replacement already recovers in (n1 took
    d1's seat over): n1 will ask from the allocation's start, so what is emitted before it asks
    waits for it, and goes once."""
    sent: list[tuple[str, Any]] = []
    e = LoggedEmitter(
        Wiring(Router([Route("down", ("d0", "n1"))]), lambda to, m: sent.append((to, m)),
               lambda peer: False, SEATS, recovering=frozenset({"n1"})),
        lambda peer: 100, log=InFlightLog(1 << 20), deltas=lambda seat: [],
    )  # fmt: skip
    for n in range(4):
        e.emit([{"n": n}])
    e.broadcast(Barrier(1))
    assert batches(sent, "d0") == [[{"n": 0}], [{"n": 2}]]
    assert [m for to, m in sent if to == "n1"] == [], "paused until the new peer asks"
    e.replay_from("n1", 0)
    assert [m for to, m in sent if to == "n1"] == [Batch([{"n": 1}]), Batch([{"n": 3}]),
                                                   Barrier(1)]  # fmt: skip
    e.emit([{"n": 4}])
    e.emit([{"n": 5}])
    assert batches(sent, "n1")[-1] == [{"n": 5}], "and then live"


def test_a_replacement_sends_nothing_its_downstream_has():
    sent: list[tuple[str, Any]] = []
    e = emitter(sent, window=100)
    e.suppress({10: 2, 11: 1})
    for n in range(4):
        e.emit([{"n": n}])
    assert batches(sent, "d0") == []
    assert batches(sent, "d1") == [[{"n": 3}]]


def test_a_peer_of_another_process_is_sent_packed_batches_and_one_of_this_process_rows():
    """d0 runs in another process: its batches are packed as they are recorded and kept so;
    d1 runs in this one: it gets the rows, and its channel keeps nothing once they went."""
    sent: list[tuple[str, Any]] = []
    log = InFlightLog(1 << 20)
    near = Wiring(Router([Route("down", ("d0", "d1"))]), lambda to, m: sent.append((to, m)),
                  lambda peer: False, SEATS, in_process={"d1"}.__contains__,
                  pack=lambda batch: pack(batch, 1 << 20))  # fmt: skip
    e = LoggedEmitter(near, lambda peer: 100, log=log, deltas=lambda seat: [])
    e.emit([{"n": 0}])
    e.emit([{"n": 1}])
    assert batches(sent, "d0") == [Packed(encode_rows([{"n": 0}]), 1)]
    assert batches(sent, "d1") == [[{"n": 1}]]
    assert log.nbytes == len(encode_rows([{"n": 0}])), "only d0's batch is kept"


def test_a_seat_taken_over_by_a_peer_of_this_process_gets_what_was_kept_then_keeps_nothing():
    sent: list[tuple[str, Any]] = []
    e = emitter(sent, window=100)
    e.broadcast(Barrier(1))
    e.emit([{"n": 0}])
    e.emit([{"n": 1}])
    here = Wiring(Router([Route("down", ("d0", "n1"))]), lambda to, m: sent.append((to, m)),
                  lambda peer: False, SEATS, in_process={"n1"}.__contains__)  # fmt: skip
    e.rewire(here)
    e.replay_from("n1", 1)
    e.emit([{"n": 2}])
    e.emit([{"n": 3}])
    assert batches(sent, "n1") == [[{"n": 1}], [{"n": 3}]]
    assert e.log.nbytes == 2 * ROW_BYTES + MARKER_BYTES, "d0's two batches and its barrier"
