"""A peer group: one process's membership of the cluster, with its virtual peers.

The group plays the log, applies every entry once, and acts on it for itself and its virtual
peers: it appends the reactions (held back until it has joined, except the membership
protocol's own), carries out side effects, and keeps its ZooKeeper watches equal to
``watch_targets``. Each identity is an Incarnation; a group presumed dead (its session expired,
or the log says it left without asking) never goes on under that identity: it ends the
incarnation and starts a new one with fresh ids.

Moving segments needs no log. The group's one thread both plays the log and drives the data
plane, and a request to ZooKeeper while it is unreachable waits for a server (kazoo retries up
to the session timeout), which would stop every segment and barrier of the group (only its
heartbeats, on a thread of their own, would go on). So while the store says it is not
connected the group neither reads nor writes the log: entries to write stay in the outbox, the
log is read again once the store is back (its reconnection wakes the group, the poll interval
bounds the wait), and coordinators' commits, which run in a worker pool, wait there. Only the
session expiring ends the identity.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from peer import metrics
from peer.cluster.applier import Applier
from peer.cluster.coordination import Coordination
from peer.cluster.direct_join import Joined
from peer.cluster.downing import Cause, Downing
from peer.cluster.handover import HandOver, StopDeadlines
from peer.cluster.modes import CoordinationModes
from peer.cluster.readiness import Readiness, readiness
from peer.cluster.ring import watch_targets
from peer.cluster.switchboard import Switchboard
from peer.log import subscriber
from peer.log.entries import KINDS
from peer.log.entries.gc import GC
from peer.log.entries.group_leave import GROUP_LEAVE
from peer.log.entries.join import ABORT_JOIN, PREPARE_JOIN
from peer.log.entries.leave import EXIT, LEAVE
from peer.log.entries.virtual_peers import ADD_VIRTUAL_PEER
from peer.log.entry import Entry, Transition
from peer.log.replica import EMPTY_VERSION, Replica
from peer.log.store import LogStore, StoreError, store_origin_and_trim
from peer.membership.agent import MembershipSettings
from peer.membership.gossip import Status
from peer.membership.members import lifecycle
from peer.membership.service import MembershipService
from peer.messaging.transport import Transport
from peer.runtime import collector
from peer.runtime.checkpoints import CheckpointStorage
from peer.runtime.coordinator import Coordinator
from peer.runtime.dataplane import DataPlane, DataPlaneConfig

log = logging.getLogger(__name__)


def new_id() -> str:
    return uuid.uuid4().hex


def ring_figures(
    replica: Replica, me: str, peers: list[str], reported: set[str]
) -> metrics.RingFigures:
    """The ring as group ``me`` sees it. Its watch target is alive unless reported dead; a group
    alone in the ring watches nobody and counts as watched alive; one outside it, as not."""
    target = replica.pairs.get(me)
    alive = replica.groups <= {me} if target is None else target not in reported
    return metrics.RingFigures(
        member=me in replica.groups,
        groups=len(replica.groups),
        watch_pairs=len(replica.pairs),
        watch_target_alive=alive,
        joins_in_flight=len(replica.prepared) + len(replica.accepted),
        virtual_peers=sum(1 for peer in peers if peer in replica.peers),
    )


def member_figures(replica: Replica, membership: MembershipService | None) -> metrics.MemberFigures:
    counts = Counter(lifecycle(replica).values())
    return metrics.MemberFigures(
        statuses=tuple((status.value, counts[status]) for status in Status),
        unreachable=None if membership is None else len(membership.unreachable),
    )


def job_figures(replica: Replica) -> tuple[metrics.JobFigures, ...]:
    return tuple(
        metrics.JobFigures(
            id=job_id,
            peers=sum(len(ps) for ps in replica.allocations.get(job_id, {}).values()),
            allocation_version=replica.allocation_versions.get(job_id),
            barrier_period=replica.jobs[job_id].barrier_period,
        )
        for job_id in sorted(replica.jobs)
    )


def epoch_figures(
    coordinators: Mapping[tuple[str, int], Coordinator],
) -> tuple[metrics.EpochFigures, ...]:
    """Read off a copy, as the group's thread may add or drop a coordinator meanwhile."""
    return tuple(
        metrics.EpochFigures(job_id, c.epoch, c.committed_number(), c.last_commit)
        for (job_id, _), c in sorted(dict(coordinators).items())
    )


