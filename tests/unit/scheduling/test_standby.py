"""Standby choice: a standby is free, outside its running peer's group, able to run the task,
standing by for one peer only; a standby still valid stays; the same inputs give the same
choice whatever order the peers come in."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from peer.scheduling import PeerInfo
from peer.scheduling.standby import StandbyNeed, choose_standbys


def peer(id_: str, group: str, *tags: str) -> PeerInfo:
    return PeerInfo(id_, group, frozenset(tags))


CLUSTER = [
    peer("a1", "ga"), peer("a2", "ga"), peer("b1", "gb"), peer("b2", "gb", "ssd"),
    peer("c1", "gc", "ssd", "gpu"), peer("c2", "gc"),
]  # fmt: skip


def test_a_standby_is_free_of_another_group_with_the_fewest_tags_then_the_lowest_id():
    needs = [StandbyNeed("j", "a1", "ga"), StandbyNeed("j", "b1", "gb")]
    chosen = choose_standbys(needs, CLUSTER, {"a1", "b1"}, {})
    assert chosen == {"j": {"a1": "c2", "b1": "a2"}}


def test_a_task_requiring_tags_gets_a_standby_that_has_them():
    needs = [StandbyNeed("j", "a1", "ga", frozenset({"ssd"}))]
    assert choose_standbys(needs, CLUSTER, {"a1"}, {}) == {"j": {"a1": "b2"}}


def test_a_valid_standby_is_kept_and_an_invalid_one_replaced():
    needs = [StandbyNeed("j", "a1", "ga"), StandbyNeed("j", "b1", "gb")]
    previous = {"j": {"a1": "c1", "b1": "b2"}}  # b2 is b1's own group: invalid
    chosen = choose_standbys(needs, CLUSTER, {"a1", "b1"}, previous)
    assert chosen == {"j": {"a1": "c1", "b1": "a2"}}


def test_a_need_nothing_suits_gets_no_standby():
    needs = [StandbyNeed("j", "a1", "ga", frozenset({"fpga"})), StandbyNeed("k", "b1", "gb")]
    assert choose_standbys(needs, CLUSTER, {"a1", "b1"}, {}) == {"k": {"b1": "a2"}}


def test_allocated_peers_never_stand_by():
    taken = {p.id for p in CLUSTER} - {"a2"}
    needs = [StandbyNeed("j", "a1", "ga"), StandbyNeed("j", "b1", "gb")]
    assert choose_standbys(needs, CLUSTER, taken, {}) == {"j": {"b1": "a2"}}


@st.composite
def cases(draw: st.DrawFn):
    """Active peers in a few groups, some allocated; needs for some allocated peers; and a
    previous choice naming any peers, valid or not."""
    ids = [f"p{i}" for i in range(draw(st.integers(1, 12)))]
    peers = [
        peer(p, draw(st.sampled_from(["g0", "g1", "g2"])),
             *draw(st.lists(st.sampled_from(["ssd", "gpu"]), unique=True)))
        for p in ids
    ]  # fmt: skip
    allocated = set(draw(st.lists(st.sampled_from(ids), unique=True)))
    group = {p.id: p.group for p in peers}
    running = sorted(allocated)
    needs = [
        StandbyNeed(draw(st.sampled_from(["j", "k"])), p, group[p],
                    frozenset(draw(st.lists(st.sampled_from(["ssd"]), max_size=1))))
        for p in draw(st.lists(st.sampled_from(running), unique=True)) if running
    ] if running else []  # fmt: skip
    previous: dict[str, dict[str, str]] = {}
    for need in needs:
        if draw(st.booleans()):
            previous.setdefault(need.job, {})[need.peer] = draw(st.sampled_from(ids))
    return peers, allocated, needs, previous


@settings(max_examples=200, deadline=None)
@given(cases(), st.randoms())
def test_standbys_are_free_apart_unshared_stable_and_deterministic(case, random):
    peers, allocated, needs, previous = case
    chosen = choose_standbys(needs, peers, allocated, previous)
    info = {p.id: p for p in peers}
    by_peer = {(n.job, n.peer): n for n in needs}
    standbys = [s for per_job in chosen.values() for s in per_job.values()]
    assert len(standbys) == len(set(standbys)), "a standby stands by for two peers"
    for job, per_job in chosen.items():
        for running, standby in per_job.items():
            need = by_peer[job, running]
            assert standby not in allocated
            assert info[standby].group != need.group
            assert need.tags <= info[standby].tags
    kept = choose_standbys(needs, peers, allocated, chosen)
    assert kept == chosen, "a valid standby moved"
    shuffled = list(peers)
    random.shuffle(shuffled)
    assert choose_standbys(needs, shuffled, allocated, previous) == chosen


@settings(max_examples=100, deadline=None)
@given(cases())
def test_a_previous_standby_still_valid_is_kept(case):
    peers, allocated, needs, previous = case
    chosen = choose_standbys(needs, peers, allocated, previous)
    info = {p.id: p for p in peers}
    seen: set[str] = set()
    for need in needs:
        old = previous.get(need.job, {}).get(need.peer)
        valid = old in info and old not in allocated and need.suits(info[old])
        if valid and old not in seen:
            assert chosen[need.job][need.peer] == old
            seen.add(old)
