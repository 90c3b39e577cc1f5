"""Gossiping a log entry: whom a member passes a copy on to, in which round, and how many rounds
a cluster needs."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.log.epidemic.rumor import (
    LiveMembers,
    Rumor,
    Spread,
    copy_rng,
    forward,
    messages_per_entry,
    originate,
    rounds_for,
)

ids = st.lists(st.text("abcdef", min_size=1, max_size=3), min_size=1, max_size=40, unique=True)


@settings(max_examples=150, deadline=None)
@given(
    ids,
    st.one_of(st.integers(0, 60), st.none()),
    st.integers(1, 6),
    st.integers(1, 8),
    st.integers(0, 9),
)
def test_a_copy_goes_to_distinct_other_live_members_in_the_next_round(
    names, sender_index, fanout, rounds, round_
):
    """A sender that is not (or no longer) among the live members picks from all of them."""
    members = LiveMembers.of(names)
    me = "outsider" if sender_index is None else members.ids[sender_index % len(members.ids)]
    rumor = Rumor(7, b"entry", round_)
    sends = forward(rumor, me, members, rng=copy_rng(me, "x", rumor), spread=Spread(fanout, rounds))
    assert sends.rumor == Rumor(7, b"entry", round_ + 1)
    others = [m for m in members.ids if m != me]
    expected = min(fanout, len(others)) if round_ + 1 < rounds else 0
    assert len(sends.targets) == expected
    assert list(sends.targets) == sorted(set(sends.targets))
    assert set(sends.targets) <= set(others)


def test_the_writer_sends_round_0_to_fanout_members():
    members = LiveMembers.of(f"m{i}" for i in range(10))
    sends = originate(
        3, b"e", "m0", members, rng=copy_rng("m0", "m0", Rumor(3, b"e", 0)), spread=Spread(3, 4)
    )
    assert sends.rumor == Rumor(3, b"e", 0)
    assert len(sends.targets) == 3
    assert "m0" not in sends.targets


def test_a_copy_received_in_the_last_round_goes_nowhere():
    members = LiveMembers.of(f"m{i}" for i in range(10))
    spread = Spread(3, 4)
    last, before = Rumor(0, b"e", 3), Rumor(0, b"e", 2)
    assert forward(last, "m1", members, rng=copy_rng("m1", "m2", last), spread=spread).targets == ()
    assert (
        len(forward(before, "m1", members, rng=copy_rng("m1", "m2", before), spread=spread).targets)
        == 3
    )


def test_targets_are_a_function_of_the_copy_and_differ_between_paths():
    members = LiveMembers.of(f"m{i:03d}" for i in range(200))
    spread = Spread(3, 6)
    rumor = Rumor(5, b"e", 1)

    def targets(sender):
        return forward(
            rumor, "m001", members, rng=copy_rng("m001", sender, rumor), spread=spread
        ).targets

    assert targets("m002") == targets("m002")
    assert len({targets(f"m{i:03d}") for i in range(2, 22)}) > 15


def test_every_other_member_is_picked_about_equally_often():
    members = LiveMembers.of(f"m{i:02d}" for i in range(20))
    counts = dict.fromkeys(members.ids, 0)
    for position in range(2000):
        rumor = Rumor(position, b"", 0)
        sends = forward(rumor, "m05", members, rng=copy_rng("m05", "w", rumor), spread=Spread(3, 4))
        for target in sends.targets:
            counts[target] += 1
    assert counts.pop("m05") == 0
    # 6000 picks over 19 members: about 316 each.
    assert all(250 < n < 390 for n in counts.values()), counts


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 20_000), st.integers(2, 8), st.floats(0.25, 3.0))
def test_rounds_are_the_fewest_with_c_n_ln_n_messages(members, fanout, certainty):
    rounds = rounds_for(members, fanout, certainty)
    needed = certainty * members * math.log(members)
    assert messages_per_entry(members, Spread(fanout, rounds)) >= needed
    if rounds > 1:
        assert messages_per_entry(members, Spread(fanout, rounds - 1)) < needed


def test_rounds_at_fanout_3_for_the_clusters_the_issue_names():
    assert [rounds_for(n) for n in (1, 2, 10, 200, 1000, 10_000)] == [1, 2, 3, 6, 8, 11]
    assert Spread.for_members(1000) == Spread(3, 8)


def test_live_members_are_sorted_and_distinct():
    assert LiveMembers.of(["b", "a", "b"]).ids == ("a", "b")
    with pytest.raises(ValueError, match="sorted and distinct"):
        LiveMembers(("b", "a"))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Rumor(-1, b"", 0), "position must be 0 or more, not -1"),
        (lambda: Rumor(0, b"", -2), "round must be 0 or more, not -2"),
        (lambda: Spread(0, 3), "fan-out must be 1 or more, not 0"),
        (lambda: Spread(3, 0), "rounds must be 1 or more, not 0"),
        (lambda: rounds_for(0), "1 member or more, not 0"),
        (lambda: rounds_for(10, 3, 0.0), "certainty must be above 0"),
    ],
)
def test_bad_values_are_refused_by_name(make, message):
    with pytest.raises(ValueError, match=message):
        make()