@dataclass(frozen=True)
class GroupConfig:
    vpeers: int = 1
    join_back_off: float = 0.5
    """Mean seconds a group waits before retrying an aborted join (uniform in [0, 2x])."""
    leave_timeout: float = 10.0
    """How long a stopped group's graceful leave may take in all, from the signal to reading its
    removal, before it closes anyway (shared out by peer.cluster.handover.StopDeadlines)."""
    hand_over_timeout: float = 60.0
    """How long a leaving member waits for its jobs' current epochs to commit before it exits
    anyway (peer.cluster.handover); a stopped one, at most the first half of leave_timeout."""
    poll_interval: float = 0.5
    """The longest the group goes without reading the log, should a watch not fire."""
    tags: tuple[str, ...] = ()
    """What this group's peers offer to tasks with required tags."""
    dataplane: DataPlaneConfig = field(default_factory=DataPlaneConfig)
    membership: MembershipSettings | None = field(default_factory=MembershipSettings)
    """How this group watches the others and gossips what it sees (peer.membership.agent);
    None for a group that runs no membership service (a simulated member of bench/)."""
    seed_nodes: tuple[str, ...] = ()
    """Sites of running members this group asks for the cluster as it starts, besides reading
    the log (peer.membership.seeds)."""
    idle_wait: float = 0.01
    """The longest the group sleeps between rounds of data-plane work when there is none. The
    sleep doubles from half a millisecond, so a busy stream is polled at once; an idle group
    wakes a hundred times a second (each round polls every subscription and the membership
    service), not a thousand."""
    modes: CoordinationModes = field(default_factory=CoordinationModes)
    """Which coordination mechanisms this group runs besides (or instead of) the classic ones."""


