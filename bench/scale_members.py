"""The scale bench's simulated members: one OS process hosting many real members' coordination.

Each member is a real ``Incarnation`` (peer.cluster.group) with its own ZooKeeper session, its
own UDP socket (bench.udp_transport) and its own threads: the group's loop, which reads the log
through the feed its modes choose and applies every entry with the real pure functions, and the
membership thread. No job runs, so the data plane carries only coordination: join direct's
asks and replies, the epidemic log's rumors, heartbeats and gossip.

A thousand real joins would take the bench longer than everything it measures, so the cluster
is formed the way a gc leaves it: the bench process stores an origin whose replica already
holds every simulated member in one ring, each with its virtual peers and its site, and every
member here starts from that replica (``SimulatedMember._join``) with its pulse registered,
reading only what the log holds after it. The origin is decoded once per process and the same
immutable replica handed to every member.

The bench process talks to ``serve`` over a pipe: ``("start", version)`` (each member registers
its pulse), ``("pulses",)`` (how many are there), ``("go",)`` (now they run), ``("write", count,
spacing)`` (the first member appends marked no-op entries), ``("versions",)``, ``("learned",)``
(how the members learned entries, by source), ``("applied",)`` (how many marked entries the
members applied), ``("marks",)``
(when each member applied each marked entry, and when each was appended, on this machine's
monotonic clock, which every process shares) and ``("stop",)``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from bench.udp_transport import UdpHub
from peer import metrics
from peer.cluster.group import GroupConfig, Incarnation
from peer.cluster.modes import CoordinationModes
from peer.log.entries.join_direct import JOIN_DIRECT
from peer.log.entry import Entry, Transition
from peer.log.replica import Replica
from peer.log.stores.zookeeper import ZooKeeperStore
from peer.membership.agent import MembershipSettings
from peer.runtime.dataplane import DataPlane, DataPlaneConfig

MARK = "bench-mark"
"""The argument that makes a no-op entry one whose spread the bench times."""


@dataclass(frozen=True)
class SimulationSettings:
    """What every simulated member of one cluster runs with (sent to each member process)."""

    zookeeper: str
    tenancy: str
    modes: CoordinationModes
    vpeers: int = 10
    heartbeat: float = 60.0
    """Seconds between heartbeats: slow, so that a thousand members' membership threads fit
    two cores. Their tick follows the interval, and the agent's tick costs time in proportion
    to the members (bench/scale.py measures it: about 1.7 ms at 1,000), which a member on a
    machine of its own pays alone, but a thousand of them here would pay on two cores."""
    session_timeout: float = 30.0
    """Long, so that kazoo's pings (one per third of it, or so) are few."""
    poll_interval: float = 5.0
    """The longest a member goes without reading the log when nothing woke it."""
    log_dir: str = "."

    def group_config(self, seeds: tuple[str, ...] = ()) -> GroupConfig:
        membership = MembershipSettings(
            heartbeat_interval=self.heartbeat,
            gossip_interval=2 * self.heartbeat,
            acceptable_heartbeat_pause=2 * self.heartbeat,
            auto_down_unreachable_after=None,
        )
        return GroupConfig(
            vpeers=self.vpeers,
            poll_interval=self.poll_interval,
            idle_wait=self.poll_interval,
            dataplane=DataPlaneConfig(membership=membership, seed_nodes=seeds),
            modes=self.modes,
        )

    def store(self) -> ZooKeeperStore:
        return ZooKeeperStore(
            self.zookeeper,
            self.tenancy,
            session_timeout=self.session_timeout,
            connect_timeout=60.0,
            watch_log=not self.modes.epidemic_log,
        )


def noop_entry(joiner: str, aider: str, **extra: object) -> Entry:
    """A join-direct of a group that has joined already: every member refuses it alike (the
    replica changes only its version) and nobody reacts to it, so it costs what any entry
    costs to learn and apply, and nothing more."""
    return JOIN_DIRECT.entry(joiner=joiner, aider=aider, **extra)


class SimulatedMember(Incarnation):
    """A member that starts inside the ring, from the replica the bench process formed."""

    start_from: Replica | None = None
    go: threading.Event
    arrived: threading.Event
    thread: threading.Thread
    running = False
    """Whether it has started from its replica (and made its watches)."""
    """Set once every member of the cluster has registered its pulse: a member that started
    watching its ring target before that target's pulse existed would report it dead."""
    to_write: queue.SimpleQueue[Entry]
    applied: list[tuple[int, float]]
    appended: list[tuple[int, float]]

    def _join(self, stop: threading.Event) -> None:
        self.go.wait()
        assert self.start_from is not None, "the member was started without its replica"
        self.replica = self.start_from
        self.origin = self.replica.version
        self.dataplane.sync(self.replica, self.peers)
        self.reconcile_watches()
        self.running = True

    def _work_until(self, deadline: float) -> None:
        """As the group's own, except for how it idles: where the group naps a millisecond at
        most between rounds, this member sleeps until a datagram comes (its socket's hub sets
        ``arrived``), the log wakes it, or the deadline passes. A thousand members napping a
        millisecond each would leave two cores nothing for anything else."""
        while not self.wakeup.is_set() and (now := time.monotonic()) < deadline:
            if self.dataplane.step():
                continue
            self.arrived.wait(deadline - now)
            self.arrived.clear()

    def _step(self, stop: threading.Event) -> None:
        while not self.to_write.empty():
            entry = self.to_write.get()
            started = time.monotonic()
            self.append(entry)
            self.appended.append((entry.args[MARK], started))
        super()._step(stop)

    def _handle(self, t: Transition, started: float) -> None:
        super()._handle(t, started)
        mark = t.entry.args.get(MARK)
        if isinstance(mark, int):
            self.applied.append((mark, time.monotonic()))


