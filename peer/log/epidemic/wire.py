"""A rumor as it travels between members: msgpack, written and checked by msgspec.

A copy carries the entry's position, its round, who sent it (the receiver's randomness for
passing it on depends on the sender, peer.log.epidemic.rumor.copy_rng) and the entry's bytes,
exactly as the log holds them. An entry too large for one frame travels as its position alone
(``data`` None): the receiver reads that one znode when its turn comes. Frames come from other
processes, so reading one checks every field and names the first that is wrong.
"""

from __future__ import annotations

import msgspec

from peer.log.epidemic.rumor import Rumor


class RumorFrame(msgspec.Struct, array_like=True, frozen=True):
    position: int
    round: int
    sender: str
    data: bytes | None


class RumorError(ValueError):
    """A payload that is not a rumor; the message says what is wrong with it."""


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(RumorFrame)


def encode(rumor: Rumor, sender: str, *, with_data: bool = True) -> bytes:
    """The payload of ``rumor`` from ``sender``; without ``with_data``, its position alone."""
    data = rumor.data if with_data else None
    return _ENCODER.encode(RumorFrame(rumor.position, rumor.round, sender, data))


def decode(payload: bytes) -> tuple[Rumor, str, bool]:
    """The rumor, its sender and whether it carried the entry's bytes."""
    try:
        frame = _DECODER.decode(payload)
    except msgspec.DecodeError as e:
        raise RumorError(f"a rumor of {len(payload)} bytes does not read: {e}") from None
    if not frame.sender:
        raise RumorError(f"the rumor of log position {frame.position} names no sender")
    try:
        rumor = Rumor(frame.position, frame.data or b"", frame.round)
    except ValueError as e:
        raise RumorError(f"a rumor from member {frame.sender}: {e}") from None
    return rumor, frame.sender, frame.data is not None
