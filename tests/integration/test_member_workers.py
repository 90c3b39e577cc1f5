"""One member per machine: `onyx peer start --workers N` processes on a real ZooKeeper, their
virtual peers in worker processes with Aeron transports of their own. A checkpointed word count
into the exactly-once sink publishes exactly what a failure-free run does (every word's count,
once) when a worker or a whole member is killed mid-job; each member holds the one ZooKeeper
session of its machine, and its workers none.

A worker is judged only once it has said it is ready: one slow to start is kept, one that never
does is killed at the start timeout and started again after a back-off, and /readyz names it
meanwhile. A second member given the same worker ports is refused in one line. A task's code
that exits its process fails its job: at once when the exit can be caught, after three deaths
of the workers running it when it cannot; the member and its workers go on."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import urllib.error
import urllib.request
from contextlib import closing
from pathlib import Path

import pytest

from peer import api
from peer.cluster.member import PING_EVERY
from peer.cluster.supervision import BackOff, CodeDeaths
from peer.log.entry import Entry
from tests.integration.failing_fns import EXIT_CODE
from tests.integration.test_jobs import (
    await_peers,
    cluster_args,
    paced_job,
    published,
    wordcount_job,
)
from tests.integration.test_metrics import Scrape
from tests.support import (
    PeerProcess,
    assert_one_line_error,
    free_port,
    free_udp_ports,
    onyx,
    wait_for,
)

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
    try:
        code = two.process.wait(30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the member did not exit within 30 s of SIGTERM:\n{two.output()[-4000:]}")
    assert code == 0
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


SESSION_TIMEOUT = 4.0
"""The session timeout PeerProcess gives a member: how long a ready worker may leave what the
member sends it unread."""
START_TIMEOUT = 20.0
"""A start timeout short enough for a test, long enough for a worker on a loaded machine."""


def started(member: PeerProcess, slot: int) -> int | None:
    """The pid of the latest process the member started for ``slot``."""
    found = re.findall(rf"started worker {slot} \(pid (\d+)\)", member.output())
    return int(found[-1]) if found else None


def said_ready(member: PeerProcess, pid: int) -> bool:
    return f"(pid {pid}) listens at" in member.output()


def stopped_as_it_starts(member: PeerProcess, slot: int) -> int:
    """Kill the worker of ``slot`` (no job runs: no job is blamed) and stop the process started
    in its place before it says it is ready, as a worker slow to import or to bring its
    transport up would be; its pid."""
    old = started(member, slot)
    os.kill(old, signal.SIGKILL)
    fresh = wait_for(lambda: (started(member, slot) or old) != old and started(member, slot),
                     30, f"a worker to replace {old}", interval=0.01)  # fmt: skip
    os.kill(fresh, signal.SIGSTOP)
    assert not said_ready(member, fresh), f"worker {fresh} said it was ready before it stopped"
    return fresh


def readyz(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


def starting_for(port: int, slot: int) -> float:
    return Scrape(port)("onyx_worker_starting_seconds", worker=str(slot))


def test_a_worker_slow_to_say_it_is_ready_is_not_judged_stuck_and_is_kept(
    start_peer, zookeeper, tenancy
):
    """A worker reads nothing until its transport is up, which takes seconds: stopped before it
    said it was ready, it is not killed as stuck once the member's session timeout has passed,
    as a ready one would be, and /readyz names it meanwhile. Resumed, it says it is ready, it is
    kept, its peers join, and the member is ready again."""
    port = free_port()
    member = start_peer(vpeers=4, extra=["--workers", "2", "--metrics-port", str(port)])
    await_peers(zookeeper, tenancy, 4)
    with closing(api.connect(zookeeper.address, tenancy)) as store:
        group = next(iter(api.replica(store).groups))
        fresh = stopped_as_it_starts(member, 1)
        try:
            why = f"worker 1 (pid {fresh}) has not said it is ready"
            named = wait_for(lambda: why in readyz(port)[1]["reason"], 30, "/readyz to name it")
            assert named
            assert readyz(port)[0] == 503
            judged = SESSION_TIMEOUT + 3 * PING_EVERY
            wait_for(lambda: starting_for(port, 1) > judged, 60,
                     f"worker {fresh} to have been starting for {judged:g} s")  # fmt: skip
            assert alive(fresh)
        finally:
            os.kill(fresh, signal.SIGCONT)
        wait_for(lambda: said_ready(member, fresh), 60, f"worker {fresh} to say it is ready")
        after = api.follow(store, lambda r: len(r.group_peers.get(group, ())) == 4, 30)
        wait_for(lambda: readyz(port)[0] == 200, 30, "the member to be ready again")
    assert alive(fresh)
    assert {after.peer_sites[p] for p in after.group_peers[group]} == set(workers_of(member))
    assert fresh in workers_of(member).values()
    assert "has not read what the member sent" not in member.output()
    assert Scrape(port).total("onyx_worker_restarts_total", reason="not_ready") == 0


def test_a_worker_that_never_says_it_is_ready_is_killed_at_the_start_timeout_and_backs_off(
    start_peer, zookeeper, tenancy
):
    """Killed at the start timeout, not before (it is never judged stuck); its death follows a
    death moments after its predecessor's start, so it waits the back-off of a second failed
    start in a row before its next start, which the member reports; that one starts and is
    kept."""
    port = free_port()
    timeout = ["--worker-start-timeout", f"{START_TIMEOUT:g}"]
    member = start_peer(vpeers=4, extra=["--workers", "2", "--metrics-port", str(port), *timeout])
    await_peers(zookeeper, tenancy, 4)
    fresh = stopped_as_it_starts(member, 1)
    try:
        wait_for(lambda: not alive(fresh), START_TIMEOUT + 30, f"worker {fresh} to be killed")
    finally:
        if alive(fresh):
            os.kill(fresh, signal.SIGCONT)
    wait_for(lambda: said_ready(member, started(member, 1)), 60, "its successor to be ready")
    wait_for(lambda: readyz(port)[0] == 200, 30, "the member to be ready again")
    out = member.output()
    assert (f"worker 1 (pid {fresh}) has not said it is ready within {START_TIMEOUT:g} s of "
            "its start; killing it") in out  # fmt: skip
    assert ("worker 1 died (killed by SIGKILL); reporting its peers [] and starting it again "
            f"in {BackOff().delay(2):.3g} s") in out  # fmt: skip
    assert "has not read what the member sent" not in out
    assert Scrape(port)("onyx_worker_restarts_total", worker="1", reason="not_ready") == 1
    assert len(workers_of(member)) == 2


def test_a_member_given_worker_ports_another_member_holds_is_refused_in_one_line(
    start_peer, zookeeper, tenancy
):
    base = free_udp_ports(2)
    first = start_peer(vpeers=2, extra=["--workers", "2", "--worker-port-base", str(base)])
    await_peers(zookeeper, tenancy, 2)
    result = onyx("peer", "start", *cluster_args(zookeeper, tenancy), "--vpeers", "2",
                  "--workers", "2", "--worker-port-base", str(base))  # fmt: skip
    assert_one_line_error(
        result, 1, "worker 0", f"127.0.0.1:{base}", "--worker-port-base", "Address already in use"
    )
    assert first.process.poll() is None
    assert len(workers_of(first)) == 2


def killed_for(zookeeper, tenancy, job_path, timeout: str = "120") -> str:
    """The job submitted and waited for as a user does: it is killed; the line `wait` prints."""
    submitted = onyx("job", "submit", str(job_path), *cluster_args(zookeeper, tenancy))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    waited = onyx("job", "wait", job_id, *cluster_args(zookeeper, tenancy), "--timeout", timeout)
    assert waited.returncode == 1, waited.stdout + waited.stderr
    line = waited.stdout.strip()
    assert line.startswith(f"job {job_id}: killed: job {job_id!r}: task 'split'"), line
    return line


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_task_that_raises_system_exit_kills_its_job_and_not_its_process(
    workers, start_peer, zookeeper, tenancy, tmp_path
):
    member = start_peer(vpeers=4, extra=["--workers", workers])
    await_peers(zookeeper, tenancy, 4)
    pids = workers_of(member)
    job, _ = wordcount_job(tmp_path, 50, "tests.integration.failing_fns:exits")
    line = killed_for(zookeeper, tenancy, job)
    assert line.endswith(f": SystemExit: {EXIT_CODE} (a task's code may not end its process)")
    assert member.process.poll() is None
    assert workers_of(member) == pids
    assert all(alive(pid) for pid in pids.values())
    assert " died " not in member.output()


def test_a_task_whose_code_ends_its_worker_kills_its_job_after_three_deaths(
    start_peer, zookeeper, tenancy, tmp_path
):
    """``os._exit`` cannot be caught: the worker running the task dies, and each time the job's
    task comes back to a worker it dies again. The third such death, wherever the task ran,
    kills the job with a reason naming the task and the exit; the member stays up, and so do
    its workers, started again."""
    member = start_peer(vpeers=4, extra=["--workers", "2"])
    await_peers(zookeeper, tenancy, 4)
    job, _ = wordcount_job(tmp_path, 50, "tests.integration.failing_fns:ends_its_process")
    line = killed_for(zookeeper, tenancy, job, timeout="240")
    limit = CodeDeaths().limit
    assert line.endswith(
        f": the task's code exits its process (exit code {EXIT_CODE}): {limit} worker "
        f"processes died running it within {CodeDeaths().window:g} s"
    ), line
    assert member.process.poll() is None
    wait_for(lambda: len(workers_of(member)) == 2 and all(map(alive, workers_of(member).values())),
             60, "both workers to listen again")  # fmt: skip
    out = member.output()
    assert len(re.findall(r"worker \d died \(", out)) == limit, out
    assert len(re.findall(rf"worker \d died \(exit code {EXIT_CODE}\)", out)) == limit
    assert len(re.findall(r"died running the code of task 'split' of job ", out)) == limit