class Incarnation:
    """One identity of a peer group, from its pulse to its departure. It is the Effects that
    entry kinds act through."""

    def __init__(
        self,
        store: LogStore,
        config: GroupConfig,
        wakeup: threading.Event,
        transport: Transport | None = None,
        storage: CheckpointStorage | None = None,
        *,
        observe: Callable[[], None] | None = None,
    ) -> None:
        self.store, self.config, self.wakeup, self.transport = store, config, wakeup, transport
        self.observe = observe or (lambda: None)
        """Called after every round of reading the log and once the identity has ended: where
        its group looks for a change of readiness."""
        self.id = new_id()
        self.peers = [new_id() for _ in range(config.vpeers)]
        self.rng = random.Random(self.id)
        self.coordination = Coordination(config.modes)
        """What the coordination modes choose, decided once (peer.cluster.coordination)."""
        self.planner = self.coordination.planner()
        self.replica = Replica()
        self.applier: Applier | None = None
        self.watches: dict[str, Callable[[], None]] = {}
        self.reported: set[str] = set()
        self.gone: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.outbox: list[Entry] = []
        self.origin = EMPTY_VERSION
        """The position of the origin: what this identity booted from, or the last gc read."""
        self.hold_until = 0.0
        self.lost = threading.Event()
        self.ended: str | None = None
        self.leave_position: int | None = None
        """Where this group's own group-leave-cluster is, once it leaves at once."""
        self.stopping: StopDeadlines | None = None
        """The deadlines of its leave, once it is asked to stop."""
        self.handing_over: HandOver | None = None
        self.dataplane = DataPlane(
            self.id, transport, self._write_work, config.dataplane, store=store, storage=storage
        )
        self.downing = Downing(self.id, self._write_work)
        """The one place this group writes another member down (peer.cluster.downing)."""
        self.switchboard = Switchboard(
            self.id, transport, self.dataplane, downing=self.downing,
            membership=config.membership, seeds=config.seed_nodes,
        )  # fmt: skip
        self.direct = self.coordination.direct_join(self, transport, config.seed_nodes,
                                                    config.tags)  # fmt: skip
        if self.direct is not None:
            self.switchboard.connect_side(self.direct)
        self.first_join = self.coordination.first_join(self.direct)
        self.feed = self.coordination.feed(store, self.id, transport, wakeup.set)
        """Where the log's next entries come from (peer.log.feed)."""
        self.switchboard.connect_rumors(self.feed.receive)

    # -- the loop -------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> str:
        """Play the log until this identity ends: "left", "restart" or "lost"."""
        self.store.register_pulse(self.id, getattr(self.transport, "address", None))
        log.info("group %s starting with %d virtual peers", self.id, len(self.peers))
        try:
            self._join(stop)
            while self.ended is None:
                self.wakeup.clear()
                self._step(stop)
                self.observe()
                if self.ended is None:
                    self._work_until(time.monotonic() + self._sleep())
        finally:
            self._finish()
            self.observe()
        return self.ended

    def _join(self, stop: threading.Event) -> None:
        """Directly when the mode is on and an aider stitches this group in (adopting the
        aider's replica, reading only what follows); else by the classic join, from the origin."""
        joined = self.first_join(stop)
        if isinstance(joined, str):
            self.ended = joined
        elif isinstance(joined, Joined):
            log.info("group %s joined the ring at log position %d, aided by group %s",
                     self.id, joined.replica.version, joined.aider)  # fmt: skip
            self.replica = joined.replica
            self.origin, self.outbox = self.replica.version, list(joined.owed)
            self.switchboard.sync(self.replica, self._local_peers())
            self.reconcile_watches()
        else:
            self.replica = subscriber.boot(self.store)
            self.origin = self.replica.version
            self.outbox = [PREPARE_JOIN.entry(joiner=self.id), *self._announcements()]

    def settled(self) -> Replica:
        return self.replica if self.applier is None else self.applier.complete

    def step_data_plane(self) -> bool:
        return self.switchboard.step()

    def _work_until(self, deadline: float) -> None:
        """Drive the data plane until the log needs reading, backing off while it is idle."""
        idle = 0.0
        while not self.wakeup.is_set() and (now := time.monotonic()) < deadline:
            if self.switchboard.step():
                idle = 0.0
                continue
            idle = min(max(2 * idle, 0.0005), self.config.idle_wait)
            self.wakeup.wait(min(idle, deadline - now, self.switchboard.patience()))

    def _announcements(self) -> list[Entry]:
        return [self._announce(peer) for peer in self.peers]

    def peers_to_announce(self) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
        """What a direct join carries: the peers and own sites of ``_announcements``, so that
        it announces exactly what the classic join would."""
        entries = self._announcements()
        peers = tuple(e.args["id"] for e in entries)
        sites = tuple((e.args["id"], e.args["peer_site"]) for e in entries if "peer_site" in e.args)
        return peers, sites

    def _local_peers(self) -> list[str]:
        """The peers whose task runners run in this process's data plane."""
        return self.peers

    def workers_not_ready(self) -> tuple[str, ...]:
        """What readiness reads of a member's worker processes (peer.cluster.member): a group
        that runs its peers itself has none."""
        return ()

    def _announce(self, peer: str) -> Entry:
        extra: dict[str, object] = {}
        if self.transport is not None:
            extra["site"] = self.transport.address
        if self.config.tags:
            extra["tags"] = list(self.config.tags)
        if self.feed.takes_rumors:
            extra["rumors"] = True
        return ADD_VIRTUAL_PEER.entry(id=peer, group=self.id, **extra)

    def _step(self, stop: threading.Event) -> None:
        if self._session_lost():
            return
        now = time.monotonic()
        if self.stopping is not None and now >= self.stopping.close:
            log.warning("group %s: its leave did not end in time; closing", self.id)
            self.ended = "left"
            return
        if not self.store.connected:
            return
        if stop.is_set():
            self._leave_on_stop(now)
        self._report_gone()
        if self.applier is None:
            self.applier = self.coordination.applier(self.replica, self.wakeup, self.planner)
        synced = self.applier.complete
        started = time.perf_counter()
        entries = self.feed.next_entries(self.applier.position, self.replica)
        for t in self.applier.transitions(entries):
            if self._session_lost():
                return
            self._handle(t, started)
            if self.ended is not None:
                return
            started = time.perf_counter()
        if self.applier.complete is not synced:
            self.switchboard.sync(self.applier.complete, self._local_peers())
            if self.direct is not None:
                self.direct.answer_settled()
        self._exit_once_handed_over()
        self.flush()

    def _session_lost(self) -> bool:
        """Once the session has expired this identity is dead to the cluster: it reads no
        further entry and writes nothing more."""
        if self.lost.is_set():
            self.ended = "lost"
        return self.ended == "lost"

    def _sleep(self) -> float:
        wait = min(self.config.poll_interval, self.feed.due_in(time.monotonic()))
        if self.outbox and self.hold_until > time.monotonic():
            wait = min(wait, self.hold_until - time.monotonic())
        return max(wait, 0.0)

    def _handle(self, t: Transition, started: float) -> None:
        self.replica = t.new
        reactions = t.act((self.id, *self.peers), self)
        self._count(t, time.perf_counter() - started)
        if self.ended is not None:
            return
        self.outbox.extend(reactions)
        if self.id in t.new.groups and self.id not in t.old.groups:
            log.info("group %s joined the ring at log position %d", self.id, t.new.version)
        if self.direct is not None:
            self.direct.applied(t)
        self.reconcile_watches()
        if self.leave_position is not None and self.replica.version >= self.leave_position:
            self.ended = "left"

    def _count(self, t: Transition, seconds: float) -> None:
        """A refused entry counts as kind ``refused``: its own kind is whatever the entry said,
        and could be any string at all."""
        kind = t.kind.name if t.kind else "refused"
        metrics.APPLY_SECONDS.observe(seconds)
        metrics.ENTRIES_APPLIED.labels(kind).inc()
        if kind == GC.name:
            metrics.GC_RUNS.inc()
            self.origin = t.entry.position
        elif kind == ABORT_JOIN.name:
            metrics.JOINS_ABORTED.inc()

    def figures(self) -> metrics.GroupSnapshot:
        """What the metrics show of this identity, taken now, on the scraping thread: the
        replica is immutable, and the store answers any thread."""
        try:
            tail: int | None = self.feed.tail()
        except StoreError:
            tail = None
        publications = getattr(self.transport, "publications", None)
        return metrics.GroupSnapshot(
            ring=ring_figures(self.replica, self.id, self.peers, self.reported),
            members=member_figures(self.replica, self.switchboard.membership),
            log=metrics.LogFigures(self.replica.version, self.origin, tail),
            jobs=job_figures(self.replica),
            epochs=epoch_figures(self.dataplane.coordinators),
            publications=None if publications is None else publications(),
        )

    def flush(self) -> None:
        """Write what may be written: nothing during a back-off; before the group has joined,
        only the membership protocol's own entries."""
        if time.monotonic() < self.hold_until or not self.store.connected:
            return
        joined = self.id in self.replica.groups
        held = []
        for entry in self.outbox:
            if joined or KINDS[entry.fn].while_joining:
                self.append(entry)
            else:
                held.append(entry)
        self.outbox = held

    # -- watches --------------------------------------------------------------------------------

    def reconcile_watches(self) -> None:
        """Watch what the ring says, and the joiners this group is stitching in meanwhile."""
        aiding = self.direct.watching() if self.direct is not None else frozenset()
        wanted = (watch_targets(self.replica, self.id) | aiding) - self.reported
        for group in sorted(set(self.watches) - wanted):
            self.watches.pop(group)()
        for group in sorted(wanted - set(self.watches)):
            self.watches[group] = self.store.watch_pulse(group, self._pulse_gone)

    def _pulse_gone(self, group: str) -> None:
        self.gone.put(group)
        self.wakeup.set()

    def _report_gone(self) -> None:
        while not self.gone.empty():
            group = self.gone.get()
            if self.watches.pop(group, None) is not None:
                self._report(group)

    def _report(self, group: str) -> None:
        """The fallback detector's finding (peer.cluster.downing): ``group``'s pulse is gone."""
        metrics.DEATHS_DETECTED.inc()
        self.reported.add(group)
        self.downing.down(group, Cause.PULSE_GONE)

    # -- leaving --------------------------------------------------------------------------------

    def _leave_on_stop(self, now: float) -> None:
        """A stop is the graceful leave `onyx leave` asks for, begun by the member itself: it
        writes its own member-leave, and the log takes it through the same hand-over, exit and
        removal, so that its jobs move from the epochs they are in rather than roll back. Only
        a group that has not joined (it has no work to hand over) and one whose leave has run
        out of time leave at once."""
        if self.stopping is None:
            self.stopping = StopDeadlines.after(now, self.config.leave_timeout)
            if lifecycle(self.replica).get(self.id) is Status.UP:
                log.info("group %s leaving the cluster: it hands its work over first", self.id)
                self.append(LEAVE.entry(id=self.id))
            if self.handing_over is not None:
                self.handing_over.deadline = min(
                    self.handing_over.deadline, self.stopping.hand_over
                )
        if self.leave_position is not None:
            return
        if self.id not in self.replica.groups or now >= self.stopping.leave_at_once:
            self._leave_at_once()

    def _leave_at_once(self) -> None:
        log.info("group %s leaving the cluster at once", self.id)
        self.outbox.clear()
        entry = GROUP_LEAVE.entry(id=self.id)
        self.leave_position = self.store.append(entry)
        self.feed.wrote(self.leave_position, entry, self.replica)

    def _exit_once_handed_over(self) -> None:
        """member-exit, once the hand-over is done. A group that runs no membership service has
        no leader to remove it, so it removes itself right after, as a last member does."""
        if self.handing_over is None or not self.handing_over.done(self.replica, time.monotonic()):
            return
        log.info("group %s has handed its work over and exits", self.id)
        self.handing_over = None
        self.outbox.append(EXIT.entry(id=self.id))
        if self.switchboard.membership is None:
            self.outbox.append(GROUP_LEAVE.entry(id=self.id))

    def _write_work(self, entry: Entry) -> None:
        self.outbox.append(entry)
        self.wakeup.set()

    def _finish(self) -> None:
        if self.applier is not None:
            self.applier.close()
        self.switchboard.close()
        self.feed.close()
        for cancel in self.watches.values():
            cancel()
        self.watches.clear()
        if self.ended != "lost" and not self.lost.is_set():
            try:
                self.store.remove_pulse(self.id)
            except StoreError as e:
                log.warning("group %s: could not remove its pulse: %s", self.id, e)

    # -- Effects --------------------------------------------------------------------------------

    def append(self, entry: Entry) -> None:
        if not self.lost.is_set():
            self.feed.wrote(self.store.append(entry), entry, self.replica)

    def back_off(self) -> None:
        self.hold_until = time.monotonic() + self.rng.uniform(0, 2 * self.config.join_back_off)

    def report_if_dead(self, group: str) -> None:
        if group not in self.reported and not self.store.pulse_exists(group):
            self._report(group)

    def restart_group(self) -> None:
        if self.leave_position is None:
            log.warning("group %s was removed from the cluster while alive; rejoining", self.id)
            self.ended = "restart"
        else:
            self.ended = "left"

    def hand_over(self) -> None:
        log.info("group %s is leaving: it exits once its jobs commit their current epochs", self.id)
        deadline = time.monotonic() + self.config.hand_over_timeout
        if self.stopping is not None:
            deadline = min(deadline, self.stopping.hand_over)
        self.handing_over = HandOver.begin(self.store, self.replica, self.peers, deadline)

    def end_group(self) -> None:
        log.info("group %s was removed from the cluster as it asked; stopping", self.id)
        self.ended = "left"

    def restart_virtual_peer(self, peer: str) -> None:
        fresh = new_id()
        self.peers = [fresh if p == peer else p for p in self.peers]
        self.outbox.append(self._announce(fresh))

    def store_origin(self, replica: Replica) -> None:
        store_origin_and_trim(self.store, replica)


