"""join-direct: replica before, entry, replica after, diff, and what each actor does; and the
aider's decision, which follows the entry's own rule."""

from __future__ import annotations

import pytest
from pyrsistent import pset

from peer.cluster.aider import Decision, JoinRequest, answer, decide, owed
from peer.log.apply import apply_entry
from peer.log.entries.group_leave import GROUP_LEAVE
from peer.log.entries.join import ACCEPT_JOIN, NOTIFY_JOIN, PREPARE_JOIN
from peer.log.entries.join_direct import JOIN_DIRECT, refusal
from peer.log.entries.virtual_peers import ADD_VIRTUAL_PEER
from peer.log.replica import invariant_violations, ring_cycle


def direct(joiner, aider, position, **extra):
    return JOIN_DIRECT.entry(joiner=joiner, aider=aider, **extra).at(position)


def test_join_direct_stitches_joiner_right_after_the_aider(make_replica, reactions, effects):
    before = make_replica(8, ring=["a", "b", "c"], aborted=["j"])
    t = apply_entry(before, direct("j", "a", 9))
    assert t.new == make_replica(9, ring=["a", "j", "b", "c"])
    assert ring_cycle(t.new) == ["a", "j", "b", "c"]
    assert invariant_violations(t.new) == []
    assert t.diff == {"joiner": "j", "aider": "a", "target": "b"}
    assert reactions(t, "j", "a", "b", "c") == dict.fromkeys("jabc", ())
    assert effects(t, "j", "a", "b", "c") == {key: [] for key in "jabc"}


def test_lone_aider_and_joiner_form_a_two_cycle(make_replica):
    t = apply_entry(make_replica(2, ring=["a"]), direct("j", "a", 3))
    assert t.new.pairs == {"a": "j", "j": "a"}
    assert ring_cycle(t.new) == ["a", "j"]
    assert t.diff == {"joiner": "j", "aider": "a", "target": "a"}


def test_peers_announced_before_become_active(make_replica):
    before = make_replica(4, ring=["a", "b"], group_peers={"j": ["j1", "j2"]})
    assert before.orphaned == {"j": ["j1", "j2"]}
    t = apply_entry(before, direct("j", "b", 5))
    assert t.new.peers == ["j1", "j2"]
    assert t.new.orphaned == {}


def test_peers_carried_by_the_entry_are_announced_and_active(make_replica):
    before = make_replica(4, ring=["a"], group_peers={"j": ["j1"]}).evolve(
        short_ids=make_replica().short_ids.set("j1", 0), next_short_id=1
    )
    entry = direct("j", "a", 5, peers=["j3", "j1", "j2"], site="host:1", tags=["y", "x", "y"])
    t = apply_entry(before, entry)
    assert t.new.group_peers["j"] == pset(["j1", "j2", "j3"])
    assert t.new.peers == ["j1", "j2", "j3"]
    assert dict(t.new.short_ids) == {"j1": 0, "j2": 1, "j3": 2}
    assert t.new.next_short_id == 3
    assert t.new.sites["j"] == "host:1"
    assert t.new.group_tags["j"] == ("x", "y")


def test_entry_carrying_peers_matches_announcing_them_one_by_one(make_replica):
    before = make_replica(4, ring=["a", "b"])
    carried = apply_entry(before, direct("j", "a", 5, peers=["j1", "j2"], site="s")).new
    replica = before
    for position, entry in enumerate(
        [
            ADD_VIRTUAL_PEER.entry(id="j1", group="j", site="s"),
            ADD_VIRTUAL_PEER.entry(id="j2", group="j", site="s"),
            JOIN_DIRECT.entry(joiner="j", aider="a"),
        ],
        start=5,
    ):
        replica = apply_entry(replica, entry.at(position)).new
    assert carried == replica.evolve(version=5)


def test_peers_carried_with_sites_of_their_own_are_found_there(make_replica):
    """A member with workers: each peer at its worker's site, as add-virtual-peer's peer_site
    puts it; a peer at the joiner's own site, or announced before, keeps no site of its own."""
    before = make_replica(4, ring=["a"], group_peers={"j": ["j0"]})
    sites = {"j0": "W0", "j1": "W1", "j2": "J"}
    t = apply_entry(before, direct("j", "a", 5, peers=["j0", "j1", "j2", "j3"], site="J",
                                   peer_sites=sites))  # fmt: skip
    assert dict(t.new.peer_sites) == {"j1": "W1"}
    assert [t.new.site_of(p, "j") for p in ("j1", "j2", "j3")] == ["W1", "J", "J"]
    assert invariant_violations(t.new) == []


