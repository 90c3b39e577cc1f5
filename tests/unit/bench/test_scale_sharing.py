"""What the scale bench's members of one process share is what each would have computed alone:
a transition of the same replica object at the same position, and the data plane's peer index
of the same ring."""

from __future__ import annotations

from hypothesis import given, settings

from bench.scale import ring_of
from bench.scale_members import SharedApply, SharedIndex, noop_entry
from peer.log.apply import apply_entry
from peer.log.entries.join_direct import JOIN_DIRECT
from peer.log.entry import Entry
from peer.log.replica import Replica
from peer.runtime.dataplane import DataPlane
from tests.unit.log.random_logs import random_logs, replay


@settings(max_examples=50, deadline=None)
@given(random_logs(max_size=20))
def test_members_sharing_the_apply_reach_the_replicas_of_apply_entry(log):
    shared = SharedApply()
    first = second = Replica()
    expected = replay(log)
    for entry, wanted in zip(log, expected, strict=True):
        a = shared(first, entry)
        b = shared(second, Entry.decode(entry.encode(), entry.position))
        assert a.new == wanted
        assert b is a  # the second member got the first one's transition
        first, second = a.new, b.new


def test_a_different_replica_object_at_the_same_position_is_applied_afresh():
    shared = SharedApply()
    replica = Replica().evolve(version=4)
    twin = Replica().evolve(version=4)
    entry = JOIN_DIRECT.entry(joiner="g1", aider="g1").at(5)
    assert shared(replica, entry) is not shared(twin, entry)
    assert shared(replica, entry).new == apply_entry(twin, entry).new


def test_a_different_entry_at_the_same_position_is_applied_afresh():
    shared = SharedApply()
    replica = Replica().evolve(version=4)
    one, other = noop_entry("g1", "g2").at(5), noop_entry("g3", "g4").at(5)
    assert shared(replica, one).entry == one
    assert shared(replica, other).entry == other


def ring(groups: int) -> Replica:
    return ring_of(
        [(f"g{g}", [f"p{g}-{v}" for v in range(3)], f"h:{g + 1}") for g in range(groups)]
    )


def test_data_planes_sharing_the_index_see_what_each_would_build():
    shared = SharedIndex()
    replica = ring(4)
    alone = DataPlane("g0", None, lambda _e: None)
    alone.sync(replica, [])
    planes = [DataPlane(f"g{i}", None, lambda _e: None) for i in range(2)]
    for plane in planes:
        shared.bind(plane)
        plane.sync(replica, [])
    assert planes[0].peer_sites == alone.peer_sites
    assert planes[0].short_peers == alone.short_peers
    assert planes[1].peer_sites is planes[0].peer_sites
    entry = JOIN_DIRECT.entry(joiner="g9", aider="g3", peers=["q"], site="h:99")
    grown = apply_entry(replica, entry.at(replica.version + 1)).new
    assert "q" in grown.peers
    planes[0].sync(grown, [])
    assert planes[0].peer_sites["q"] == "h:99"
    assert "q" not in planes[1].peer_sites
    for plane in (alone, *planes):
        plane.close()
