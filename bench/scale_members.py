"""The scale bench's simulated members: one OS process hosting many real members' coordination.

Each member is a real ``Incarnation`` (peer.cluster.group): its own identity, UDP socket on
loopback (bench.udp_transport), log feed (the classic subscriber, or the epidemic feed with its
rumor forwarding, reorder cache and read by position after a silence), replica, join direct as
an aider, and the real pure functions applying every entry. No job runs, so the data plane
carries only coordination: join direct's asks and replies and the epidemic log's rumors.

What a thousand members on two cores cannot each have, and what they share instead (a member
on a machine of its own pays none of this, so sharing it keeps the harness from setting the
figure; bench/README.md says the same):

- Threads. A real member runs its group's loop and its membership thread, and its kazoo client
  two more; a thousand members' four thousand threads left gossip hops waiting for the GIL for
  seconds. Here one thread per process (``MemberHost``) drives all its members: a selector over
  their sockets hands each datagram to its member's data plane (which passes a rumor to the
  feed, which forwards it at once), a member whose wakeup is set (an entry ready, an append
  under way, its pulse watch, the log directory's watch) runs one step of the group's own loop
  body (``Incarnation._step``), and a timer heap wakes each member when its own loop would have
  (the feed's ``due_in``, the poll interval, a back-off). The steps are the group's; only the
  waiting between them is the host's.
- ZooKeeper sessions. The members of one process share one kazoo client (``SharedSessionStore``):
  every member still makes its own requests (its own reads, listings, watches and appends, and
  its own ephemeral pulse), so ZooKeeper serves the same requests, but pings and connections
  are per process. Sessions per member are measured apart, by bench/scale.py, on a small
  cluster whose members open their own (``SimulationSettings.shared_session`` off).
- Applying an entry. ``apply_entry`` is a pure function of the replica and the entry, so
  members of one process that hold the identical replica object and apply the same entry at
  the same position get the same transition: ``SharedApply`` computes it once per process and
  hands every such member the same result (members that started from one origin keep sharing
  replicas, as each new one is the same object for all). Each member still acts on the
  transition itself (its reactions, its watches, its data plane's sync).
- The data plane's peer index (where each peer listens, each short id's peer) is a function
  of the replica's ring alone, rebuilt when the ring changes (tens of milliseconds at 10,000
  peers): ``SharedIndex`` builds it once per process for each ring and hands every member's data
  plane the same read-only maps.
- Membership. Its heartbeats and gossip are failure detection, not the log: the members here
  run no membership service (a joiner's heartbeats to its seed go unanswered). Its cost per
  member is measured apart (bench/scale.py's ``membership_tick_us_<N>_members``).

A thousand real joins would take the bench longer than everything it measures, so the cluster
is formed the way a gc leaves it: the bench process stores an origin whose replica already
holds every simulated member in one ring, each with its virtual peers and its site, and every
member here starts from that replica with its pulse registered, reading only what the log
holds after it. The origin is decoded once per process and the same immutable replica handed to
every member.

The bench process talks to ``serve`` over a pipe: ``("start", version)`` (each member registers
its pulse), ``("pulses",)`` (how many are there), ``("go",)`` (now they run), ``("write", count,
spacing, other)`` (the first member appends marked no-op entries), ``("versions",)``,
``("cpu",)`` (the process's CPU seconds so far), ``("learned",)`` (how the members learned
entries, by source), ``("applied",)`` (how many marked entries the members applied),
``("marks",)`` (when each member applied each marked entry, and when each was appended, on
this machine's monotonic clock, which every process shares) and ``("stop",)``.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import operator
import selectors
import socket
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

from bench.udp_transport import MAX_DATAGRAM, UdpTransport, open_socket
from peer import metrics
from peer.cluster.applier import Sequential
from peer.cluster.group import GroupConfig, Incarnation
from peer.cluster.modes import CoordinationModes
from peer.log.apply import apply_entry
from peer.log.entries.join_direct import JOIN_DIRECT
from peer.log.entry import Entry, Transition
from peer.log.replica import Replica
from peer.log.stores.zookeeper import ZooKeeperStore
from peer.membership.agent import MembershipSettings
from peer.runtime.dataplane import DataPlane

log = logging.getLogger(__name__)

MARK = "bench-mark"
"""The argument that makes a no-op entry one whose spread the bench times."""
RESEND = 0.002
"""Seconds before a member whose join-direct frames the socket refused offers them again."""
STEPS_PER_WAKE = 64
"""The most rounds of data-plane work one member gets before the host serves the others."""


@dataclass(frozen=True)
class SimulationSettings:
    """What every simulated member of one cluster runs with (sent to each member process)."""

    zookeeper: str
    tenancy: str
    modes: CoordinationModes
    vpeers: int = 10
    heartbeat: float = 60.0
    """Seconds between a real joiner's heartbeats (the simulated members run no membership)."""
    session_timeout: float = 30.0
    """Long, so that kazoo's pings (one per third of it, or so) are few."""
    poll_interval: float = 5.0
    """The longest a member goes without reading the log when nothing woke it."""
    log_dir: str = "."
    shared_session: bool = True
    """The members of one process share one ZooKeeper session; off, each opens its own (to
    measure sessions per member)."""

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
            membership=membership,
            seed_nodes=seeds,
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

    def session(self) -> KazooClient:
        """One process's shared session, with the retries a store's own would have."""
        retry = KazooRetry(max_tries=-1, max_delay=1.0, deadline=self.session_timeout)
        client = KazooClient(hosts=self.zookeeper, timeout=self.session_timeout,
                             command_retry=retry)  # fmt: skip
        client.start(timeout=60.0)
        return client


