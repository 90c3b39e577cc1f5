"""One member per machine: `onyx peer start --workers N` processes on a real ZooKeeper, their
virtual peers in worker processes with Aeron transports of their own. A checkpointed word count
into the exactly-once sink publishes exactly what a failure-free run does (every word's count,
once) when a worker or a whole member is killed mid-job; each member holds the one ZooKeeper
session of its machine, and its workers none."""

from __future__ import annotations

import json
import os
import re
import signal
import urllib.request
from contextlib import closing
from pathlib import Path

import pytest

from peer import api
from peer.log.entry import Entry
from tests.integration.test_jobs import await_peers, paced_job, published
from tests.integration.test_metrics import Scrape
from tests.support import PeerProcess, free_port, free_udp_ports, wait_for

pytestmark = pytest.mark.integration

LINES = 3_000
"""Long enough that the job is still running when both reallocations a worker's restart causes
(its peers leaving, their replacements joining) have been read: a job reallocated after its
final epoch committed would publish its end-of-input output twice (a gap of the checkpoint
protocol, not of the members)."""


def workers_of(member: PeerProcess) -> dict[str, int]:
    """Each current worker's site and pid, from the member's log (a restarted worker's line comes
    later and replaces its predecessor's)."""
    found = re.findall(r"worker (\d+) \(pid (\d+)\) listens at (\S+)", member.output())
    by_slot = {slot: (site, int(pid)) for slot, pid, site in found}
    return dict(by_slot.values())


def slot_of(member: PeerProcess, pid: int) -> int:
    return int(re.findall(rf"worker (\d+) \(pid {pid}\)", member.output())[0])


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in {"Z", "X"}


