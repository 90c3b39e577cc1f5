"""Keyed state a closed slot leaves in its process for its job's next allocation, so that a slot
restoring there keeps the key groups it held already instead of reading them again.

A keyed task's runner that closes under a new allocation (a rescale, a rollback) shelves its
backend when what it holds is exactly its last snapshot: it passed a barrier and wrote nothing
since, and its input was not over. The next allocation's runner of the same task in the same
process takes it when its restore point is that barrier's epoch: it keeps the key groups it
owns now of it, drops the rest, and fetches only the key groups it gained (peer.runtime.task).
At a rescale the job stands still at its pause's commit, so the slots that held state shelve
it, and each new slot reads only what moves to it.

A shelved backend goes to one new slot only, its heir: the slot of the new count that owns the
most of its key groups (the lower slot on a tie). Every process decides alike with nothing
asked. What no runner here still waiting for its restore point would take is closed at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from peer.state.backends import Backend
from peer.state.key_groups import groups_of, heir
from peer.values.epoch import Epoch


class Slot(NamedTuple):
    """A slot of a new allocation that may take from the shelf."""

    job: str
    task: str
    slot: int
    slots: int


@dataclass(frozen=True, eq=False)
class Shelved:
    """One closed slot's keyed state: the slot ``slot`` of ``slots`` of ``task`` of ``job``,
    exactly as its snapshot at ``epoch`` holds it."""

    job: str
    task: str
    epoch: Epoch
    slot: int
    slots: int
    key_groups: int
    backend: Backend

    @property
    def held(self) -> range:
        return groups_of(self.slot, self.slots, self.key_groups)

    def heir(self, slots: int) -> int:
        """The slot, of ``slots``, that owns the most of what this one held."""
        return heir(self.slot, self.slots, slots, self.key_groups)

    def goes_to(self, new: Slot) -> bool:
        return self.job == new.job and self.task == new.task and self.heir(new.slots) == new.slot


class StateShelf:
    """The shelved keyed state of one process's closed slots, until an heir takes it."""

    def __init__(self) -> None:
        self.held: list[Shelved] = []

    def put(self, shelved: Shelved) -> None:
        self.held.append(shelved)

    def take(self, new: Slot, epoch: Epoch | None) -> Shelved | None:
        """What slot ``new`` restoring from ``epoch`` keeps: the state shelved for it that is
        exactly that epoch's, if any (None: it restores from no epoch, or not by key group);
        whatever else was shelved for it is closed, since no other slot will take it."""
        mine = [s for s in self.held if s.goes_to(new)]
        self.held = [s for s in self.held if s not in mine]
        kept = next((s for s in mine if epoch is not None and s.epoch == epoch), None)
        for shelved in mine:
            if shelved is not kept:
                shelved.backend.close()
        return kept

    def prune(self, waiting: Iterable[Slot]) -> None:
        """Close what none of the ``waiting`` slots would take."""
        heirs = set(waiting)
        kept = [s for s in self.held if any(s.goes_to(new) for new in heirs)]
        for shelved in self.held:
            if shelved not in kept:
                shelved.backend.close()
        self.held = kept

    def close(self) -> None:
        self.prune(())