def _member(settings: SimulationSettings, hub: UdpHub) -> SimulatedMember:
    wakeup, arrived = threading.Event(), threading.Event()
    store = settings.store()
    member = SimulatedMember(store, settings.group_config(), wakeup, hub.transport(arrived))
    member.to_write, member.applied, member.appended = queue.SimpleQueue(), [], []
    member.go, member.arrived = threading.Event(), arrived

    def woken() -> None:
        wakeup.set()
        arrived.set()

    store.on_append(woken)
    store.on_session_lost(lambda: (member.lost.set(), woken()))
    return member


def _write(member: SimulatedMember, count: int, spacing: float, other: str) -> None:
    """Marked no-op entries, ``spacing`` seconds apart, appended by ``member``'s own loop (so
    that, in the epidemic mode, it gossips them as any writer does)."""
    for mark in range(count):
        member.to_write.put(noop_entry(member.id, other, **{MARK: mark}))
        member.wakeup.set()
        member.arrived.set()
        time.sleep(spacing)


def serve(settings: SimulationSettings, count: int, index: int, pipe: Connection) -> None:
    """Host ``count`` members until told to stop; answer the bench process's commands."""
    logging.basicConfig(
        level=logging.WARNING,
        filename=str(Path(settings.log_dir) / f"members-{settings.tenancy}-{index}.log"),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    hub = UdpHub()
    members = [_member(settings, hub) for _ in range(count)]
    pipe.send([(m.id, list(m.peers), m.transport.address) for m in members])
    stop = threading.Event()
    while True:
        command, *args = pipe.recv()
        if command == "start":
            _start(members, args[0], stop)
            pipe.send("started")
        elif command == "pulses":
            pipe.send(sum(m.store.pulse_exists(m.id) for m in members))
        elif command == "go":
            for m in members:
                m.go.set()
            pipe.send("going")
        elif command == "write":
            threading.Thread(target=_write, args=(members[0], *args), daemon=True).start()
            pipe.send("writing")
        elif command == "versions":
            pipe.send([m.replica.version if m.running and m.ended is None else None
                       for m in members])  # fmt: skip
        elif command == "learned":
            pipe.send(learned())
        elif command == "applied":
            pipe.send(sum(len(m.applied) for m in members))
        elif command == "marks":
            pipe.send(([(i, *a) for i, m in enumerate(members) for a in list(m.applied)],
                       [a for m in members for a in list(m.appended)]))  # fmt: skip
        elif command == "stop":
            _stop(members)
            hub.close()
            pipe.send("stopped")
            return


def learned() -> dict[str, float]:
    """How this process's members learned the entries they consumed, by source (gossip,
    zookeeper, written...): the members' own counter (peer.metrics)."""
    return {
        sample.labels["source"]: sample.value
        for family in metrics.ENTRIES_LEARNED.collect()
        for sample in family.samples
        if sample.name.endswith("_total")
    }


def _stop(members: list[SimulatedMember]) -> None:
    """End every member as if its session were gone (nothing more is written), then close the
    sessions: the bench's next cluster runs in a tenancy of its own."""
    for m in members:
        m.lost.set()
        m.wakeup.set()
        m.arrived.set()
    deadline = time.monotonic() + 30
    for m in members:
        if m.go.is_set():
            m.thread.join(max(deadline - time.monotonic(), 0.0))
    for m in members:
        m.store.close()


def _start(members: list[SimulatedMember], version: int, stop: threading.Event) -> None:
    """Every member from the origin, decoded once, as of ``version``: the origin's own, or a
    later one when the log holds only no-op entries after it (which change nothing else)."""
    origin = members[0].store.origin()
    assert origin is not None, "the bench stored no origin"
    replica = origin if version == origin.version else origin.evolve(version=version)
    index = DataPlane(members[0].id, None, lambda _entry: None)
    index.sync(replica, [])
    index.close()
    for member in members:
        member.start_from = replica
        # The peer index is a function of the replica alone: made once here, not by each member
        # (tens of milliseconds at 10,000 peers); a member makes its own once the ring changes.
        plane = member.dataplane
        plane.peer_sites, plane.short_peers = index.peer_sites, index.short_peers
        plane.indexed = index.indexed
        member.thread = threading.Thread(target=member.run, args=(stop,), daemon=True)
        member.thread.start()