class SharedSessionStore(ZooKeeperStore):
    """A member's store on its process's shared session: every request is still the member's
    own, and closing it leaves the session to the host."""

    def __init__(self, client: KazooClient, settings: SimulationSettings) -> None:
        self.shared = client
        super().__init__(settings.zookeeper, settings.tenancy,
                         watch_log=not settings.modes.epidemic_log)  # fmt: skip

    def _connect(self, session_timeout: float, connect_timeout: float) -> KazooClient:
        self.shared.add_listener(self._state_changed)
        return self.shared

    def close(self) -> None:
        self.closing = True
        self.shared.remove_listener(self._state_changed)


def noop_entry(joiner: str, aider: str, **extra: object) -> Entry:
    """A join-direct of a group that has joined already: every member refuses it alike (the
    replica changes only its version) and nobody reacts to it, so it costs what any entry
    costs to learn and apply, and nothing more."""
    return JOIN_DIRECT.entry(joiner=joiner, aider=aider, **extra)


class SharedApply:
    """``apply_entry``, computed once per (replica object, position) for a process's members.

    It is pure: the same replica and the same entry give the same transition, so a member whose
    replica is the very object another member applied this position to gets that member's
    transition. The entry is compared too (the log gives every member the same one at a
    position; a mismatch would be a bug here, so it is applied afresh)."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self.memo: OrderedDict[tuple[int, int], tuple[Replica, Transition]] = OrderedDict()

    def __call__(self, replica: Replica, entry: Entry) -> Transition:
        key = (id(replica), entry.position)
        hit = self.memo.get(key)
        if hit is not None and hit[0] is replica and _same(hit[1].entry, entry):
            return hit[1]
        t = apply_entry(replica, entry)
        self.memo[key] = (replica, t)  # holding the replica keeps its id from being reused
        if len(self.memo) > self.limit:
            self.memo.popitem(last=False)
        return t


def _same(a: Entry, b: Entry) -> bool:
    return a.fn == b.fn and a.args == b.args and a.position == b.position


class SharedSequential(Sequential):
    """The classic apply through the process's ``SharedApply``."""

    def __init__(self, replica: Replica, shared: SharedApply) -> None:
        super().__init__(replica)
        self.shared = shared

    def transitions(self, entries: Iterable[Entry]) -> Iterator[Transition]:
        for entry in entries:
            t = self.shared(self.replica, entry)
            self.replica = t.new
            yield t


