"""The recorder logs live reads, gives them back in a replay, and is what peer.context uses."""

from __future__ import annotations

import random
import threading
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer import context
from peer.causal.determinants import BARRIER, CLOCK, RANDOM, TAKE, TICK, DeterminantLog
from peer.causal.recorder import Recorder, ReplayDiverged, current

steps = st.lists(
    st.one_of(
        st.sampled_from(["now", "random", "tick", "context now", "context random"]),
        st.tuples(st.just(TAKE), st.lists(st.tuples(st.integers(0, 9), st.integers(1, 5)))),
        st.tuples(st.just(BARRIER), st.integers(1, 9)),
    ),
    max_size=40,
)


def play(recorder: Recorder, script: list[Any]) -> list[Any]:
    """What a task's code and runner read, in the order they read it."""
    out = []
    with recorder.active():
        for step in script:
            if step in ("now", "random", "tick"):
                out.append(getattr(recorder, step)())
            elif step == "context now":
                out.append(context.now())
            elif step == "context random":
                out.append(context.random())
            elif recorder.replaying:
                out.append(recorder.consume(step[0]))
            else:
                recorder.record(step)
                out.append(recorder.log.since(recorder.log.end - 1)[0])
    return out


@settings(max_examples=200, deadline=None)
@given(steps, st.integers(0, 2**32), st.integers(0, 50), st.integers(0, 40))
def test_a_replay_reads_the_logged_values_and_rebuilds_the_same_log(script, seed, start, cut):
    """A replacement that replays part of the log and goes on live reads what the first run
    read up to there, and ends with a log the same up to there."""
    first = Recorder(DeterminantLog(start), random.Random(seed))
    values = play(first, script)
    logged = first.log.since(start)
    cut = min(cut, len(logged))
    again = Recorder(DeterminantLog(start), random.Random(seed + 1))
    again.replay(msgpack.unpackb(msgpack.packb(logged[:cut])))
    replayed = play(again, script)
    assert replayed[:cut] == values[:cut]
    assert again.log.since(start)[:cut] == logged[:cut]
    assert not again.replaying
    assert again.log.end == first.log.end


def test_a_replay_that_asks_for_another_kind_has_diverged():
    recorder = Recorder(DeterminantLog())
    recorder.replay([[CLOCK, 5.0]])
    with pytest.raises(ReplayDiverged, match=r"expected a random event, found clock 5\.0"):
        recorder.random()
    assert recorder.peek() == (CLOCK, 5.0)
    assert recorder.now() == 5.0
    assert recorder.peek() is None
    with pytest.raises(ReplayDiverged, match="expected a tick event, found nothing"):
        recorder.consume(TICK)


def test_a_live_event_during_a_replay_has_diverged():
    recorder = Recorder(DeterminantLog())
    recorder.replay([(RANDOM, 0.5)])
    with pytest.raises(ReplayDiverged, match="1 logged events wait"):
        recorder.record((TAKE, ((1, 1),)))


def test_a_malformed_replay_is_refused_whole():
    recorder = Recorder(DeterminantLog())
    with pytest.raises(ValueError, match="finite number"):
        recorder.replay([(CLOCK, 1.0), (CLOCK, "late")])
    assert not recorder.replaying


def test_context_goes_through_the_active_recorder_and_nests():
    outer, inner = Recorder(DeterminantLog()), Recorder(DeterminantLog())
    outer.replay([(CLOCK, 10.0), (CLOCK, 30.0)])
    inner.replay([(RANDOM, 0.25)])
    assert current() is None
    with outer.active():
        assert context.now() == 10.0
        with inner.active():
            assert context.random() == 0.25
        assert current() is outer
        assert context.now() == 30.0
    assert current() is None
    assert 0.0 <= context.random() < 1.0


def test_another_thread_does_not_see_this_threads_recorder():
    recorder = Recorder(DeterminantLog())
    seen = []
    with recorder.active():
        thread = threading.Thread(target=lambda: seen.append(current()))
        thread.start()
        thread.join()
    assert seen == [None]
