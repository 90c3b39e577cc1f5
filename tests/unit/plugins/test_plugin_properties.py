"""Generative checks on the inputs: however the data falls, whatever the slots, and wherever a
peer stops and recovers, every slot delivers exactly its share, in order, once. A file's lines
are in as many splits as there are slots, so line i is slot i % slots's, as the memory input's
items are."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.job.spec import Task
from peer.plugins import Input, load
from tests.unit.plugins.plugin_fixtures import EPOCH, json_values, recovery, task

EXAMPLES = settings(max_examples=200, deadline=None)

limits = st.integers(1, 4)


def memory_task(items: list[Any], _directory: Path) -> Task:
    return task("peer.plugins.memory:input", segments=items)


def jsonl_task(items: list[Any], directory: Path) -> Task:
    path = directory / "in.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return task("peer.plugins.jsonl:input", path=str(path))


def polled(plugin: Input, limits: list[int]) -> list[Any]:
    return [segment for limit in limits for segment in plugin.poll(limit)]


def drained(plugin: Input, bound: int) -> list[Any]:
    segments: list[Any] = []
    for _ in range(bound):
        if plugin.completed():
            return segments
        segments += plugin.poll(2)
    raise AssertionError(f"not completed after {bound} polls")


@pytest.mark.parametrize("make", [memory_task, jsonl_task])
@EXAMPLES
@given(items=st.lists(json_values, max_size=25), slots=st.integers(1, 5), data=st.data())
def test_recovery_anywhere_loses_and_repeats_nothing(
    make: Callable[[list[Any], Path], Task], items: list[Any], slots: int, data: st.DataObject
):
    with tempfile.TemporaryDirectory() as directory:
        spec = make(items, Path(directory))
        for slot in range(slots):
            first = load(spec, slot, slots, slots)
            first.recover(recovery())
            share = polled(first, data.draw(st.lists(limits, max_size=8), label="before"))
            checkpoint = json.loads(json.dumps(first.checkpoint(EPOCH)))
            first.poll(data.draw(limits, label="lost"))  # read past the checkpoint, then crash
            first.close()
            second = load(spec, slot, slots, slots)
            second.recover(recovery(checkpoint, EPOCH, 2))
            share += drained(second, len(items) + 2)
            second.close()
            assert share == items[slot::slots]
