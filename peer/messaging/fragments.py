"""Frames larger than one transport message: split by the sender, put back by the receiver.

A transport carries at most ``limit`` bytes in one message (Aeron: 2 MiB, its ``max_frame``,
peer.messaging.aeron). A larger batch is first split into BATCH frames of fewer segments (rows,
or slices of an Arrow batch), each small enough; the epoch field of each counts the parts of the
batch still to come, and the receiver joins them into the one batch the sender's task emitted
(credit between peers counts batches, so a split batch is still one). A frame still too large,
a single large segment, is cut into FRAGMENT frames: each repeats the whole frame's job, source,
destination and allocation version, holds the whole frame's length in its epoch field, and
carries an 8-byte offset and the next slice of the whole frame.

A group offers the pieces of one frame back to back on its one exclusive publication to the
receiving group (one image there), and Aeron delivers an image in order, so a receiver has at
most one frame in assembly per sending peer, and never more than ``MAX_FRAME`` bytes of it: that
bounds what any peer can make another hold. A segment over ``MAX_SEGMENT`` never leaves its
group; the sender's task fails instead, which kills its job.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from peer.messaging.codec import encode_rows
from peer.messaging.frame import (
    HEADER,
    Body,
    Decoded,
    FrameError,
    Header,
    MessageType,
    decode,
    decode_header,
    encode,
    unpack,
)

MAX_SEGMENT = 64 * 1024 * 1024
"""The largest segment, encoded, that travels between groups (64 MiB). Large enough
for any record a stream processor should carry whole (a document, an image); a larger one is
refused with its size and its job is killed, because every receiver must be able to hold it
while its fragments arrive. Segments handed over within a group are not encoded and not limited."""
ARRAY_PREFIX = 5
"""The most bytes msgpack spends saying a list has n elements."""
MAX_FRAME = HEADER.size + ARRAY_PREFIX + MAX_SEGMENT
"""The largest frame that travels in fragments: one segment of MAX_SEGMENT bytes with its header
and the msgpack array around it. A receiver holds at most this much per sender."""
OFFSET = struct.Struct("<Q")
"""Where in the whole frame a fragment's slice starts."""


def frames(header: Header, body: Body, limit: int, largest: int = MAX_FRAME) -> list[bytes]:
    """The frames, none over ``limit`` bytes, that carry ``body`` under ``header``, in the
    order they must be offered; a FrameError for what cannot be encoded or is over the limit."""
    frame = encode(header, body)
    if len(frame) <= limit:
        return [frame]
    body = unpack(body)
    if header.type == MessageType.BATCH and len(body) > 1:
        if isinstance(body, pa.RecordBatch):
            runs = _arrow_runs(header, body, limit, len(frame))
        else:
            runs = _row_runs(body, limit)
        out = []
        for i, run in enumerate(runs):
            out.extend(frames(header._replace(epoch=len(runs) - 1 - i), run, limit, largest))
        return out
    if len(frame) > largest:
        what = "a segment" if header.type == MessageType.BATCH else f"a {header.type.name} frame"
        raise FrameError(f"{what} of {len(frame) - HEADER.size - 1:,} bytes (encoded) is over the "
                         f"{largest - HEADER.size - ARRAY_PREFIX:,}-byte limit on what "
                         "travels between groups")  # fmt: skip
    return fragment(frame, limit)


def _row_runs(segments: Sequence[Any], limit: int) -> list[list[Any]]:
    """Consecutive runs of segments, each run's frame within ``limit`` where its segments allow
    (a segment too large alone is a run of its own, and goes in fragments)."""
    budget = limit - HEADER.size - ARRAY_PREFIX
    runs: list[list[Any]] = [[]]
    used = 0
    for segment in segments:
        size = len(encode_rows((segment,))) - 1
        if runs[-1] and used + size > budget:
            runs.append([])
            used = 0
        runs[-1].append(segment)
        used += size
    return runs


def _arrow_runs(header: Header, batch: pa.RecordBatch, limit: int, size: int) -> list[Any]:
    """Consecutive slices of ``batch`` (whose frame is ``size`` bytes), each slice's frame
    within ``limit`` unless it is one row: as many equal slices as its size asks for, halved
    again where one is still over."""
    pieces = math.ceil(size / (limit * 0.9))
    step = math.ceil(len(batch) / pieces)
    pending = [batch.slice(at, step) for at in range(0, len(batch), step)]
    runs = []
    while pending:
        run = pending.pop(0)
        if len(run) == 1 or len(encode(header, run)) <= limit:
            runs.append(run)
        else:
            half = len(run) // 2
            pending[:0] = [run.slice(0, half), run.slice(half)]
    return runs


