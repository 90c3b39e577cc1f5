"""What a task's slot stores at each barrier: a ``TaskSnapshot``, with the seat's ``SeatState``
when its job recovers locally, and the keyed state the engine keeps for it, one part per key
group (peer.state.keyed).

Stored, it is laid out so that it can be written as its keyed state is packed, one key group
at a time, and so that a slot reads only the key groups it owns (``chunks``): MAGIC, the parts
in ascending key group order, the header (a msgpack map: the snapshot's fields and each part's
key group and length, in that order), the header's length (4 bytes, big-endian) and MAGIC
again. A slot restoring on as many slots as took the checkpoint reads its own snapshot whole;
one whose key groups came from other slots reads each one's tail, holding the header, and the
one range of parts it owns. Snapshots stored before read back too (``read``): those with the
header first (EARLIER), and those of one msgpack map. Reading checks every field: one that is
not a snapshot fails its restore with the field named, never with a KeyError deep in a restore.

The keyed state of one snapshot may hold only what changed since the slot's snapshot before
(``chain`` names those it adds to, back to a whole one): ``Chain`` decides, at each barrier,
whether the next is whole. ``Restored`` is what a restore reads: the snapshot and the keyed
parts of each link of its chain, oldest first.

The parts the engine does not own stay as their owners made them: the plugin's position, the
windows' state and the fn's state are whatever each returned (peer.plugins, peer.state).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, ItemsView, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

MAGIC = b"\xc1SN3"
"""0xc1 is the one byte msgpack never writes: no snapshot stored as one msgpack map starts so."""
TAIL = 4 + len(MAGIC)
"""The header's length and the magic that end a stored snapshot."""
EARLIER = b"\xc1SN2"
"""What a snapshot stored with its header first starts with."""
HEAD = len(EARLIER) + 4
"""The magic and the header's length that start a snapshot stored with its header first."""
MAX_CHAIN = 32
"""The most snapshots a restore reads for one slot: a whole one and those of changes after it."""


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
    watermark: float | None = None
    """The watermark the seat had passed on (None: none yet)."""
    watermarks: dict[int, float] = field(default_factory=dict)
    """Per upstream seat, the last watermark taken from it: what was sent before the barrier
    is not sent again, yet the seat's replay must reckon with it."""


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
    chain: tuple[int, ...] = ()
    """The numbers of this slot's earlier snapshots, of the same allocation, that its keyed
    state adds to, oldest (a whole one) first; empty when its keyed state is whole."""

    def chunks(self, parts: Iterable[tuple[int, bytes]]) -> Iterator[bytes]:
        """The snapshot laid out for storage, with its keyed state's ``parts`` (key group and
        part, ascending), in pieces: each part as it comes, then the header."""
        yield MAGIC
        listed = []
        for group, part in parts:
            listed.append([group, len(part)])
            yield part
        header = msgpack.packb({**self._doc(), "parts": listed})
        yield b"".join([header, struct.pack(">I", len(header)), MAGIC])

    def to_bytes(self, parts: Mapping[int, bytes] | None = None) -> bytes:
        """The snapshot laid out for storage, whole."""
        return b"".join(self.chunks(sorted((parts or {}).items())))

    def _doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"plugin": self.plugin, "windows": self.windows, "fn": self.fn,
                               "ended": self.ended}  # fmt: skip
        if self.causal is not None:
            seat = self.causal
            doc["causal"] = {
                "offset": seat.offset, "sent": seat.sent, "received": seat.received,
                "turn": seat.turn, "timers": seat.timers, "watermark": seat.watermark,
                "watermarks": seat.watermarks,
            }  # fmt: skip
        if self.channel:
            doc["channel"] = self.channel
        if self.chain:
            doc["chain"] = list(self.chain)
        return doc

    @classmethod
    def from_doc(cls, doc: Any) -> TaskSnapshot:
        """The snapshot a header (or a whole snapshot of the layout before) holds."""
        if not isinstance(doc, Mapping):
            raise SnapshotError(f"it holds a {type(doc).__name__}, not a map")
        missing = sorted({"plugin", "windows", "fn"} - set(doc))
        if missing:
            raise SnapshotError(f"it has no {', '.join(missing)}")
        channel = doc.get("channel", [])
        if not isinstance(channel, list):
            raise SnapshotError(f"its channel is a {type(channel).__name__}, not a list")
        chain = doc.get("chain", [])
        if not (isinstance(chain, list) and all(_is_number(n) for n in chain)):
            raise SnapshotError("its chain is not a list of epoch numbers")
        causal = doc.get("causal")
        return cls(doc["plugin"], doc["windows"], doc["fn"], _flag(doc.get("ended", False)),
                   None if causal is None else _seat(causal), channel, tuple(chain))  # fmt: skip


