"""The wire format between peer groups: one frame per Aeron message.

A frame is a fixed 32-byte little-endian header and a body. The header comes first and alone
says where a frame goes and whether it is still wanted (its job, destination and allocation
version), so a group routes or drops a frame without decoding its body. The first byte is the
format version: a peer refuses a frame of a format it does not know instead of misreading it.
Version 2 added frames too large for one message (peer.messaging.fragments): a BATCH's epoch
field counts the parts of its batch still to come, and FRAGMENT. Version 3 gave the third byte
to the body's format (peer.messaging.codec): 0 for msgpack (a list: a batch of rows, or what
another message carries), 1 for an Arrow IPC stream of one record batch.

Rows come back as exactly the JSON-like values they were (tuples as lists, as in JSON; bytes as
bytes; NaN and the infinities as themselves); a value that cannot is refused, naming its segment
and field. bench/codec.py chose the codecs (peer.messaging.codec says why). Which message a frame
carries, and what its epoch field and body hold, is peer.messaging.messages.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, NamedTuple, NoReturn

import pyarrow as pa

from peer.messaging.codec import (
    EMPTY,
    CodecError,
    Format,
    decode_arrow,
    decode_rows,
    encode_arrow,
    encode_rows,
)

FORMAT_VERSION = 3
HEADER = struct.Struct("<BBBxIIIQQ")
"""version, type, body format, one reserved byte (zero), job, source, destination, allocation
version, epoch: 32 bytes, so the body starts aligned."""


@dataclass(frozen=True, slots=True)
class Packed:
    """A batch of rows already encoded as a body (``pack``). A sender that keeps what it sent
    until a commit (peer.causal.inflight) holds these bytes rather than the rows: one object
    to free instead of a dict per row, freed long after the rows would have gone cold. A
    frame takes them as they are."""

    data: bytes
    rows: int
    """How many rows ``data`` holds, so that a batch has its length whatever its form."""

    def __len__(self) -> int:
        return self.rows


type Decoded = Sequence[Any] | pa.RecordBatch
"""A body as a frame reads back: a list (rows, or what another message carries) or one Arrow
record batch."""
type Body = Decoded | Packed
"""What a frame is made of: a body as it reads back, or rows already packed."""


class FrameError(ValueError):
    """Bytes that are not a frame this peer can read, or values that cannot become one."""


class MessageType(IntEnum):
    """What a frame carries: the wire's side of peer.messaging.messages, which says what each
    one's epoch field and body hold. FRAGMENT carries a piece of a frame too large for one
    message (peer.messaging.fragments). JOIN_ASK and JOIN_REPLY are join direct's side channel
    (peer.cluster.direct_join); a peer that predates them drops them as unknown. DETERMINANTS,
    REPLAY, RECALL and RECALLED are local recovery's (peer.runtime.causal)."""

    BATCH = 1
    END = 2
    MEMBERSHIP = 3
    BARRIER = 4
    ACK = 5
    COMMITTED = 6
    RECOVER = 7
    DRAINED = 8
    WATERMARK = 9
    CREDIT = 10
    FRAGMENT = 11
    JOIN_ASK = 12
    JOIN_REPLY = 13
    RUMOR = 14
    DETERMINANTS = 15
    REPLAY = 16
    RECALL = 17
    RECALLED = 18


class Header(NamedTuple):
    """What a group needs to route a frame, or to drop it unread.

    ``allocation_version`` (u64) is the job allocation the frame belongs to: a receiver drops
    frames of a stale one. ``source`` and ``destination`` (u32) are the short ids of the sending
    and receiving virtual peers, ``job`` (u32) the short id of the job: a group routes by job and
    destination. ``epoch`` is a u64 whose meaning depends on ``type``.
    """

    type: MessageType
    allocation_version: int
    source: int
    destination: int
    epoch: int
    job: int


