"""Random logs of every kind of entry, membership and jobs mixed, for the property tests of key
declarations and of applying with allocations pending. Job entries come from the allocation
properties' generator; the membership entries here mostly make sense for the replica they
follow (a notify for a prepared join, an accept for a notified one), now and then not."""

from __future__ import annotations

from hypothesis import strategies as st

from peer.log.apply import apply_entry
from peer.log.entries.gc import GC
from peer.log.entries.group_leave import GROUP_LEAVE
from peer.log.entries.join import ABORT_JOIN, ACCEPT_JOIN, NOTIFY_JOIN, PREPARE_JOIN
from peer.log.entries.join_direct import JOIN_DIRECT
from peer.log.entries.leave import EXIT, LEAVE
from peer.log.entry import Entry
from peer.log.replica import Replica
from tests.unit.log.test_allocation_properties import GROUPS, TAGS, steps

CHOICES = ("jobs", "jobs", "jobs", "prepare", "notify", "accept", "abort", "direct", "gc", "down")


def membership_entry(draw: st.DrawFn, replica: Replica, choice: str) -> Entry | None:
    group = draw(st.sampled_from(GROUPS))
    if choice == "prepare":
        return PREPARE_JOIN.entry(joiner=group)
    if choice == "notify" and replica.prepared:
        watcher, joiner = draw(st.sampled_from(sorted(replica.prepared.items())))
        return NOTIFY_JOIN.entry(joiner=joiner, watcher=watcher)
    if choice == "accept" and replica.accepted:
        watcher, joiner = draw(st.sampled_from(sorted(replica.accepted.items())))
        return ACCEPT_JOIN.entry(joiner=joiner, watcher=watcher)
    if choice == "abort":
        return ABORT_JOIN.entry(id=group)
    if choice == "direct":
        aider = draw(st.sampled_from(GROUPS))
        peers = [f"d{replica.version + 1}-{i}" for i in range(draw(st.integers(0, 2)))]
        tags = draw(st.lists(st.sampled_from(TAGS), max_size=2, unique=True))
        apart = draw(st.lists(st.sampled_from(peers), unique=True)) if peers else []
        sites = {peer: draw(st.sampled_from(["s", "w0", "w1"])) for peer in apart}
        extra = {"peer_sites": sites} if sites else {}
        return JOIN_DIRECT.entry(
            joiner=group, aider=aider, peers=peers, tags=tags, site="s", **extra
        )
    if choice == "gc":
        return GC.entry(id=group)
    if choice == "down":
        return draw(st.sampled_from([GROUP_LEAVE, LEAVE, EXIT])).entry(id=group)
    return None


def next_entry(draw: st.DrawFn, replica: Replica) -> Entry:
    """One entry to follow ``replica``, of any kind."""
    choice = draw(st.sampled_from(CHOICES))
    entry = membership_entry(draw, replica, choice)
    return entry if entry is not None else steps(draw, replica)


@st.composite
def random_logs(draw: st.DrawFn, max_size: int = 40) -> list[Entry]:
    """A log from the empty replica, positioned from 0, each entry drawn for the replica the
    entries before it lead to."""
    replica, log = Replica(), []
    for position in range(draw(st.integers(1, max_size))):
        entry = next_entry(draw, replica).at(position)
        log.append(entry)
        replica = apply_entry(replica, entry).new
    return log


def replay(log: list[Entry]) -> list[Replica]:
    """The replica at every position of ``log``, applied one entry after another."""
    replicas, replica = [], Replica()
    for entry in log:
        replica = apply_entry(replica, entry).new
        replicas.append(replica)
    return replicas