class PeerGroup:
    """Runs incarnations one after another until the group leaves. ``on_readiness`` hears every
    change of the group's readiness (see peer.cluster.readiness), on the group's thread."""

    def __init__(
        self,
        store: LogStore,
        config: GroupConfig,
        transport: Transport | None = None,
        storage: CheckpointStorage | None = None,
        on_readiness: Callable[[Readiness], None] | None = None,
        *,
        incarnation: type[Incarnation] | Callable[..., Incarnation] = Incarnation,
    ) -> None:
        """``incarnation`` makes each identity: a member with worker processes passes its own
        (peer.cluster.member)."""
        self.store, self.config, self.transport = store, config, transport
        self.incarnation = incarnation
        self.storage = storage
        self.on_readiness = on_readiness
        self.observed = readiness(None)
        self.wakeup = threading.Event()
        self.stopping = threading.Event()
        self.current: Incarnation | None = None
        store.on_append(self.wakeup.set)
        store.on_session_lost(self._session_lost)

    @property
    def id(self) -> str | None:
        return self.current.id if self.current else None

    def _session_lost(self) -> None:
        if self.current is not None:
            log.warning("group %s: ZooKeeper session expired", self.current.id)
            self.current.lost.set()
        self.wakeup.set()

    def _observe(self) -> None:
        now = readiness(self.current)
        if now != self.observed:
            self.observed = now
            if self.on_readiness is not None:
                self.on_readiness(now)

    def stop(self) -> None:
        """Ask the group to leave gracefully; run() returns once it has."""
        self.stopping.set()
        self.wakeup.set()

    def run(self) -> None:
        collector.tune()
        while True:
            self.current = self.incarnation(
                self.store,
                self.config,
                self.wakeup,
                self.transport,
                self.storage,
                observe=self._observe,
            )
            try:
                outcome = self.current.run(self.stopping)
            except StoreError as e:
                log.warning("group %s: %s; rejoining with a fresh id", self.current.id, e)
                outcome = "lost"
            if outcome == "left" or self.stopping.is_set():
                return
            if outcome == "lost":
                self.stopping.wait(self.config.poll_interval)
