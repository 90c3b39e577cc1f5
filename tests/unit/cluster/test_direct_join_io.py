"""Join direct's I/O (peer.cluster.direct_join) between members in one process: an in-memory
log store and a loopback network that carries frames as the data transport would, in order per
site, a refused offer kept for the next round. The processes, ZooKeeper and Aeron are
tests/integration/test_join_direct.py's."""

from __future__ import annotations

import itertools
import logging
import threading
from collections import defaultdict

from peer.cluster.direct_join import DirectJoin, Joined
from peer.cluster.join_wire import read_reply
from peer.log.apply import apply_entry
from peer.log.entries.join import PREPARE_JOIN
from peer.log.entries.join_direct import JOIN_DIRECT
from peer.log.entry import Entry
from peer.log.replica import Replica, invariant_violations
from peer.log.stores.memory import MemoryLog
from peer.messaging import fragments, messages
from peer.messaging.messages import JoinAsk

TIMEOUT = 1.0
"""Seconds a joiner waits for an aider's answer."""


class Network:
    """Frames in flight, per receiving site."""

    def __init__(self) -> None:
        self.frames: dict[str, list[bytes]] = defaultdict(list)
        self.members: dict[str, Member] = {}
        self.clock = itertools.count()

    def now(self) -> float:
        """A clock that moves a tenth of a second per look: deadlines pass without sleeping."""
        return next(self.clock) / 10

    def step(self) -> bool:
        busy = False
        for member in list(self.members.values()):
            busy = member.poll() or busy
        return busy


class Loopback:
    def __init__(self, network: Network, address: str) -> None:
        self.network, self.address = network, address
        self.max_frame = 4096

    def offer(self, address: str, frame: bytes) -> bool:
        self.network.frames[address].append(frame)
        return True

    def forget(self, address: str) -> None:
        pass


class Member:
    """Just what DirectJoin asks of its group (peer.cluster.direct_join.Host)."""

    def __init__(self, network: Network, log: MemoryLog, name: str, *, alive: bool = True) -> None:
        self.id, self.peers, self.network = name, [f"{name}-p0"], network
        self.own_sites: tuple[tuple[str, str], ...] = ()
        self.store, self.replica = log.session(), Replica()
        self.lost = threading.Event()
        self.alive = alive
        self.watched: set[str] = set()
        self.lagging: Replica | None = None
        self.assembly = fragments.Assembly()
        self.transport = Loopback(network, f"{name}:1")
        self.direct = DirectJoin(self, self.transport, TIMEOUT, ())
        self.store.register_pulse(name, self.transport.address)
        network.members[name] = self

    def append(self, entry: Entry) -> None:
        self.store.append(entry)

    def peers_to_announce(self) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
        return tuple(self.peers), self.own_sites

    def settled(self) -> Replica:
        """The replica itself, or an older one while ``lagging`` (an allocation computed in
        the background)."""
        return self.lagging or self.replica

    def reconcile_watches(self) -> None:
        self.watched = set(self.direct.watching())

    def step_data_plane(self) -> bool:
        return self.network.step()

    def poll(self) -> bool:
        """Read the log and the frames that came, as a group's loop does, unless dead."""
        if not self.alive:
            return False
        busy = False
        if self.id in self.replica.groups or not self.direct.joining:
            for entry in self.store.read(self.replica.version):
                t = apply_entry(self.replica, entry)
                self.replica = t.new
                self.direct.applied(t)
                self.reconcile_watches()
                busy = True
        for frame in self.network.frames.pop(self.transport.address, []):
            whole = self.assembly.add(frame)
            if whole is not None:
                self.direct.receive(messages.read(*whole))
            busy = True
        return self.direct.flush() or busy


def founded(network: Network, log: MemoryLog, name: str) -> Member:
    member = Member(network, log, name)
    member.append(PREPARE_JOIN.entry(joiner=name))
    member.poll()
    assert name in member.replica.groups
    return member


def test_an_aider_stitches_the_joiner_in_and_hands_it_the_replica() -> None:
    network, log = Network(), MemoryLog()
    aider = founded(network, log, "a")
    joiner = Member(network, log, "j")
    joined = joiner.direct.join(threading.Event(), network.now)
    assert isinstance(joined, Joined)
    assert joined.aider == "a"
    assert joined.replica == aider.replica
    assert set(joined.replica.groups) == {"a", "j"}
    assert set(joined.replica.group_peers["j"]) == {"j-p0"}
    assert invariant_violations(joined.replica) == []
    written = [e.fn for e in log.session().read(-1)]
    assert written == [PREPARE_JOIN.name, JOIN_DIRECT.name]
    assert aider.direct.watching() == frozenset()


