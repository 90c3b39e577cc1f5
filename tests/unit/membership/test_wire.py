"""Membership messages through the engine's frame format and back, and what a bad body gets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.membership.agent import (
    HeartbeatReply,
    HeartbeatRequest,
    InitJoin,
    State,
    StateRequest,
    Welcome,
)
from peer.membership.gossip import Gossip, Status
from peer.membership.pushpull import GossipStatus
from peer.membership.wire import from_wire, to_wire
from peer.messaging.frame import Header, MessageType, decode, encode

NODES = st.sampled_from(["a", "b", "c", "d"])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("status"), NODES, NODES, st.sampled_from(list(Status))),
        st.tuples(st.just("observe"), NODES, NODES, st.booleans()),
        st.tuples(st.just("seen"), NODES),
    ),
    max_size=25,
)


def built(ops) -> Gossip:
    state = Gossip()
    for op in ops:
        if op[0] == "status":
            state = state.with_member_status(op[1], op[2], op[3])
        elif op[0] == "observe":
            state = state.observe(op[1], op[2], op[3])
        else:
            state = state.seen_by(op[1])
    return state


def through_a_frame(body):
    """The body as another process reads it."""
    header = Header(MessageType.MEMBERSHIP, 0, 0, 0, 0, 0)
    return decode(encode(header, body))[1]


@settings(deadline=None)
@given(OPS, NODES)
def test_every_message_comes_back_as_it_was_sent(ops, sender):
    state = built(ops)
    messages = [
        HeartbeatRequest(sender), HeartbeatReply(sender), StateRequest(sender),
        GossipStatus.of(sender, state), State(sender, state), InitJoin(sender, "10.0.0.1:9"),
        Welcome(sender, state, tuple((m, f"{m}.example:7") for m in sorted(state.members))),
    ]  # fmt: skip
    for message in messages:
        assert from_wire(through_a_frame(to_wire(message))) == message


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("heartbeat", "body 'heartbeat' is not a list"),
        (["heartbeat"], "is not a list of the right size"),
        (["heartbeat", 7], "sender 7 is not a string"),
        (["gossip", "a"], "kind 'gossip' with 2 items is none"),
        (["status", "a", [["b", 0]], "x"], "version count 0 is not a positive integer"),
        (["status", "a", [["b", 1], ["a", 1]], "x"], "version: not a normal vector clock"),
        (["state", "a", [[], [["b", "asleep"]], [], []]], "status 'asleep' is no member status"),
        (["state", "a", [[], [], [["a", "b", "no", 1]], []]], "reachable 'no' is not a boolean"),
        (["state", "a", [[], [], [], [3]]], "seen 3 is not a string"),
        (["state", "a", [[], [], []]], "state"),
        (["join", "a"], "kind 'join' with 2 items is none"),
        (["join", "a", 9], "site 9 is not a string"),
        (["join", "a", "nowhere"], "site is not HOST:PORT: 'nowhere' has no port"),
        (["join", "a", "h:99999"], "site is not HOST:PORT"),
        (["welcome", "a", [[], [["a", "up"]], [], []]], "kind 'welcome' with 3 items is none"),
        (["welcome", "a", [[], [["a", "up"]], [], []], "x"], "sites 'x' is not a list"),
        (["welcome", "a", [[], [["a", "up"]], [], []], [["a"]]], "site entry ['a'] is not"),
        (
            ["welcome", "a", [[], [["a", "up"]], [], []], [["b", "h:1"]]],
            "site member 'b' is not in the state",
        ),
        (
            ["welcome", "a", [[], [["a", "up"]], [], []], [["a", "h:1"], ["a", "h:2"]]],
            "site member 'a' comes twice",
        ),
        (
            ["welcome", "a", [[], [["a", "up"]], [], []], [["a", ":1"]]],
            "site is not HOST:PORT: ':1' has no host",
        ),
    ],
)
def test_a_bad_body_is_refused_naming_the_field(body, words):
    with pytest.raises(ValueError, match="membership message") as refused:
        from_wire(body)
    assert words in str(refused.value)
