"""Snapshots: a state restored from its msgpack snapshot is the same state and goes on emitting
what the original does; restoring with ``keep`` by key hash splits the state among slots
disjointly and completely, and restoring the slots' snapshots together puts it back."""

from __future__ import annotations

from typing import Any

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from peer.job.spec import Trigger, Window
from peer.state import TaskState
from peer.state.key_groups import groups_of, key_group
from tests.unit.state.windowed import FNS, closed, seg, state

WINDOWS = (
    Window("fixed", "agg", "fixed", "sum", key="t", range=10, field="v"),
    Window("sliding", "agg", "sliding", "count", key="t", range=10, slide=5),
    Window("session", "agg", "session", "collect", key="t", gap=4),
    Window("global", "agg", "global", "average", field="v"),
)
TRIGGERS = (
    *(Trigger(w.id, "watermark") for w in WINDOWS),
    Trigger("fixed", "segment", threshold=3, refinement="discarding"),
    Trigger("session", "punctuation", predicate=f"{FNS}:is_last"),
)

segments = st.builds(
    lambda user, half, v, last: seg(user, half / 2, v, last=last),
    st.sampled_from("abcde"),
    st.integers(0, 120),
    st.integers(-5, 5),
    st.booleans(),
)
ops = st.lists(
    st.one_of(
        st.lists(segments, max_size=6).map(lambda batch: ("apply", batch)),
        st.integers(0, 70).map(lambda mark: ("watermark", mark)),
    ),
    max_size=12,
)


def run(s: TaskState, op: tuple[str, Any]) -> list[Any]:
    kind, arg = op
    return s.apply(arg, now=0) if kind == "apply" else closed(s.watermark(arg))


def packed(s: TaskState) -> Any:
    """The snapshot as a restoring peer reads it."""
    return msgpack.unpackb(msgpack.packb(s.snapshot()), strict_map_key=False)


@given(ops, st.integers(0, 12))
def test_a_restored_state_is_equal_and_goes_on_as_the_original(steps, cut):
    original = state(WINDOWS, TRIGGERS)
    for op in steps[:cut]:
        run(original, op)
    restored = state(WINDOWS, TRIGGERS)
    restored.restore([packed(original)], lambda key: True)
    assert packed(restored) == packed(original)
    late = original.late
    for op in steps[cut:]:
        assert run(restored, op) == run(original, op)
    assert closed(restored.finish()) == closed(original.finish())
    assert restored.late == original.late - late


def owns(slot: int, slots: int, key: str) -> bool:
    return key_group(key, 128) in groups_of(slot, slots, 128)


@given(ops, st.integers(1, 4))
def test_restoring_by_key_group_splits_the_state_disjointly_and_completely(steps, slots):
    original = state(WINDOWS, TRIGGERS)
    for op in steps:
        run(original, op)
    snapshot = packed(original)
    parts = []
    for slot in range(slots):
        part = state(WINDOWS, TRIGGERS)
        part.restore([snapshot], lambda key, slot=slot: owns(slot, slots, key))
        parts.append(packed(part))
    for window in WINDOWS:
        held = [entry for part in parts for entry in part["windows"][window.id]]
        assert sorted(held, key=lambda entry: entry[0]) == snapshot["windows"][window.id]
        for slot, part in enumerate(parts):
            assert all(owns(slot, slots, key) for key, _ in part["windows"][window.id])
    whole = state(WINDOWS, TRIGGERS)
    whole.restore(parts, lambda key: True)
    assert packed(whole) == snapshot


def test_restoring_merges_what_several_slots_held_for_one_key():
    windows = (
        Window("fixed", "agg", "fixed", "sum", key="t", range=10, field="v"),
        Window("session", "agg", "session", "count", key="t", gap=4),
    )
    triggers = tuple(Trigger(w.id, "watermark") for w in windows)
    first, second, both = (state(windows, triggers, key_of=None) for _ in range(3))
    one, other = [seg("a", 1, v=2), seg("b", 9, v=3)], [seg("c", 4, v=5), seg("d", 30, v=1)]
    first.apply(one, now=0)
    second.apply(other, now=0)
    both.apply(one + other, now=0)
    closed(second.watermark(2))
    merged = state(windows, triggers, key_of=None)
    merged.restore([packed(first), packed(second)], lambda key: True)
    assert packed(merged) == {**packed(both), "watermark": 2}
    assert closed(merged.finish()) == closed(both.finish())
    assert merged.apply([seg("e", 1)], now=0) == []
    assert merged.late == 2