def test_a_joiner_whose_peers_listen_apart_has_each_found_at_its_own_site() -> None:
    """A member with workers: each peer at its worker's site, its group at the member's."""
    network, log = Network(), MemoryLog()
    founded(network, log, "a")
    joiner = Member(network, log, "j")
    joiner.peers = ["j-p0", "j-p1", "j-p2"]
    joiner.own_sites = (("j-p0", "w0:1"), ("j-p1", "w1:1"))
    joined = joiner.direct.join(threading.Event(), network.now)
    assert isinstance(joined, Joined)
    replica = joined.replica
    assert dict(replica.peer_sites) == {"j-p0": "w0:1", "j-p1": "w1:1"}
    assert [replica.site_of(p, "j") for p in joiner.peers] == ["w0:1", "w1:1", "j:1"]
    assert invariant_violations(replica) == []


def test_an_aider_whose_allocations_lag_answers_once_its_replica_has_settled() -> None:
    network, log = Network(), MemoryLog()
    aider = founded(network, log, "a")
    aider.lagging = aider.replica
    aider.direct.receive(JoinAsk(["j", ["j-p0"], "j:1", [], "j:1"]))
    aider.poll()
    assert "j" in aider.replica.groups
    assert network.frames.get("j:1", []) == [], "no answer with a replica that lags the join"
    aider.lagging = None
    aider.direct.answer_settled()
    aider.direct.flush()
    reply = read_reply(messages.read(*fragments.Assembly().add(network.frames["j:1"][0])).body)
    assert reply.decision.joined
    assert reply.replica == aider.replica


def test_the_aider_watches_the_joiner_from_before_it_writes_the_entry() -> None:
    network, log = Network(), MemoryLog()
    aider = founded(network, log, "a")
    ask = ["j", ["j-p0"], "j:1", [], "j:1"]
    aider.direct.receive(JoinAsk(ask))
    assert aider.watched == {"j"}
    assert [e.fn for e in log.session().read(0)] == [JOIN_DIRECT.name]
    aider.direct.receive(JoinAsk(ask))  # asked again before it read its entry: one entry only
    assert len(log.session().read(0)) == 1
    aider.poll()
    assert aider.watched == set()
    assert "j" in aider.replica.groups


def test_a_malformed_ask_is_logged_and_dropped(caplog) -> None:
    network, log = Network(), MemoryLog()
    aider = founded(network, log, "a")
    with caplog.at_level(logging.WARNING):
        aider.direct.receive(JoinAsk(["j", "not a list", None, [], "j:1"]))
    assert "field peers" in caplog.text
    assert len(log.session().read(-1)) == 1


def test_a_joiner_whose_aider_is_dead_asks_the_next_one() -> None:
    network, log = Network(), MemoryLog()
    founded(network, log, "a").alive = False
    other = Member(network, log, "b")
    other.replica = apply_entry(Replica(), PREPARE_JOIN.entry(joiner="a").at(0)).new
    other.append(JOIN_DIRECT.entry(joiner="b", aider="a"))
    other.poll()
    assert "b" in other.replica.groups
    joiner = Member(network, log, "j")
    joiner.direct.seeds = ("a:1", "b:1")
    joined = joiner.direct.join(threading.Event(), network.now)
    assert isinstance(joined, Joined)
    assert joined.aider == "b"


def test_with_nobody_to_ask_the_joiner_joins_by_the_classic_protocol() -> None:
    network, log = Network(), MemoryLog()
    assert Member(network, log, "j").direct.join(threading.Event(), network.now) is None


def test_two_unjoined_members_find_nobody_to_stitch_them_and_fall_back() -> None:
    network, log = Network(), MemoryLog()
    first, second = Member(network, log, "x"), Member(network, log, "y")
    assert first.direct.join(threading.Event(), network.now) is None
    assert second.direct.join(threading.Event(), network.now) is None


def test_the_embedded_store_finds_the_sites_of_live_pulses() -> None:
    log = MemoryLog()
    first, second = log.session(), log.session()
    first.register_pulse("a", "h:1")
    second.register_pulse("b")
    second.register_pulse("c", "h:3")
    assert first.pulse_sites() == {"a": "h:1", "c": "h:3"}
    second.close()
    assert first.pulse_sites() == {"a": "h:1"}


def test_an_aider_that_cannot_reach_the_store_refuses_instead_of_waiting_for_it() -> None:
    network, log = Network(), MemoryLog()
    aider = founded(network, log, "a")
    aider.store.connected = False
    aider.direct.receive(JoinAsk(["j", [], None, [], "j:1"]))
    aider.direct.flush()
    assert len(log.session().read(-1)) == 1
    assert aider.direct.watching() == frozenset()
    [frame] = network.frames["j:1"]
    _, reply = messages.decode(frame)
    assert "cannot reach the log store" in reply.body[3]
