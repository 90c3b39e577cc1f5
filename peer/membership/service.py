"""A peer group's membership, running: its agent, driven by a thread of its own and by the
group's loop.

The thread ticks the agent every ``settings.tick`` seconds (sooner when a reply is waiting) and
sends what it says through the transport's beacon, publications of its own, so heartbeats and gossip
go on while the group's loop is busy with a long batch. The group's loop hands in the
membership frames it reads, tells the agent when it has polled (so a stall of its own is not
blamed on the others) and writes the downs and removals the agent decides. Both sides meet
under one lock. A frame whose body is not a membership message is dropped with a warning: it
cannot hurt the group. What the agent holds unreachable is logged as it changes, for the operator.

Given seed nodes, the thread also sends them join requests as it starts (peer.membership.seeds),
and logs which seed welcomed the group, or, at the deadline, each seed that never answered; the
group learns the cluster from the log either way.
"""

from __future__ import annotations

import logging
import operator
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import NamedTuple

from peer.log.replica import Replica
from peer.membership.agent import (
    InitJoin,
    MembershipAgent,
    MembershipMessage,
    MembershipSettings,
    Welcome,
)
from peer.membership.gossip import GONE, Gossip
from peer.membership.members import lifecycle
from peer.membership.seeds import SeedContact
from peer.membership.wire import from_wire, to_wire
from peer.messaging import messages
from peer.messaging.frame import FrameError
from peer.messaging.messages import NOWHERE, Membership

log = logging.getLogger(__name__)


class Decisions(NamedTuple):
    """What the leader decided that only the log can carry out."""

    downs: tuple[str, ...]
    removals: tuple[str, ...]


Send = tuple[str | None, str, MembershipMessage]
"""(site, whom, message): a message and where it goes, the site looked up as it was decided."""


