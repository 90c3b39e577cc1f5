"""Stream joins (peer.state.joins): for any rows of the two sides, taken in any batches with any
watermarks between them, a join sends exactly the pairs its definition names among the rows
that were not late, each once; restored from its keyed state's snapshot it goes on as the
original would; bad rows fail it naming the job, the task, the join and the field."""

from __future__ import annotations

import math
from typing import Any

import msgpack
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from peer.job.spec import Job, Join, Task
from peer.state.backends import MemoryBackend
from peer.state.joins import JoinPart
from peer.state.keyed import KeyedState
from peer.values.columnar import Late, SchemaViolation, Sided

GROUPS = 8
RANGE, SLIDE, LOWER, UPPER = 10, 5, -2, 3


def job(join_type: str, **bounds: Any) -> Job:
    join = Join("j", "joined", join_type, "lefts", "rights", "k", "k", **bounds)
    catalog = (Task("lefts", "input", plugin="peer.plugins.memory:input"),
               Task("rights", "input", plugin="peer.plugins.memory:input"),
               Task("joined", "function"),
               Task("out", "output", plugin="peer.plugins.null:output"))  # fmt: skip
    workflow = (("lefts", "joined"), ("rights", "joined"), ("joined", "out"))
    return Job(workflow, catalog, joins=(join,), id="jobbed")


TIMED = {"left_time": "t", "right_time": "t"}
JOINS = {
    "window": job("window", range=RANGE, **TIMED),
    "sliding": job("window", range=RANGE, slide=SLIDE, **TIMED),
    "interval": job("interval", lower=LOWER, upper=UPPER, **TIMED),
    "until": job("interval", lower=0, until="u", **TIMED),
    "regular": job("regular", ttl=1_000_000),
}


def part(name: str) -> tuple[JoinPart, KeyedState]:
    keyed = KeyedState(GROUPS, MemoryBackend())
    return JoinPart(JOINS[name], "joined", keyed), keyed


def shared(name: str, left: dict, right: dict) -> list[int]:
    """The starts of the extents of the window join ``name`` that hold both rows."""
    slide = SLIDE if name == "sliding" else RANGE
    return [k * slide for k in range(-3, 10)
            if all(k * slide <= r["t"] < k * slide + RANGE for r in (left, right))]  # fmt: skip


def pairs_of(name: str, left: dict, right: dict) -> list[Any]:
    """Each time the join ``name`` pairs ``left`` with ``right``, by its definition: once per
    extent they share in a window join, with the extent's start, else once."""
    if left["k"] != right["k"]:
        return []
    if name in ("window", "sliding"):
        return shared(name, left, right)
    if name == "interval":
        return [None] if left["t"] + LOWER <= right["t"] <= left["t"] + UPPER else []
    if name == "until":
        return [None] if left["t"] <= right["t"] <= left["u"] else []
    return [None]


row = st.fixed_dictionaries({"k": st.integers(0, 3), "t": st.integers(0, 30),
                             "u": st.integers(0, 40)})  # fmt: skip
step = st.one_of(
    st.tuples(st.just("rows"), st.lists(st.tuples(st.integers(0, 1), row), max_size=6)),
    st.tuples(st.just("mark"), st.integers(0, 30)),
)
steps = st.lists(step, max_size=12)


def numbered(steps: list) -> list:
    """The steps with each row given a number of its own, so that pairs can be told apart."""
    out, n = [], 0
    for kind, value in steps:
        if kind == "rows":
            out.append((kind, [(side, {**r, "n": (n := n + 1)}) for side, r in value]))
        else:
            out.append((kind, value))
    return out


def run(join: JoinPart, steps: list) -> list:
    """What ``join`` sends for ``steps``: a batch per ``rows`` step, in any sides' mix."""
    sent: list = []
    for kind, value in steps:
        if kind == "rows":
            sent += join.apply(Sided([(side, [r]) for side, r in value]), None)
        else:
            sent += [s for out in join.watermark(value) for s in out]
    return sent


def taken(steps: list, timed: bool) -> list[tuple[int, dict]]:
    """The rows that were not late: at or after the watermark when they came (every row, for a
    join without times)."""
    mark, out = -math.inf, []
    for kind, value in steps:
        if kind == "mark":
            mark = max(mark, value) if timed else mark
        else:
            out += [(side, r) for side, r in value if r["t"] >= mark]
    return out


def key(pair: dict) -> tuple[int, int, Any]:
    assert pair["join"] == "j"
    assert pair["key"] == pair["left"]["k"] == pair["right"]["k"]
    return pair["left"]["n"], pair["right"]["n"], pair.get("start")


