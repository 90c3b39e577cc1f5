"""One member's membership: its heartbeat monitor, its gossiped state and the leader's downing,
driven by the time and the messages its caller passes in.

The agent does no I/O and reads no clock: ``tick`` (called every few tens of milliseconds) and
``receive`` return what to send to whom and which members to down, and the caller (the peer
group) sends those and writes the downs to the log. What it does, as in Akka Cluster:

- every ``heartbeat_interval`` it asks its receivers on the ring for a heartbeat; their replies
  feed a phi accrual detector each, and the detectors' verdicts become its reachability
  observations in the gossiped state;
- every ``gossip_interval`` (three times as often while most members have not seen the current
  version) it sends its state's status to one member, biased to those that have not seen it,
  and push-pull decides whether a whole state travels, and which way;
- the leader downs a member that has been unreachable for ``auto_down_unreachable_after``,
  and removes exiting members once every member has seen them exiting;
- a new member given seed nodes asks them for the cluster (peer.membership.seeds): a seed
  answers a join request with a welcome, its state and the sites of the members it names, and
  the new member merges the state as gossip and takes the sites it has none for yet, so its
  heartbeats and gossip start before its replica knows the others.

Where each member listens (its site) comes from the log through ``sync``; sites learned from a
join request or a welcome fill in for members the log has no site for yet.

A member whose own loop has stalled (``polled`` not called for longer than ``stall_after``)
judges nobody until it runs again, and then does not count the stall as anyone's silence: the
silence it would see is its own.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from peer.membership.auto_down import AutoDown
from peer.membership.gossip import GONE, Gossip, Status
from peer.membership.heartbeat import HeartbeatMonitor
from peer.membership.monitors import DEFAULT_MONITORS
from peer.membership.phi import PhiSettings
from peer.membership.pushpull import (
    GossipReply,
    GossipStatus,
    pick_target,
    respond,
    rounds_per_interval,
)
from peer.membership.removal import due_removals

TICKS_PER_HEARTBEAT = 12.5
"""How many times per heartbeat interval the membership thread looks at the agent."""


@dataclass(frozen=True)
class MembershipSettings:
    """Durations in seconds, the defaults chosen with bench/failure_detection.py on real member
    processes (bench/README.md has the figures). An acceptable pause of 0.2 s at a 0.25 s
    interval detects a kill -9 no slower than the old fixed 1 s timeout did (0.90 s median
    against 0.98 s) and suspects a member paused by 0.3-1.5 s stops 2 to 8 times less often
    (two runs); the longer pauses tried (0.3 s and up) were slower to detect. Five seconds of
    auto-down outlast the longest suspicion those pauses caused (0.5 s) many times over, so
    none of them moved any work."""

    heartbeat_interval: float = 0.25
    gossip_interval: float = 0.5
    monitors: int = DEFAULT_MONITORS
    threshold: float = 8.0
    acceptable_heartbeat_pause: float = 0.2
    min_std_deviation: float = 0.1
    auto_down_unreachable_after: float | None = 5.0

    @property
    def tick(self) -> float:
        """Seconds between the membership thread's looks at the agent: a twelfth and a half
        of the heartbeat interval (0.02 s at the default 0.25 s), well under any interval it
        keeps, so a member that heartbeats slowly also wakes its thread less often."""
        return self.heartbeat_interval / TICKS_PER_HEARTBEAT

    @property
    def stall_after(self) -> float:
        """How long the member's own loop may go without taking in replies before the gap
        counts as its own stall: a gap shorter than an interval and the acceptable pause delays
        a reply by less than the detectors tolerate anyway, and their history absorbs it."""
        return self.heartbeat_interval + self.acceptable_heartbeat_pause

    @property
    def phi(self) -> PhiSettings:
        """The detectors' settings; before any reply is measured, one is expected every
        heartbeat interval."""
        return PhiSettings(
            threshold=self.threshold,
            min_std_deviation=self.min_std_deviation,
            acceptable_heartbeat_pause=self.acceptable_heartbeat_pause,
            first_heartbeat_estimate=self.heartbeat_interval,
        )

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval", "gossip_interval"):
            if not getattr(self, name) > 0:
                raise ValueError(f"membership settings: {name} must be positive")
        if self.monitors < 1:
            raise ValueError("membership settings: monitors must be at least 1")
        after = self.auto_down_unreachable_after
        if after is not None and not after >= 0:
            raise ValueError("membership settings: auto_down_unreachable_after must be >= 0")
        self.phi  # noqa: B018 (refuses a bad threshold, pause or deviation, naming it)


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    sender: str


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    sender: str


@dataclass(frozen=True, slots=True)
class StateRequest:
    """Push-pull's pull: the receiver of a status asks for the newer state it names."""

    sender: str


