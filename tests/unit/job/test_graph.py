"""The workflow's order and the facts a job derives from it."""

from __future__ import annotations

import pytest

from peer.job.graph import topological_order
from peer.job.load import from_yaml
from tests.unit.job import wordcount


def test_word_count_order_and_roles():
    job = from_yaml(wordcount.YAML)
    assert job.sorted_tasks() == ("read", "split", "count", "write")
    assert job.input_tasks() == ("read",)
    assert job.output_tasks() == ("write",)
    assert job.task("count").fn == "tests.unit.job.fixtures_fns.count"
    with pytest.raises(KeyError):
        job.task("store")


def test_ties_are_broken_by_name_not_by_edge_order():
    edges = [("in-b", "z"), ("in-a", "y"), ("y", "out"), ("z", "out"), ("in-a", "z")]
    assert topological_order(edges) == (("in-a", "in-b", "y", "z", "out"), ())
    assert topological_order(list(reversed(edges))) == (("in-a", "in-b", "y", "z", "out"), ())


def test_a_task_comes_after_all_its_upstream_tasks():
    edges = [("a", "d"), ("b", "c"), ("c", "d"), ("d", "e")]
    assert topological_order(edges) == (("a", "b", "c", "d", "e"), ())


def test_cycle_is_named_from_its_smallest_task_in_edge_order():
    edges = [("in", "m"), ("m", "k"), ("k", "x"), ("x", "m"), ("x", "out")]
    assert topological_order(edges) == (("in",), ("k", "x", "m"))


def test_self_loop_is_a_cycle():
    assert topological_order([("a", "b"), ("b", "b")]) == (("a",), ("b",))
