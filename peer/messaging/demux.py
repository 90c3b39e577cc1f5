"""Frames in, each to the owner of its protocol.

One transport carries four protocols between groups: task data (segments, barriers, credit and
the rest of the data plane's messages, peer.runtime.dataplane), membership heartbeats and gossip
(peer.membership), the direct-join side channel (peer.cluster.direct_join) and rumors of log
entries (peer.log.feed). A frame's header names its type, so the demultiplexer reads only the
header and hands the frame on: task data to the data plane, which puts fragments back together
and reads the body itself; a frame of another protocol, always small and whole, read here to
its message and given to the owner registered for that message's type. A frame of a protocol
nobody in this process speaks (membership in a member's worker process, the side channel
without join direct) is dropped, as is one that does not read, with a short warning naming the
group and the frame's size.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from peer.messaging import messages
from peer.messaging.frame import FrameError, MessageType, decode_header
from peer.messaging.messages import JoinAsk, JoinReply, LogRumor, Membership

log = logging.getLogger(__name__)

CONTROL = (Membership, JoinAsk, JoinReply, LogRumor)
"""The messages that are for a group itself, not for one of its peers' tasks."""
CONTROL_TYPES = frozenset(messages.type_of(kind) for kind in CONTROL)


class Demultiplexer:
    def __init__(self, group: str, data: Callable[[bytes], None]) -> None:
        """``data`` takes every frame of task data, fragments included."""
        self.group, self.data = group, data
        self.owners: dict[MessageType, Callable[[Any], None]] = {}

    def route[M](self, kind: type[M], owner: Callable[[M], None]) -> None:
        """Give the messages of ``kind``, one of CONTROL, to ``owner``."""
        if kind not in CONTROL:
            raise ValueError(f"{kind.__name__} is task data, which goes to the data plane")
        self.owners[messages.type_of(kind)] = owner

    def receive(self, frame: bytes) -> None:
        try:
            header = decode_header(frame)
        except FrameError as e:
            self._drop(frame, e)
            return
        if header.type not in CONTROL_TYPES:
            self.data(frame)
            return
        owner = self.owners.get(header.type)
        if owner is None:
            return
        try:
            message = messages.decode(frame)[1]
        except FrameError as e:
            self._drop(frame, e)
            return
        owner(message)

    def _drop(self, frame: bytes, error: FrameError) -> None:
        log.warning("group %s dropped an unreadable frame of %d bytes: %.200s",
                    self.group, len(frame), error)  # fmt: skip