@dataclass(frozen=True, slots=True)
class State:
    sender: str
    gossip: Gossip


@dataclass(frozen=True, slots=True)
class InitJoin:
    """A new member's first word to a seed node: who it is and where to answer it."""

    sender: str
    site: str


@dataclass(frozen=True, slots=True)
class Welcome:
    """A seed's answer to a join request: its state, and (member, site) for the members that
    state names and the seed knows a site for, itself included."""

    sender: str
    gossip: Gossip
    sites: tuple[tuple[str, str], ...]


MembershipMessage = (
    HeartbeatRequest | HeartbeatReply | GossipStatus | StateRequest | State | InitJoin | Welcome
)


@dataclass(frozen=True)
class Outbox:
    sends: tuple[tuple[str, MembershipMessage], ...] = ()
    """(member, message) pairs, in the order to send them."""
    downs: tuple[str, ...] = ()
    """Members this one, as the leader, has just downed: their group-leave goes to the log."""
    removals: tuple[str, ...] = ()
    """Exiting members this one, as the leader, removes: their group-leave goes to the log."""


class MembershipAgent:
    def __init__(
        self, me: str, settings: MembershipSettings | None = None, site: str | None = None
    ) -> None:
        self.me, self.site = me, site
        self.settings = settings or MembershipSettings()
        self.gossip = Gossip().with_member_status(me, me, Status.UP)
        self.monitor = HeartbeatMonitor(me, self.settings.phi, self.settings.monitors)
        self.downing = AutoDown(self.settings.auto_down_unreachable_after)
        self.rng = random.Random(me)
        self.downed: set[str] = set()
        self.removed: set[str] = set()
        self.next_heartbeat = self.next_gossip = float("-inf")
        self.last_poll: float | None = None
        self.logged_sites: Mapping[str, str] = {}
        self.learned_sites: dict[str, str] = {}
        self.sites: Mapping[str, str] = {}
        """Where each member listens: the log's sites, and the learned ones it lacks."""

    def sync(self, statuses: Mapping[str, Status], sites: Mapping[str, str] | None = None) -> None:
        """The members' statuses as the log has them (a member the log has not told of yet,
        known through gossip, is left as it is; one that left and was never known is not
        added: gossip has nothing to tell of it), and where they listen. A learned site is kept
        while the log has none for its member and gossip holds that member alive."""
        state = self.gossip
        for member, status in sorted(statuses.items()):
            if status in GONE and member not in state.members:
                continue
            state = state.with_member_status(self.me, member, status)
        self.gossip = state
        self.monitor = self.monitor.for_members(self._alive())
        if sites is not None:
            alive = set(self._alive())
            self.logged_sites = dict(sites)
            self.learned_sites = {
                m: s for m, s in self.learned_sites.items() if m in alive and m not in sites
            }
            self.sites = {**self.learned_sites, **self.logged_sites}

    def polled(self, now: float) -> None:
        """The caller's loop has just taken in what arrived: after a stall, the detectors
        leave the stall out of the silences they measure instead of blaming the others for it."""
        if self.last_poll is not None and now - self.last_poll > self.settings.stall_after:
            self.monitor = self.monitor.forgive(self.last_poll, now)
        self.last_poll = now

    def tick(self, now: float) -> Outbox:
        """What is due at ``now``: heartbeat requests, observations, downs, a gossip round."""
        sends: list[tuple[str, MembershipMessage]] = []
        if now >= self.next_heartbeat:
            sends += [(r, HeartbeatRequest(self.me)) for r in self.monitor.receivers]
            self.monitor = self.monitor.asked(now)
            self.next_heartbeat = now + self.settings.heartbeat_interval
        stalled = self._stalled(now)
        downs = self._judge(now) if not stalled else ()
        removals = self._removals() if not stalled else ()
        if now >= self.next_gossip:
            target = pick_target(self.gossip, self.me, self._live(), self.rng)
            if target is not None:
                sends.append((target, GossipStatus.of(self.me, self.gossip)))
            interval = self.settings.gossip_interval / rounds_per_interval(self.gossip)
            self.next_gossip = now + interval
        return Outbox(tuple(sends), downs, removals)

    def receive(self, message: MembershipMessage, now: float) -> Outbox:
        """What to answer a message from another member."""
        match message:
            case HeartbeatRequest(sender):
                return Outbox(((sender, HeartbeatReply(self.me)),))
            case HeartbeatReply(sender):
                self.monitor = self.monitor.replied(sender, now)
            case GossipStatus(sender=sender):
                return self._answer(sender, respond(self.gossip, message))
            case StateRequest(sender):
                return Outbox(((sender, State(self.me, self.gossip)),))
            case State(sender, theirs):
                return self._take(sender, theirs)
            case InitJoin(sender, site):
                self._learn(((sender, site),))
                return Outbox(((sender, self._welcome()),))
            case Welcome(sender, theirs, sites):
                self._learn(sites)
                return self._take(sender, theirs)
        return Outbox()

    # -- inside ---------------------------------------------------------------------------------

    def _judge(self, now: float) -> tuple[str, ...]:
        """Observe what the detectors say, and down what the leader must."""
        state = self.gossip
        for subject, reachable in self.monitor.reachability(now).items():
            state = state.observe(self.me, subject, reachable)
        self.downing = self.downing.seen(state, now)
        downs = tuple(m for m in self.downing.due(state, self.me, now) if m not in self.downed)
        for member in downs:
            state = state.with_member_status(self.me, member, Status.DOWN)
        self.downed.update(downs)
        self.gossip = state
        if downs:
            self.monitor = self.monitor.for_members(self._alive())
        return downs

    def _removals(self) -> tuple[str, ...]:
        """Each exiting member once: its removal comes back through the log."""
        removals = tuple(m for m in due_removals(self.gossip, self.me) if m not in self.removed)
        self.removed.update(removals)
        return removals

    def _answer(self, sender: str, reply: GossipReply) -> Outbox:
        if reply is GossipReply.SEND_STATE:
            return Outbox(((sender, State(self.me, self.gossip)),))
        if reply is GossipReply.REQUEST_STATE:
            return Outbox(((sender, StateRequest(self.me)),))
        return Outbox()

    def _take(self, sender: str, theirs: Gossip) -> Outbox:
        """Merge a state; send the merge back when the sender lacks part of it (its version or
        who has seen it), which ends once both hold the same."""
        before = self.gossip
        self.gossip = before.receive(self.me, theirs)
        if self.gossip.members != before.members or self.gossip.gone() != before.gone():
            self.monitor = self.monitor.for_members(self._alive())
        if self.gossip.version == theirs.version and self.gossip.seen == theirs.seen:
            return Outbox()
        return Outbox(((sender, State(self.me, self.gossip)),))

    def _welcome(self) -> Welcome:
        """This member's state, with the sites of the members alive in it."""
        known = {**self.sites, **({self.me: self.site} if self.site else {})}
        sites = tuple((m, known[m]) for m in self._alive() if m in known)
        return Welcome(self.me, self.gossip, sites)

    def _learn(self, sites: Iterable[tuple[str, str]]) -> None:
        """Take the sites of members this one has no site for yet."""
        new = {m: s for m, s in sites if m != self.me and m not in self.sites}
        if new:
            self.learned_sites.update(new)
            self.sites = {**self.learned_sites, **self.logged_sites}

    def _alive(self) -> list[str]:
        return sorted(m for m, r in self.gossip.members.items() if r.status not in GONE)

    def _live(self) -> list[str]:
        """Whom gossip goes to: members alive and not held unreachable."""
        unreachable = self.gossip.unreachable_members()
        return [m for m in self._alive() if m not in unreachable]

    def _stalled(self, now: float) -> bool:
        return self.last_poll is not None and now - self.last_poll > self.settings.stall_after