class SharedIndex:
    """``DataPlane._index``, built once per process for each ring (the replica's parts it
    reads, compared by identity: immutable, so the same objects give the same index)."""

    def __init__(self, limit: int = 16) -> None:
        self.limit = limit
        self.built: OrderedDict[tuple[int, ...], tuple[tuple[object, ...], dict, dict]] = (
            OrderedDict()
        )

    def bind(self, plane: DataPlane) -> None:
        """Make ``plane`` index through this."""
        plane._index = lambda replica: self.index(plane, replica)  # type: ignore[method-assign]

    def index(self, plane: DataPlane, replica: Replica) -> None:
        inputs = (replica.groups, replica.sites, replica.peer_sites, replica.group_peers,
                  replica.short_ids)  # fmt: skip
        if plane.indexed is not None and all(map(operator.is_, inputs, plane.indexed)):
            return
        key = tuple(map(id, inputs))
        hit = self.built.get(key)
        if hit is None or not all(map(operator.is_, inputs, hit[0])):
            DataPlane._index(plane, replica)
            hit = self.built[key] = (inputs, plane.peer_sites, plane.short_peers)
            if len(self.built) > self.limit:
                self.built.popitem(last=False)
        plane.indexed, plane.peer_sites, plane.short_peers = hit


class Wakeup:
    """A member's wakeup, as the group's Event is used (``set``, ``is_set``, ``clear``): setting
    it, from any thread (kazoo's watches, the feed, the member's own effects), queues the
    member for its host's next round."""

    def __init__(self, host: MemberHost, index: int) -> None:
        self.host, self.index = host, index
        self.flag = False

    def set(self) -> None:
        if not self.flag:
            self.flag = True
            self.host.ready(self.index)

    def is_set(self) -> bool:
        return self.flag

    def clear(self) -> None:
        self.flag = False


class SimulatedMember(Incarnation):
    """A member that starts inside the ring and is driven by its process's ``MemberHost``."""

    applied: list[tuple[int, float]]
    appended: list[tuple[int, float]]
    due = float("inf")
    """When its own loop would next read the log without a wakeup (the host's timers for
    earlier times are stale)."""
    running = False
    """Whether it has started from its replica (and made its watches)."""

    def start(self, replica: Replica, shared: SharedApply) -> None:
        """As a member that has joined: its replica, its data plane and watches, an applier."""
        self.replica = replica
        self.origin = replica.version
        self.applier = SharedSequential(replica, shared)
        self.switchboard.sync(self.replica, self.peers)
        self.reconcile_watches()
        self.running = True

    def _handle(self, t: Transition, started: float) -> None:
        super()._handle(t, started)
        mark = t.entry.args.get(MARK)
        if isinstance(mark, int):
            self.applied.append((mark, time.monotonic()))

    def write(self, entry: Entry) -> None:
        """Append ``entry`` now, as the member's own loop appends, so that in the epidemic mode
        it gossips it as any writer does."""
        started = time.monotonic()
        self.append(entry)
        self.appended.append((entry.args[MARK], started))


