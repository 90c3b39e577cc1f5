"""Members as the replica has them, and how an operator names one."""

from __future__ import annotations

import pytest
from pyrsistent import pmap, pset

from peer.log.replica import Replica
from peer.membership.gossip import Status
from peer.membership.members import MemberError, lifecycle, resolve

REPLICA = Replica(
    groups=pset({"aaaa1111", "aaaa2222", "bbbb3333", "ffff7777", "gggg8888"}),
    prepared=pmap({"aaaa1111": "cccc4444"}),
    left=pset({"dddd5555", "eeee6666"}),
    removed=pset({"eeee6666"}),
    leaving=pset({"ffff7777"}),
    exiting=pset({"gggg8888"}),
)


def test_the_lifecycle_is_read_from_the_ring_the_joins_the_leaves_and_the_departed():
    assert lifecycle(REPLICA) == {
        "aaaa1111": Status.UP,
        "aaaa2222": Status.UP,
        "bbbb3333": Status.UP,
        "cccc4444": Status.JOINING,
        "dddd5555": Status.DOWN,
        "eeee6666": Status.REMOVED,
        "ffff7777": Status.LEAVING,
        "gggg8888": Status.EXITING,
    }


@pytest.mark.parametrize(
    ("name", "member"),
    [("aaaa2222", "aaaa2222"), ("aaaa2", "aaaa2222"), ("b", "bbbb3333"), ("cccc", "cccc4444")],
)
def test_a_member_is_named_by_its_id_or_a_prefix_of_it_alone(name, member):
    assert resolve(REPLICA, name) == member


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("zzzz", "no member of this cluster has that id or prefix"),
        ("", "no member of this cluster"),
        ("aaaa", "the prefix names 2 members: aaaa1111, aaaa2222"),
        ("dddd", "dddd5555 is down already"),
        ("eeee", "eeee6666 is removed already"),
    ],
)
def test_a_name_that_fits_no_live_member_or_several_is_refused_saying_so(name, words):
    with pytest.raises(MemberError, match=f"member {name!r}: .*{words}"):
        resolve(REPLICA, name)
