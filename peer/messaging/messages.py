"""The runtime's messages, and the one table that turns each into a frame and back.

Along a workflow's edges, in order with each other: a ``Batch`` (rows or an Arrow record batch),
a ``Barrier`` (the epoch ends here; ``final`` when it is the job's last), a ``Watermark`` and
``End`` (the sender's input is over). Back up an edge: ``Credit`` for more batches. From a job's
coordinator to its peers: ``Recover`` (where to restore from, or nothing), a ``Barrier`` for an
input and ``Committed``; from its peers to the coordinator: ``Ack`` (the sender's snapshot of an
epoch is stored) and ``Drained`` (an output has every end marker). For local recovery
(peer.runtime.causal): ``Determinants`` in line along an edge, and, from a peer that took over
a seat, ``ReplayFrom`` to its upstream peers and ``Recall`` to its downstream ones, answered by
``Recalled``. Between groups: ``Membership`` (heartbeats and gossip, whose body
peer.membership.wire writes and reads),
join direct's ``JoinAsk`` and ``JoinReply`` (peer.cluster.join_wire), and ``LogRumor`` (a log
entry gossiped, whose payload peer.log.epidemic.wire writes and reads). The
task runner, its inbox and the coordinator take and give these same types; the data plane hands
them over as they are within a group and through this table between groups, so a batch that
stays in its process is never encoded.

Each kind of message has one row in ``TABLE``: its frame type, what goes in the header's epoch
field, what in the body, and how the message is made back from the two (refusing a body of the
wrong shape, since frames come from other processes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pyarrow as pa

from peer.messaging import fragments
from peer.messaging.frame import Body, BodyError, FrameError, Header, MessageType, Packed, unpack
from peer.messaging.frame import decode as decode_frame


@dataclass(frozen=True, slots=True)
class Batch:
    batch: list[Any] | pa.RecordBatch | Packed
    """Rows, an Arrow record batch, or rows packed for the wire by a sender that keeps them
    (peer.messaging.frame.pack)."""


@dataclass(frozen=True, slots=True)
class Barrier:
    epoch: int
    final: bool = False
    pause: bool = False
    """A hand-over's: the inputs read nothing after it, so its epoch's commit is where the job
    stands still (peer.runtime.coordinator)."""


@dataclass(frozen=True, slots=True)
class Watermark:
    value: float


@dataclass(frozen=True, slots=True)
class End:
    pass


@dataclass(frozen=True, slots=True)
class Credit:
    batches: int
    rows: int = 0
    """The most rows a batch to the receiver should hold (peer.runtime.debloat), 0 for no limit:
    in the body, which is empty without one."""


RESTORE_SCOPES = ("global", "handover")
"""What a restore from a committed epoch is (peer.runtime.checkpoints.CommitRecord.scope)."""


@dataclass(frozen=True, slots=True)
class RestorePoint:
    """Where every runner of a job restores from: epoch ``number`` of allocation ``version`` of
    job ``job`` (the job's own last commit, or the one its ``resume_from`` names), which
    ``slots`` peers of each task took; ``scope`` is what a restore from it is, a rollback of the
    whole job (global) or a hand-over's pause, which redoes nothing."""

    job: str
    version: int
    number: int
    slots: dict[str, int]
    scope: str = "global"
    groups: dict[str, int] = field(default_factory=dict)
    """Each keyed task's number of key groups when the epoch was taken (none for an epoch taken
    before key groups, whose keys were split by hash modulo slots)."""


@dataclass(frozen=True, slots=True)
class Recover:
    point: RestorePoint | None
    """The coordinator's answer: where to restore from, None to start afresh. On the wire
    ``[]`` or ``[job, version, number, {task: slots}, scope, {task: key groups}]`` (a sender of
    an earlier release leaves the scope out, global, or the key groups, none; the key groups
    are left out when no task is keyed)."""


@dataclass(frozen=True, slots=True)
class Ack:
    epoch: int
    since: int = 0
    """Where the chain of the sender's snapshot starts (peer.runtime.snapshot); 0: whole."""


@dataclass(frozen=True, slots=True)
class Drained:
    pass


@dataclass(frozen=True, slots=True)
class Committed:
    epoch: int


@dataclass(frozen=True, slots=True)
class Determinants:
    deltas: list[Any]
    """Causal logging: what the receiver has not yet seen of the determinant logs the sender
    passes on, ``[[origin seat, offset, hops, [event, ...]], ...]`` (peer.causal.determinants).
    In line along an edge, just before the message whose making they precede."""


@dataclass(frozen=True, slots=True)
class ReplayFrom:
    epoch: int
    """From a peer that took over a seat to its upstream peers: send me again what you sent the
    seat after your barrier of this epoch (0: since the allocation began)."""


@dataclass(frozen=True, slots=True)
class Recall:
    """From a peer that took over a seat to its downstream peers: what do you hold of the seat's
    determinants, and how many in-line messages have you had from it?"""


@dataclass(frozen=True, slots=True)
class Recalled:
    """The answer to a Recall, on the wire ``[received, offset, events]``."""

    received: int
    """In-line messages received from the seat."""
    offset: int
    """Where in the seat's determinant log the events held begin."""
    events: list[Any]
    """The seat's determinants held, ``[event, ...]`` (peer.causal.determinants)."""


@dataclass(frozen=True, slots=True)
class Membership:
    body: list[Any]
    """A membership message as plain data (peer.membership.wire)."""


@dataclass(frozen=True, slots=True)
class JoinAsk:
    body: list[Any]
    """A joiner's request to be stitched in, as plain data (peer.cluster.join_wire)."""


@dataclass(frozen=True, slots=True)
class JoinReply:
    body: list[Any]
    """An aider's answer, with its replica when the joiner is in (peer.cluster.join_wire)."""


@dataclass(frozen=True, slots=True)
class LogRumor:
    payload: bytes
    """A copy of a log entry on its way from member to member (peer.log.epidemic.wire)."""


Message = (
    Batch
    | Barrier
    | Watermark
    | End
    | Credit
    | Recover
    | Ack
    | Drained
    | Committed
    | Determinants
    | ReplayFrom
    | Recall
    | Recalled
    | Membership
    | JoinAsk
    | JoinReply
    | LogRumor
)
END = End()
DRAINED = Drained()
RECALL = Recall()


class Address(NamedTuple):
    """Who a message is from and for: the header's fields other than its type and epoch."""

    job: int
    source: int
    destination: int
    allocation_version: int


NOWHERE = Address(0, 0, 0, 0)
"""The address of a membership message or a rumor, which is for a group, not a peer."""


@dataclass(frozen=True)
class Kind:
    """How one kind of message travels."""

    message: type
    type: MessageType
    epoch: Callable[[Any], int]
    """What the header's epoch field holds."""
    body: Callable[[Any], Body]
    read: Callable[[int, Body], Message]
    """The message again, from the epoch field and the body."""


def _one(body: Body, kinds: type | tuple[type, ...]) -> Any:
    """The one value of a body that must hold exactly one of ``kinds``."""
    if not isinstance(body, list) or len(body) != 1 or not isinstance(body[0], kinds):
        raise ValueError(f"body {body!r:.80} is not one {kinds}")
    return body[0]


def _flags(body: Body) -> tuple[bool, bool]:
    """A barrier's final and pause flags: two booleans (one, final, from an older sender)."""
    if not (isinstance(body, list) and 1 <= len(body) <= 2 and all(type(f) is bool for f in body)):
        raise ValueError(f"body {body!r:.80} is not [final, pause] as booleans")
    return body[0], len(body) == 2 and body[1]


def _list(body: Body) -> list[Any]:
    if not isinstance(body, list):
        raise ValueError(f"body of type {type(body).__name__} is not a list")
    return body


def _optional_count(body: Body, name: str) -> int:
    """A count a body may hold (a Credit's row limit, an Ack's chain start): 0 in an empty
    body, else one int >= 0."""
    if not body:
        return 0
    count = _one(body, int)
    if not _counts(count):
        raise ValueError(f"{name} {count!r} is not an int >= 0")
    return count


def _restore_point(body: Body) -> RestorePoint | None:
    """A Recover's restore point; None for an empty body (start afresh)."""
    items = _list(body)
    if not items:
        return None
    if len(items) not in (4, 5, 6):
        raise ValueError(f"body {body!r:.80} is not [job, version, epoch, slots, scope, groups]")
    job, version, number, slots, *rest = items
    scope = rest[0] if rest else "global"
    groups = rest[1] if len(rest) > 1 else {}
    if not (isinstance(job, str) and _counts(version, number)):
        raise ValueError(f"body {body!r:.80} does not start with a job id and two ints >= 0")
    for name, per_task in (("slots", slots), ("groups", groups)):
        if not (isinstance(per_task, dict) and all(isinstance(t, str) and _counts(n)
                                                   for t, n in per_task.items())):  # fmt: skip
            raise ValueError(f"{name} {per_task!r:.80} are not {{task: count}}")
    if scope not in RESTORE_SCOPES:
        raise ValueError(f"scope {scope!r:.40} is not one of {', '.join(RESTORE_SCOPES)}")
    return RestorePoint(job, version, number, slots, scope, groups)


def _restore_body(point: RestorePoint | None) -> Body:
    if point is None:
        return []
    body = [point.job, point.version, point.number, point.slots, point.scope]
    return [*body, point.groups] if point.groups else body


def _recalled(body: Body) -> Recalled:
    items = _list(body)
    if len(items) != 3 or not _counts(*items[:2]) or not isinstance(items[2], list):
        raise ValueError(f"body {body!r:.80} is not [received, offset, events]")
    return Recalled(*items)


def _counts(*values: Any) -> bool:
    return all(type(v) is int and v >= 0 for v in values)


def _zero(message: Any) -> int:
    return 0


def _nothing(message: Any) -> Body:
    return ()


TABLE = (
    Kind(Batch, MessageType.BATCH, _zero, lambda m: m.batch, lambda _, b: Batch(b)),
    Kind(Barrier, MessageType.BARRIER, lambda m: m.epoch, lambda m: [m.final, m.pause],
         lambda e, b: Barrier(e, *_flags(b))),
    Kind(Watermark, MessageType.WATERMARK, _zero, lambda m: [m.value],
         lambda _, b: Watermark(_one(b, (int, float)))),
    Kind(End, MessageType.END, _zero, _nothing, lambda _, b: END),
    Kind(Credit, MessageType.CREDIT, lambda m: m.batches, lambda m: [m.rows] if m.rows else (),
         lambda e, b: Credit(e, _optional_count(b, "row limit"))),
    Kind(Recover, MessageType.RECOVER, _zero, lambda m: _restore_body(m.point),
         lambda _, b: Recover(_restore_point(b))),
    Kind(Ack, MessageType.ACK, lambda m: m.epoch, lambda m: [m.since] if m.since else (),
         lambda e, b: Ack(e, _optional_count(b, "since"))),
    Kind(Drained, MessageType.DRAINED, _zero, _nothing, lambda _, b: DRAINED),
    Kind(Committed, MessageType.COMMITTED, lambda m: m.epoch, _nothing, lambda e, _: Committed(e)),
    Kind(Determinants, MessageType.DETERMINANTS, _zero, lambda m: m.deltas,
         lambda _, b: Determinants(_list(b))),
    Kind(ReplayFrom, MessageType.REPLAY, lambda m: m.epoch, _nothing,
         lambda e, _: ReplayFrom(e)),
    Kind(Recall, MessageType.RECALL, _zero, _nothing, lambda _, b: RECALL),
    Kind(Recalled, MessageType.RECALLED, _zero, lambda m: [m.received, m.offset, m.events],
         lambda _, b: _recalled(b)),
    Kind(Membership, MessageType.MEMBERSHIP, _zero, lambda m: m.body,
         lambda _, b: Membership(_list(b))),
    Kind(JoinAsk, MessageType.JOIN_ASK, _zero, lambda m: m.body, lambda _, b: JoinAsk(_list(b))),
    Kind(JoinReply, MessageType.JOIN_REPLY, _zero, lambda m: m.body,
         lambda _, b: JoinReply(_list(b))),
    Kind(LogRumor, MessageType.RUMOR, _zero, lambda m: [m.payload],
         lambda _, b: LogRumor(_one(b, bytes))),
)  # fmt: skip
_BY_CLASS = {kind.message: kind for kind in TABLE}
_BY_TYPE = {kind.type: kind for kind in TABLE}


def type_of(message: type) -> MessageType:
    """The frame type that carries messages of class ``message``."""
    return _BY_CLASS[message].type


def encode(
    address: Address, message: Message, max_frame: int, largest: int = fragments.MAX_FRAME
) -> list[bytes]:
    """The frames, none over ``max_frame`` bytes, that carry ``message`` to ``address``, in the
    order they must be offered; a FrameError naming what cannot travel."""
    kind = _BY_CLASS.get(type(message))
    if kind is None:
        raise TypeError(f"a {type(message).__name__} is not a message")
    header = Header(kind.type, address.allocation_version, address.source, address.destination,
                    kind.epoch(message), address.job)  # fmt: skip
    try:
        return fragments.frames(header, kind.body(message), max_frame, largest)
    except FrameError as e:
        if kind.message is Batch:
            raise
        raise FrameError(f"a {kind.message.__name__} message cannot travel: {e}") from e


def in_process(message: Message) -> Message:
    """``message`` as a peer of the sender's own process takes it: a batch packed for the wire
    read back into its rows (a seat whose new peer runs here may have some waiting)."""
    if isinstance(message, Batch) and isinstance(message.batch, Packed):
        return Batch(unpack(message.batch))
    return message


def read(header: Header, body: Body) -> Message:
    """The message a whole frame's header and body carry; a BodyError for one of the wrong
    shape."""
    kind = _BY_TYPE.get(header.type)
    if kind is None:
        raise BodyError(header, f"a {header.type.name} frame is not a message")
    try:
        return kind.read(header.epoch, body)
    except ValueError as e:
        raise BodyError(header, f"a {header.type.name} frame: {e}") from e


def decode(frame: bytes | memoryview) -> tuple[Header, Message]:
    """The header and message of one whole frame (not a fragment or a part of a batch:
    fragments.Assembly puts those together first)."""
    header, body = decode_frame(frame)
    return header, read(header, body)


def address_of(header: Header) -> Address:
    return Address(header.job, header.source, header.destination, header.allocation_version)