@dataclass(frozen=True, slots=True)
class StoredHeader:
    """A stored snapshot's header: the snapshot, and where each key group's part lies in the
    stored bytes (start, end)."""

    snapshot: TaskSnapshot
    parts: dict[int, tuple[int, int]]


def header_start(tail: bytes, size: int) -> int | None:
    """Where the header of the stored snapshot of ``size`` bytes ending with ``tail`` (TAIL
    bytes at least, or all of it) starts; None for a snapshot stored before this layout."""
    if not tail.endswith(MAGIC):
        return None
    if size < len(MAGIC) + TAIL:
        raise SnapshotError(f"it ends after {size} bytes, inside its header's length")
    start = size - TAIL - struct.unpack_from(">I", tail, len(tail) - TAIL)[0]
    if start < len(MAGIC):
        raise SnapshotError(f"its header's length reaches past its start, in {size} bytes")
    return start


def read_footer(header: bytes, start: int) -> StoredHeader:
    """The header of a stored snapshot, from its bytes, which start at byte ``start``: its
    parts must end there."""
    stored = _stored_header(_unpack(header), len(MAGIC))
    end = max((b for _, b in stored.parts.values()), default=len(MAGIC))
    if end != start:
        raise SnapshotError(f"its parts end at byte {end}, and its header starts at {start}")
    return stored


def header_end(prefix: bytes) -> int | None:
    """Where the header of a snapshot stored with its header first, starting with ``prefix``
    (HEAD bytes at least), ends; None for one of another layout."""
    if not prefix.startswith(EARLIER):
        return None
    if len(prefix) < HEAD:
        raise SnapshotError(f"it ends after {len(prefix)} bytes, inside its header's length")
    return HEAD + struct.unpack_from(">I", prefix, len(EARLIER))[0]


def read_header(prefix: bytes, size: int | None = None) -> StoredHeader:
    """The header of a snapshot stored with its header first, from bytes holding it whole
    (``header_end``); ``size``, when known, is the stored snapshot's length, which its parts
    must fit."""
    end = header_end(prefix)
    if end is None or len(prefix) < end:
        raise SnapshotError("its header is cut short or missing")
    stored = _stored_header(_unpack(prefix[HEAD:end]), end)
    at = max((b for _, b in stored.parts.values()), default=end)
    if size is not None and at != size:
        raise SnapshotError(f"its parts end at byte {at}, and it has {size}")
    return stored


def _stored_header(doc: Any, at: int) -> StoredHeader:
    """The snapshot a header holds, and where its parts lie, the first at byte ``at``."""
    snapshot = TaskSnapshot.from_doc(doc)
    listed = doc.get("parts", [])
    if not (isinstance(listed, list) and all(_is_part(p) for p in listed)):
        raise SnapshotError("its parts are not a list of [key group, length]")
    parts = {}
    for group, length in listed:
        parts[group] = (at, at + length)
        at += length
    return StoredHeader(snapshot, parts)


def read(blob: bytes) -> tuple[TaskSnapshot, dict[int, bytes]]:
    """A whole stored snapshot: the snapshot and its keyed state's parts, of any layout."""
    if blob.startswith(MAGIC):
        start = header_start(blob, len(blob))
        if start is None:
            raise SnapshotError("it is cut short: it does not end as a snapshot does")
        header = read_footer(blob[start : len(blob) - TAIL], start)
    elif header_end(blob[:HEAD]) is not None:
        header = read_header(blob, len(blob))
    else:
        doc = _unpack(blob)
        snapshot = TaskSnapshot.from_doc(doc)
        state = doc.get("state", {})
        if not (isinstance(state, Mapping) and all(isinstance(g, int) for g in state)):
            raise SnapshotError("its keyed state is not a map of key groups")
        return snapshot, {group: msgpack.packb(part) for group, part in state.items()}
    return header.snapshot, {g: blob[start:end] for g, (start, end) in header.parts.items()}