def zookeeper_connections(pid: int, port: int) -> int:
    """How many established TCP connections to ZooKeeper's ``port`` process ``pid`` holds: one
    per session, as a client keeps its session on one connection."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] == "01":
                inodes.add(fields[9])
    fds = Path(f"/proc/{pid}/fd")
    links = []
    for fd in fds.iterdir():
        try:
            links.append(os.readlink(fd))
        except FileNotFoundError:
            continue
    return sum(1 for link in links if link.startswith("socket:[") and link[8:-1] in inodes)


@pytest.fixture
def members(start_peer, zookeeper, tenancy, tmp_path, monkeypatch):
    """A member of 2 workers and a member of 1, 4 virtual peers each, and a classic group of
    one process with 2 (the modes mix in one cluster), running the paced word count once it has
    begun splitting; the members, the job's id, its expected counts and a session on the
    cluster."""
    marker = tmp_path / "started"
    monkeypatch.setenv("ONYX_TEST_STARTED", str(marker))
    two = start_peer(vpeers=4, extra=["--workers", "2"])
    one = start_peer(vpeers=4, extra=["--workers", "1"])
    start_peer(vpeers=2)
    await_peers(zookeeper, tenancy, 10)
    job, expected = paced_job(tmp_path, LINES)
    with closing(api.connect(zookeeper.address, tenancy)) as store:
        job_id = api.submit(store, job)
        wait_for(marker.exists, 30, "the job to start splitting")
        yield (two, one), store, job_id, expected


def test_each_member_holds_the_one_session_of_its_machine(members, zookeeper):
    """And a member stopped gracefully leaves and stops its workers before it exits."""
    (two, one), _, _, _ = members
    assert [len(workers_of(m)) for m in (two, one)] == [2, 1]
    for member in (two, one):
        assert zookeeper_connections(member.process.pid, zookeeper.port) == 1
        for pid in workers_of(member).values():
            assert zookeeper_connections(pid, zookeeper.port) == 0
    pids = list(workers_of(two).values())
    two.signal(signal.SIGTERM)
    assert two.process.wait(30) == 0
    assert not [pid for pid in pids if alive(pid)]
    assert sorted(re.findall(r"worker (\d) stopped", two.output())) == ["0", "1"]
    assert "did not stop in time" not in two.output()


def test_a_worker_killed_mid_job_is_restarted_and_the_output_is_exact(members, tmp_path):
    (two, one), store, job_id, expected = members
    before = api.replica(store)
    counter = in_a_worker(before, job_id)
    group = before.group_of(counter)
    member = next(m for m in (two, one) if group in m.output())
    site = before.peer_sites[counter]
    pid = workers_of(member)[site]
    os.kill(pid, signal.SIGKILL)
    final = api.wait(store, job_id, 60)
    assert final.state == "completed"
    assert published(tmp_path) == sorted(expected.items())
    moves = allocations(store, job_id)
    assert counter in moves[0]
    assert counter not in moves[-1]
    assert f"worker {slot_of(member, pid)} died" in member.output()
    after = api.follow(store, lambda r: replaced(r, group, counter), 30)
    assert group in after.groups
    restarted = workers_of(member)
    assert pid not in restarted.values()
    assert len(restarted) == (2 if member is two else 1)
    assert not alive(pid)
    assert {after.peer_sites[p] for p in after.group_peers[group]} == set(restarted)


def in_a_worker(replica, job_id: str) -> str:
    """A peer of the job in a worker process, of the counter if it has one there: only the
    peers of workers listen at sites of their own."""
    tasks = replica.allocations[job_id]
    peers = [p for task in ("count", "split", "read", "write") for p in tasks[task]]
    return next(p for p in peers if p in replica.peer_sites)


def allocations(store, job_id: str) -> list[set[str]]:
    """The peers of each allocation the job had, in log order (the log is replayed whole)."""
    seen: list[set[str]] = []

    def note(t) -> None:
        tasks = t.new.allocations.get(job_id)
        peers = {p for ps in (tasks or {}).values() for p in ps}
        if peers and (not seen or peers != seen[-1]):
            seen.append(peers)

    api.follow(store, lambda _: True, 30, each=note)
    return seen


def replaced(replica, group: str, peer: str) -> bool:
    """Whether ``peer`` of ``group`` is gone and the group has its 4 peers again."""
    peers = replica.group_peers.get(group, ())
    return peer not in peers and len(peers) == 4


def test_a_member_killed_mid_job_takes_its_workers_and_the_output_is_exact(members, tmp_path):
    (two, one), store, job_id, expected = members
    before = api.replica(store)
    group = before.group_of(in_a_worker(before, job_id))
    member = next(m for m in (two, one) if group in m.output())
    pids = list(workers_of(member).values())
    member.kill()
    wait_for(lambda: not any(alive(pid) for pid in pids), 10, f"the workers {pids} to die")
    final = api.wait(store, job_id, 60)
    assert final.state == "completed"
    assert published(tmp_path) == sorted(expected.items())
    moves, gone = allocations(store, job_id), set(before.group_peers[group])
    assert moves[0] & gone
    assert not moves[-1] & gone
    assert group not in api.replica(store).groups


def test_the_members_metrics_show_each_workers_task_runners(start_peer, zookeeper, tenancy,
                                                            tmp_path):  # fmt: skip
    """Under the same names as a single-process group's, each series with its worker's slot."""
    port = free_port()
    start_peer(vpeers=4, extra=["--workers", "2", "--metrics-port", str(port)])
    await_peers(zookeeper, tenancy, 4)
    job, _ = paced_job(tmp_path, LINES)
    with closing(api.connect(zookeeper.address, tenancy)) as store:
        job_id = api.submit(store, job)

        def both_run() -> Scrape | None:
            """A scrape in which both workers' runners have taken segments and finished a
            batch (a batch is timed once it ends, after its segments are counted)."""
            found = Scrape(port)
            ran = [found.total(name, onyx_job=job_id, worker=w)
                   for name in ("onyx_task_segments_in_total", "onyx_task_batch_seconds_count")
                   for w in ("0", "1")]  # fmt: skip
            return found if all(ran) else None

        found = wait_for(both_run, 30, "both workers' task runners in the member's metrics")
    for worker in ("0", "1"):
        assert found("onyx_worker_metrics_fresh", worker=worker) == 1
        assert found.total("onyx_aeron_frames_sent_total", worker=worker) > 0
    tasks = {dict(k)["task"] for k in found.samples["onyx_task_segments_in_total"]}
    assert tasks == {"read", "split", "count", "write"}
    assert found("onyx_group_virtual_peers") == 4


def test_a_worker_that_stops_reading_holds_up_nothing_and_is_replaced(start_peer, zookeeper,
                                                                      tenancy):  # fmt: skip
    """A stopped worker fills its pipe (the log grows by entries of 50 kB); the member keeps
    applying the log and a scrape answers without the worker; once it has read nothing for the
    member's session timeout it is killed and started again, its peers replaced by fresh ones."""
    port = free_port()
    member = start_peer(vpeers=4, extra=["--workers", "2", "--metrics-port", str(port)])
    await_peers(zookeeper, tenancy, 4)
    with closing(api.connect(zookeeper.address, tenancy)) as store:
        before = api.replica(store)
        group = next(iter(before.groups))
        site, stopped = sorted(workers_of(member).items())[0]
        slot = slot_of(member, stopped)
        gone = {p for p in before.group_peers[group] if before.peer_sites[p] == site}
        os.kill(stopped, signal.SIGSTOP)
        try:
            last = max(store.append(Entry("test-load", {"pad": "x" * 50_000})) for _ in range(40))
            wait_for(lambda: applied(port) >= last, 30, f"the member to apply up to {last}")
            during = Scrape(port)
            assert during("onyx_worker_metrics_fresh", worker=str(1 - slot)) == 1
            assert during("onyx_worker_metrics_fresh", worker=str(slot)) == 0 or not alive(stopped)
            wait_for(lambda: not alive(stopped), 30, f"the stopped worker {stopped} to be killed")
        finally:
            if alive(stopped):
                os.kill(stopped, signal.SIGCONT)
        after = api.follow(store, lambda r: replaced_all(r, group, gone), 30)
    restarted = workers_of(member)
    assert stopped not in restarted.values()
    assert len(restarted) == 2
    assert {after.peer_sites[p] for p in after.group_peers[group]} == set(restarted)
    assert f"worker {slot} (pid {stopped}) has not read what the member sent" in member.output()
    assert Scrape(port)("onyx_worker_restarts_total", worker=str(slot), reason="unresponsive") == 1


