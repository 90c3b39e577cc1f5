"""Generative tests of the ring membership protocol, played through ClusterModel.

Random interleavings of starts, partial advances, kills, graceful leaves, false death reports and
injected join aborts must keep every replica structurally sound and every replica at a position
equal to the one a fresh replay of the log computes there; once the survivors settle, they form
exactly one ring over themselves, each with its own virtual peers.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from peer.cluster.model import ClusterModel, ModelGroup
from peer.log.apply import apply_entry
from peer.log.entries.group_leave import GROUP_LEAVE
from peer.log.entries.join import ABORT_JOIN
from peer.log.replica import Replica, invariant_violations, ring_cycle

Op = tuple

# Quiescence takes well under 200 rounds in these small clusters; a livelock fails fast instead of
# spinning through the model's default bound on every example hypothesis shrinks.
SETTLE_ROUNDS = 5_000

INDEX = st.integers(min_value=0, max_value=63)

START = st.tuples(st.just("start"), st.integers(min_value=1, max_value=4))

OPS = st.one_of(
    START,
    START,
    st.tuples(st.just("advance"), INDEX, st.integers(min_value=1, max_value=6)),
    st.tuples(st.just("settle")),
    st.tuples(st.just("kill"), INDEX),
    st.tuples(st.just("leave"), INDEX),
    st.tuples(st.just("false_report"), INDEX),
    st.tuples(st.just("abort"), INDEX),
)

# A few groups started (and maybe settled into a ring) first, so that most examples disturb a
# ring that exists rather than an empty cluster.
SCENARIOS = st.builds(
    lambda starts, settle, ops: [*starts, *([("settle",)] if settle else []), *ops],
    st.lists(START, max_size=6),
    st.booleans(),
    st.lists(OPS, max_size=50),
)


class Replay:
    """The log replayed from an empty replica, one replica per position, extended on demand."""

    def __init__(self) -> None:
        self.replicas: list[Replica] = []

    def at(self, version: int) -> Replica:
        return self.replicas[version] if version >= 0 else Replica()

    def catch_up(self, model: ClusterModel) -> None:
        while len(self.replicas) < len(model.log):
            position = len(self.replicas)
            new = apply_entry(self.at(position - 1), model.log[position]).new
            assert new.version == position
            problems = invariant_violations(new)
            assert not problems, f"replayed replica at {position}: {problems}"
            self.replicas.append(new)

    def tail(self) -> Replica:
        return self.at(len(self.replicas) - 1)


def live_ids(model: ClusterModel) -> list[str]:
    return sorted(g.id for g in model.alive())


def pick(ids: Sequence[str], index: int) -> str | None:
    return ids[index % len(ids)] if ids else None


def apply_op(model: ClusterModel, replay: Replay, op: Op) -> None:
    kind, *args = op
    live = live_ids(model)
    if kind == "start":
        model.start(args[0])
    elif kind == "advance":
        gid = pick(live, args[0])
        for _ in range(args[1] if gid else 0):
            if not model.advance(gid):
                break
    elif kind == "settle":
        assert model.settle(SETTLE_ROUNDS), "the cluster did not settle"
    elif kind == "kill" and live:
        model.kill(pick(live, args[0]))
    elif kind == "leave" and live:
        model.leave(pick(live, args[0]))
    elif kind == "false_report" and live:
        model.append(GROUP_LEAVE.entry(id=pick(live, args[0])))
    elif kind == "abort":
        replay.catch_up(model)
        joining = [g for g in live if g not in replay.tail().groups]
        if joining:
            model.append(ABORT_JOIN.entry(id=pick(joining, args[0])))


def check_step(model: ClusterModel, replay: Replay) -> None:
    replay.catch_up(model)
    for group in model.alive():
        replica = group.replica
        problems = invariant_violations(replica)
        assert not problems, f"{group.id} at {replica.version}: {problems}"
        assert replica == replay.at(replica.version), (
            f"{group.id} differs from the replay at {replica.version}"
        )


def check_settled(model: ClusterModel, replay: Replay) -> None:
    assert model.settle(SETTLE_ROUNDS), "the cluster did not settle"
    check_step(model, replay)
    live: list[ModelGroup] = sorted(model.alive(), key=lambda g: g.id)
    if not live:
        return
    final = replay.tail()
    ids = {g.id for g in live}
    for group in live:
        assert group.replica.version == len(model.log) - 1, f"{group.id} lags behind the tail"
        assert group.replica == final
    assert set(final.groups) == ids
    assert not ids & set(final.left), "a live group goes on under an id that has left"
    cycle = ring_cycle(final)
    assert cycle is not None, f"no single ring: {dict(final.pairs)}"
    assert sorted(cycle) == sorted(ids)
    assert not final.prepared
    assert not final.accepted
    for group in live:
        expected = {f"{group.id}-p{i}" for i in range(group.vpeers)}
        assert set(final.group_peers[group.id]) == expected


def run(ops: Sequence[Op]) -> ClusterModel:
    model, replay = ClusterModel(), Replay()
    for op in ops:
        apply_op(model, replay, op)
        check_step(model, replay)
    check_settled(model, replay)
    return model


@settings(max_examples=300, deadline=None)
@given(SCENARIOS)
def test_random_interleavings_keep_one_ring(ops: list[Op]) -> None:
    run(ops)


def settled_ring(size: int) -> tuple[ClusterModel, list[str]]:
    model = ClusterModel()
    for _ in range(size):
        model.start(2)
    assert model.settle(SETTLE_ROUNDS)
    cycle = ring_cycle(model.alive()[0].replica)
    assert cycle is not None
    assert len(cycle) == size
    return model, cycle


def leaves_of(model: ClusterModel) -> list[str]:
    return [e.args["id"] for e in model.log if e.fn == GROUP_LEAVE.name]


def test_two_neighbours_killed_together_close_the_ring_over_three() -> None:
    model, cycle = settled_ring(5)
    first, second = cycle[1], cycle[2]
    assert model.alive()[0].replica.pairs[first] == second
    model.kill(first)
    model.kill(second)
    replay = Replay()
    check_settled(model, replay)
    final = replay.tail()
    survivors = [g for g in cycle if g not in (first, second)]
    assert ring_cycle(final) == survivors
    assert dict(final.pairs) == {cycle[0]: cycle[3], cycle[3]: cycle[4], cycle[4]: cycle[0]}
    assert sorted(leaves_of(model)) == sorted([first, second])
    assert {first, second} <= set(final.left)


def test_new_group_joins_alone_after_the_whole_ring_died() -> None:
    model, cycle = settled_ring(3)
    for gid in cycle:
        model.kill(gid)
    assert not model.alive()
    newcomer = model.start(3)
    replay = Replay()
    check_settled(model, replay)
    final = replay.tail()
    assert [g.id for g in model.alive()] == [newcomer]
    assert ring_cycle(final) == [newcomer]
    assert set(final.groups) == {newcomer}
    assert not final.pairs
    assert set(cycle) <= set(final.left)
    assert set(leaves_of(model)) == set(cycle)