class BodyError(FrameError):
    """A frame whose header reads but whose body does not: the header says whose it was."""

    def __init__(self, header: Header, reason: str) -> None:
        super().__init__(reason)
        self.header = header


_TYPES = {t: t for t in MessageType}
_FIELD_BITS = {"allocation_version": 64, "source": 32, "destination": 32, "epoch": 64, "job": 32}


def encode(header: Header, body: Body = ()) -> bytes:
    """The frame of ``header`` and ``body``, a FrameError for anything a peer could not read
    back as the same values."""
    arrow = isinstance(body, pa.RecordBatch)
    try:
        head = HEADER.pack(FORMAT_VERSION, _TYPES[header.type], arrow, header.job, header.source,
                           header.destination, header.allocation_version, header.epoch)  # fmt: skip
    except (KeyError, TypeError, struct.error):
        _refuse_header(header)
    if isinstance(body, Packed):
        return head + body.data
    try:
        if arrow:
            return encode_arrow(body, head)
        return head + (encode_rows(body) if body else EMPTY)
    except CodecError as e:
        raise FrameError(str(e)) from e


def pack(batch: Sequence[Any] | pa.RecordBatch, limit: int) -> Body:
    """A batch as a sender that keeps it holds it: rows encoded once, to be sent as they are,
    when their frame fits in ``limit`` bytes; else the rows themselves, which go split in
    several frames (peer.messaging.fragments). An Arrow batch as it is: its buffers are already
    few objects. A FrameError naming what cannot travel."""
    if isinstance(batch, pa.RecordBatch):
        return batch
    try:
        data = encode_rows(batch)
    except CodecError as e:
        raise FrameError(str(e)) from e
    return Packed(data, len(batch)) if HEADER.size + len(data) <= limit else batch


def unpack(body: Body) -> Decoded:
    """The rows a Packed body holds (read back as a receiver would); any other body as it
    is."""
    return decode_rows(body.data) if isinstance(body, Packed) else body


def decode_header(frame: bytes | bytearray | memoryview) -> Header:
    """The header alone, the body left untouched: enough to route or drop a frame."""
    if not frame:
        raise FrameError("empty frame")
    if frame[0] != FORMAT_VERSION:
        raise FrameError(f"unknown frame format version {frame[0]} (this peer reads "
                         f"{FORMAT_VERSION})")  # fmt: skip
    if len(frame) < HEADER.size:
        raise FrameError(f"frame of {len(frame)} bytes is shorter than the {HEADER.size} byte "
                         "header")  # fmt: skip
    _, kind, _, job, source, destination, allocation_version, epoch = HEADER.unpack_from(frame)
    message_type = _TYPES.get(kind)
    if message_type is None:
        raise FrameError(f"unknown message type {kind}")
    return Header(message_type, allocation_version, source, destination, epoch, job)


def decode(frame: bytes | bytearray | memoryview) -> tuple[Header, Decoded]:
    """The header and body of a frame from a peer: a BodyError for a body that does not read,
    a FrameError for anything else unreadable. An Arrow body's buffers point into ``frame``."""
    header = decode_header(frame)
    body = memoryview(frame)[HEADER.size :]
    try:
        if frame[2] == Format.ROWS:
            return header, decode_rows(body)
        if frame[2] == Format.ARROW:
            return header, decode_arrow(body)
    except CodecError as e:
        raise BodyError(header, str(e)) from e
    raise BodyError(header, f"unknown body format {frame[2]}")


def _refuse_header(header: Header) -> NoReturn:
    """Name the field that does not fit, which struct.error does not."""
    if header.type not in _TYPES:
        raise FrameError(f"header type {header.type!r} is not a MessageType")
    for name, bits in _FIELD_BITS.items():
        value = getattr(header, name)
        if not isinstance(value, int) or not 0 <= value < 1 << bits:
            raise FrameError(f"header {name} {value!r} is not an unsigned {bits}-bit integer")
    raise FrameError(f"header cannot be encoded: {header!r}")
