"""A group's readiness, read off its state: the pure reading on each state a group passes
through (a member's workers not ready among them), and the changes a real group in this process
reports as it joins, loses its session and leaves."""

from __future__ import annotations

import itertools
import threading
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyrsistent import pset

from peer.cluster.group import GroupConfig, PeerGroup
from peer.cluster.readiness import Readiness, readiness
from peer.log.replica import Replica
from peer.log.stores.memory import MemoryLog
from tests.support import wait_for

JOINED = Replica(version=7, groups=pset(["g1", "g2"]))


def group(replica: Replica = JOINED, *, lost=False, ended=None, leave=None, up=True, id="g1",
          waiting=()):  # fmt: skip
    event = threading.Event()
    if lost:
        event.set()
    return SimpleNamespace(id=id, replica=replica, lost=event, ended=ended,
                           leave_position=leave, switchboard=SimpleNamespace(up=up),
                           workers_not_ready=lambda: tuple(waiting))  # fmt: skip


@pytest.mark.parametrize(
    ("state", "expected", "words"),
    [
        (None, "starting", "starting"),
        (group(Replica(version=3)), "joining", "group g1 has not joined the ring yet"),
        (group(JOINED, id="g3"), "joining", "group g3 has not joined"),
        (group(lost=True), "lost", "ZooKeeper session was lost"),
        (group(ended="lost"), "lost", "ZooKeeper session was lost"),
        (group(ended="restart"), "rejoining", "removed from the cluster"),
        (group(leave=9), "leaving", "group g1 is leaving the ring"),
        (group(ended="left"), "leaving", "leaving the ring"),
        (group(JOINED.evolve(leaving=pset(["g1"]))), "leaving", "group g1 is leaving the ring"),
        (group(JOINED.evolve(exiting=pset(["g1"]))), "leaving", "group g1 is leaving the ring"),
        (group(up=False), "data plane down", "data plane is closed"),
        (
            group(waiting=["worker 1 (pid 7) has not said it is ready"]),
            "workers not ready",
            "group g1: worker 1 (pid 7) has not said it is ready",
        ),
    ],
)
def test_a_group_is_not_ready_until_joined_with_its_data_plane_up(state, expected, words):
    found = readiness(state)
    assert not found.ready
    assert found.state == expected
    assert words in found.reason
    assert "\n" not in found.reason


def test_a_joined_group_with_its_data_plane_up_is_ready():
    assert readiness(group()) == Readiness(True, "ready", "group g1 has joined the ring")


@given(
    joined=st.booleans(),
    lost=st.booleans(),
    ended=st.sampled_from([None, "left", "lost", "restart"]),
    leave=st.sampled_from([None, 4, 12]),
    up=st.booleans(),
    waiting=st.lists(st.sampled_from(["worker 0 is starting", "worker 1 is to start again"])),
)
def test_ready_exactly_when_joined_live_staying_up_and_with_its_workers(
    *, joined, lost, ended, leave, up, waiting
):
    replica = JOINED if joined else Replica(version=2)
    state = group(replica, lost=lost, ended=ended, leave=leave, up=up, waiting=waiting)
    found = readiness(state)
    alive = joined and not lost and ended is None and leave is None and up
    assert found.ready == (alive and not waiting)
    assert found.ready == (found.state == "ready")
    assert "group g1" in found.reason
    assert "\n" not in found.reason


def test_a_member_names_every_worker_that_is_not_ready():
    found = readiness(group(waiting=["worker 0 is starting", "worker 2 is to start again"]))
    assert found.reason == "group g1: worker 0 is starting; worker 2 is to start again"


def test_a_lost_session_outweighs_a_leave_in_flight():
    assert readiness(group(lost=True, leave=9)).state == "lost"


def test_a_group_reports_each_change_of_readiness_as_it_joins_rejoins_and_leaves():
    heard: list[Readiness] = []
    log = MemoryLog()
    config = GroupConfig(vpeers=1, join_back_off=0.02, poll_interval=0.05, leave_timeout=5)
    peer_group = PeerGroup(log.session(), config, on_readiness=heard.append)
    thread = threading.Thread(target=peer_group.run, daemon=True)
    thread.start()
    wait_for(lambda: heard and heard[-1].ready, 20, "the group to be ready")
    first = peer_group.id
    assert [r.state for r in heard] == ["joining", "ready"]

    peer_group.store.expire()
    wait_for(lambda: peer_group.id != first and heard[-1].ready, 20, "the group to rejoin")
    assert [r.state for r in heard[2:]] == ["lost", "joining", "ready"]

    peer_group.stop()
    thread.join(10)
    assert not thread.is_alive()
    assert heard[-1].state == "leaving"
    assert all(a != b for a, b in itertools.pairwise(heard))
