"""Membership messages as plain data for the wire, and back.

A frame's body holds only lists, strings, integers and booleans (peer.messaging.codec writes
them), so each message becomes a list whose first item names its kind. Frames come from other
processes: reading one checks every field and refuses what does not fit with a ValueError that
names the field, so a bad frame is dropped and never reaches the agent. A site must be HOST:PORT,
and a welcome may name sites only for members its own state names, each once: what it holds is
bounded by the state it carries.
"""

from __future__ import annotations

from typing import Any

from pyrsistent import pmap

from peer.membership.agent import (
    HeartbeatReply,
    HeartbeatRequest,
    InitJoin,
    MembershipMessage,
    State,
    StateRequest,
    Welcome,
)
from peer.membership.gossip import Gossip, Member, Status
from peer.membership.pushpull import GossipStatus
from peer.membership.reachability import Observation, Reachability
from peer.membership.seeds import parse_site
from peer.membership.vclock import VectorClock

_SIMPLE: dict[str, type[HeartbeatRequest | HeartbeatReply | StateRequest]] = {
    "heartbeat": HeartbeatRequest, "heartbeat-reply": HeartbeatReply,
    "state-request": StateRequest}  # fmt: skip
"""The messages that carry nothing but their sender, by the kind that names them on the wire."""
_NAMES = {kind: name for name, kind in _SIMPLE.items()}


def to_wire(message: MembershipMessage) -> list[Any]:
    """The message as a list of plain values."""
    match message:
        case GossipStatus(sender, version, digest):
            return ["status", sender, _clock(version), digest]
        case State(sender, gossip):
            return ["state", sender, _gossip(gossip)]
        case InitJoin(sender, site):
            return ["join", sender, site]
        case Welcome(sender, gossip, sites):
            return ["welcome", sender, _gossip(gossip), [[m, s] for m, s in sites]]
        case _:
            return [_NAMES[type(message)], message.sender]


def from_wire(body: Any) -> MembershipMessage:
    """The message a body holds; a ValueError naming what is wrong with one that holds none."""
    items = _list(body, "body", least=2)
    kind, sender = _str(items[0], "kind"), _str(items[1], "sender")
    if kind in _SIMPLE and len(items) == 2:
        return _SIMPLE[kind](sender)
    if kind == "status" and len(items) == 4:
        return GossipStatus(sender, _read_clock(items[2]), _str(items[3], "digest"))
    if kind == "state" and len(items) == 3:
        return State(sender, _read_gossip(items[2]))
    if kind == "join" and len(items) == 3:
        return InitJoin(sender, _site(items[2], "site"))
    if kind == "welcome" and len(items) == 4:
        gossip = _read_gossip(items[2])
        return Welcome(sender, gossip, _read_sites(items[3], gossip))
    raise ValueError(f"membership message: kind {kind!r} with {len(items)} items is none")


def _clock(clock: VectorClock) -> list[list[Any]]:
    return [[node, count] for node, count in clock.entries]


def _gossip(state: Gossip) -> list[Any]:
    members = [[m.id, m.status.value] for _, m in sorted(state.members.items())]
    records = [
        [r.observer, r.subject, r.reachable, r.version]
        for _, r in sorted(state.reachability.records.items())
    ]
    return [_clock(state.version), members, records, sorted(state.seen)]


def _read_clock(body: Any) -> VectorClock:
    pairs = [_list(p, "version entry", least=2, most=2) for p in _list(body, "version")]
    entries = tuple((_str(node, "version node"), _int(n, "version count")) for node, n in pairs)
    try:
        return VectorClock(entries)
    except ValueError as e:
        raise ValueError(f"membership message: version: {e}") from e


def _read_gossip(body: Any) -> Gossip:
    version, members, records, seen = _list(body, "state", least=4, most=4)
    read_members = {}
    for item in _list(members, "members"):
        member, status = _list(item, "member", least=2, most=2)
        read_members[_str(member, "member id")] = Member(member, _status(status))
    read_records = {}
    for item in _list(records, "reachability"):
        observer, subject, reachable, number = _list(item, "observation", least=4, most=4)
        record = Observation(
            _str(observer, "observer"), _str(subject, "subject"),
            _bool(reachable, "reachable"), _int(number, "observation version"),
        )  # fmt: skip
        read_records[(observer, subject)] = record
    return Gossip(
        members=pmap(read_members),
        reachability=Reachability(pmap(read_records)),
        version=_read_clock(version),
        seen=frozenset(_str(s, "seen") for s in _list(seen, "seen")),
    )


def _read_sites(body: Any, state: Gossip) -> tuple[tuple[str, str], ...]:
    """(member, site) pairs, for members of ``state`` alone and each once."""
    sites: dict[str, str] = {}
    for item in _list(body, "sites"):
        member, site = _list(item, "site entry", least=2, most=2)
        if _str(member, "site member") not in state.members:
            raise ValueError(f"membership message: site member {member!r:.60} is not in the state")
        if member in sites:
            raise ValueError(f"membership message: site member {member!r:.60} comes twice")
        sites[member] = _site(site, "site")
    return tuple(sites.items())


def _site(value: Any, field: str) -> str:
    text = _str(value, field)
    try:
        return parse_site(text)
    except ValueError as e:
        raise ValueError(f"membership message: {field} is not HOST:PORT: {e!s:.120}") from None


def _status(value: Any) -> Status:
    try:
        return Status(_str(value, "status"))
    except ValueError:
        raise ValueError(f"membership message: status {value!r} is no member status") from None


def _list(value: Any, field: str, least: int = 0, most: int | None = None) -> list[Any]:
    if not isinstance(value, list) or len(value) < least or (most and len(value) > most):
        raise ValueError(
            f"membership message: {field} {value!r:.60} is not a list of the right size"
        )
    return value


def _str(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"membership message: {field} {value!r:.60} is not a string")
    return value


def _int(value: Any, field: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"membership message: {field} {value!r:.60} is not a positive integer")
    return value


def _bool(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"membership message: {field} {value!r:.60} is not a boolean")
    return value