def _unpack(blob: bytes) -> Any:
    try:
        return msgpack.unpackb(blob, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as e:
        raise SnapshotError(f"it does not read as msgpack: {e}") from None


def _is_number(value: object) -> bool:
    return type(value) is int and value >= 0


def _is_part(value: object) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(map(_is_number, value))


class StoredParts(Mapping[int, bytes]):
    """Key groups' parts of a stored snapshot that are read only as a restore takes them (a
    snapshot too large to hold in memory): ``spans`` says where each lies, in ascending key
    group order, and ``fetch(start, end)`` reads a range of the snapshot ``what`` names.
    Going through ``items()`` reads runs of consecutive parts of up to RUN bytes, so a restore
    holds one run at a time."""

    RUN = 16 * 1024 * 1024

    def __init__(
        self, spans: dict[int, tuple[int, int]], fetch: Callable[[int, int], bytes], what: str
    ) -> None:
        self.spans, self._fetch, self.what = spans, fetch, what

    def __getitem__(self, group: int) -> bytes:
        start, end = self.spans[group]
        return self._read(start, end)

    def __iter__(self) -> Iterator[int]:
        return iter(self.spans)

    def __len__(self) -> int:
        return len(self.spans)

    def items(self) -> ItemsView[int, bytes]:
        return _Runs(self)

    def runs(self) -> Iterator[tuple[int, bytes]]:
        """Each part, in order, read a run at a time."""
        spans = list(self.spans.items())
        first = 0
        while first < len(spans):
            last = first
            low = spans[first][1][0]
            while last + 1 < len(spans) and spans[last + 1][1][1] - low <= self.RUN:
                last += 1
            data = self._read(low, spans[last][1][1])
            for group, (start, end) in spans[first : last + 1]:
                yield group, data[start - low : end - low]
            first = last + 1

    def _read(self, start: int, end: int) -> bytes:
        data = self._fetch(start, end)
        if len(data) != end - start:
            raise SnapshotError(f"{self.what} is not a task's snapshot: its parts end at byte "
                                f"{start + len(data)}, not {end}")  # fmt: skip
        return data


class _Runs(ItemsView[int, bytes]):
    """A StoredParts' items, read a run at a time."""

    _mapping: StoredParts

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        return self._mapping.runs()


@dataclass(frozen=True, slots=True)
class Restored:
    """What a restore reads of one old slot: its snapshot, and the keyed state's parts of each
    snapshot of its chain and then its own, oldest first, of the key groups asked for: held,
    or, for a snapshot too large to hold, read as they are taken (StoredParts)."""

    snapshot: TaskSnapshot
    layers: list[Mapping[int, bytes]]


class Chain:
    """Which of a slot's snapshots its next one's keyed state adds to. The first after a start
    or a restore is whole; after it, each holds what changed since the one before, until the
    bytes of the chain's snapshots of changes reach the whole one's (a restore would read more
    than twice the state) or the chain is MAX_CHAIN long. A checkpoint then costs what changed,
    in bytes, whatever the sizes of the entries that did not change, and a restore reads at
    most twice the whole snapshot and the last epoch's changes. A whole snapshot packed as it
    is stored has its size only once stored (``measured``); until then the chain goes on."""

    def __init__(self) -> None:
        self.numbers: list[int] = []
        """The chain so far: the whole snapshot's epoch number, then each one's after it."""
        self.base: float = 0
        """The bytes of the chain's whole snapshot's keyed state (inf until measured)."""
        self.written = 0
        """The bytes of the keyed state of the chain's snapshots of changes measured so far."""
        self.unmeasured: set[int] = set()
        """The chain's snapshots whose size comes once they are stored."""

    def whole(self) -> bool:
        """Whether the next snapshot is whole."""
        return not self.numbers or len(self.numbers) >= MAX_CHAIN or self.written >= self.base

    def taken(self, number: int, whole: bool, size: int | None) -> tuple[int, ...]:
        """Snapshot ``number`` was taken (``whole`` or not, its keyed state ``size`` bytes, None
        when it is measured once stored): the earlier ones it adds to."""
        if size is None:
            self.unmeasured.add(number)
        if whole:
            self.numbers, self.base, self.written = [number], math.inf if size is None else size, 0
            self.unmeasured &= {number}
            return ()
        chain = tuple(self.numbers)
        self.numbers.append(number)
        self.written += size or 0
        return chain

    def measured(self, number: int, size: int) -> None:
        """Snapshot ``number``'s keyed state, taken unmeasured and now stored, has ``size``
        bytes (nothing, for one no longer of the chain)."""
        if number not in self.unmeasured:
            return
        self.unmeasured.discard(number)
        if self.numbers[0] == number:
            self.base = size
        else:
            self.written += size

    @property
    def since(self) -> int:
        """The epoch number the chain starts at: the oldest snapshot a restore reads."""
        return self.numbers[0] if self.numbers else 0


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
                         _timers(doc["timers"]), _mark(doc.get("watermark")),
                         _marks(doc.get("watermarks", {})))  # fmt: skip
    except KeyError as e:
        raise SnapshotError(f"its causal state has no {e.args[0]}") from None


def _mark(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SnapshotError(f"its causal watermark is a {type(value).__name__}, not a number")
    return float(value)


def _marks(value: object) -> dict[int, float]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, int) and not isinstance(v, bool) and isinstance(v, int | float)
        for k, v in value.items()
    ):
        raise SnapshotError("its causal watermarks are not a map of seats to numbers")
    return {k: float(v) for k, v in value.items()}


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
