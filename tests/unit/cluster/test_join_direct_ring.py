"""Generative tests of join direct mixed with the classic join, leaves and deaths.

A direct joiner asks a random live group to aid it; the aider decides on its own (possibly
lagging) replica, and may die before or after writing its join-direct. The joiner waits, reading
nothing, until an aider's answer hands it the aider's replica as of the join (the full replica
transfer); a joiner whose aider died asks another. After every step every replica is sound and
equals a fresh replay of the log at its position; no direct joiner is in the ring without a
join-direct naming it, and none is stitched in twice; once everyone settles, the survivors form
one ring, each direct joiner in it exactly once with its virtual peers active.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import example, given, settings
from hypothesis import strategies as st

from peer.cluster.aider import JoinRequest, decide, owed
from peer.cluster.model import ClusterModel, ModelGroup
from peer.log.apply import apply_entry
from peer.log.entries.group_leave import GROUP_LEAVE
from peer.log.entries.join import PREPARE_JOIN
from peer.log.entries.join_direct import JOIN_DIRECT
from peer.log.entries.virtual_peers import ADD_VIRTUAL_PEER
from peer.log.entry import Entry
from peer.log.replica import Replica, invariant_violations, ring_cycle

SETTLE_ROUNDS = 5_000
TIME_OUT = 10
"""Rounds of a busy log after which a waiting joiner asks again."""

Op = tuple
INDEX = st.integers(min_value=0, max_value=63)
DIES = st.sampled_from(["no", "no", "before", "after"])

OPS = st.one_of(
    st.tuples(st.just("start"), st.integers(min_value=1, max_value=3)),
    st.tuples(st.just("direct"), st.integers(min_value=1, max_value=3), INDEX, DIES),
    st.tuples(st.just("direct"), st.integers(min_value=1, max_value=3), INDEX, DIES),
    st.tuples(st.just("ask"), INDEX, INDEX, DIES),
    st.tuples(st.just("give_up"), INDEX),
    st.tuples(st.just("advance"), INDEX, st.integers(min_value=1, max_value=6)),
    st.tuples(st.just("settle")),
    st.tuples(st.just("kill"), INDEX),
    st.tuples(st.just("leave"), INDEX),
    st.tuples(st.just("false_report"), INDEX),
)

SCENARIOS = st.builds(
    lambda starts, settle, ops: [*starts, *([("settle",)] if settle else []), *ops],
    st.lists(st.tuples(st.just("start"), st.integers(min_value=1, max_value=3)), max_size=4),
    st.booleans(),
    st.lists(OPS, max_size=40),
)


@dataclass
class Aiding:
    joiner: str
    position: int


def site_of(group: str, peer: int) -> str:
    """Where a direct joiner's peer listens: every other one in a worker of its own, as a
    member's peers do, the rest at the group's site."""
    return f"{group}-w{peer}:1" if peer % 2 else f"{group}:1"


class DirectModel(ClusterModel):
    """The cluster model with direct joiners: they read nothing until an answer hands them a
    replica, and an aider answers its joiner when it reads its own join-direct back."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: dict[str, JoinRequest] = {}
        self.aiding: dict[str, Aiding] = {}
        self.attempts: dict[str, int] = {}
        self._direct_ids = 0

    def start_direct(self, vpeers: int) -> str:
        gid = f"d{self._direct_ids:04d}"
        self._direct_ids += 1
        self.groups[gid] = ModelGroup(gid, vpeers)
        peers = tuple(f"{gid}-p{i}" for i in range(vpeers))
        sites = tuple((peer, site_of(gid, i)) for i, peer in enumerate(peers) if i % 2)
        self.requests[gid] = JoinRequest(gid, peers=peers, site=f"{gid}:1", peer_sites=sites)
        return gid

    def waiting(self) -> list[str]:
        """Live direct joiners that have not yet been handed a replica."""
        return sorted(g for g in self.requests if self.groups[g].alive)

    def ask(self, joiner: str, aider: str, dies: str) -> None:
        """The joiner asks ``aider``, which may die before or after writing its entry."""
        group, request = self.groups[aider], self.requests[joiner]
        aiding = self.aiding.get(aider)
        busy = [aiding.joiner] if aiding and aiding.position > group.replica.version else []
        decision = decide(group.replica, aider, request, busy)
        if decision.joined:
            self.hand_replica(joiner, group.replica)
        elif decision.left:
            self.restart_direct(joiner)
        elif decision.entry is not None:
            if dies == "before":
                self.kill(aider)
                return
            self.aiding[aider] = Aiding(joiner, self.append(decision.entry))
            if dies == "after":
                self.kill(aider)

    def hand_replica(self, joiner: str, replica: Replica) -> None:
        """The full replica transfer: the joiner goes on from the aider's replica, first
        writing what it owes for the entries it skipped."""
        if joiner in self.requests and self.groups[joiner].alive:
            del self.requests[joiner]
            self.groups[joiner].replica = replica
            for entry in owed(replica, joiner):
                self.append(entry)
            self.detect_deaths()  # a group sets its watches from the replica it adopts

    def restart_direct(self, joiner: str) -> None:
        vpeers = self.groups[joiner].vpeers
        del self.requests[joiner]
        self.kill(joiner)
        self.start_direct(vpeers)

    def found(self, joiner: str) -> None:
        """No other group is alive to aid, or (``give_up``) a round of asking every member it
        found stitched it in nowhere it heard of: the joiner joins by the classic protocol,
        announcing its peers on its own and replaying the log. On an empty cluster that joins it
        at once; otherwise its prepare gives way to a join-direct written for it meanwhile."""
        request = self.requests.pop(joiner)
        self.append(PREPARE_JOIN.entry(joiner=joiner))
        own = dict(request.peer_sites)
        for peer in request.peers:
            apart = {"peer_site": own[peer]} if peer in own else {}
            self.append(ADD_VIRTUAL_PEER.entry(id=peer, group=joiner, site=request.site, **apart))

    def time_out(self, joiner: str) -> None:
        """The joiner heard nothing in time and asks the next live group in turn; when none of
        them has joined, nor knows the joiner has, there is no cluster to be stitched into and
        the joiner founds it."""
        others = [g for g in live(self) if g != joiner]
        replicas = [self.groups[g].replica.groups for g in others]
        if not any(
            g in groups or joiner in groups for g, groups in zip(others, replicas, strict=True)
        ):
            self.found(joiner)
        else:
            attempt = self.attempts.get(joiner, 0)
            self.attempts[joiner] = attempt + 1
            self.ask(joiner, others[attempt % len(others)], "no")

    def settle(self, max_steps: int = 200_000) -> bool:
        """Play to the tail until nobody writes and nobody waits; waiting joiners time out
        whenever the log is quiet, and every TIME_OUT rounds however busy it is."""
        for step in range(max_steps):
            progressed = [self.advance(g.id) for g in self.alive()]
            waiting = self.waiting()
            if not any(progressed) and not waiting:
                return True
            if not any(progressed) or step % TIME_OUT == 0:
                for joiner in waiting:
                    self.time_out(joiner)
        return False

    def advance(self, gid: str) -> bool:
        if gid in self.requests:
            return False
        progressed = super().advance(gid)
        aiding = self.aiding.get(gid)
        group = self.groups[gid]
        if progressed and aiding and group.replica.version == aiding.position:
            del self.aiding[gid]
            if aiding.joiner in group.replica.groups:
                self.hand_replica(aiding.joiner, group.replica)
        return progressed


