"""Generative tests of the gossiped membership state.

Histories are random sequences of status changes, reachability observations and gossip
exchanges on a few members, each holding its own state, so states meet in every relation their
versions can have (same, before, after, concurrent). Merge must be a join on what the state
observes, and random push-pull gossip must bring any set of concurrent changes to one
converged state with one leader.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from pyrsistent import pmap

from peer.membership.gossip import GONE, Gossip, Member, Status
from peer.membership.pushpull import (
    GossipReply,
    GossipStatus,
    pick_target,
    respond,
    rounds_per_interval,
)

NODES = ["a", "b", "c", "d"]
NODE = st.sampled_from(NODES)
SUBJECT = st.sampled_from([*NODES, "e"])

OPS = st.one_of(
    st.tuples(st.just("status"), NODE, SUBJECT, st.sampled_from(Status)),
    st.tuples(st.just("observe"), NODE, SUBJECT, st.booleans()),
    st.tuples(st.just("gossip"), NODE, NODE),
)


def play(ops: list[tuple]) -> dict[str, Gossip]:
    """Every node's state after the history."""
    states = dict.fromkeys(NODES, Gossip())
    for kind, node, other, arg in (op if len(op) == 4 else (*op, None) for op in ops):
        if kind == "status":
            states[node] = states[node].with_member_status(node, other, arg)
        elif kind == "observe":
            states[node] = states[node].observe(node, other, arg)
        else:
            states[node] = states[node].receive(node, states[other])
    return states


HISTORIES = st.lists(OPS, max_size=40).map(play)


def observable(state: Gossip) -> tuple:
    return (state.members, state.reachability, state.version)


@settings(deadline=None)
@given(HISTORIES, NODE, NODE)
def test_merge_is_commutative(states, x, y):
    assert observable(states[x].merge(states[y])) == observable(states[y].merge(states[x]))


@settings(deadline=None)
@given(HISTORIES, NODE, NODE, NODE)
def test_merge_is_associative(states, x, y, z):
    a, b, c = states[x], states[y], states[z]
    assert observable(a.merge(b).merge(c)) == observable(a.merge(b.merge(c)))


@settings(deadline=None)
@given(HISTORIES, NODE)
def test_merge_is_idempotent(states, x):
    assert states[x].merge(states[x]) == states[x]


@settings(deadline=None)
@given(HISTORIES, NODE, NODE)
def test_merge_never_moves_a_status_backwards(states, x, y):
    merged = states[x].merge(states[y])
    for source in (states[x], states[y]):
        for key, member in source.members.items():
            assert merged.members[key].status.progress >= member.status.progress


# Changes: (node, kind, subject, status or reachable), indices taken modulo the cluster's size.
CHANGES = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=19),
        st.sampled_from(["status", "observe"]),
        st.integers(min_value=0, max_value=19),
        st.one_of(st.sampled_from(Status), st.booleans()),
    ),
    max_size=30,
)


def genesis(ids: list[str]) -> Gossip:
    """A formed cluster: every member up, and every member has seen it."""
    return Gossip(members=pmap({m: Member(m, Status.UP) for m in ids}), seen=frozenset(ids))


def change(states: dict[str, Gossip], ids: list[str], step: tuple) -> None:
    """One change at one node. The first two members are never downed or removed, so there is
    a cluster left to converge."""
    node_at, kind, subject_at, arg = step
    node, n = ids[node_at % len(ids)], len(ids)
    if kind == "status" and isinstance(arg, Status):
        subject = ids[2 + subject_at % (n - 2)] if arg in GONE else ids[subject_at % n]
        states[node] = states[node].with_member_status(node, subject, arg)
    elif kind == "observe" and isinstance(arg, bool):
        states[node] = states[node].observe(node, ids[subject_at % n], arg)


def heal(states: dict[str, Gossip]) -> None:
    """Every monitor sees again every member it had reported unreachable."""
    for node, state in sorted(states.items()):
        for (observer, subject), record in sorted(state.reachability.records.items()):
            if observer == node and not record.reachable:
                states[node] = states[node].observe(node, subject, True)


def exchange(states: dict[str, Gossip], initiator: str, receiver: str) -> None:
    """One push-pull exchange: a status, and the state only if the reply asks for it."""
    reply = respond(states[receiver], GossipStatus.of(initiator, states[initiator]))
    if reply is GossipReply.SEND_STATE:
        states[initiator] = states[initiator].receive(initiator, states[receiver])
    elif reply is GossipReply.REQUEST_STATE:
        states[receiver] = states[receiver].receive(receiver, states[initiator])


def gossip_round(states: dict[str, Gossip], rng: random.Random) -> None:
    """Every member gossips as often as the round's pace says, to the members it awaits. A
    downed member goes on too (until its process is stopped, which is not modelled), so what it
    changed before it was downed still spreads."""
    for node in sorted(states):
        for _ in range(rounds_per_interval(states[node])):
            target = pick_target(states[node], node, states[node].awaited(), rng)
            if target is not None:
                exchange(states, node, target)


def members_left(states: dict[str, Gossip]) -> list[Gossip]:
    """The states of the members that do not know themselves downed or removed."""
    return [state for node, state in sorted(states.items()) if node not in state.gone()]


def settled(states: dict[str, Gossip]) -> bool:
    first, *others = members_left(states)
    return first.converged() and all(state == first for state in others)


# Dissemination takes O(log n) rounds: up to 20 members settle in at most 7 rounds over hundreds
# of random schedules, so this bound is loose but still catches a protocol that stalls.
def round_bound(n: int) -> int:
    return 10 + 5 * n


@settings(deadline=None, max_examples=50)
@given(st.integers(min_value=3, max_value=20), CHANGES, st.integers(min_value=0))
def test_random_gossip_schedules_converge(n, changes, seed):
    ids = [f"m{i:02d}" for i in range(n)]
    states = dict.fromkeys(ids, genesis(ids))
    for step in changes:
        change(states, ids, step)
    heal(states)
    rng = random.Random(seed)
    rounds = 0
    while not settled(states):
        assert rounds < round_bound(n), f"no convergence after {rounds} rounds"
        gossip_round(states, rng)
        rounds += 1
    final = members_left(states)
    assert {state.leader() for state in final} == {final[0].leader()}
    leading = {Status.UP, Status.LEAVING}
    if any(member.status in leading for member in final[0].members.values()):
        assert final[0].leader() is not None