def fragment(frame: bytes, limit: int) -> list[bytes]:
    """FRAGMENT frames, none over ``limit`` bytes, that carry ``frame`` in order."""
    whole = decode_header(frame)
    head = HEADER.pack(frame[0], MessageType.FRAGMENT, 0, whole.job, whole.source,
                       whole.destination, whole.allocation_version, len(frame))  # fmt: skip
    step = limit - HEADER.size - OFFSET.size
    if step <= 0:
        raise ValueError(f"a limit of {limit} bytes leaves no room for a fragment's slice")
    return [head + OFFSET.pack(at) + frame[at : at + step] for at in range(0, len(frame), step)]


class Assembly:
    """Whole messages from the frames a group receives: fragments put back into frames per
    sending peer, a split batch's parts joined into one batch. ``add`` returns a message once it
    is whole; a FrameError for a frame that is unreadable or does not fit with what came before
    (what was in assembly for that sender is dropped with it)."""

    def __init__(self, largest: int = MAX_FRAME) -> None:
        self.largest = largest
        self._pieces: dict[int, tuple[int, bytearray]] = {}
        self._parts: dict[tuple[int, int, int, int], list[Decoded]] = {}

    def add(self, frame: bytes) -> tuple[Header, Body] | None:
        if len(frame) > 1 and frame[1] == MessageType.FRAGMENT:
            whole = self._piece(decode_header(frame), frame)
            if whole is None:
                return None
            frame = whole
        header, body = decode(frame)
        if header.type == MessageType.FRAGMENT:
            raise FrameError("a fragment carries a fragment")
        if header.type == MessageType.BATCH and (header.epoch or self._parts):
            return self._part(header, body)
        return header, body

    def _piece(self, header: Header, frame: bytes) -> bytes | None:
        sender, total = header.source, header.epoch
        if len(frame) < HEADER.size + OFFSET.size:
            raise FrameError(f"a fragment of {len(frame)} bytes has no offset")
        (offset,) = OFFSET.unpack_from(frame, HEADER.size)
        piece = memoryview(frame)[HEADER.size + OFFSET.size :]
        if total > self.largest:
            raise FrameError(f"a fragment of a {total:,}-byte frame, over the {self.largest:,} "
                             "bytes a frame may have")  # fmt: skip
        held = self._pieces.pop(sender, None)
        if offset == 0:
            held = (total, bytearray())
        if held is None or held[0] != total or len(held[1]) != offset:
            raise FrameError(f"a fragment at offset {offset:,} of a {total:,}-byte frame from "
                             f"peer {sender} does not follow what came before it")  # fmt: skip
        buffer = held[1]
        buffer += piece
        if len(buffer) > total:
            raise FrameError(f"fragments from peer {sender} overrun their {total:,}-byte frame")
        if len(buffer) == total:
            return bytes(buffer)
        self._pieces[sender] = held
        return None

    def _part(self, header: Header, body: Decoded) -> tuple[Header, Decoded] | None:
        key = (header.job, header.source, header.destination, header.allocation_version)
        held = self._parts.pop(key, [])
        held.append(body)
        if header.epoch:
            self._parts[key] = held
            return None
        return header, _joined(held)

    def forget(self, gone: Callable[[int], bool]) -> None:
        """Drop what is in assembly from senders that are ``gone`` (by short id)."""
        self._pieces = {s: held for s, held in self._pieces.items() if not gone(s)}
        self._parts = {k: held for k, held in self._parts.items() if not gone(k[1])}

    def held(self) -> int:
        """Bytes of fragments waiting for the rest of their frame."""
        return sum(len(buffer) for _, buffer in self._pieces.values())


def _joined(parts: list[Decoded]) -> Decoded:
    """The one batch that was split into ``parts``."""
    if len(parts) == 1:
        return parts[0]
    if all(isinstance(part, pa.RecordBatch) for part in parts):
        try:
            return pa.concat_batches(parts)
        except pa.ArrowInvalid as e:
            raise FrameError(f"the parts of an Arrow batch do not join: {e}") from e
    if any(isinstance(part, pa.RecordBatch) for part in parts):
        raise FrameError("a batch's parts mix rows and Arrow")
    return [segment for part in parts for segment in part]
