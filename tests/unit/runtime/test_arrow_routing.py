"""Routing an Arrow batch: every row reaches exactly the peer its row would, the parts stay
Arrow, ungrouped batches go whole, and flow conditions keep the rows their predicates accept."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from peer.job.spec import FlowCondition, Job, Task
from peer.runtime.placement import place
from peer.runtime.routing import Route, Router, conditions, routes
from peer.values.columnar import FieldKey, SchemaViolation, rows
from tests.unit.values.test_columnar import batches

FNS = "tests.unit.runtime.runtime_fns"

KEY_COLUMNS = {
    "int": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "float": (pa.float64(), st.floats()),
    "small float": (pa.float64(), st.sampled_from([0.0, -0.0, 1.5, float("nan")])),
    "string": (pa.string(), st.text(max_size=3)),
    "few strings": (pa.string(), st.sampled_from(["x", "y", "é"])),
    "bool": (pa.bool_(), st.booleans()),
    "list": (pa.list_(pa.int64()), st.lists(st.integers(-3, 3), max_size=2)),
    "list of strings": (pa.list_(pa.string()), st.lists(st.text(max_size=2), max_size=2)),
}


def text(part: Any) -> list[str]:
    """A part's rows as canonical text: NaN is not equal to itself, nor -0.0 unlike 0.0."""
    return [json.dumps(row, sort_keys=True) for row in rows(part)]


@given(
    batches(columns=KEY_COLUMNS),
    st.sampled_from(["a", "b", ("a", "b"), ("c", "a")]),
    st.integers(1, 5),
)
def test_an_arrow_batch_is_routed_by_key_exactly_as_its_rows(batch, fields, peers):
    route = Route("t", tuple(f"p{i}" for i in range(peers)), FieldKey(fields))
    assume(set(route.key.names) <= set(batch.schema.names))
    by_columns = Router([route]).split(batch)
    by_rows = Router([route]).split(rows(batch))
    assert all(isinstance(part, pa.RecordBatch) for part in by_columns.values())
    assert {p: text(part) for p, part in by_columns.items()} == {
        p: text(part) for p, part in by_rows.items()
    }


@given(batches(min_rows=1, columns=KEY_COLUMNS), st.integers(1, 4))
def test_a_batch_grouped_by_a_key_fn_is_routed_as_its_rows(batch, peers):
    route = Route("t", tuple(f"p{i}" for i in range(peers)), lambda s: [s.get("a"), "k"])
    by_columns = Router([route]).split(batch)
    by_rows = Router([route]).split(rows(batch))
    assert {p: text(part) for p, part in by_columns.items()} == {
        p: text(part) for p, part in by_rows.items()
    }


def test_an_ungrouped_arrow_batch_goes_whole_to_one_peer_in_turn():
    router = Router([Route("b", ("p1", "p2"))])
    batch = pa.RecordBatch.from_pylist([{"n": 1}, {"n": 2}])
    assert [router.split(batch) for _ in range(3)] == [{"p1": batch}, {"p2": batch}, {"p1": batch}]
    assert all(part is batch for _ in range(2) for part in router.split(batch).values())


def test_flow_conditions_keep_an_arrow_batch_as_arrow():
    job = Job(
        workflow=(("in", "a"), ("in", "b")),
        catalog=(
            Task("in", "input", plugin="peer.plugins.memory:input"),
            Task("a", "output", plugin="peer.plugins.null:output", group_by_key="word"),
            Task("b", "output", plugin="peer.plugins.null:output"),
        ),
        flow_conditions=(FlowCondition("in", ("a",), f"{FNS}:is_long"),),
        id="j",
    )
    placement = place(job, 1, {"in": ("pi",), "a": ("pa",), "b": ("pb",)}, {}, {})
    router = Router(routes(placement, "in"), conditions(placement, "in"))
    batch = pa.RecordBatch.from_pylist([{"word": "hello"}, {"word": "hi"}])
    out = router.split(batch)
    assert all(isinstance(part, pa.RecordBatch) for part in out.values())
    assert {p: rows(part) for p, part in out.items()} == {
        "pa": [{"word": "hello"}],
        "pb": [{"word": "hello"}, {"word": "hi"}],
    }
    assert router.split(batch.filter([False, False])) == {}


def test_routes_read_group_by_keys_as_field_keys():
    job = Job(
        workflow=(("in", "a"),),
        catalog=(
            Task("in", "input", plugin="peer.plugins.memory:input"),
            Task("a", "output", plugin="peer.plugins.null:output", group_by_key=["x", "y"]),
        ),
        id="j",
    )
    (route,) = routes(place(job, 1, {"in": ("i",), "a": ("p",)}, {}, {}), "in")
    assert route.key == FieldKey(("x", "y"))
    assert route.key({"x": 1, "y": None}) == [1, None]
    with pytest.raises(SchemaViolation, match=r"^task 'a' groups by 'y', which segment "
                                              r"\{'x': 1\} lacks$"):  # fmt: skip
        route.key({"x": 1})


@pytest.mark.parametrize("receivers", [("c1",), ("c1", "c2")])
@pytest.mark.parametrize("kind", ["rows", "arrow"])
def test_a_batch_lacking_the_receiver_s_key_is_refused_whichever_its_kind(kind, receivers):
    """Grouped under no key, its segments would reach a peer that does not own their group."""
    job = Job(
        workflow=(("in", "count"),),
        catalog=(
            Task("in", "input", plugin="peer.plugins.memory:input"),
            Task("count", "output", plugin="peer.plugins.null:output", group_by_key="user"),
        ),
        id="j",
    )
    peers = {"in": ("i",), "count": receivers}
    router = Router(routes(place(job, 1, peers, {}, {}), "in"))
    segments = [{"user": "u1", "n": 1}, {"n": 2}]
    batch = segments if kind == "rows" else pa.RecordBatch.from_pylist(segments[1:])
    with pytest.raises(SchemaViolation) as refused:
        router.split(batch)
    assert str(refused.value) == "task 'count' groups by 'user', which segment {'n': 2} lacks"
