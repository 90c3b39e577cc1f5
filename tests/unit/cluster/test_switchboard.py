"""A group's switchboard against a loopback transport: the membership's frames reach the
membership, task data the data plane, and the leader downs a group gone silent once."""

from __future__ import annotations

import logging
import time

from peer.cluster.downing import Cause, Downing
from peer.cluster.switchboard import Switchboard
from peer.membership.agent import MembershipSettings
from peer.messaging.messages import Address, JoinAsk, LogRumor, encode
from peer.runtime.dataplane import DataPlane
from tests.unit.runtime.test_dataplane import Loopback, cluster, drive

QUICK = MembershipSettings(
    heartbeat_interval=0.02, gossip_interval=0.05, acceptable_heartbeat_pause=0.1,
    min_std_deviation=0.02, auto_down_unreachable_after=0.3,
)  # fmt: skip


def board(group: str, written: list, membership: MembershipSettings | None = QUICK) -> Switchboard:
    transport = Loopback(group.upper())
    plane = DataPlane(group, transport, written.append)
    downing = Downing(group, written.append)
    return Switchboard(group, transport, plane, downing=downing, membership=membership)


def test_a_group_gone_silent_is_downed_once_by_the_leader():
    """a and b answer each other's heartbeats; then b's loop stops. a, the leader, finds b
    unreachable and, past the auto-down time, writes its group-leave once."""
    Loopback.boxes.clear()
    written: dict[str, list] = {"a": [], "b": []}
    a, b = board("a", written["a"]), board("b", written["b"])
    try:
        replica = cluster()
        a.sync(replica, ["a1"])
        b.sync(replica, ["b1"])
        drive(lambda: a.membership.agent.monitor.reachability(time.monotonic()), a, b,
              what="a to hear from b")  # fmt: skip
        drive(lambda: written["a"], a, what="a to down b")
        for _ in range(20):
            a.step()
        downs = [(e.fn, dict(e.args)) for e in written["a"]]
        assert downs == [("group-leave-cluster", {"id": "b"})]
        assert written["b"] == []
    finally:
        a.close()
        b.close()


def test_each_protocol_goes_to_its_owner_and_one_nobody_speaks_is_dropped():
    """A rumor reaches the log feed; a join ask reaches no one where join direct is off, and
    neither reaches the data plane (nothing waits there for a peer)."""
    Loopback.boxes.clear()
    written: list = []
    a = board("a", written, membership=None)
    rumors: list[bytes] = []
    a.connect_rumors(rumors.append)
    try:
        a.sync(cluster(), ["a1"])
        to_a = Address(0, 0, 0, 0)
        for message in (LogRumor(b"entry"), JoinAsk(["ask"])):
            Loopback.boxes["A"].extend(encode(to_a, message, Loopback.max_frame))
        a.step()
        assert rumors == [b"entry"]
        assert not a.dataplane.waiting
        assert a.membership is None
        assert written == []
    finally:
        a.close()


def test_a_member_is_written_down_once_whichever_detector_saw_it_first(caplog):
    caplog.set_level(logging.INFO, logger="peer.cluster.downing")
    written: list = []
    downing = Downing("a", written.append)
    downing.down("b", Cause.PULSE_GONE)
    downing.down("b", Cause.UNREACHABLE)
    downing.down("c", Cause.EXITED)
    downing.down("c", Cause.PULSE_GONE)
    assert [(e.fn, dict(e.args)) for e in written] == [
        ("group-leave-cluster", {"id": "b"}),
        ("group-leave-cluster", {"id": "c"}),
    ]
    assert [r.getMessage() for r in caplog.records] == [
        "group a downs member b: its pulse is gone (its ZooKeeper session ended)",
        "group a removes member c, which has exited",
    ]
