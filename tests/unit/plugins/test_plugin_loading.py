"""load(): a factory by path, called and checked, with every failure naming the task and plugin."""

from __future__ import annotations

import pytest

from peer.plugins import Input, Output, PluginError, error, load
from peer.plugins.jsonl import ExactlyOnceOutput
from peer.plugins.memory import MemoryInput
from peer.plugins.null import NullOutput
from tests.unit.plugins.plugin_fixtures import task

FIXTURES = "tests.unit.plugins.plugin_fixtures"


def test_loads_an_input_and_an_output():
    reader = load(task("peer.plugins.memory:input", count=3), 1, 2)
    assert isinstance(reader, MemoryInput)
    assert isinstance(load(task("peer.plugins.null:output", "output"), 0, 1), NullOutput)


def test_loads_the_exactly_once_output(tmp_path):
    spec = task("peer.plugins.jsonl:exactly_once_output", "output", path=str(tmp_path / "out"))
    assert isinstance(load(spec, 1, 2), ExactlyOnceOutput)


def test_the_protocols_list_the_methods_load_checks():
    assert {"recover", "poll", "checkpoint", "completed", "synced", "committed", "close"} <= set(
        vars(Input)
    )
    assert {"recover", "prepare", "write", "synced", "checkpoint", "committed", "close"} <= set(
        vars(Output)
    )


@pytest.mark.parametrize(
    ("plugin", "reason"),
    [
        ("tests.unit.plugins.no_such:input", "does not import: no module named "),
        (f"{FIXTURES}:nope", f"does not import: module '{FIXTURES}' has no attribute 'nope'"),
        ("input", "does not import: is not 'package.module:attribute'"),
        (f"{FIXTURES}:not_callable", "is not callable"),
        (f"{FIXTURES}:raising", "the factory raised RuntimeError: disk on fire"),
        (f"{FIXTURES}:bare_plugin_error", "params.x is wrong"),
        (f"{FIXTURES}:poll_only", "the factory returned PollOnly, not an Input: it lacks "),
    ],
)
def test_failures_name_the_task_and_the_plugin(plugin, reason):
    with pytest.raises(PluginError) as caught:
        load(task(plugin, name="read"), 0, 1)
    assert str(caught.value).startswith(f"task 'read', plugin {plugin!r}: {reason}")


def test_a_missing_method_is_named():
    with pytest.raises(
        PluginError, match=r"it lacks recover, checkpoint, completed, synced, committed, close$"
    ):
        load(task(f"{FIXTURES}:poll_only"), 0, 1)


def test_an_input_for_an_output_task_is_refused():
    with pytest.raises(PluginError, match=r"not an Output: it lacks prepare, write$"):
        load(task("peer.plugins.memory:input", "output", count=1), 0, 1)


def test_a_plugin_error_that_says_where_is_not_wrapped_again():
    with pytest.raises(PluginError) as caught:
        load(task("peer.plugins.memory:input", name="read"), 0, 1)
    message = "set exactly one of params.segments and params.count"
    assert str(caught.value) == f"task 'read', plugin 'peer.plugins.memory:input': {message}"


@pytest.mark.parametrize(
    ("kind", "plugin", "slot", "slots", "reason"),
    [
        ("function", "peer.plugins.null:output", 0, 1, "a 'function' task has no plugin"),
        ("output", None, 0, 1, "plugin must be a dotted path string"),
        ("output", "peer.plugins.null:output", 2, 2, "slot 2 is not in 0..1"),
        ("output", "peer.plugins.null:output", -1, 2, "slot -1 is not in 0..1"),
    ],
)
def test_what_load_refuses_before_calling(kind, plugin, slot, slots, reason):
    with pytest.raises(PluginError) as caught:
        load(task(plugin, kind), slot, slots)
    assert str(caught.value) == f"task 't', plugin {plugin!r}: {reason}"


def test_error_is_a_value_error_that_says_where():
    failure = error(task("a.b:c", name="write"), "it broke")
    assert isinstance(failure, ValueError)
    assert str(failure) == "task 'write', plugin 'a.b:c': it broke"
