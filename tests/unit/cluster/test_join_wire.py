"""Join direct's messages: what a joiner and an aider send reads back as it was, and whatever
else arrives is a ValueError naming what is wrong, never another exception."""

from __future__ import annotations

import contextlib
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.cluster.aider import Decision, JoinRequest
from peer.cluster.join_wire import Ask, Reply, ask_body, read_ask, read_reply, reply_body
from peer.log.apply import apply_entry
from peer.log.entries.join import PREPARE_JOIN
from peer.log.entry import Entry
from peer.log.replica import Replica

EXAMPLES = settings(max_examples=150, deadline=None)
names = st.text(min_size=1, max_size=12)
requests = st.builds(
    JoinRequest,
    names,
    st.lists(names, max_size=4).map(tuple),
    st.none() | names,
    st.lists(names, max_size=3).map(tuple),
    st.lists(st.tuples(names, names), max_size=3).map(tuple),
    st.booleans(),
)
json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=20,
)


def ring_of(*groups: str) -> Replica:
    replica = Replica()
    for position, group in enumerate(groups):
        replica = apply_entry(replica, PREPARE_JOIN.entry(joiner=group).at(position)).new
    return replica


@EXAMPLES
@given(requests, names)
def test_an_ask_reads_back_as_it_was_sent(request: JoinRequest, site: str) -> None:
    ask = Ask(request, site)
    assert read_ask(ask_body(ask)) == ask


def test_a_joined_reply_carries_the_replica() -> None:
    replica = ring_of("aider")
    joined = apply_entry(replica, JoinRequest("joiner", ("p1",)).entry("aider").at(1)).new
    reply = Reply("joiner", "aider", Decision(joined=True), joined)
    assert read_reply(reply_body(reply)) == reply


@pytest.mark.parametrize("decision", [Decision(refused="aider a is busy"), Decision(left=True)])
def test_a_reply_that_is_not_joined_carries_no_replica(decision: Decision) -> None:
    reply = Reply("joiner", "aider", decision)
    assert read_reply(reply_body(reply)) == reply


@EXAMPLES
@given(st.lists(json_like, max_size=7))
def test_anything_else_is_a_value_error(body: list) -> None:
    for read in (read_ask, read_reply):
        with contextlib.suppress(ValueError):
            read(body)


@pytest.mark.parametrize(
    ("document", "words"),
    [
        (None, "carries no replica"),
        (b"not zlib", "does not read"),
        (zlib.compress(b"[1, 2]"), "not a JSON object"),
        (zlib.compress(b'{"bogus": 1}'), "unknown keys"),
        (zlib.compress(b"{}"), "does not hold joiner joiner"),
    ],
)
def test_a_joined_reply_with_a_bad_replica_names_what_is_wrong(document, words) -> None:
    with pytest.raises(ValueError, match=words):
        read_reply(["joiner", "aider", True, None, False, document])


def test_a_field_of_the_wrong_type_is_named() -> None:
    with pytest.raises(ValueError, match="field peers"):
        read_ask(["joiner", "p1", None, [], "127.0.0.1:1"])
    with pytest.raises(ValueError, match="field aider"):
        read_reply(["joiner", 7, False, "no", False, None])
    with pytest.raises(ValueError, match="6 fields"):
        read_reply(["joiner"])
    with pytest.raises(ValueError, match="field rumors"):
        read_ask(["joiner", [], None, [], "127.0.0.1:1", "yes"])


def test_an_ask_of_five_fields_is_a_joiner_that_takes_no_rumors() -> None:
    """What a member without the epidemic log's rumors sends still reads."""
    assert read_ask(["j", [], "h:1", [], "h:1"]).request.rumors is False
    request = read_ask(["j", [], "h:1", [], "h:1", True]).request
    assert request.entry("a").args["rumors"] is True


def test_an_entry_for_the_request_names_what_the_ask_carried() -> None:
    request = read_ask(["j", ["p2", "p1"], "h:1", ["gpu"], "h:1"]).request
    entry: Entry = request.entry("a")
    assert entry.args == {"joiner": "j", "aider": "a", "peers": ["p1", "p2"], "site": "h:1",
                          "tags": ["gpu"]}  # fmt: skip


def test_an_ask_with_the_peers_own_sites_has_a_seventh_field_and_the_entry_carries_them() -> None:
    request = JoinRequest("j", ("p1", "p2"), "m:1", (), (("p2", "w1:1"), ("p1", "w0:1")))
    body = ask_body(Ask(request, "m:1"))
    assert len(body) == 7
    assert len(ask_body(Ask(JoinRequest("j", ("p1",), "m:1"), "m:1"))) == 5, "as before"
    entry = read_ask(body).request.entry("a")
    assert entry.args["peer_sites"] == {"p1": "w0:1", "p2": "w1:1"}
    assert "rumors" not in entry.args
    with pytest.raises(ValueError, match="field peer_sites"):
        read_ask([*body[:6], [["p1"]]])
    with pytest.raises(ValueError, match="5 to 7 fields"):
        read_ask([*body, None])
