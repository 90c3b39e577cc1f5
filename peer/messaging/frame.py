"""The wire format between peer groups: one frame per Aeron message.

A frame is a fixed 32-byte little-endian header and a msgpack body. The header comes first and
alone says where a frame goes and whether it is still wanted (its job, destination and
allocation version), so a group routes or drops a frame without decoding its segments. The first
byte is the format version: a peer refuses a frame of a format it does not know instead of
misreading it. Version 2 added frames too large for one message (peer.messaging.fragments):
a BATCH's epoch field counts the parts of its batch still to come, and FRAGMENT.

The body is a msgpack array of segments. msgpack was chosen by bench/codec.py: orjson is about
twice as fast but writes NaN and infinities as ``null``, pickle runs code while it reads, and
the stdlib json is less than half as fast; msgpack is the fastest codec that gives back exactly
the JSON-like values it was handed. Exactly, except that tuples come back as lists, as in JSON.
Dict keys must be strings: the reader refuses any other key (integer keys would let a peer build
a dict of colliding hashes). bytes travel too, because msgpack carries them natively.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, NoReturn

import msgpack

FORMAT_VERSION = 2
HEADER = struct.Struct("<BBxxIIIQQ")
"""version, type, two reserved bytes (zero), job, source, destination, allocation version,
epoch: 32 bytes, so the body starts aligned."""


class FrameError(ValueError):
    """Bytes that are not a frame this peer can read, or values that cannot become one."""


class MessageType(IntEnum):
    """What a frame carries. BATCH, DONE (the sender's input has ended), BARRIER (the epoch in
    the header ends here; body ``[final]``) and WATERMARK (body ``[value]``) travel along the
    workflow's edges, in order with each other; RECOVER (body: where to restore from), ACK (the
    sender's snapshot of the header's epoch is stored), DRAINED (an output has every end
    marker) and COMMITTED (the header's epoch is committed) go between a job's peers and its
    coordinator; CREDIT (the header's epoch field holds a count of batches) goes back up an edge,
    from a receiver to a sender; HEARTBEAT between groups. A BATCH's epoch field counts the
    frames of the same batch still to come (0 for a whole one); FRAGMENT carries a piece of a
    frame too large for one message (peer.messaging.fragments)."""

    BATCH = 1
    DONE = 2
    HEARTBEAT = 3
    BARRIER = 4
    ACK = 5
    COMMITTED = 6
    RECOVER = 7
    DRAINED = 8
    WATERMARK = 9
    CREDIT = 10
    FRAGMENT = 11


@dataclass(frozen=True, slots=True)
class Header:
    """What a group needs to route a frame, or to drop it unread.

    ``allocation_version`` (u64) is the job allocation the frame belongs to: a receiver drops
    frames of a stale one. ``source`` and ``destination`` (u32) are the short ids of the sending
    and receiving virtual peers, ``job`` (u32) the short id of the job: a group routes by job and
    destination. ``epoch`` is a u64.
    """

    type: MessageType
    allocation_version: int
    source: int
    destination: int
    epoch: int
    job: int


_TYPES = {t.value: t for t in MessageType}
_FIELD_BITS = {"allocation_version": 64, "source": 32, "destination": 32, "epoch": 64, "job": 32}


def encode(header: Header, segments: Sequence[Any] = ()) -> bytes:
    """The frame of ``header`` and ``segments``, a FrameError for anything a peer could not
    read back as the same values."""
    if header.type not in _TYPES:
        _refuse_header(header)
    try:
        head = HEADER.pack(FORMAT_VERSION, header.type, header.job, header.source,
                           header.destination, header.allocation_version, header.epoch)  # fmt: skip
    except struct.error:
        _refuse_header(header)
    try:
        body = msgpack.packb(list(segments))
    except (TypeError, ValueError, OverflowError) as e:
        raise FrameError(f"segments cannot be encoded: {e}") from e
    return head + body


def decode_header(frame: bytes | memoryview) -> Header:
    """The header alone, the body left untouched: enough to route or drop a frame."""
    if not frame:
        raise FrameError("empty frame")
    if frame[0] != FORMAT_VERSION:
        raise FrameError(f"unknown frame format version {frame[0]} (this peer reads "
                         f"{FORMAT_VERSION})")  # fmt: skip
    if len(frame) < HEADER.size:
        raise FrameError(f"frame of {len(frame)} bytes is shorter than the {HEADER.size} byte "
                         "header")  # fmt: skip
    _, kind, job, source, destination, allocation_version, epoch = HEADER.unpack_from(frame)
    message_type = _TYPES.get(kind)
    if message_type is None:
        raise FrameError(f"unknown message type {kind}")
    return Header(message_type, allocation_version, source, destination, epoch, job)


def decode(frame: bytes | memoryview) -> tuple[Header, list[Any]]:
    """The header and segments of a frame from a peer, a FrameError for anything unreadable."""
    header = decode_header(frame)
    body = memoryview(frame)[HEADER.size :]
    try:
        segments = msgpack.unpackb(body, ext_hook=_refuse_extension, timestamp=1)
    except (ValueError, TypeError) as e:
        raise FrameError(f"frame body does not decode: {type(e).__name__}: {e}") from e
    if not isinstance(segments, list):
        raise FrameError(f"frame body is a {type(segments).__name__}, not a list of segments")
    return header, segments


def _refuse_extension(code: int, data: bytes) -> NoReturn:
    """Peers only write plain values; msgpack would hand others back as opaque objects.
    (Its timestamp extension never reaches this hook: ``timestamp=1`` reads it as a float.)"""
    raise ValueError(f"msgpack extension type {code} is not a segment value")


def _refuse_header(header: Header) -> NoReturn:
    """Name the field that does not fit, which struct.error does not."""
    if header.type not in _TYPES:
        raise FrameError(f"header type {header.type!r} is not a MessageType")
    for name, bits in _FIELD_BITS.items():
        value = getattr(header, name)
        if not isinstance(value, int) or not 0 <= value < 1 << bits:
            raise FrameError(f"header {name} {value!r} is not an unsigned {bits}-bit integer")
    raise FrameError(f"header cannot be encoded: {header!r}")
