"""Aggregation laws: folding segments one by one equals merging the folds of any split of them;
merge is associative and commutative (collect's up to order) and init is its identity."""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from peer.job.spec import AGGREGATIONS, Window
from peer.state.aggregations import BUILT_INS, Aggregation, aggregation
from tests.unit.state import state_fns

USER = "tests.unit.state.state_fns:DISTINCT"
NAMES = [*AGGREGATIONS, USER]
FIELDS = {"sum": "v", "min": "v", "max": "v", "average": "v", "collect_by_key": "k", "top": "v",
          USER: "k"}  # fmt: skip

segments = st.lists(
    st.fixed_dictionaries({"v": st.integers(-1000, 1000), "k": st.sampled_from("abc")}),
    max_size=30,
).map(lambda found: [{**s, "id": i} for i, s in enumerate(found)])


def window(name: str) -> Window:
    return Window(
        "w", "t", "global", name, field=FIELDS.get(name), top=2 if name == "top" else None
    )


def fold(name: str, segs: list[Any]) -> Any:
    w, agg = window(name), aggregation(window(name))
    state = agg.init(w)
    for segment in segs:
        state = agg.apply_state_update(w, state, agg.create_state_update(w, state, segment))
    return state


def merge(name: str, a: Any, b: Any) -> Any:
    """Merging may reuse its arguments, so it is given copies."""
    return aggregation(window(name)).merge(window(name), copy.deepcopy(a), copy.deepcopy(b))


def unordered(name: str, state: Any) -> Any:
    """The state with collected segments in one order: collect keeps arrival order, which a
    merge of a split cannot know."""
    if name in ("collect", "top"):  # top keeps the arrival order of ties
        return sorted(state, key=lambda s: json.dumps(s, sort_keys=True))
    if name == "collect_by_key":
        return {k: unordered("collect", v) for k, v in sorted(state.items())}
    return state


@given(segments)
def test_top_keeps_every_segment_of_the_two_highest_ranks(segs):
    """As SQL's RANK() <= 2: a segment is kept when fewer than two others are higher."""
    kept = fold("top", segs)
    expected = [s for s in segs if sum(o["v"] > s["v"] for o in segs) < 2]
    assert unordered("top", kept) == unordered("top", expected)
    assert [s["v"] for s in kept] == sorted((s["v"] for s in kept), reverse=True)


def test_every_built_in_is_there():
    assert set(BUILT_INS) == set(AGGREGATIONS)
    assert aggregation(window(USER)) is state_fns.DISTINCT


@pytest.mark.parametrize("name", NAMES)
@given(segs=segments, parts=st.lists(st.integers(0, 3), min_size=30, max_size=30))
def test_folding_equals_merging_the_folds_of_any_split(name, segs, parts):
    split = [[s for s, part in zip(segs, parts, strict=False) if part == p] for p in range(4)]
    folds = [fold(name, part) for part in split]
    merged = functools.reduce(functools.partial(merge, name), folds)
    assert unordered(name, merged) == unordered(name, fold(name, segs))


@pytest.mark.parametrize("name", NAMES)
@given(segs=segments, cut=st.integers(0, 30))
def test_merging_a_prefix_and_its_suffix_keeps_the_order(name, segs, cut):
    assert merge(name, fold(name, segs[:cut]), fold(name, segs[cut:])) == fold(name, segs)


@pytest.mark.parametrize("name", NAMES)
@given(a=segments, b=segments, c=segments)
def test_merge_is_associative_and_commutative_with_init_its_identity(name, a, b, c):
    x, y, z = fold(name, a), fold(name, b), fold(name, c)
    assert merge(name, merge(name, x, y), z) == merge(name, x, merge(name, y, z))
    assert unordered(name, merge(name, x, y)) == unordered(name, merge(name, y, x))
    init = fold(name, [])
    assert merge(name, init, x) == x == merge(name, x, init)


@pytest.mark.parametrize("name", NAMES)
@given(segs=segments)
def test_states_are_plain_data_that_survive_msgpack(name, segs):
    state = fold(name, segs)
    agg: Aggregation = aggregation(window(name))
    assert msgpack.unpackb(msgpack.packb(state), strict_map_key=False) == state
    assert agg.value(msgpack.unpackb(msgpack.packb(state), strict_map_key=False)) == agg.value(
        state
    )


def test_values():
    segs = [{"v": 3, "k": "a"}, {"v": -1, "k": "b"}, {"v": 4, "k": "a"}]
    values = {name: aggregation(window(name)).value(fold(name, segs)) for name in NAMES}
    assert values == {
        "count": 3,
        "sum": 6,
        "min": -1,
        "max": 4,
        "average": 2.0,
        "collect": segs,
        "collect_by_key": {"a": [segs[0], segs[2]], "b": [segs[1]]},
        "top": [segs[2], segs[0]],
        USER: ["a", "b"],
    }
    empty = {name: aggregation(window(name)).value(fold(name, [])) for name in NAMES}
    assert empty == {
        "count": 0,
        "sum": 0,
        "min": None,
        "max": None,
        "average": None,
        "collect": [],
        "collect_by_key": {},
        "top": [],
        USER: [],
    }


def test_a_value_does_not_change_with_its_state():
    w, agg = window("collect"), aggregation(window("collect"))
    state = fold("collect", [{"v": 1}])
    value = agg.value(state)
    agg.apply_state_update(w, state, {"v": 2})
    assert value == [{"v": 1}]
    by_key = fold("collect_by_key", [{"k": "a"}])
    value = aggregation(window("collect_by_key")).value(by_key)
    by_key["a"].append({"k": "a", "n": 2})
    assert value == {"a": [{"k": "a"}]}
