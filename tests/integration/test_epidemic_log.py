"""Epidemic log sharing on a real cluster: `onyx peer start --epidemic-log` processes on a real
ZooKeeper, rumors over Aeron. Members learn entries from each other's gossip, those the command
line wrote too (their scout starts the rumor), read ZooKeeper by position when it falls silent
(alone, when nothing is gossiped, crossing a gc's trim with nobody telling them), and reach the
same replica as a classic member beside them, which is sent no rumor."""

from __future__ import annotations

import json
import random
import signal
import time
import urllib.request
from collections import defaultdict
from contextlib import closing

import pytest
from prometheus_client.parser import text_string_to_metric_families

from peer import api
from peer.log.entries.join_direct import JOIN_DIRECT
from tests.integration.test_jobs import (
    await_peers,
    cluster_args,
    run_word_count,
)
from tests.support import PeerProcess, free_port, onyx, wait_for

pytestmark = pytest.mark.integration

LINES = 1_000


class Member:
    """One `onyx peer start` with its metrics port, to read its replica and counters."""

    def __init__(self, start_peer, *flags: str, **options: object) -> None:
        self.port = free_port()
        self.process: PeerProcess = start_peer(
            vpeers=2, extra=["--metrics-port", str(self.port), "--metrics-address", "127.0.0.1",
                             *flags], **options,
        )  # fmt: skip

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as reply:
            return reply.read()

    def replica(self) -> dict | None:
        try:
            return json.loads(self.get("/replica"))
        except OSError:
            return None

    def counters(self) -> dict[str, float]:
        """Every sample of the log feed's counters, by name and label values."""
        found: dict[str, float] = defaultdict(float)
        for family in text_string_to_metric_families(self.get("/metrics").decode()):
            for sample in family.samples:
                if sample.name.startswith(("onyx_log_entries_learned", "onyx_log_reads_by",
                                           "onyx_log_rumors")):  # fmt: skip
                    key = ",".join([sample.name, *sample.labels.values()])
                    found[key] += sample.value
        return found


def assert_replicas_agree(zookeeper, tenancy, members: list[Member]) -> None:
    """Every member's replica comes to equal the log's, read from ZooKeeper at its tail."""
    with closing(api.connect(zookeeper.address, tenancy)) as store:

        def agree() -> bool:
            expected = api.replica(store).to_json()
            return all(m.replica() == expected for m in members)

        wait_for(agree, 20, "every member's replica to equal the log's")


def learned(before: dict[str, float], after: dict[str, float], source: str) -> float:
    key = f"onyx_log_entries_learned_total,{source}"
    return after.get(key, 0.0) - before.get(key, 0.0)


def learned_by_all(before: list[dict], members: list[Member], source: str) -> float:
    return sum(learned(b, m.counters(), source) for b, m in zip(before, members, strict=True))


def test_three_epidemic_members_run_a_job_and_learn_most_entries_by_gossip(
    start_peer, zookeeper, tenancy, tmp_path
):
    """Members starting together write their first entries before they know each other's
    sites, so those are read from ZooKeeper; what the three learn once running (a fourth
    member's join, the job's end) comes by gossip."""
    flags = ("--epidemic-log", "--log-read-after", "0.5")
    members = [Member(start_peer, *flags) for _ in range(3)]
    await_peers(zookeeper, tenancy, 6)
    assert_replicas_agree(zookeeper, tenancy, members)
    before = [m.counters() for m in members]
    members.append(Member(start_peer, *flags))
    await_peers(zookeeper, tenancy, 8)
    assert_replicas_agree(zookeeper, tenancy, members)
    run_word_count(zookeeper, tenancy, tmp_path)
    assert onyx("gc", *cluster_args(zookeeper, tenancy)).returncode == 0
    assert_replicas_agree(zookeeper, tenancy, members)
    after = [m.counters() for m in members[:3]]
    gossip = sum(learned(b, a, "gossip") for b, a in zip(before, after, strict=True))
    read = sum(learned(b, a, "zookeeper") for b, a in zip(before, after, strict=True))
    assert gossip > read, (gossip, read)
    for member in members:
        assert "trimmed" not in member.process.output()
        assert "dropped a rumor" not in member.process.output()


