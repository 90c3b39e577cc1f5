"""What a task's slot stores at each barrier: a ``TaskSnapshot``, with the seat's ``SeatState``
when its job recovers locally. In storage it is one msgpack map, the map the engine has always
written (``to_bytes``), so snapshots and savepoints taken before these types read back; reading
one (``from_bytes``) checks every field, and one that is not a snapshot fails its restore with
the field named, never with a KeyError deep in a restore.

The parts the engine does not own stay as their owners made them: the plugin's position, the
windows' state and the fn's state are whatever each returned (peer.plugins, peer.state).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack


class SnapshotError(ValueError):
    """Stored bytes that are not a task's snapshot; the message names the field."""


@dataclass(frozen=True, slots=True)
class SeatState:
    """Local recovery's part of a snapshot: where the seat stood after the barrier, for the
    peer that takes the seat over (peer.runtime.causal)."""

    offset: int
    """Where the seat's determinant log stands, the barrier logged."""
    sent: dict[int, int]
    """Per downstream seat, the messages sent it so far."""
    received: dict[int, int]
    """Per upstream seat, the messages taken from it so far."""
    turn: int
    """The router's turn."""
    timers: list[list[float]]
    """When the windows' timers are next due."""


@dataclass(frozen=True, slots=True)
class TaskSnapshot:
    plugin: Any
    """The plugin's position at the barrier."""
    windows: Any
    """The windows' state."""
    fn: Any
    """The fn's state."""
    ended: bool
    """Whether the slot's input had ended: a restore leaves an ended slot's state out."""
    causal: SeatState | None = None
    """The seat's state, with local recovery on."""
    channel: list[Any] = field(default_factory=list)
    """The batches an unaligned barrier overtook (peer.runtime.unaligned), to take again."""
    state: dict[int, Any] = field(default_factory=dict)
    """The keyed state the engine keeps for the fn, per key group (peer.state.keyed)."""

    def to_bytes(self) -> bytes:
        doc: dict[str, Any] = {"plugin": self.plugin, "windows": self.windows, "fn": self.fn,
                               "ended": self.ended}  # fmt: skip
        if self.causal is not None:
            seat = self.causal
            doc["causal"] = {"offset": seat.offset, "sent": seat.sent, "received": seat.received,
                             "turn": seat.turn, "timers": seat.timers}  # fmt: skip
        if self.channel:
            doc["channel"] = self.channel
        if self.state:
            doc["state"] = self.state
        return msgpack.packb(doc)

    @classmethod
    def from_bytes(cls, blob: bytes) -> TaskSnapshot:
        try:
            doc = msgpack.unpackb(blob, strict_map_key=False)
        except (ValueError, msgpack.UnpackException) as e:
            raise SnapshotError(f"it does not read as msgpack: {e}") from None
        if not isinstance(doc, Mapping):
            raise SnapshotError(f"it holds a {type(doc).__name__}, not a map")
        missing = sorted({"plugin", "windows", "fn"} - set(doc))
        if missing:
            raise SnapshotError(f"it has no {', '.join(missing)}")
        channel = doc.get("channel", [])
        if not isinstance(channel, list):
            raise SnapshotError(f"its channel is a {type(channel).__name__}, not a list")
        causal = doc.get("causal")
        state = doc.get("state", {})
        if not (isinstance(state, Mapping) and all(isinstance(g, int) for g in state)):
            raise SnapshotError("its keyed state is not a map of key groups")
        return cls(doc["plugin"], doc["windows"], doc["fn"], _flag(doc.get("ended", False)),
                   None if causal is None else _seat(causal), channel, dict(state))  # fmt: skip


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise SnapshotError(f"its ended is a {type(value).__name__}, not a bool")
    return value


def _seat(doc: object) -> SeatState:
    if not isinstance(doc, Mapping):
        raise SnapshotError(f"its causal state is a {type(doc).__name__}, not a map")
    try:
        return SeatState(_number(doc["offset"], "offset"), _counts(doc["sent"], "sent"),
                         _counts(doc["received"], "received"), _number(doc["turn"], "turn"),
                         _timers(doc["timers"]))  # fmt: skip
    except KeyError as e:
        raise SnapshotError(f"its causal state has no {e.args[0]}") from None


def _number(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SnapshotError(f"its causal {name} is a {type(value).__name__}, not an integer")
    return value


def _counts(value: object, name: str) -> dict[int, int]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, int) and isinstance(v, int) for k, v in value.items()
    ):
        raise SnapshotError(f"its causal {name} is not a map of seats to counts")
    return dict(value)


def _timers(value: object) -> list[list[float]]:
    if not isinstance(value, list) or not all(isinstance(t, list) for t in value):
        raise SnapshotError("its causal timers are not a list of lists")
    return value
