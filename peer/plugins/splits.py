"""Inputs that split their share, so that a checkpointed job's input can run on another number
of peers: it grows when members join and shrinks when they leave, as a keyed task does.

Such an input reads its source as one sequence of items (the lines of a file, the numbered
segments of a job) and puts item i in split ``i % S``, where S is the task's maximum parallelism
(its ``max_parallelism``, else the job's), fixed for the life of the job's checkpoints. Slot s of
n owns the contiguous range of splits ``groups_of(s, n, S)``, as a keyed task's slot owns key
groups, and reads the items of those splits alone. Its factory says it splits by taking the
range as a keyword, ``factory(task, slot, slots, *, splits)`` with ``splits`` a ``Splits``
(peer.job.imports.takes_splits).

Its checkpoint is one position per split of its range, in split order: ``[index, resume]``, the
index of the split's next item and where the source resumes reading at that index (a file's
byte offset; the index again for a sequence held in memory). When the task runs on another
number of peers, each new slot gets the positions of the splits it owns now, gathered from the
old slots that held them (``gather``), and reads on from each as if it had read it all along
(``Cursor``): nothing is read twice or skipped. A source of numbered items, each made from its
index, reads through ``Numbered``, which hands out the owned splits' items as runs of
consecutive indices.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from peer.job.values import is_int
from peer.state.key_groups import groups_of

Position = tuple[int, int]
"""A split's next item index and where the source resumes at it."""


@dataclass(frozen=True)
class Splits:
    """The splits a slot owns, of how many."""

    owned: range
    total: int

    @classmethod
    def of(cls, slot: int, slots: int, total: int) -> Splits:
        return cls(groups_of(slot, slots, total), total)

    @property
    def whole(self) -> bool:
        """Whether this slot owns every split: it reads the whole source."""
        return len(self.owned) == self.total


@functools.cache
def shard_splits(total: int, first: int) -> tuple[int, ...]:
    """The split of each of a source's shards (a Kafka topic's partitions), numbered from 0,
    when the source had ``first`` of them as its job started: those are spread evenly over the
    ``total`` splits, shard p where slot p of ``first`` slots starts, so that any number of slots
    holds its share of them (one each, on as many slots as shards);
    shards added later go halfway between, then a quarter of the way, and so on (probing on to
    the next free split where two would meet), so that a shard's split never moves while the job
    lives. Each of the ``total`` shards at most has a split of its own."""
    if not 0 < first <= total:
        raise ValueError(f"{first} shards at the start, for {total} splits")
    taken: list[int] = []
    used: set[int] = set()
    for shard in range(total):
        split = _placed(shard, total, first)
        while split in used:
            split = (split + 1) % total
        used.add(split)
        taken.append(split)
    return tuple(taken)