@pytest.mark.parametrize("name", sorted(JOINS))
@given(steps=steps)
def test_a_join_sends_each_pair_its_definition_names_once(name, steps):
    steps = numbered(steps)
    join, _ = part(name)
    before = join.late._value.get()
    sent = run(join, steps) + [s for out in join.finish() for s in out]
    rows = taken(steps, name != "regular")
    lefts = [r for side, r in rows if side == 0]
    rights = [r for side, r in rows if side == 1]
    expected = sorted((left["n"], right["n"], start) for left in lefts for right in rights
                      for start in pairs_of(name, left, right))  # fmt: skip
    assert sorted(map(key, sent)) == expected
    late = sum(len(v) for kind, v in steps if kind == "rows") - len(rows)
    assert join.late._value.get() - before == late


@pytest.mark.parametrize("name", sorted(JOINS))
@given(steps=steps, cut=st.integers(0, 12))
def test_a_join_restored_from_its_snapshot_goes_on_as_the_original(name, steps, cut):
    assume(cut <= len(steps))
    steps = numbered(steps)
    original, held = part(name)
    run(original, steps[:cut])
    header = msgpack.unpackb(msgpack.packb(original.snapshot()), strict_map_key=False)
    restored, again = part(name)
    restored.restore([header], lambda key: True)
    again.restore([held.snapshot(whole=True)], lambda group: True)
    rest = run(restored, steps[cut:]) + [s for out in restored.finish() for s in out]
    expected = run(original, steps[cut:]) + [s for out in original.finish() for s in out]
    assert list(map(key, rest)) == list(map(key, expected))


def test_a_null_key_pairs_with_nothing():
    join, _ = part("regular")
    sent = join.apply(Sided([(0, [{"k": None}]), (1, [{"k": None}])]), None)
    assert sent == []


def test_keys_of_unequal_types_fail_the_join_naming_both_fields():
    join, _ = part("regular")
    join.apply(Sided([(0, [{"k": 1}])]), None)
    with pytest.raises(ValueError, match=r"job 'jobbed', task 'joined', join 'j': left_key 'k' "
                                         r"is int and right_key 'k' is str"):  # fmt: skip
        join.apply(Sided([(1, [{"k": "1"}])]), None)


def test_a_row_without_its_key_fails_the_join_naming_the_task_and_field():
    join, _ = part("regular")
    with pytest.raises(SchemaViolation, match="task 'joined' groups by 'k'"):
        join.apply(Sided([(1, [{"key": 1}])]), None)


def test_a_row_without_its_time_fails_the_join_naming_the_field():
    join, _ = part("window")
    with pytest.raises(ValueError, match="join 'j': a right row's time 't' is missing"):
        join.apply(Sided([(1, [{"k": 1}])]), None)


def test_a_left_row_without_its_until_fails_the_join_naming_the_field():
    join, _ = part("until")
    with pytest.raises(ValueError, match="join 'j': a left row's until 'u' is missing"):
        join.apply(Sided([(0, [{"k": 1, "t": 3}])]), None)


def test_a_regular_join_forgets_a_side_s_rows_ttl_after_its_last_for_the_key():
    join, _ = part("regular")
    join.watermark(0)
    join.apply(Sided([(0, [{"k": 1, "n": 1}])]), None)
    list(join.watermark(1_000_001))
    assert join.apply(Sided([(1, [{"k": 1, "n": 2}])]), None) == []


def test_a_join_with_a_side_output_sends_its_late_rows_there_as_they_came():
    join = JoinPart(job("window", range=RANGE, late="behind", **TIMED), "joined",
                    KeyedState(GROUPS, MemoryBackend()))  # fmt: skip
    list(join.watermark(20))
    sent = join.apply(Sided([(0, [{"k": 1, "t": 25}, {"k": 1, "t": 3}])]), None)
    assert sent == [Late("behind", {"k": 1, "t": 3})]


def test_what_a_watermark_leaves_expires_when_it_would_have():
    join = JoinPart(job("interval", lower=0, until="u", ttl=300, **TIMED), "joined",
                    KeyedState(GROUPS, MemoryBackend()))  # fmt: skip
    list(join.watermark(0))
    join.apply(Sided([(0, [{"k": 1, "t": 0, "u": 5}, {"k": 1, "t": 0, "u": 1000}])]), None)
    list(join.watermark(100))  # forgets the first, keeps the second, written at 0
    list(join.watermark(350))
    assert join.apply(Sided([(1, [{"k": 1, "t": 360}])]), None) == []