def test_entry_carrying_peer_sites_matches_announcing_them_one_by_one(make_replica):
    before = make_replica(4, ring=["a", "b"])
    sites = {"j1": "W1", "j2": "W2"}
    carried = apply_entry(
        before, direct("j", "a", 5, peers=["j1", "j2"], site="s", peer_sites=sites)
    ).new
    replica = before
    for position, entry in enumerate(
        [
            ADD_VIRTUAL_PEER.entry(id="j1", group="j", site="s", peer_site="W1"),
            ADD_VIRTUAL_PEER.entry(id="j2", group="j", site="s", peer_site="W2"),
            JOIN_DIRECT.entry(joiner="j", aider="a"),
        ],
        start=5,
    ):
        replica = apply_entry(replica, entry.at(position)).new
    assert carried == replica.evolve(version=5)


def test_a_refused_join_direct_records_no_peer_site(make_replica):
    before = make_replica(4, ring=["a", "j"])
    t = apply_entry(before, direct("j", "a", 5, peers=["j9"], peer_sites={"j9": "W"}))
    assert t.new == before.evolve(version=5)


REFUSED = {
    "aider-not-joined": ({"ring": ["a", "b"]}, "z", "aider z has not joined the cluster"),
    "aider-left": ({"ring": ["a", "b"], "left": ["z"]}, "z", "aider z has not joined the cluster"),
    "aider-leaving": (
        {"ring": ["a", "b"], "leaving": ["a"]},
        "a",
        "aider a is leaving the cluster",
    ),
    "aider-exiting": (
        {"ring": ["a", "b"], "exiting": ["a"]},
        "a",
        "aider a is leaving the cluster",
    ),
    "aider-prepared-watcher": (
        {"ring": ["a", "b"], "prepared": {"a": "k"}},
        "a",
        "aider a is stitching in k by the classic join",
    ),
    "aider-accepted-watcher": (
        {"ring": ["a", "b"], "accepted": {"a": "k"}},
        "a",
        "aider a is stitching in k by the classic join",
    ),
    "joiner-joined": ({"ring": ["a", "j"]}, "a", "joiner j has joined already"),
    "joiner-is-the-aider": ({"ring": ["j", "b"]}, "j", "joiner j has joined already"),
    "joiner-prepared": (
        {"ring": ["a", "b"], "prepared": {"b": "j"}},
        "a",
        "joiner j is joining by the classic join",
    ),
    "joiner-accepted": (
        {"ring": ["a", "b"], "accepted": {"b": "j"}},
        "a",
        "joiner j is joining by the classic join",
    ),
    "joiner-left": (
        {"ring": ["a", "b"], "left": ["j"]},
        "a",
        "joiner j has left the cluster: its group must come back under a new id",
    ),
    "empty-cluster": ({}, "a", "aider a has not joined the cluster"),
}


def _replica(make_replica, version, state):
    state = dict(state)
    departing = {k: pset(state.pop(k, ())) for k in ("leaving", "exiting")}
    return make_replica(version, **state).evolve(**departing)


@pytest.mark.parametrize("case", REFUSED.values(), ids=REFUSED)
def test_refused_join_direct_changes_nothing(make_replica, reactions, effects, case):
    state, aider, reason = case
    before = _replica(make_replica, 6, state)
    assert refusal(before, "j", aider) == reason
    t = apply_entry(before, direct("j", aider, 7, peers=["j1"]))
    assert t.new == before.evolve(version=7)
    assert t.diff is None
    assert reactions(t, "j", aider) == {"j": (), aider: ()}
    assert effects(t, "j", aider) == {"j": [], aider: []}


def test_aider_that_only_watches_a_prepared_watcher_may_aid(make_replica):
    """Unlike the classic prepare, join-direct reads the ring as of its own position, so the
    group watching a prepared watcher can stitch in front of it: the classic accept then
    stitches after the watcher whatever it watches by then."""
    before = make_replica(5, ring=["a", "b", "c"], prepared={"b": "k"})
    t1 = apply_entry(before, direct("j", "a", 6))
    assert dict(t1.new.pairs) == {"a": "j", "j": "b", "b": "c", "c": "a"}
    t2 = apply_entry(t1.new, NOTIFY_JOIN.entry(joiner="k", watcher="b").at(7))
    t3 = apply_entry(t2.new, ACCEPT_JOIN.entry(joiner="k", watcher="b").at(8))
    assert ring_cycle(t3.new) == ["a", "j", "b", "k", "c"]
    assert invariant_violations(t3.new) == []


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"peers": ["j1", ""]}, "join-direct: peers must be non-empty strings, got ['j1', '']"),
        ({"tags": [3]}, "join-direct: tags must be non-empty strings, got [3]"),
        ({"site": 5}, "join-direct: argument 'site' must be a non-empty str, got 5"),
        ({"peer_sites": ["j1"]}, "join-direct: argument 'peer_sites' must be a non-empty dict"),
        (
            {"peers": ["j1"], "peer_sites": {"j1": ""}},
            "join-direct: peer_sites must be non-empty strings, got ['j1', '']",
        ),
        (
            {"peers": ["j1"], "peer_sites": {"j2": "W"}},
            "join-direct: peer_sites names peers the entry does not carry: ['j2']",
        ),
    ],
)
def test_malformed_join_direct_is_refused_by_everyone(make_replica, caplog, bad, message):
    before = make_replica(6, ring=["a"])
    t = apply_entry(before, direct("j", "a", 7, **bad))
    assert t.kind is None
    assert t.new == before.evolve(version=7)
    assert message in caplog.text


