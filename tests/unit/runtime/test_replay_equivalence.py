"""A replacement that takes a function's seat over and replays its determinants reaches the
seat's state and makes the seat's output again, message for message, however the first peer's
takes from its two inputs interleaved, whenever its timer fired and whatever its fn read from
the clock and from randomness; and it sends its downstream only what the downstream lacks."""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peer.messaging.messages import END, Barrier, Recover, Watermark
from peer.runtime import task as task_module
from peer.runtime.causal import Watchdog
from peer.runtime.phases import Phase
from peer.runtime.task import TaskRunner
from tests.unit.runtime.seat_world import (
    SeatWorld,
    committed_epoch,
    job,
    recover_body,
    step_until,
)

values = st.lists(st.integers(0, 99), min_size=1, max_size=4)
actions = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["a0", "b0"]), values),
        st.tuples(st.just("step"), st.integers(1, 4)),
    ),
    max_size=20,
)


ending = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["a0", "b0"]), values),
        st.tuples(st.just("step"), st.integers(1, 4)),
        st.tuples(st.just("end"), st.sampled_from(["a0", "b0"])),
    ),
    max_size=20,
)
"""``actions``, and the end of either input (once both have ended, the seat's windows close);
an input sends nothing after its end."""

marking = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["a0", "b0"]), values),
        st.tuples(st.just("step"), st.integers(1, 4)),
        st.tuples(
            st.just("watermark"), st.tuples(st.sampled_from(["a0", "b0"]), st.integers(0, 30))
        ),
    ),
    max_size=20,
)
"""``actions``, and watermarks from either input (each at least its last): fixed windows of the
seat's count close as the smaller of the two passes them."""


def play(world: SeatWorld, r: TaskRunner, script: list[tuple[str, Any]]) -> None:
    for what, arg in script:
        if what == "step":
            for _ in range(arg):
                r.step()
        elif what == "end":
            if END not in world.up.sent[arg]:
                world.deliver(r, arg, END)
        elif what == "watermark":
            source, value = arg
            if END not in world.up.sent[source]:
                world.deliver(r, source, Watermark(float(value)))
        elif END not in world.up.sent[what]:
            world.batch(r, what, arg)


def state(r: TaskRunner) -> Any:
    return [r.apply.snapshot(), r.windows.snapshot(), r.windows.timers()]


def started(world: SeatWorld, peer: str, told: Recover, **how: Any) -> TaskRunner:
    r = world.runner(peer, job(**how))
    r.recover_from(told)
    return r


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=actions, after=actions, commit=st.booleans(), had=st.floats(0, 1))
def test_a_replacement_reaches_the_seats_state_and_output(before, after, commit, had):
    replaced(before, after, commit, had)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=ending, after=ending, commit=st.booleans(), had=st.floats(0, 1))
def test_a_replacement_whose_input_ends_closes_the_windows_a_step_at_a_time_alike(
    before, after, commit, had
):
    """The inputs may end before the commit, or after it, within what the replacement
    replays; the close of the windows at the end goes over several steps (CLOSE_SLICE 0: a key
    a step), in the first peer and in the replay alike."""
    with patch.object(task_module, "CLOSE_SLICE", 0.0):
        replaced(before, after, commit, had)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=marking, after=marking, commit=st.booleans(), had=st.floats(0, 1))
def test_a_replacement_closes_the_windows_the_watermarks_close_alike(before, after, commit, had):
    """Watermarks sent before the commit count in the replay as in the first peer: the
    replacement starts from the watermarks the seat had taken at the barrier."""
    replaced(before, after, commit, had, on_watermarks=True)


def replaced(before: list[Any], after: list[Any], commit: bool, had: float, **how: Any) -> None:
    """The first peer plays ``before``, commits epoch 1 or not, plays ``after`` and dies with
    ``had`` of what it sent since taken downstream: its replacement sends the rest of its
    output, reaches its state (unless it had ended at the commit: a restore leaves an ended
    slot's state out), and nothing rolls back."""
    world = SeatWorld()
    try:
        first = started(world, "f0", Recover(None), **how)
        step_until(first, lambda: first.phase is Phase.RUN, "the first peer to run")
        play(world, first, before)
        epoch, ended = None, False
        if commit:
            world.deliver(first, "a0", Barrier(1))
            world.deliver(first, "b0", Barrier(1))
            committed_epoch(world, first, 1)
            epoch, ended = 1, first.phase is Phase.ENDED
        base = len(world.down.received["f0"])
        play(world, first, after)
        queues = first.intake.inbox.queues
        step_until(first, lambda: not any(queues.values()) and first.closing is None,
                   "the first peer to take everything")  # fmt: skip
        sent = world.down.received["f0"][base:]
        kept = round(had * len(sent))  # what the downstream had when the first peer died
        own = first.local.causal.log
        expected = state(first)

        again = started(world, "s0", recover_body(epoch), **how)
        step_until(again, lambda: again.phase is Phase.RECALL, "the replacement to recall")
        world.replay_to(again, base + kept, (own.start, own.since(own.start)))
        step_until(again, lambda: world.recovered, "the replacement to replay")

        assert ended or state(again) == expected
        assert world.down.received["s0"][: len(sent) - kept] == sent[kept:]
        assert world.rollbacks == []
    finally:
        world.close()


def test_a_recall_that_gets_no_answer_rolls_the_job_back():
    world = SeatWorld()
    try:
        first = started(world, "f0", Recover(None))
        step_until(first, lambda: first.phase is Phase.RUN, "the first peer to run")
        again = started(world, "s0", Recover(None))
        again.watchdog = Watchdog(0.05)
        step_until(again, lambda: world.rollbacks, "the replacement to give up")
        assert again.phase is Phase.FAILED
        assert "the recall of the downstream peers made no progress" in world.rollbacks[0]
    finally:
        world.close()


def test_a_replacement_never_told_where_to_restore_from_rolls_the_job_back():
    world = SeatWorld()
    try:
        again = world.runner("s0", job())
        again.watchdog = Watchdog(0.05)
        step_until(again, lambda: world.rollbacks, "the replacement to give up")
        assert again.phase is Phase.FAILED
        assert "the wait for where to restore the seat from made no progress" in world.rollbacks[0]
    finally:
        world.close()


def test_a_replay_whose_messages_never_come_rolls_the_job_back():
    world = SeatWorld()
    try:
        again = started(world, "s0", Recover(None))
        again.watchdog = Watchdog(0.05)
        step_until(again, lambda: again.phase is Phase.RECALL, "the replacement to recall")
        world.replay_to(again, 0, (0, [(0, ((0, 1),))]))  # a take of a batch never resent
        step_until(again, lambda: world.rollbacks, "the replacement to give up")
        assert "the replay made no progress" in world.rollbacks[0]
    finally:
        world.close()