class MembershipService:
    def __init__(
        self,
        group: str,
        settings: MembershipSettings,
        offer: Callable[[str, bytes], object],
        max_frame: int,
        *,
        site: str | None = None,
        seeds: Sequence[str] = (),
        forget: Callable[[str], object] = lambda _: None,
    ) -> None:
        """``site`` is where this group listens, ``forget`` closes what ``offer`` opened to a
        site; seeds need a site to be answered at."""
        self.group, self.offer, self.max_frame, self.forget = group, offer, max_frame, forget
        self.site = site
        self.agent = MembershipAgent(group, settings, site)
        self.tick = settings.tick
        self.synced: tuple[object, ...] | None = None
        """The replica's parts the agent was last told the members from."""
        asked = tuple(s for s in seeds if s != site) if site else ()
        self.seeds = SeedContact(asked, retry=settings.heartbeat_interval)
        self.lock = threading.Lock()
        self.outgoing: deque[Send] = deque()
        self.downs: list[str] = []
        self.removals: list[str] = []
        self.unreachable: frozenset[str] = frozenset()
        """The members this group last logged as unreachable, as of ``reported``."""
        self.reported: Gossip | None = None
        self.wake = threading.Event()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="onyx-membership", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def sync(self, replica: Replica) -> None:
        """The members the log has now, and where each listens. Nothing to do when none of the
        replica's parts they come from changed (they are immutable: the same object says the
        same), as for most entries; at a thousand members telling the agent again costs
        milliseconds of the group's loop."""
        inputs = (replica.groups, replica.prepared, replica.accepted, replica.left,
                  replica.removed, replica.leaving, replica.exiting, replica.sites)  # fmt: skip
        if self.synced is not None and all(map(operator.is_, inputs, self.synced)):
            return
        self.synced = inputs
        with self.lock:
            self.agent.sync(lifecycle(replica), replica.sites)

    def polled(self) -> None:
        with self.lock:
            self.agent.polled(time.monotonic())

    def receive(self, body: object) -> None:
        """A membership frame's body, from the group's loop."""
        try:
            message = from_wire(body)
        except ValueError as e:
            log.warning("group %s dropped a membership frame: %s", self.group, e)
            return
        with self.lock:
            sends = self._addressed(self.agent.receive(message, time.monotonic()).sends)
            self.outgoing.extend(sends)
            first = message if isinstance(message, Welcome) and self.seeds.answered() else None
        if first is not None:
            self._welcomed(first)
        if sends:
            self.wake.set()

    def take_decisions(self) -> Decisions:
        """The members downed and removed since the last call, for the log."""
        with self.lock:
            decisions = Decisions(tuple(self.downs), tuple(self.removals))
            self.downs, self.removals = [], []
        return decisions

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def stop(self) -> None:
        self.stopping = True
        self.wake.set()

    def _run(self) -> None:
        while not self.stopping:
            self.wake.wait(self.tick)
            self.wake.clear()
            with self.lock:
                now = time.monotonic()
                outbox = self.agent.tick(now)
                sends = [*self.outgoing, *self._addressed(outbox.sends)]
                self.outgoing.clear()
                self.downs += outbox.downs
                self.removals += outbox.removals
                state = self.agent.gossip
                sends += self._join_requests(now)
                silent = self.seeds.silent(now)
                members = set(self.agent.sites.values())
            for site, whom, message in sends:
                self._send(site, whom, message)
            self._give_up(silent, members)
            self._report(state)

    def _give_up(self, silent: Sequence[str], members: set[str]) -> None:
        """Report each seed that never answered, and close what was opened to it unless a
        member listens there."""
        for seed in silent:
            log.warning("group %s: seed node %s did not answer; learning the cluster "
                        "from ZooKeeper", self.group, seed)  # fmt: skip
            if seed not in members:
                self.forget(seed)

    def _addressed(self, sends: Sequence[tuple[str, MembershipMessage]]) -> list[Send]:
        """The agent's sends with their sites: a welcome's site is a joiner's that is only
        kept until the log's next change."""
        return [(self.agent.sites.get(m), f"member {m}", message) for m, message in sends]

    def _join_requests(self, now: float) -> list[Send]:
        """Seeds are only asked with a site to answer at."""
        due = self.seeds.due(now)
        return [(s, f"seed node {s}", InitJoin(self.group, self.site or "")) for s in due]

    def _welcomed(self, welcome: Welcome) -> None:
        sites = dict(welcome.sites)
        members = [m for m, r in welcome.gossip.members.items()
                   if r.status not in GONE and m != self.group]  # fmt: skip
        log.info("group %s learned the cluster from seed node %s (member %s): %d %s",
                 self.group, sites.get(welcome.sender, "at an unknown site"), welcome.sender,
                 len(members), "member" if len(members) == 1 else "members")  # fmt: skip

    def _report(self, state: Gossip) -> None:
        if state is self.reported:  # states are values: the same one says the same
            return
        self.reported = state
        unreachable = state.unreachable_members() & frozenset(state.members)
        for member in sorted(unreachable - self.unreachable):
            log.warning("group %s: member %s is unreachable", self.group, member)
        for member in sorted(self.unreachable - unreachable):
            log.info("group %s: member %s is reachable again", self.group, member)
        self.unreachable = unreachable

    def _send(self, site: str | None, whom: str, message: MembershipMessage) -> None:
        """One message; a member without a site yet, or a refused offer, loses it, which the
        next heartbeat or gossip round (or join request) makes good."""
        if site is None:
            return
        try:
            frames = messages.encode(NOWHERE, Membership(to_wire(message)), self.max_frame)
            if len(frames) > 1:
                raise FrameError(f"{sum(map(len, frames)):,} bytes do not fit one frame")
            self.offer(site, frames[0])
        except Exception as e:  # the thread must outlive any one message
            log.warning("group %s: a %s for %s was not sent: %s",
                        self.group, type(message).__name__, whom, e)  # fmt: skip
