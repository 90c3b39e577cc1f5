"""The runner's parts: each task gets the intake, apply step and emitter its kind and engine
choose, and each part keeps the accounts the runner relies on (credit, alignment, marks)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from peer.job.spec import Task, Window
from peer.messaging.messages import END, Barrier, Batch, Watermark
from peer.metrics import task_meters
from peer.runtime.apply import Apply, PythonApply, SparkApply, apply_for
from peer.runtime.emit import (
    LOCAL_WINDOW,
    WINDOW,
    PluginEmitter,
    RouterEmitter,
    emitter_for,
    window,
)
from peer.runtime.intake import InboxIntake, PluginIntake, intake_for
from peer.runtime.placement import place
from peer.runtime.routing import Route, Router
from peer.runtime.task_windows import UNWINDOWED, Windowed
from peer.state import TaskState
from peer.values.columnar import collect
from tests.unit.runtime.test_placement import job
from tests.unit.runtime.test_task import FNS, World, run, runner

METERS = task_meters("j", "t")


def kind(name: str, **fields) -> Task:
    return Task("t", name, **fields)


@pytest.mark.parametrize(
    ("task", "intake", "emitter"),
    [
        (kind("input"), PluginIntake, RouterEmitter),
        (kind("function"), InboxIntake, RouterEmitter),
        (kind("output"), InboxIntake, PluginEmitter),
    ],
)
def test_the_kind_chooses_the_intake_and_the_emitter(task, intake, emitter):
    assert type(intake_for(task, frozenset({1}), print, METERS)) is intake
    assert type(emitter_for(task, Router(()), print, lambda: False)) is emitter


@pytest.mark.parametrize(
    ("task", "part"),
    [
        (kind("function", fn=f"{FNS}:double"), PythonApply),
        (kind("input"), Apply),
        (kind("function", fn="tests.integration.spark_fns:identity", engine="spark"), SparkApply),
    ],
)
def test_the_engine_chooses_the_apply_step(task, part):
    assert type(apply_for(task)) is part


def test_an_engine_without_an_apply_step_is_refused_naming_the_task():
    with pytest.raises(ValueError, match="task 't': engine 'cobol' has no apply step"):
        apply_for(kind("function", fn=f"{FNS}:double", engine="cobol"))


def test_a_stateful_fn_is_flushed_and_a_stateless_one_has_nothing_to_keep():
    total = apply_for(kind("function", fn=f"{FNS}:Total"))
    assert total.apply([{"n": 2}, {"n": 3}]) == []
    assert total.flush() == [{"total": 5}]
    double = apply_for(kind("function", fn=f"{FNS}:double"))
    assert (double.snapshot(), double.flush()) == (None, [])


@given(st.lists(st.one_of(st.none(), st.integers(), st.lists(st.integers(), max_size=3))))
def test_what_fns_return_is_flattened_in_order(results):
    expected = []
    for r in results:
        expected += r if isinstance(r, list) else [] if r is None else [r]
    assert collect(results) == expected


def test_one_segment_per_segment_is_the_batch_itself():
    results = [{"n": 1}, {"n": 2}]
    assert collect(results) is results


@given(
    st.lists(st.one_of(st.just("emit"), st.tuples(st.sampled_from(["a", "b"]), st.integers(1, 40))))
)
def test_a_router_emitter_is_blocked_exactly_when_a_peer_has_no_credit_left(actions):
    """Each batch costs its peer one credit, each grant gives some back."""
    expected = dict.fromkeys(("a", "b"), WINDOW)

    def send(peer: str, batch: list) -> None:
        expected[peer] -= 1

    emitter = RouterEmitter(Router([Route("next", ("a", "b"))]), send, lambda: False)
    for action in actions:
        if action == "emit":
            emitter.emit([{"n": 1}])
        else:
            emitter.credit(*action)
            expected[action[0]] += action[1]
        assert emitter.credits == expected
        assert emitter.blocked() == (min(expected.values()) <= 0)


def test_a_congested_downstream_blocks_a_router_emitter():
    congested = [False]
    emitter = RouterEmitter(Router([Route("next", ("a",))]), print, lambda: congested[0])
    assert not emitter.blocked()
    congested[0] = True
    assert emitter.blocked()


def test_an_input_takes_barriers_from_its_coordinator_and_marks_from_its_assigned_times():
    intake = intake_for(kind("input", batch_size=2), frozenset(), print, METERS)

    class Source:
        def poll(self, limit):
            return [{"t": 3.0}, {"t": 1.0}][:limit]

    intake.attach(Source(), lambda s: s["t"])
    intake.deliver(0, Batch([{"t": 9.0}]))
    intake.deliver(0, Barrier(1))
    assert (intake.next_barrier(), intake.next_barrier()) == (Barrier(1), None)
    assert intake.read() == [{"t": 3.0}, {"t": 1.0}]
    assert intake.mark() == 3.0
    intake.end()
    assert intake.read() == []


def test_an_inbox_intake_grants_credit_aligns_barriers_and_marks_the_slowest_sender():
    grants = []
    intake = intake_for(
        kind("function", batch_size=1), frozenset({1, 2}), lambda *g: grants.append(g), METERS
    )
    for n in range(WINDOW // 2):
        intake.deliver(1, Batch([{"n": n}]))
    intake.deliver(1, Watermark(5.0))
    intake.deliver(2, Watermark(3.0))
    while intake.read():
        pass
    assert grants == [(1, WINDOW // 2, 0)]
    assert intake.mark() == 3.0
    intake.deliver(1, Barrier(1))
    assert intake.aligned() is None
    intake.deliver(2, Barrier(1))
    assert intake.aligned() == Barrier(1)
    assert intake.aligned() is None
    intake.deliver(1, END)
    intake.deliver(2, END)
    intake.read()
    assert intake.finished()


def test_an_output_writes_through_its_plugin_until_it_has_written():
    world = World()
    r = runner(Task("out", "output", plugin="peer.plugins.null:output"), world, upstream={1})
    r.deliver(1, Batch([{"n": 1}]))
    run(r)
    assert isinstance(r.emitter, PluginEmitter)
    assert r.emitter.plugin is r.plugin
    assert (r.plugin.written, r.emitter.staged) == (1, False)


def test_a_windowed_task_loads_its_window_state():
    r = runner(
        kind("function", fn=f"{FNS}:double"),
        World(),
        upstream={1},
        windows=[Window("w", "t", "global", "count")],
    )
    run(r, 1)
    assert isinstance(r.windows, Windowed)
    assert isinstance(r.windows.state, TaskState)


def test_a_task_without_windows_passes_its_rows_on_and_reads_no_clock():
    """Its runner's windows are the pass-through, which never reads the clock it is handed (a
    logging clock logs every read)."""
    r = runner(kind("function", fn=f"{FNS}:double"), World(), upstream={1})
    run(r, 1)
    assert r.windows is UNWINDOWED

    class Unread:
        def now(self) -> float:
            raise AssertionError("the clock was read")

        def due(self, at: float) -> float | None:
            raise AssertionError("the clock was read")

    rows = [{"n": 1}]
    assert r.windows.apply(rows, Unread()) is rows
    assert r.windows.due(Unread()) == []


def test_an_edge_within_a_group_has_the_small_window_and_one_between_groups_the_large():
    placement = place(
        job([("in", "out")], {"in": "input", "out": "output"}),
        1,
        {"in": ("i1", "i2"), "out": ("o1",)},
        {"j": 9, "i1": 1, "i2": 2, "o1": 3},
        {"i1": "a", "i2": "b", "o1": "a"},
    )
    assert window(placement, "i1", "o1") == LOCAL_WINDOW < WINDOW
    assert window(placement, "i2", "o1") == WINDOW
    assert window(placement, "i1", "unplaced") == WINDOW


def test_credit_goes_back_to_each_sender_at_half_of_its_own_window():
    """A peer of the receiver's group gets its credit back after LOCAL_WINDOW // 2 batches, so
    it never runs more than a few batches ahead; one elsewhere after WINDOW // 2."""
    grants = []
    windows = {1: LOCAL_WINDOW, 2: WINDOW}
    intake = intake_for(
        kind("function", batch_size=1), frozenset(windows), lambda *g: grants.append(g), METERS,
        window=windows.__getitem__,
    )  # fmt: skip
    for n in range(WINDOW // 2):
        intake.deliver(1, Batch([{"n": n}]))
        intake.deliver(2, Batch([{"n": n}]))
    while intake.read():
        pass
    local = [g for g in grants if g[0] == 1]
    assert local == [(1, LOCAL_WINDOW // 2, 0)] * (WINDOW // LOCAL_WINDOW)
    assert [g for g in grants if g[0] == 2] == [(2, WINDOW // 2, 0)]


def test_a_router_emitter_starts_each_peer_with_its_own_window():
    emitter = RouterEmitter(
        Router([Route("next", ("near", "far"))]), print, lambda: False,
        {"near": LOCAL_WINDOW, "far": WINDOW}.__getitem__,
    )  # fmt: skip
    assert emitter.credits == {"near": LOCAL_WINDOW, "far": WINDOW}
    for _ in range(LOCAL_WINDOW):
        emitter.emit([{"n": 1}])  # ungrouped batches take turns: near, far, near, ...
    assert emitter.credits == {"near": LOCAL_WINDOW // 2, "far": WINDOW - LOCAL_WINDOW // 2}


def test_an_input_reads_nothing_from_a_pause_until_the_next_barrier():
    """A hand-over's pause: nothing is read after it; an ordinary barrier starts reads again."""
    intake = PluginIntake(kind("input", batch_size=10))

    class Counting:
        def poll(self, limit):
            return [{"n": 1}]

    intake.attach(Counting(), None)
    assert intake.read() == [{"n": 1}]
    intake.deliver(0, Barrier(1, pause=True))
    assert intake.read() == []
    assert intake.next_barrier() == Barrier(1, pause=True)
    assert intake.read() == []
    intake.deliver(0, Barrier(2))
    assert intake.next_barrier() == Barrier(2)
    assert intake.read() == [{"n": 1}]