def _placed(shard: int, total: int, first: int) -> int:
    """Where ``shard`` would go if nothing were there: on the first shards' grid, or between."""
    if shard < first:
        return -(-shard * total // first)  # where slot ``shard`` of ``first`` starts
    level = first
    while shard >= 2 * level:
        level *= 2
    return -(-((shard - level) * 2 + 1) * total // (2 * level)) % total


def gather(held: Mapping[int, Any], old: int, owned: range, total: int) -> list[list[int]]:
    """The positions of the splits in ``owned`` (of ``total``), from the checkpoints ``held`` of
    the old slots (of ``old``) that held them. A ValueError names the old slot whose checkpoint
    is not one position per split of its range, as when the number of splits changed."""
    positions: list[list[int]] = []
    for slot in sorted(held):
        had = groups_of(slot, old, total)
        checkpoint = held[slot]
        if not (isinstance(checkpoint, list | tuple) and len(checkpoint) == len(had)):
            raise ValueError(
                f"the checkpoint of its old slot {slot} of {old} is not one position for each "
                f"of its {len(had)} splits (of {total}, the task's max_parallelism): "
                f"{_brief(checkpoint)}"
            )
        for split, at in zip(had, checkpoint, strict=True):
            if split in owned:
                positions.append(list(_position(at, f"split {split}")))
    if len(positions) != len(owned):
        raise ValueError(f"the old slots {sorted(held)} of {old} do not hold splits {owned}")
    return positions


def pair(value: Any) -> tuple[int, int] | None:
    """``value`` as two ints >= 0, if it is a list or tuple of just those: a position's shape."""
    if (isinstance(value, list | tuple) and len(value) == 2
            and all(is_int(n) and n >= 0 for n in value)):  # fmt: skip
        return value[0], value[1]
    return None


def _position(value: Any, what: str) -> Position:
    position = pair(value)
    if position is None:
        raise ValueError(f"the position of {what} must be [index, resume] (ints >= 0), got "
                         f"{_brief(value)}")  # fmt: skip
    return position


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


class Cursor:
    """Where a slot's reading of the sequence stands, for each split it owns. It reads on from
    its least position (``at``) and takes an item only if its split is the slot's and has not
    read past it (``takes``): after a change of peers, the splits it gained may stand at other
    positions than one another."""

    def __init__(self, splits: Splits, checkpoint: Any,
                 invalid: Callable[[str], Exception]) -> None:  # fmt: skip
        owned, total = splits.owned, splits.total
        self.owned, self.total = owned, total
        if checkpoint is None:
            self.floors: list[Position] = [(0, 0)] * len(owned)
        elif isinstance(checkpoint, list | tuple) and len(checkpoint) == len(owned):
            try:
                pairs = zip(owned, checkpoint, strict=True)
                self.floors = [_position(at, f"split {s}") for s, at in pairs]
            except ValueError as e:
                raise invalid(f"checkpoint: {e}") from None
        else:
            raise invalid(f"checkpoint must hold one [index, resume] position for each of the "
                          f"{len(owned)} splits {owned.start}..{owned.stop - 1} (of {total}), "
                          f"got {_brief(checkpoint)}")  # fmt: skip
        self.at: Position = min(self.floors, default=(0, 0))
        """The reader's next item and where the source resumes at it."""
        self._past = max((f[0] for f in self.floors), default=0)
        """Below this index some split may stand ahead of the reader."""

    def settled(self, index: int) -> bool:
        """Whether no owned split stands ahead of item ``index``: from there on every item of
        an owned split is this slot's to read."""
        return index >= self._past

    def takes(self, index: int) -> bool:
        """Whether item ``index`` is this slot's to read: its split is owned, and stands at or
        before it."""
        split = index % self.total
        if split not in self.owned:
            return False
        return index >= self._past or index >= self.floors[split - self.owned.start][0]

    def moved(self, index: int, resume: int) -> None:
        """The reader stands at item ``index``, which the source resumes at ``resume``."""
        self.at = (index, resume)

    def checkpoint(self) -> list[list[int]]:
        """Each owned split's position: the reader's, or the split's own where it stands ahead."""
        at = self.at
        if at[0] >= self._past:
            return [[at[0], at[1]] for _ in self.owned]
        return [list(f if f[0] > at[0] else at) for f in self.floors]


class Numbered:
    """A slot's reading of a sequence of ``length`` numbered items (each made from its index,
    so the index is where the source resumes): the items of the splits it owns, in order, as
    runs of consecutive indices, from the positions ``checkpoint`` holds (None: the start)."""

    def __init__(self, splits: Splits, length: int, checkpoint: Any,
                 invalid: Callable[[str], Exception]) -> None:  # fmt: skip
        self.splits, self.length = splits, length
        self.cursor = Cursor(splits, checkpoint, invalid)
        self.next = self._owned_from(self.cursor.at[0])
        """The next index of an owned split, the reader's."""

    def _owned_from(self, index: int) -> int:
        """The first index at or after ``index`` whose split is owned (``length``: none)."""
        owned, total = self.splits.owned, self.splits.total
        if not owned:
            return self.length
        row, split = divmod(index, total)
        if split < owned.start:
            return min(row * total + owned.start, self.length)
        if split >= owned.stop:
            return min((row + 1) * total + owned.start, self.length)
        return min(index, self.length)

    def take(self, limit: int, until: int | None = None) -> list[range]:
        """Up to ``limit`` of the next items of the owned splits (of those below ``until``,
        given), as runs of consecutive indices, and the reader moved past them."""
        runs: list[range] = []
        left, at, cursor = limit, self.next, self.cursor
        stop, total = self.splits.owned.stop, self.splits.total
        end = self.length if until is None else min(until, self.length)
        while left > 0 and at < end:
            run = range(at, min(at - at % total + stop, end, at + left))
            left -= len(run)
            if cursor.settled(at):
                _join(runs, run)
            else:  # some splits stand ahead of the reader: only the items of the others
                for index in filter(cursor.takes, run):
                    _join(runs, range(index, index + 1))
            at = self._owned_from(run.stop)
        self.next = at
        cursor.moved(at, at)
        return runs

    def completed(self) -> bool:
        return self.next >= self.length

    def checkpoint(self) -> list[list[int]]:
        return self.cursor.checkpoint()


def _join(runs: list[range], run: range) -> None:
    """Add ``run`` to ``runs``, joining the last one where it follows on."""
    if runs and runs[-1].stop == run.start:
        runs[-1] = range(runs[-1].start, run.stop)
    else:
        runs.append(run)