class Replay:
    """The log replayed from an empty replica, checked entry by entry."""

    def __init__(self) -> None:
        self.replicas: list[Replica] = []
        self.stitched: dict[str, int] = {}

    def at(self, version: int) -> Replica:
        return self.replicas[version] if version >= 0 else Replica()

    def tail(self) -> Replica:
        return self.at(len(self.replicas) - 1)

    def catch_up(self, log: Sequence[Entry]) -> None:
        while len(self.replicas) < len(log):
            position = len(self.replicas)
            entry = log[position]
            t = apply_entry(self.at(position - 1), entry)
            problems = invariant_violations(t.new)
            assert not problems, f"replayed replica at {position}: {problems}"
            if entry.fn == JOIN_DIRECT.name and t.diff is not None:
                joiner = entry.args["joiner"]
                assert joiner not in self.stitched, f"{joiner} stitched in twice"
                self.stitched[joiner] = position
            self.replicas.append(t.new)


def live(model: ClusterModel) -> list[str]:
    return sorted(g.id for g in model.alive())


def pick(ids: Sequence[str], index: int) -> str | None:
    return ids[index % len(ids)] if ids else None


def ask_some_aider(model: DirectModel, joiner: str | None, index: int, dies: str) -> None:
    others = [g for g in live(model) if g != joiner]
    if joiner is not None and others:
        model.ask(joiner, pick(others, index), dies)


def apply_op(model: DirectModel, op: Op) -> None:
    kind, *args = op
    ids = live(model)
    if kind == "start":
        model.start(args[0])
    elif kind == "direct":
        ask_some_aider(model, model.start_direct(args[0]), args[1], args[2])
    elif kind == "ask":
        ask_some_aider(model, pick(model.waiting(), args[0]), args[1], args[2])
    elif kind == "give_up" and model.waiting():
        model.found(pick(model.waiting(), args[0]))
    elif kind == "advance" and ids:
        gid = pick(ids, args[0])
        for _ in range(args[1]):
            if not model.advance(gid):
                break
    elif kind == "settle":
        assert model.settle(SETTLE_ROUNDS), "the cluster did not settle"
    elif kind == "kill" and ids:
        model.kill(pick(ids, args[0]))
    elif kind == "leave" and ids:
        model.leave(pick(ids, args[0]))
    elif kind == "false_report" and ids:
        model.append(GROUP_LEAVE.entry(id=pick(ids, args[0])))


def named_by_join_direct(model: ClusterModel) -> set[str]:
    return {e.args["joiner"] for e in model.log if e.fn == JOIN_DIRECT.name}