def test_a_worker_stopped_while_the_log_is_idle_is_found_by_its_pings_and_replaced(
    start_peer, zookeeper, tenancy
):
    """Nothing is sent to a worker while the log is idle, so only the member's pings tell that
    it has stopped: it is killed after the member's session timeout and its peers replaced.
    The workers' ports are fixed (--worker-port-base): the new worker listens where the old
    one did."""
    base = free_udp_ports(2)
    member = start_peer(vpeers=2, extra=["--workers", "2", "--worker-port-base", str(base)])
    await_peers(zookeeper, tenancy, 2)
    with closing(api.connect(zookeeper.address, tenancy)) as store:
        before = api.replica(store)
        group = next(iter(before.groups))
        site, stopped = sorted(workers_of(member).items())[0]
        gone = {p for p in before.group_peers[group] if before.peer_sites[p] == site}
        os.kill(stopped, signal.SIGSTOP)
        try:
            wait_for(lambda: not alive(stopped), 30, f"the stopped worker {stopped} to be killed")
        finally:
            if alive(stopped):
                os.kill(stopped, signal.SIGCONT)
        api.follow(store, lambda r: replaced_all(r, group, gone, 2), 30)
    now = workers_of(member)
    assert stopped not in now.values()
    assert {site.rsplit(":", 1)[1] for site in now} == {str(base), str(base + 1)}


def replaced_all(replica, group: str, gone: set[str], count: int = 4) -> bool:
    """Whether none of ``gone`` is left in ``group`` and it has its ``count`` peers again."""
    peers = set(replica.group_peers.get(group, ()))
    return len(peers) == count and not peers & gone


def applied(port: int) -> int:
    """The log position of the member's replica, as its /replica shows."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/replica", timeout=5) as reply:
        return json.loads(reply.read())["version"]


def test_a_member_that_comes_back_as_a_new_identity_gives_its_workers_fresh_peers(
    start_peer, zookeeper, tenancy, tmp_path, monkeypatch
):
    """A member stopped past its session timeout is removed from the cluster; running again, it
    joins as a new identity with fresh peer ids, which its same worker processes serve (the
    old identity's peers closed), and the job it ran completes exactly."""
    marker = tmp_path / "started"
    monkeypatch.setenv("ONYX_TEST_STARTED", str(marker))
    member = start_peer(vpeers=4, extra=["--workers", "2"])
    start_peer(vpeers=2)
    await_peers(zookeeper, tenancy, 6)
    job, expected = paced_job(tmp_path, LINES)
    with closing(api.connect(zookeeper.address, tenancy)) as store:
        job_id = api.submit(store, job)
        wait_for(marker.exists, 30, "the job to start splitting")
        before = api.replica(store)
        old = next(g for g in before.groups if member.runs(g))
        pids = workers_of(member)
        member.signal(signal.SIGSTOP)
        try:
            api.follow(store, lambda r: old not in r.groups, 30)
        finally:
            member.signal(signal.SIGCONT)
        after = api.follow(store, lambda r: rejoined(r, member, old), 30)
        final = api.wait(store, job_id, 60)
    assert final.state == "completed"
    assert published(tmp_path) == sorted(expected.items())
    new = next(g for g in after.groups if member.runs(g))
    assert not set(after.group_peers[new]) & set(before.group_peers[old])
    assert {after.peer_sites[p] for p in after.group_peers[new]} == set(pids)
    assert workers_of(member) == pids
    closed = re.findall(rf"worker (\d): member {old} has ended", member.output())
    assert sorted(closed) == ["0", "1"]


def rejoined(replica, member: PeerProcess, old: str) -> bool:
    """Whether a new identity of ``member`` (not ``old``) is in the ring with its 4 peers."""
    new = [g for g in replica.groups if g != old and member.runs(g)]
    return bool(new) and len(replica.group_peers.get(new[0], ())) == 4
