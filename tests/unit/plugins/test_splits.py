"""Inputs that split their share (peer.plugins.splits): the positions a change of peers hands
on, and a file read by any sequence of slot counts, each stopped anywhere, every line once."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.plugins import PluginError, load
from peer.plugins.splits import Numbered, Splits, gather
from tests.unit.plugins.plugin_fixtures import EPOCH, drain, recovery, task


def test_gather_takes_each_owned_split_from_the_old_slot_that_held_it():
    """8 splits on 2 slots (0-3, 4-7), then on 3 (0-2, 3-5, 6-7)."""
    held = {0: [[i, 10 * i] for i in range(4)], 1: [[i, 10 * i] for i in range(4, 8)]}
    assert gather(held, 2, range(3, 6), 8) == [[3, 30], [4, 40], [5, 50]]


def test_gather_names_an_old_slot_whose_checkpoint_has_another_number_of_splits():
    """As when max_parallelism changed between the checkpoint and the restore."""
    with pytest.raises(ValueError, match=r"old slot 1 of 2 is not one position for each of its 4"):
        gather({0: [[0, 0]] * 4, 1: [[0, 0]] * 3}, 2, range(8), 8)
    with pytest.raises(ValueError, match=r"the position of split 2 must be \[index, resume\]"):
        gather({0: [[0, 0], [0, 0], [0, -1], [0, 0]]}, 2, range(3), 8)


def test_gather_refuses_old_slots_that_do_not_hold_what_is_owned():
    with pytest.raises(ValueError, match=r"do not hold splits range\(0, 8\)"):
        gather({0: [[0, 0]] * 4}, 2, range(8), 8)


def test_a_loaded_splitting_input_owns_its_range_of_the_task_s_splits(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text("".join(f"{i}\n" for i in range(20)))
    spec = task("peer.plugins.jsonl:input", name="read", path=str(path))
    plugin = load(spec, 1, 3, 10)
    plugin.recover(recovery())
    assert drain(plugin) == [i for i in range(20) if i % 10 in range(4, 7)]
    assert len(plugin.checkpoint(EPOCH)) == 3


def test_a_checkpoint_for_other_splits_is_named(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text("1\n")
    plugin = load(task("peer.plugins.jsonl:input", name="read", path=str(path)), 0, 2, 4)
    with pytest.raises(PluginError, match=r"for each of the 2 splits 0\.\.1 \(of 4\), got"):
        plugin.recover(recovery([[0, 0]] * 3))


@st.composite
def rescales(draw):
    """Lines in a file, a number of splits, and the slot counts the input runs on in turn, each
    slot of each but the last polling some times before the checkpoint."""
    lines = draw(st.integers(0, 60))
    total = draw(st.integers(1, 12))
    counts = draw(st.lists(st.integers(1, min(total, 4)), min_size=1, max_size=4))
    polls = [draw(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 5)), min_size=n,
                           max_size=n)) for n in counts]  # fmt: skip
    return lines, total, counts, polls


def read_on(counts: list[int], polls: list, total: int, reader: Callable[..., Any]) -> list[int]:
    """What readers made by ``reader(slot, slots, checkpoint)`` read on each of ``counts``
    slots in turn: each slot of each count but the last polls as ``polls`` says and hands its
    checkpoint on (``gather``); those of the last read to the end."""
    read: list[int] = []
    held: dict[int, Any] | None = None
    for step, slots in enumerate(counts):
        last = step == len(counts) - 1
        positions = {}
        for slot in range(slots):
            owned = Splits.of(slot, slots, total).owned
            checkpoint = None if held is None else gather(held, len(held), owned, total)
            source = reader(slot, slots, checkpoint)
            if last:
                while not source.completed():
                    read += source.poll(5)
            else:
                times, limit = polls[step][slot]
                for _ in range(times):
                    read += source.poll(limit)
            positions[slot] = source.checkpoint(EPOCH)
            source.close()
        held = positions
    return read


@settings(max_examples=150, deadline=None)
@given(rescales())
def test_a_file_read_on_any_sequence_of_slot_counts_gives_every_line_once(case):
    lines, total, counts, polls = case
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch, "in.jsonl")
        path.write_text("".join(f"{i}\n" for i in range(lines)))
        spec = task("peer.plugins.jsonl:input", name="read", path=str(path))

        def reader(slot: int, slots: int, checkpoint: Any) -> Any:
            plugin = load(spec, slot, slots, total)
            plugin.recover(recovery(checkpoint))
            return plugin

        read = read_on(counts, polls, total, reader)
    assert sorted(read) == list(range(lines))


class NumberedReader:
    """``Numbered`` as an input is polled, checking that it reads its own splits' items, in
    order, at most as many as asked for."""

    def __init__(self, splits: Splits, length: int, checkpoint: Any) -> None:
        self.splits, self.reading, self.last = splits, Numbered(splits, length, checkpoint,
                                                                ValueError), -1  # fmt: skip

    def poll(self, limit: int) -> list[int]:
        items = [i for run in self.reading.take(limit) for i in run]
        assert len(items) <= limit
        assert all(i % self.splits.total in self.splits.owned for i in items)
        assert items == sorted(items)
        assert not items or items[0] > self.last
        self.last = items[-1] if items else self.last
        return items

    def completed(self) -> bool:
        return self.reading.completed()

    def checkpoint(self, epoch: Any) -> list[list[int]]:
        return self.reading.checkpoint()

    def close(self) -> None:
        """Nothing to let go of."""


@settings(max_examples=150, deadline=None)
@given(rescales())
def test_numbered_items_read_on_any_sequence_of_slot_counts_come_once_each(case):
    """Each slot reads only items of the splits it owns, in order and at most as many as it
    asks for; over the whole sequence of slot counts every item comes once."""
    length, total, counts, polls = case
    read = read_on(counts, polls, total,
                   lambda slot, slots, at: NumberedReader(Splits.of(slot, slots, total), length,
                                                          at))  # fmt: skip
    assert sorted(read) == list(range(length))


def test_numbered_items_below_a_bound_only_are_taken():
    reading = Numbered(Splits.of(0, 1, 4), 20, None, ValueError)
    assert reading.take(100, until=6) == [range(0, 6)]
    assert reading.take(3) == [range(6, 9)]
    assert Numbered(Splits.of(1, 2, 4), 20, None, ValueError).take(5) == [
        range(2, 4),
        range(6, 8),
        range(10, 11),
    ]
