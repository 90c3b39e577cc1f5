"""Push-pull gossip, as decisions: what to answer, whom to gossip to, how often.

A gossiper first sends only its version and a digest of its seen set; the full state travels
only where the versions (or the seen sets) differ, in the direction that brings news. Targets
are biased towards members that have not seen the current version, and rounds run three times
as often while most members have not, which speeds up both the early and the late phase of
dissemination. Time and randomness come from the caller, so these are plain functions.
"""

from __future__ import annotations

import enum
import hashlib
import random
from collections.abc import Collection
from dataclasses import dataclass

from peer.membership.gossip import Gossip
from peer.membership.vclock import Order, VectorClock


def seen_digest(seen: Collection[str]) -> str:
    """A short fingerprint of a seen set, equal on every member for equal sets."""
    return hashlib.blake2b("\n".join(sorted(seen)).encode(), digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True)
class GossipStatus:
    """The digest a gossiper sends first: who it is, its version and its seen set's digest."""

    sender: str
    version: VectorClock
    digest: str

    @classmethod
    def of(cls, sender: str, state: Gossip) -> GossipStatus:
        """The status ``sender`` sends for the state it holds."""
        return cls(sender, state.version, seen_digest(state.seen))


class GossipReply(enum.Enum):
    """A receiver's answer to a gossip status."""

    SEND_STATE = "send_state"
    """Mine is newer or concurrent (or equal but seen by others): here it is, merge it."""
    REQUEST_STATE = "request_state"
    """Yours is newer: send it to me."""
    NOTHING = "nothing"
    """We hold the same state."""


def respond(local: Gossip, status: GossipStatus) -> GossipReply:
    """The receiver's answer, from its own state and the gossiper's status alone."""
    order = local.version.compare(status.version)
    if order is Order.BEFORE:
        return GossipReply.REQUEST_STATE
    if order is Order.SAME and seen_digest(local.seen) == status.digest:
        return GossipReply.NOTHING
    return GossipReply.SEND_STATE


def pick_target(
    state: Gossip,
    me: str,
    live_members: Collection[str],
    rng: random.Random,
    unseen_bias: float = 0.8,
) -> str | None:
    """Whom ``me`` gossips to this round, among the other live members; None when alone.

    While the state has not converged, with probability ``unseen_bias`` the target is one that
    has not seen the current version (when there is one), since it is the one that needs it;
    otherwise any live member, so seen sets keep spreading too.
    """
    candidates = sorted(set(live_members) - {me})
    if not candidates:
        return None
    unseen = [member for member in candidates if member not in state.seen]
    if unseen and not state.converged() and rng.random() < unseen_bias:
        return rng.choice(unseen)
    return rng.choice(candidates)


def rounds_per_interval(state: Gossip) -> int:
    """Three gossip rounds per interval while fewer than half of the awaited members have seen
    the current version, else one."""
    awaited = state.awaited()
    return 3 if 2 * len(awaited & state.seen) < len(awaited) else 1
