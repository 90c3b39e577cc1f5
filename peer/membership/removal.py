"""The leader's removal of exiting members: the last step of a graceful leave.

An exiting member has handed its work over already (its peers get nothing from the schedulers),
so removing it moves nothing; what the removal waits for is that every member has seen it
exiting, the convergence that all of the leader's duties but auto-down wait for. A member that
finds no leader (it is the last one) removes itself: nobody else is left to.
"""

from __future__ import annotations

from peer.membership.gossip import Gossip, Status


def due_removals(state: Gossip, me: str) -> tuple[str, ...]:
    """The exiting members ``me`` removes from ``state`` now, sorted."""
    exiting = sorted(m for m, record in state.members.items() if record.status is Status.EXITING)
    if not exiting:
        return ()
    leader = state.leader()
    if leader is None:
        return tuple(m for m in exiting if m == me)
    if leader != me or not state.converged():
        return ()
    return tuple(exiting)
