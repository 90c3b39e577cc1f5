"""Join direct's two messages as plain data: a joiner's ask and an aider's reply.

Each is the body of one frame (peer.messaging.messages JoinAsk, JoinReply), so it comes from
another process and is checked field by field: what does not read is a ValueError naming the
field, which the receiver logs and drops. The reply carries the aider's replica as of the joiner's
join-direct entry, as its JSON document compressed with zlib: a few hundred kilobytes at 10,000
virtual peers, sent over the data transport (in fragments when it is over one frame).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from peer.cluster.aider import Decision, JoinRequest
from peer.log.replica import Replica

MAX_REPLICA_BYTES = 256 * 1024 * 1024
"""The most a reply's replica may inflate to: a bound on what a bad reply can make a joiner
hold, far above the document of 10,000 virtual peers."""
REPLY_SOURCE = 1 << 31
"""Set in the source field of a reply's frames, which no virtual peer's short id reaches: the
fragments of a large reply are reassembled per source, apart from any peer's frames."""


@dataclass(frozen=True, slots=True)
class Ask:
    """A joiner's request, and the site its reply goes to."""

    request: JoinRequest
    reply_to: str


@dataclass(frozen=True, slots=True)
class Reply:
    """An aider's answer: ``decision`` says joined, refused (why) or left; ``replica`` is the
    aider's, as of the joiner's entry, when joined."""

    joiner: str
    aider: str
    decision: Decision
    replica: Replica | None = None


def ask_body(ask: Ask) -> list[Any]:
    """Five fields, a sixth (whether the joiner takes rumors) when it does, and a seventh (the
    peers' own sites, as [peer, site] pairs) only when some peer has one: an aider that knows
    only five still aids every classic joiner without workers."""
    r = ask.request
    body = [r.joiner, list(r.peers), r.site, list(r.tags), ask.reply_to]
    if r.peer_sites:
        return [*body, r.rumors, [list(pair) for pair in r.peer_sites]]
    return [*body, True] if r.rumors else body


def read_ask(body: Sequence[Any]) -> Ask:
    """The ask in ``body``; a ValueError naming the field that does not read. An ask of five
    fields, without ``rumors``, is a joiner's that does not take rumors; one of six, without
    ``peer_sites``, a joiner's whose peers are all at its own site."""
    if len(body) not in (5, 6, 7):
        raise ValueError(f"a join ask has 5 to 7 fields, not {len(body)}")
    joiner, peers, site, tags, reply_to, rumors = (*body, False)[:6]
    if not isinstance(rumors, bool):
        raise ValueError(f"field rumors is not true or false: {rumors!r:.60}")
    request = JoinRequest(
        joiner=_string("joiner", joiner),
        peers=_strings("peers", peers),
        site=None if site is None else _string("site", site),
        tags=_strings("tags", tags),
        peer_sites=_pairs("peer_sites", body[6]) if len(body) == 7 else (),
        rumors=rumors,
    )
    return Ask(request, _string("reply_to", reply_to))


def reply_body(reply: Reply) -> list[Any]:
    d = reply.decision
    document = None
    if reply.replica is not None:
        document = zlib.compress(json.dumps(reply.replica.to_json()).encode(), 6)
    return [reply.joiner, reply.aider, d.joined, d.refused, d.left, document]


def read_reply(body: Sequence[Any]) -> Reply:
    """The reply in ``body``; a ValueError naming the field that does not read. A joined reply
    must carry a replica that holds the joiner."""
    if len(body) != 6:
        raise ValueError(f"a join reply has 6 fields, not {len(body)}")
    joiner, aider, joined, refused, left, document = body
    if not isinstance(joined, bool) or not isinstance(left, bool):
        raise ValueError("a join reply's joined and left fields are not booleans")
    decision = Decision(
        joined=joined, refused=None if refused is None else _string("refused", refused), left=left
    )
    reply = Reply(_string("joiner", joiner), _string("aider", aider), decision)
    if not joined:
        return reply
    replica = _replica(document)
    if reply.joiner not in replica.groups:
        raise ValueError(f"a joined reply's replica does not hold joiner {reply.joiner}")
    return Reply(reply.joiner, reply.aider, decision, replica)


def _replica(document: object) -> Replica:
    if not isinstance(document, bytes):
        raise ValueError("a joined reply carries no replica")
    inflate = zlib.decompressobj()
    try:
        data = inflate.decompress(document, MAX_REPLICA_BYTES)
        if inflate.unconsumed_tail:
            raise ValueError(f"the replica inflates past {MAX_REPLICA_BYTES:,} bytes")
        doc = json.loads(data)
        if not isinstance(doc, dict):
            raise ValueError("the replica is not a JSON object")
        return Replica.from_json(doc)
    except (zlib.error, UnicodeDecodeError, TypeError, KeyError, AttributeError) as e:
        raise ValueError(f"the replica does not read: {type(e).__name__}: {e}") from e


def _string(field: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"field {field} is not a non-empty string: {value!r:.60}")
    return value


def _strings(field: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ValueError(f"field {field} is not a list: {value!r:.60}")
    return tuple(_string(field, v) for v in value)


def _pairs(field: str, value: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or not all(isinstance(v, list) and len(v) == 2 for v in value):
        raise ValueError(f"field {field} is not a list of pairs: {value!r:.60}")
    return tuple((_string(field, a), _string(field, b)) for a, b in value)