def founders(model: ClusterModel) -> set[str]:
    return {e.args["joiner"] for e in model.log if e.fn == PREPARE_JOIN.name}


def check_step(model: DirectModel, replay: Replay) -> None:
    replay.catch_up(model.log)
    for group in model.alive():
        replica = group.replica
        assert not invariant_violations(replica), f"{group.id} at {replica.version}"
        assert replica == replay.at(replica.version), f"{group.id} differs from the replay"
    direct_in_ring = {g for g in replay.tail().groups if g.startswith("d")}
    asked = named_by_join_direct(model) | founders(model)
    assert direct_in_ring <= asked, "a direct joiner joined unasked"


def check_settled(model: DirectModel, replay: Replay) -> None:
    assert model.settle(SETTLE_ROUNDS), "the cluster did not settle"
    check_step(model, replay)
    survivors = model.alive()
    if not survivors:
        return
    final, ids = replay.tail(), {g.id for g in survivors}
    assert all(g.replica == final for g in survivors), "a survivor lags behind the tail"
    assert set(final.groups) == ids
    cycle = ring_cycle(final)
    assert cycle is not None, f"no single ring: {dict(final.pairs)}"
    assert not final.prepared
    assert not final.accepted
    for group in survivors:
        expected = {f"{group.id}-p{i}" for i in range(group.vpeers)}
        assert set(final.group_peers[group.id]) == expected
        assert set(final.peers) >= expected
        if group.id.startswith("d") and group.id not in founders(model):
            assert group.id in replay.stitched, f"{group.id} is in the ring but never stitched"
        if group.id.startswith("d"):
            found = [final.site_of(f"{group.id}-p{i}", group.id) for i in range(group.vpeers)]
            assert found == [site_of(group.id, i) for i in range(group.vpeers)]


def run(ops: Sequence[Op]) -> DirectModel:
    model, replay = DirectModel(), Replay()
    for op in ops:
        apply_op(model, op)
        check_step(model, replay)
    check_settled(model, replay)
    return model


@settings(max_examples=150, deadline=None)
@given(SCENARIOS)
@example(
    ops=[("start", 1), ("start", 1), ("start", 3), ("start", 3), ("settle",),
         ("direct", 1, 0, "after"), ("direct", 1, 3, "after")],
)  # fmt: skip
def test_direct_and_classic_joins_keep_one_ring(ops: list[Op]) -> None:
    run(ops)


@settings(max_examples=50, deadline=None)
@given(SCENARIOS)
def test_the_same_log_gives_the_same_replica(ops: list[Op]) -> None:
    model = run(ops)
    first, second = Replay(), Replay()
    first.catch_up(model.log)
    second.catch_up(model.log)
    assert first.replicas == second.replicas


def settled(size: int) -> tuple[DirectModel, Replay]:
    model, replay = DirectModel(), Replay()
    for _ in range(size):
        model.start(2)
    assert model.settle(SETTLE_ROUNDS)
    check_step(model, replay)
    return model, replay


def test_joiner_whose_aider_died_before_writing_is_not_in_the_ring_and_joins_via_another() -> None:
    model, replay = settled(3)
    first, second = live(model)[:2]
    joiner = model.start_direct(2)
    model.ask(joiner, first, "before")
    for gid in live(model):
        while model.advance(gid):
            pass
    check_step(model, replay)
    assert joiner not in replay.tail().groups
    assert joiner not in named_by_join_direct(model)
    assert model.waiting() == [joiner]
    model.ask(joiner, second, "no")
    check_settled(model, replay)
    assert replay.stitched.keys() == {joiner}
    assert [e.args["aider"] for e in model.log if e.fn == JOIN_DIRECT.name] == [second]
    assert ring_cycle(replay.tail()) is not None


def test_joiner_whose_aider_died_after_writing_joins_once_and_learns_it_from_another() -> None:
    model, replay = settled(3)
    first, second = live(model)[:2]
    joiner = model.start_direct(1)
    model.ask(joiner, first, "after")
    for gid in live(model):
        while model.advance(gid):
            pass
    check_step(model, replay)
    assert joiner in replay.tail().groups
    assert model.waiting() == [joiner], "nobody answered: the aider died"
    model.ask(joiner, second, "no")
    assert model.waiting() == []
    assert model.groups[joiner].replica == replay.tail()
    check_settled(model, replay)
    writes = [e for e in model.log if e.fn == JOIN_DIRECT.name]
    assert len(writes) == 1
    assert first in replay.tail().left


def test_second_aider_that_lags_writes_a_join_the_log_refuses() -> None:
    model, replay = settled(2)
    first, second = live(model)
    joiner = model.start_direct(1)
    model.ask(joiner, first, "after")
    model.ask(joiner, second, "no")
    check_settled(model, replay)
    writes = [e.args["aider"] for e in model.log if e.fn == JOIN_DIRECT.name]
    assert writes == [first, second]
    assert replay.stitched == {
        joiner: model.log.index(next(e for e in model.log if e.fn == JOIN_DIRECT.name))
    }
    assert sorted(replay.tail().groups) == sorted([second, joiner])