class MemberHost:
    """One thread driving every member of this process (the module's docstring says why)."""

    def __init__(self, settings: SimulationSettings, count: int, pipe: Connection) -> None:
        self.settings, self.pipe = settings, pipe
        self.selector = selectors.DefaultSelector()
        self.poke_in, self.poke_out = socket.socketpair()
        self.poke_in.setblocking(False)
        self.poke_out.setblocking(False)
        self.selector.register(self.poke_in, selectors.EVENT_READ, self._poked)
        self.selector.register(pipe.fileno(), selectors.EVENT_READ, self._command)
        self.woken: deque[int] = deque()
        self.poked = False
        self.thread = threading.get_ident()
        self.timers: list[tuple[float, int, Callable[[], None]]] = []
        self.sequence = itertools.count()
        self.shared_apply = SharedApply()
        self.shared_index = SharedIndex()
        self.never = threading.Event()
        """The stop a member's step is given: these members never leave gracefully."""
        self.stopped = False
        self.session = settings.session() if settings.shared_session else None
        self.members = [self._member(i) for i in range(count)]

    # -- members --------------------------------------------------------------------------------

    def _member(self, index: int) -> SimulatedMember:
        s = self.settings
        store = s.store() if self.session is None else SharedSessionStore(self.session, s)
        wakeup = Wakeup(self, index)
        transport = UdpTransport(open_socket(), wakeup)
        config = replace(s.group_config(), membership=None)  # see the module's docstring
        member = SimulatedMember(store, config, wakeup, transport)  # type: ignore[arg-type]
        member.applied, member.appended = [], []
        self.shared_index.bind(member.dataplane)
        store.on_append(wakeup.set)
        store.on_session_lost(lambda: (member.lost.set(), wakeup.set()))
        self.selector.register(transport.sock, selectors.EVENT_READ, lambda: self._drain(index))
        return member

    def ready(self, index: int) -> None:
        """Queue member ``index`` for a step; from another thread, rouse the selector."""
        self.woken.append(index)
        if threading.get_ident() != self.thread and not self.poked:
            self.poked = True
            with contextlib.suppress(BlockingIOError):  # a poke is already waiting
                self.poke_out.send(b"!")

    def _poked(self) -> None:
        self.poked = False
        with contextlib.suppress(BlockingIOError):
            while self.poke_in.recv(4096):
                pass

    def _drain(self, index: int) -> None:
        """Every datagram waiting for member ``index``, through its data plane at once (a rumor
        goes on to the next members from there)."""
        member = self.members[index]
        transport: UdpTransport = member.transport  # type: ignore[assignment]
        while True:
            try:
                transport.inbox.append(transport.sock.recv(MAX_DATAGRAM + 1024))
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:
                log.debug("member socket %s: %s", transport.address, e)
                break
        self._work(member)

    def _work(self, member: SimulatedMember) -> None:
        if not member.running or member.ended is not None:
            member.transport.inbox.clear()  # type: ignore[union-attr]
            return
        for _ in range(STEPS_PER_WAKE):
            if not member.switchboard.step():
                break
        direct = member.direct
        if direct is not None and direct.outbox:
            self.at(time.monotonic() + RESEND, lambda: self._work(member))

    def _step(self, index: int) -> None:
        """One round of the member's own loop: read and apply the log, act, write."""
        member = self.members[index]
        if not member.running or member.ended is not None:
            return
        member.wakeup.clear()
        member._step(self.never)
        if member.ended is not None:
            log.warning("member %s ended: %s", member.id, member.ended)
            return
        self._work(member)
        member.due = due = time.monotonic() + member._sleep()
        self.at(due, lambda: self._due(index, due))

    def _due(self, index: int, due: float) -> None:
        member = self.members[index]
        if member.due == due:
            member.due = float("inf")
            member.wakeup.set()

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.timers, (when, next(self.sequence), action))

    # -- the loop -------------------------------------------------------------------------------

    def run(self) -> None:
        while not self.stopped:
            for key, _ in self.selector.select(self._timeout()):
                key.data()
            self._run_timers()
            while self.woken:
                self._step(self.woken.popleft())

    def _timeout(self) -> float:
        if self.woken:
            return 0.0
        if not self.timers:
            return 1.0
        return max(self.timers[0][0] - time.monotonic(), 0.0)

    def _run_timers(self) -> None:
        now = time.monotonic()
        while self.timers and self.timers[0][0] <= now:
            heapq.heappop(self.timers)[2]()

    # -- the bench's commands -------------------------------------------------------------------

    def _command(self) -> None:
        command, *args = self.pipe.recv()
        answer = getattr(self, f"_do_{command}")(*args)
        self.pipe.send(answer)

    def _do_start(self, version: int) -> str:
        """Every pulse registered, and every member given the origin, decoded once, as of
        ``version``: the origin's own, or a later one when the log holds only no-op entries
        after it (which change nothing else)."""
        for member in self.members:
            member.store.register_pulse(member.id, member.transport.address)  # type: ignore[union-attr]
        origin = self.members[0].store.origin()
        assert origin is not None, "the bench stored no origin"
        self.origin = origin if version == origin.version else origin.evolve(version=version)
        return "started"

    def _do_pulses(self) -> int:
        return sum(m.store.pulse_exists(m.id) for m in self.members)

    def _do_go(self) -> str:
        """Every member starts; a member that started watching its ring target before that
        target's pulse existed would report it dead, hence after every pulse is there."""
        for i, member in enumerate(self.members):
            member.start(self.origin, self.shared_apply)
            member.wakeup.set()
            self.ready(i)
        return "going"

    def _do_write(self, count: int, spacing: float, other: str) -> str:
        """Marked no-op entries, ``spacing`` seconds apart, appended by the first member."""
        writer, now = self.members[0], time.monotonic()
        for mark in range(count):
            entry = noop_entry(writer.id, other, **{MARK: mark})
            self.at(now + mark * spacing, lambda e=entry: self._write(writer, e))
        return "writing"

    def _write(self, writer: SimulatedMember, entry: Entry) -> None:
        writer.write(entry)
        writer.wakeup.set()

    def _do_versions(self) -> list[int | None]:
        return [m.replica.version if m.running and m.ended is None else None for m in self.members]

    def _do_learned(self) -> dict[str, float]:
        return learned()

    def _do_applied(self) -> int:
        return sum(len(m.applied) for m in self.members)

    def _do_marks(self) -> tuple[list[tuple[int, int, float]], list[tuple[int, float]]]:
        return ([(i, *a) for i, m in enumerate(self.members) for a in m.applied],
                [a for m in self.members for a in m.appended])  # fmt: skip

    def _do_cpu(self) -> float:
        """Seconds of CPU this process has used, every thread's (kazoo's included)."""
        return time.process_time()

    def _do_members(self) -> list[tuple[str, list[str], str]]:
        return [(m.id, list(m.peers), m.transport.address) for m in self.members]  # type: ignore[union-attr]

    def _do_stop(self) -> str:
        """End every member as if its session were gone (nothing more is written), then close
        the sessions: the bench's next cluster runs in a tenancy of its own."""
        for member in self.members:
            member.lost.set()
            member.ended = member.ended or "lost"
            member._finish()
            member.store.close()
            member.transport.close()  # type: ignore[union-attr]
        if self.session is not None:
            self.session.stop()
            self.session.close()
        self.stopped = True
        return "stopped"


def learned() -> dict[str, float]:
    """How this process's members learned the entries they consumed, by source (gossip,
    zookeeper, written...): the members' own counter (peer.metrics)."""
    return {
        sample.labels["source"]: sample.value
        for family in metrics.ENTRIES_LEARNED.collect()
        for sample in family.samples
        if sample.name.endswith("_total")
    }


def serve(settings: SimulationSettings, count: int, index: int, pipe: Connection) -> None:
    """Host ``count`` members until told to stop, answering the bench process's commands."""
    logging.basicConfig(
        level=logging.WARNING,
        filename=str(Path(settings.log_dir) / f"members-{settings.tenancy}-{index}.log"),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    host = MemberHost(settings, count, pipe)
    pipe.send(host._do_members())
    host.run()