def test_entries_written_from_outside_the_cluster_are_spread_by_their_scouts_rumors(
    start_peer, zookeeper, tenancy
):
    """A client with no transport (the command line, here this test) appends entries at random
    moments; each is read from ZooKeeper by its scout, which starts its rumor, and the others
    learn it by gossip. A member whose own read falls between the entry's write and the
    scout's read (a quarter of a silence in every two) reads it too, so the bound leaves room
    for some: without scouts every member reads every entry."""
    flags = ("--epidemic-log", "--log-read-after", "1.0")
    members = [Member(start_peer, *flags) for _ in range(3)]
    await_peers(zookeeper, tenancy, 6)
    assert_replicas_agree(zookeeper, tenancy, members)
    before = [m.counters() for m in members]
    rng, count = random.Random(), 8
    with closing(api.connect(zookeeper.address, tenancy)) as store:
        a, b = sorted(api.replica(store).groups)[:2]
        for _ in range(count):
            time.sleep(rng.uniform(0.2, 2.0))  # a random moment, not a wait for anything
            # a join-direct of a group that has joined: every member refuses it alike
            store.append(JOIN_DIRECT.entry(joiner=a, aider=b))
    assert_replicas_agree(zookeeper, tenancy, members)
    read = learned_by_all(before, members, "zookeeper")
    assert read <= 2 * count, f"{read} of {len(members) * count} entries read from ZooKeeper"
    assert learned_by_all(before, members, "gossip") >= count - 2


def test_with_gossip_off_the_zookeeper_timer_alone_keeps_members_up_to_date(
    start_peer, zookeeper, tenancy, tmp_path
):
    flags = ("--epidemic-log", "--gossip-fanout", "0", "--log-read-after", "0.3")
    members = [Member(start_peer, *flags) for _ in range(2)]
    await_peers(zookeeper, tenancy, 4)
    run_word_count(zookeeper, tenancy, tmp_path)
    assert_replicas_agree(zookeeper, tenancy, members)
    for member in members:
        counters = member.counters()
        assert counters.get("onyx_log_entries_learned_total,gossip", 0) == 0
        assert counters["onyx_log_reads_by_position_total,true"] > 0


def test_a_member_with_gossip_off_kept_behind_a_gc_trim_jumps_to_the_origin(
    start_peer, zookeeper, tenancy
):
    """While one member is stopped, two `onyx gc` trim the entry it needs next; no rumor tells
    it that the log moved on (gossip is off), only the origin's version, read when its next
    position is missing. Members do not give the stopped one up in the meantime."""
    flags = ("--epidemic-log", "--gossip-fanout", "0", "--log-read-after", "0.3",
             "--auto-down-unreachable-after", "60")  # fmt: skip
    members = [Member(start_peer, *flags, session_timeout=30.0) for _ in range(2)]
    await_peers(zookeeper, tenancy, 4)
    assert_replicas_agree(zookeeper, tenancy, members)
    behind = members[1].process
    behind.signal(signal.SIGSTOP)
    try:
        for _ in range(2):
            assert onyx("gc", *cluster_args(zookeeper, tenancy)).returncode == 0
    finally:
        behind.signal(signal.SIGCONT)
    assert_replicas_agree(zookeeper, tenancy, members)
    assert "trimmed by gc; jumping to the origin" in behind.output()
    assert members[1].counters()["onyx_log_entries_learned_total,origin"] == 1


def test_a_classic_and_epidemic_members_reach_the_same_replica_and_only_these_get_rumors(
    start_peer, zookeeper, tenancy, tmp_path
):
    epidemic = ("--epidemic-log", "--log-read-after", "0.5")
    members = [Member(start_peer), Member(start_peer, *epidemic), Member(start_peer, *epidemic)]
    await_peers(zookeeper, tenancy, 6)
    run_word_count(zookeeper, tenancy, tmp_path)
    assert_replicas_agree(zookeeper, tenancy, members)
    classic, *others = (m.counters() for m in members)
    assert classic.get("onyx_log_reads_by_position_total,true", 0) == 0
    assert classic.get("onyx_log_rumors_received_total", 0) == 0
    assert all(c["onyx_log_rumors_received_total"] > 0 for c in others)