def test_second_join_direct_of_a_joined_joiner_changes_nothing(make_replica):
    first = apply_entry(make_replica(2, ring=["a", "b"]), direct("j", "a", 3)).new
    t = apply_entry(first, direct("j", "b", 4))
    assert t.new == first.evolve(version=4)
    assert t.diff is None


def test_classic_prepare_of_a_directly_joined_group_changes_nothing(make_replica):
    joined = apply_entry(make_replica(2, ring=["a"]), direct("j", "a", 3)).new
    t = apply_entry(joined, PREPARE_JOIN.entry(joiner="j").at(4))
    assert t.new == joined.evolve(version=4)


# the aider's decision


def test_free_aider_writes_the_entry_and_tells_joiner_its_successor(make_replica):
    replica = make_replica(3, ring=["a", "b", "c"])
    request = JoinRequest("j", peers=("j2", "j1"), site="h:1", tags=("t",))
    decision = decide(replica, "b", request)
    assert decision == Decision(
        entry=JOIN_DIRECT.entry(joiner="j", aider="b", peers=["j1", "j2"], site="h:1", tags=["t"]),
        target="c",
    )


def test_lone_aider_tells_joiner_to_watch_itself(make_replica):
    decision = decide(make_replica(3, ring=["a"]), "a", JoinRequest("j"))
    assert decision == Decision(entry=JOIN_DIRECT.entry(joiner="j", aider="a"), target="a")


def test_joined_joiner_gets_the_replica_and_no_entry(make_replica):
    decision = decide(make_replica(3, ring=["a", "j"], prepared={"a": "k"}), "a", JoinRequest("j"))
    assert decision == Decision(joined=True)


@pytest.mark.parametrize(("state", "aider", "reason"), REFUSED.values(), ids=REFUSED)
def test_aider_refuses_what_the_entry_would_refuse(make_replica, state, aider, reason):
    replica = _replica(make_replica, 6, state)
    decision = decide(replica, aider, JoinRequest("j"))
    if "j" in replica.groups:
        assert decision == Decision(joined=True)
    else:
        assert decision == Decision(refused=reason, left="j" in replica.left)


def test_aider_stitches_one_joiner_at_a_time(make_replica):
    replica = make_replica(3, ring=["a", "b"])
    assert decide(replica, "a", JoinRequest("j"), aiding=["k"]) == Decision(
        refused="aider a is stitching in k already"
    )
    assert decide(replica, "a", JoinRequest("j"), aiding=["j"]) == Decision(
        refused="aider a is stitching in j already"
    )


def test_joiner_whose_id_has_left_is_told_to_restart(make_replica):
    """Reported dead after its entry stitched it in but before it heard so: asking again is
    useless, its group comes back under a new id."""
    joined = apply_entry(make_replica(3, ring=["a", "b"]), direct("j", "a", 4)).new
    gone = apply_entry(joined, GROUP_LEAVE.entry(id="j").at(5)).new
    assert decide(gone, "b", JoinRequest("j")) == Decision(
        refused="joiner j has left the cluster: its group must come back under a new id",
        left=True,
    )
    assert decide(gone, "b", JoinRequest("j"), aiding=["k"]).left


def test_answer_after_reading_the_entry_back(make_replica):
    before = make_replica(3, ring=["a", "b"])
    stitched = apply_entry(before, direct("j", "a", 4))
    assert answer(stitched) == Decision(joined=True)
    busy = before.evolve(accepted=before.accepted.set("a", "k"))
    refused = apply_entry(busy, direct("j", "a", 4))
    assert answer(refused) == Decision(refused="aider a is stitching in k by the classic join")
    malformed = apply_entry(before, direct("j", "a", 4, peers=[""]))
    assert answer(malformed) == Decision(refused="the entry was refused as malformed")


def test_joiner_handed_a_later_replica_owes_the_notify_a_prepare_asked_of_it(make_replica):
    """Its aider died before answering; meanwhile a classic prepare chose it as a watcher."""
    joined = apply_entry(make_replica(3, ring=["a", "b"]), direct("j", "a", 4)).new
    prepared = apply_entry(joined, PREPARE_JOIN.entry(joiner="k").at(5)).new
    assert dict(prepared.prepared) == {"j": "k"}
    assert owed(prepared, "j") == (NOTIFY_JOIN.entry(joiner="k", watcher="j"),)
    assert owed(prepared, "a") == ()
    assert owed(joined, "j") == ()
