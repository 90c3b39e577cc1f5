"""`onyx peer start --join-direct`: a new group asks a running member to stitch it in and gets
the member's replica, instead of replaying the log. Real processes, a real ZooKeeper, real Aeron."""

from __future__ import annotations

import json
import re
import signal
import urllib.request

import pytest

from peer import api
from peer.log.entries.join import NOTIFY_JOIN
from peer.log.entries.join_direct import JOIN_DIRECT
from peer.log.replica import Replica, invariant_violations
from tests.integration.test_jobs import cluster_args, counts, wordcount_job
from tests.integration.test_metrics import Scrape
from tests.integration.test_seed_nodes import await_ring, group_id, ring
from tests.support import PeerProcess, ZooKeeperServer, free_port, onyx, wait_for

pytestmark = pytest.mark.integration

VPEERS = 2
DEADLINE = 60.0
"""Generous: a loaded two-core machine may take some seconds to start a group."""
OLD_ENTRIES = 10_000


def joined_directly(peer: PeerProcess) -> re.Match[str]:
    return wait_for(
        lambda: re.search(r"joined the ring at log position (\d+), aided by group (\S+)",
                          peer.output()),
        DEADLINE, "the direct join's log line",
    )  # fmt: skip


def served_replica(port: int) -> Replica | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/replica", timeout=5) as reply:
            return Replica.from_json(json.loads(reply.read()))
    except OSError:
        return None


def metrics_args(port: int) -> list[str]:
    return ["--metrics-port", str(port), "--metrics-address", "127.0.0.1"]


def fill_log(zookeeper: ZooKeeperServer, tenancy: str, count: int) -> None:
    """``count`` entries that change nothing (a notify for a join nobody prepared), written
    straight through the store's client, so the log is long before any group starts."""
    store = api.connect(zookeeper.address, tenancy, create=True)
    try:
        data = NOTIFY_JOIN.entry(joiner="nobody", watcher="nobody").encode()
        path = f"{store.log_path}/entry-"
        for start in range(0, count, 1000):
            pending = [store.client.create_async(path, data, sequence=True)
                       for _ in range(start, min(count, start + 1000))]  # fmt: skip
            for result in pending:
                result.get()
    finally:
        store.close()


def entries_after(zookeeper: ZooKeeperServer, tenancy: str, position: int) -> list:
    store = api.connect(zookeeper.address, tenancy)
    try:
        return store.read(after=position)
    finally:
        store.close()


def test_a_direct_joiner_applies_none_of_a_long_log_and_ends_with_the_same_replica(
    start_peer, zookeeper, tenancy
):
    fill_log(zookeeper, tenancy, OLD_ENTRIES)
    first_port, joiner_port = free_port(), free_port()
    first = start_peer(vpeers=VPEERS, extra=metrics_args(first_port))
    before = await_ring(zookeeper, tenancy, 1).version
    assert before >= OLD_ENTRIES
    joiner = start_peer(vpeers=VPEERS, extra=["--join-direct", *metrics_args(joiner_port)])
    position, aider = joined_directly(joiner).groups()
    assert aider == group_id(first)
    written = entries_after(zookeeper, tenancy, before)
    assert [(e.fn, e.args["joiner"]) for e in written] == [(JOIN_DIRECT.name, group_id(joiner))]
    assert int(position) == written[0].position
    # the join's ZooKeeper writes: the joiner's pulse and this one entry
    assert set(written[0].args["peers"]) == set(await_ring(zookeeper, tenancy, 2).group_peers[
        group_id(joiner)])  # fmt: skip
    same = wait_for(
        lambda: (r := served_replica(joiner_port)) is not None and r == served_replica(first_port),
        DEADLINE, "the joiner's replica to equal the first member's",
    )  # fmt: skip
    assert same
    applied = Scrape(joiner_port).samples["onyx_log_entries_applied_total"]
    kinds = {dict(labels)["kind"]: n for labels, n in applied.items() if n}
    assert sum(kinds.values()) < 10, kinds
    assert NOTIFY_JOIN.name not in kinds


def test_a_joiner_whose_aider_dies_asks_another_and_the_ring_stays_sound(
    start_peer, zookeeper, tenancy
):
    ports = [free_port() for _ in range(3)]
    doomed = start_peer(vpeers=VPEERS, extra=metrics_args(ports[0]))
    await_ring(zookeeper, tenancy, 1)
    other = start_peer(vpeers=VPEERS, extra=metrics_args(ports[1]))
    replica = await_ring(zookeeper, tenancy, 2)
    doomed_site = replica.sites[group_id(doomed)]
    other_site = replica.sites[group_id(other)]
    doomed.signal(signal.SIGSTOP)
    joiner = start_peer(vpeers=VPEERS, extra=[
        "--join-direct", "--join-direct-timeout", "2", "--seed-nodes", doomed_site,
        "--seed-nodes", other_site, *metrics_args(ports[2])])  # fmt: skip
    wait_for(lambda: f"asks the member at {doomed_site}" in joiner.output(), DEADLINE,
             "the joiner's ask of the stopped member")  # fmt: skip
    doomed.kill()
    aider = joined_directly(joiner).group(2)
    assert aider == group_id(other)
    assert f"the member at {doomed_site} did not answer" in joiner.output()
    survivors = {group_id(other), group_id(joiner)}
    final = wait_for(lambda: (r := ring(zookeeper, tenancy, 2)) and set(r.groups) == survivors
                     and r, DEADLINE, "the ring of the two survivors")  # fmt: skip
    for port in ports[1:]:
        served = wait_for(lambda p=port: (r := served_replica(p)) and r.version >= final.version
                          and r, DEADLINE, "a survivor's replica")  # fmt: skip
        assert invariant_violations(served) == []
        assert set(served.groups) == survivors


def test_a_job_runs_to_exact_counts_on_a_cluster_whose_second_member_joined_directly(
    start_peer, zookeeper, tenancy, tmp_path
):
    first = start_peer(vpeers=2, extra=["--join-direct"])
    await_ring(zookeeper, tenancy, 1)
    assert "aided by" not in first.output()  # the first member of a cluster joins classically
    joiner = start_peer(vpeers=2, extra=["--join-direct"])
    joined_directly(joiner)
    await_ring(zookeeper, tenancy, 2)
    job, expected = wordcount_job(tmp_path, 2_000)
    submitted = onyx("job", "submit", str(job), *cluster_args(zookeeper, tenancy))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    waited = onyx("job", "wait", job_id, *cluster_args(zookeeper, tenancy), "--timeout", "60")
    assert waited.returncode == 0, waited.stderr
    assert counts(tmp_path / "out" / "counts.jsonl") == expected
