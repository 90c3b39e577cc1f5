"""A peer group's side of its transport: every frame that comes in goes to the owner of its
protocol (peer.messaging.demux), and each owner does its round, in order.

The owners are the data plane (task data, peer.runtime.dataplane), the membership service
(heartbeats and gossip, peer.membership), the direct join's side channel
(peer.cluster.direct_join) and the log feed (rumors of log entries, peer.log.feed). A member's
worker processes carry task data only: their switchboard has the data plane alone, and leave
watching and gossip to their member.

The membership service decides, as the leader, to down a member unreachable past the auto-down
time and to remove one that has exited; the switchboard hands each decision to the group's
downing (peer.cluster.downing), the one place a member is written down.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from peer.cluster.downing import Cause, Downing
from peer.log.replica import Replica
from peer.membership.agent import MembershipSettings
from peer.membership.service import Decisions, MembershipService
from peer.messaging.demux import Demultiplexer
from peer.messaging.messages import JoinAsk, JoinReply, LogRumor, Membership
from peer.messaging.transport import Transport
from peer.runtime.dataplane import DataPlane


class SideChannel(Protocol):
    """Who takes the frames that are for the group itself, not a peer (peer.cluster.direct_join),
    and offers its own between the data plane's rounds."""

    def receive(self, message: JoinAsk | JoinReply) -> None: ...

    def flush(self) -> bool: ...


class Switchboard:
    def __init__(
        self,
        group: str,
        transport: Transport | None,
        dataplane: DataPlane,
        *,
        downing: Downing | None = None,
        membership: MembershipSettings | None = None,
        seeds: tuple[str, ...] = (),
    ) -> None:
        """With ``membership`` settings, a transport and a ``downing`` to carry out its
        decisions, the group watches the others and gossips what it sees, asking ``seeds``
        (sites of running members) for the cluster as it starts, besides reading the log
        (peer.membership.seeds)."""
        self.group, self.transport, self.dataplane = group, transport, dataplane
        self.downing = downing
        self.demux = Demultiplexer(group, dataplane.receive)
        self.side: SideChannel | None = None
        self.membership: MembershipService | None = None
        if transport is not None and membership is not None and downing is not None:
            beacon = transport.beacon()
            self.membership = MembershipService(
                group, membership, beacon.offer, beacon.max_frame, site=transport.address,
                seeds=seeds, forget=beacon.forget,
            )  # fmt: skip
            service = self.membership
            self.demux.route(Membership, lambda message: service.receive(message.body))
            service.start()

    def connect_side(self, side: SideChannel) -> None:
        self.side = side
        self.demux.route(JoinAsk, side.receive)
        self.demux.route(JoinReply, side.receive)

    def connect_rumors(self, take: Callable[[bytes], None]) -> None:
        """Rumors of log entries go to ``take`` (the group's log feed)."""
        self.demux.route(LogRumor, lambda message: take(message.payload))

    def sync(self, replica: Replica, mine: list[str]) -> None:
        self.dataplane.sync(replica, mine)
        if self.membership is not None:
            self.membership.sync(replica)

    def step(self) -> bool:
        """One round: take in what arrived, let the data plane and the side channel work and
        send, and carry out the membership's decisions; whether anything was done."""
        busy = self.transport is not None and self.transport.poll(self.demux.receive) > 0
        if self.membership is not None:
            self.membership.polled()
        busy = self.dataplane.step() or busy
        if self.side is not None:
            busy = self.side.flush() or busy
        if self.membership is not None:
            self._carry_out(self.membership.take_decisions())
        return busy

    def patience(self) -> float:
        """How long the loop may sleep while nothing comes (see DataPlane.patience)."""
        return self.dataplane.patience()

    def _carry_out(self, decisions: Decisions) -> None:
        assert self.downing is not None  # there is a membership only with a downing
        for member in decisions.downs:
            self.downing.down(member, Cause.UNREACHABLE)
        for member in decisions.removals:
            self.downing.down(member, Cause.EXITED)

    @property
    def up(self) -> bool:
        """The data plane open, and the membership running (when there is one): what a
        group's readiness requires."""
        return not self.dataplane.closed and (self.membership is None or self.membership.alive)

    def close(self) -> None:
        self.dataplane.close()
        if self.membership is not None:
            self.membership.stop()
