"""A member's outbox to one worker: putting never waits, even when the worker reads nothing; a
worker whose messages make no progress for the timeout, counted in the member's running time,
or that lets too many pile up, is stuck; one that reads is never stuck."""

from __future__ import annotations

from multiprocessing import Pipe

from hypothesis import given, settings
from hypothesis import strategies as st

from peer.cluster.worker_outbox import CHECK_GAP, WorkerOutbox
from tests.support import wait_for

BIG = b"x" * (4 << 20)
"""More than a pipe holds: its send blocks until the other end reads."""


def blocked(timeout: float = 3.0, limit: int = 100) -> tuple[WorkerOutbox, object]:
    """An outbox whose sender is stuck in a send nobody reads; and the unread end."""
    member, worker = Pipe()
    outbox = WorkerOutbox(member, "worker 0", timeout, limit)
    assert outbox.put(BIG)
    wait_for(lambda: outbox.in_flight, 5, "the sender to start sending", 0.001)
    return outbox, worker


def test_putting_never_waits_for_a_worker_that_reads_nothing():
    outbox, _ = blocked()
    for n in range(50):
        assert outbox.put(("apply", n))
    assert len(outbox.waiting) == 50
    outbox.close()


def test_no_progress_for_the_timeout_of_running_time_is_stuck():
    outbox, _ = blocked(timeout=3.0)
    checks = [0.0, 0.9, 1.8, 2.7]
    assert not any(outbox.stuck(t) for t in checks)
    assert outbox.stuck(3.6)
    outbox.close()


def test_a_member_that_was_not_running_counts_no_more_than_a_check_gap():
    """A member stopped for a minute finds its messages late through no fault of the worker."""
    outbox, _ = blocked(timeout=3.0)
    assert not outbox.stuck(0.0)
    assert not outbox.stuck(60.0)
    assert outbox.waited == CHECK_GAP
    outbox.close()


def test_too_many_messages_waiting_is_stuck_at_once():
    outbox, _ = blocked(limit=3)
    assert all(outbox.put(n) for n in range(3))
    assert not outbox.put(3)
    assert outbox.stuck(0.0)
    outbox.close()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.0, 5.0), min_size=1, max_size=30))
def test_a_worker_that_reads_is_never_stuck(gaps):
    member, worker = Pipe()
    outbox = WorkerOutbox(member, "worker 0", timeout=1.0)
    now = 0.0
    for n, gap in enumerate(gaps):
        assert outbox.put(n)
        assert worker.recv() == n
        wait_for(lambda: not outbox.in_flight, 5, "the send to finish", 0.001)
        now += gap
        assert not outbox.stuck(now)
    outbox.close()


def test_a_worker_gone_takes_nothing_more():
    member, worker = Pipe()
    outbox = WorkerOutbox(member, "worker 0", timeout=1.0)
    worker.close()
    outbox.put("first")
    wait_for(lambda: outbox.closed, 5, "the sender to see the pipe broken")
    assert not outbox.put("second")


def test_an_ask_left_unanswered_for_the_timeout_is_stuck_though_the_pipe_took_it():
    """A stopped worker's pipe still takes a small message, so only the missing answer tells."""
    member, worker = Pipe()
    outbox = WorkerOutbox(member, "worker 0", timeout=3.0)
    assert outbox.ask("ping")
    assert worker.recv() == "ping"
    wait_for(lambda: not outbox.in_flight, 5, "the send to finish", 0.001)
    assert not any(outbox.stuck(t) for t in (0.0, 0.9, 1.8, 2.7))
    assert outbox.stuck(3.6)
    outbox.close()


def test_an_answered_ask_is_progress():
    member, worker = Pipe()
    outbox = WorkerOutbox(member, "worker 0", timeout=1.0)
    now = 0.0
    for n in range(5):
        assert outbox.ask(n)
        assert worker.recv() == n
        assert not outbox.stuck(now)
        now += 0.9
        outbox.answer()
        assert not outbox.waiting_answer
        assert not outbox.stuck(now)
    outbox.close()
