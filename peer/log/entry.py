"""Log entries and the contract every kind of entry fulfils.

A kind is four functions. ``apply`` and ``diff`` are pure and run on every replica; ``reactions``
is pure too and says which entries one group appends in response; ``side_effects`` is the only
place that acts on the world, and it does so only through the ``Effects`` it is handed, so a
kind's module imports nothing that talks to ZooKeeper.
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from peer.log.replica import KEYS, Replica
from peer.values.limits import MAX_ENTRY_BYTES, MAX_ENTRY_DEPTH, deeper_than

Diff = Mapping[str, Any] | None


UNDECODABLE = "undecodable"
"""The argument that carries why an entry's bytes could not be decoded (its ``fn`` is empty)."""

_shown = reprlib.Repr(maxlevel=3, maxstring=80, maxother=80, maxlist=6, maxdict=6)
"""How a refusal quotes the value at fault: bounded, so a large argument is never copied whole
into a message every group logs."""


class InvalidEntry(ValueError):
    """An entry every peer refuses the same way: applying it leaves the replica unchanged."""


@dataclass(frozen=True, slots=True)
class Entry:
    """``{fn, args}`` as written to the log; ``position`` is set once the log has ordered it,
    ``size`` (its length in bytes) once it has been read from the log."""

    fn: str
    args: Mapping[str, Any] = field(default_factory=dict)
    position: int = -1
    size: int = field(default=-1, compare=False)

    def at(self, position: int) -> Entry:
        return Entry(self.fn, self.args, position, self.size)

    def encode(self) -> bytes:
        return json.dumps({"fn": self.fn, "args": dict(self.args)}, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes, position: int) -> Entry:
        """Bytes from the log; anything unreadable becomes an entry of no known kind, so that it
        is refused at apply time, at its position, by every peer alike. An entry larger than
        MAX_ENTRY_BYTES or nesting deeper than MAX_ENTRY_DEPTH is unreadable by rule, checked
        before parsing, so whether it is refused never depends on a stack's depth."""
        size = len(data)
        if size > MAX_ENTRY_BYTES:
            return cls.undecodable(
                f"{size:,} bytes, over the limit of {MAX_ENTRY_BYTES:,}", position, size
            )
        if deeper_than(data, MAX_ENTRY_DEPTH):
            return cls.undecodable(
                f"nests deeper than the limit of {MAX_ENTRY_DEPTH} levels", position, size
            )
        try:
            doc = json.loads(data)
            fn, args = doc["fn"], doc.get("args", {})
            if not isinstance(fn, str) or not isinstance(args, dict):
                raise TypeError("fn must be a string and args an object")
        except (ValueError, TypeError, KeyError) as e:
            return cls.undecodable(f"{type(e).__name__}: {e}", position, size)
        return cls(fn, args, position, size)

    @classmethod
    def undecodable(cls, reason: str, position: int, size: int) -> Entry:
        return cls("", {UNDECODABLE: reason}, position, size)


@dataclass(frozen=True, slots=True)
class Transition:
    """One entry's step from ``old`` to ``new``, with the kind's summary of what changed.
    ``kind`` is None for an entry every peer refused."""

    entry: Entry
    old: Replica
    new: Replica
    diff: Diff
    kind: EntryKind | None = None

    def reactions(self, actor: str) -> tuple[Entry, ...]:
        return self.kind.reactions(self, actor) if self.kind else ()

    def side_effects(self, actor: str, effects: Effects) -> None:
        if self.kind:
            self.kind.side_effects(self, actor, effects)

    def act(self, actors: Sequence[str], effects: Effects) -> list[Entry]:
        """What one peer group does for this entry as each of its actors, itself first and then
        its virtual peers: every side effect carried out, every reaction returned in order."""
        reactions = [r for actor in actors for r in self.reactions(actor)]
        for actor in actors:
            self.side_effects(actor, effects)
        return reactions


class Effects(Protocol):
    """What a peer group lets a kind's side effects do to the world."""

    def append(self, entry: Entry) -> None:
        """Write an entry to the log now, even before the group has joined."""

    def back_off(self) -> None:
        """Delay this group's next writes by a randomized interval."""

    def report_if_dead(self, group: str) -> None:
        """Append group-leave-cluster for ``group`` if its pulse is gone."""

    def restart_group(self) -> None:
        """End this incarnation of the group and rejoin with fresh ids."""

    def hand_over(self) -> None:
        """Let this group's jobs commit their current epochs, then write its member-exit."""

    def end_group(self) -> None:
        """End the group for good: it has left the cluster by its own wish."""

    def restart_virtual_peer(self, peer: str) -> None:
        """Replace one of this group's virtual peers with a fresh one."""

    def store_origin(self, replica: Replica) -> None:
        """Make ``replica`` the log's origin and delete the entries before it."""


def _no_diff(entry: Entry, old: Replica, new: Replica) -> Diff:
    return None


def _no_reactions(t: Transition, group: str) -> tuple[Entry, ...]:
    return ()


def _no_side_effects(t: Transition, group: str, effects: Effects) -> None:
    return None


@dataclass(frozen=True, slots=True)
class EntryKind:
    """One kind of log entry.

    ``args`` names each required argument and its type, ``optional`` those that may be
    absent; ``validate`` refuses anything else.
    ``apply`` returns the very replica it was given when the entry changes nothing, so a diff
    tells "no change" by identity, in constant time, however large the replica.
    ``while_joining`` says whether a group may write the kind before it has fully joined: the
    membership protocol's own entries may, everything a group volunteers for work waits.

    ``reads`` and ``writes`` name the replica keys (peer.log.replica.KEYS) the kind depends on
    and may change: ``apply`` changes no other key, and nothing the kind computes (its result,
    diff, reactions and side effects, and what the group's Effects read of the replica for
    them) depends on any other. Whatever a kind writes it reads too (it updates the old value).
    Applying an entry later than its predecessors (peer.log.pipeline) relies on them: a kind
    that reads nothing an allocation still owes can be applied meanwhile. A kind that declares
    nothing is taken to read and write everything.
    """

    name: str
    args: Mapping[str, type]
    apply: Callable[[Replica, Entry], Replica]
    diff: Callable[[Entry, Replica, Replica], Diff] = _no_diff
    reactions: Callable[[Transition, str], tuple[Entry, ...]] = _no_reactions
    side_effects: Callable[[Transition, str, Effects], None] = _no_side_effects
    while_joining: bool = True
    optional: Mapping[str, type] = field(default_factory=dict)
    reads: frozenset[str] = KEYS
    writes: frozenset[str] = KEYS

    def __post_init__(self) -> None:
        unknown = (self.reads | self.writes) - KEYS
        if unknown:
            raise ValueError(f"entry kind {self.name}: not keys of the replica: {sorted(unknown)}")

    def validate(self, entry: Entry) -> None:
        given = [(n, k) for n, k in self.optional.items() if n in entry.args]
        for name, kind in [*self.args.items(), *given]:
            value = entry.args.get(name)
            if not isinstance(value, kind) or (kind is str and not value):
                raise InvalidEntry(
                    f"{self.name}: argument {name!r} must be a non-empty {kind.__name__}, "
                    f"got {_shown.repr(value)}"
                )

    def entry(self, **args: Any) -> Entry:
        return Entry(self.name, args)
