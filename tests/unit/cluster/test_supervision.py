"""How a member restarts its workers and blames jobs for their deaths, without processes: the
back-off schedule, the count of a job's deaths, how a process ended in words, which job and task
a mark names, and a member's workers judged by it (a worker still starting is given the start
timeout, never pinged; one that keeps failing waits longer each time)."""

from __future__ import annotations

import itertools
import multiprocessing
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from multiprocessing import Pipe
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyrsistent import pmap

from peer import code_marks
from peer.cluster import member
from peer.cluster.ipc import CannotListen
from peer.cluster.member import RESTART_BACK_OFF, Workers
from peer.cluster.supervision import BackOff, CodeDeaths, how_it_ended, the_codes_doing
from peer.cluster.worker import WorkerSpec
from peer.cluster.worker_outbox import WorkerOutbox
from peer.job.spec import Job, Task
from peer.log.replica import Replica
from peer.log.stores.memory import MemoryLog
from peer.messaging.aeron import TransportError
from tests.support import free_udp_ports

SPEC = WorkerSpec(slot=0, tenancy="t", checkpoints="/nonexistent")


@given(st.integers(0, 200))
def test_a_back_off_never_shrinks_as_failures_mount_and_never_passes_its_cap(failures):
    back_off = BackOff()
    assert 0 <= back_off.delay(failures) <= back_off.delay(failures + 1) <= back_off.cap


@given(st.integers(2, 30))
def test_a_back_off_doubles_until_its_cap(failures):
    back_off = BackOff(first=2.0, cap=60.0)
    assert back_off.delay(failures + 1) == min(back_off.cap, 2 * back_off.delay(failures))


def test_the_first_failure_restarts_at_once_then_the_waits_double():
    assert [BackOff(first=2.0, cap=60.0).delay(n) for n in range(1, 9)] == [
        0, 2, 4, 8, 16, 32, 60, 60,
    ]  # fmt: skip


@given(st.integers(0, 50), st.none() | st.floats(0, 1000))
def test_a_steady_run_starts_the_count_afresh(before, ready_for):
    back_off = BackOff(steady=30.0)
    after = back_off.failures(before, ready_for)
    steady = ready_for is not None and ready_for >= 30.0
    assert after == (1 if steady else before + 1)


def test_a_job_is_blamed_at_its_third_death_within_the_window_and_counts_afresh_after():
    deaths = CodeDeaths(limit=3, window=600.0)
    assert [deaths.to_blame("j", t) for t in (0.0, 100.0)] == [False, False]
    assert not deaths.to_blame("other", 150.0)
    assert deaths.to_blame("j", 200.0)
    assert not deaths.to_blame("j", 201.0)


@given(st.lists(st.floats(0, 10_000), min_size=1, max_size=20))
def test_only_deaths_within_the_window_count(times):
    times = sorted(times)
    deaths = CodeDeaths(limit=100, window=600.0)
    counts = [deaths.died("j", t) for t in times]
    assert counts[-1] == sum(1 for t in times if t > times[-1] - 600.0)


@pytest.mark.parametrize(
    ("exitcode", "words"),
    [
        (3, "exit code 3"),
        (0, "exit code 0"),
        (-signal.SIGKILL, "killed by SIGKILL"),
        (-signal.SIGSEGV, "killed by SIGSEGV"),
        (-200, "killed by signal 200"),
        (None, "its exit code unknown"),
    ],
)
def test_how_a_process_ended(exitcode, words):
    assert how_it_ended(exitcode) == words


JOB = Job(
    workflow=(("in", "f"), ("f", "out")),
    catalog=(
        Task("in", "input", plugin="peer.plugins.memory:input"),
        Task("f", "function", fn="tests.unit.runtime.runtime_fns:double"),
        Task("out", "output", plugin="peer.plugins.null:output"),
    ),
    id="j",
)
REPLICA = Replica(jobs=pmap({"j": JOB}), short_ids=pmap({"j": 7, "p1": 3, "p2": 8}))


@given(st.sampled_from(["in", "f", "out"]))
def test_a_mark_names_the_job_and_task_whose_code_ran(task):
    index = [t.name for t in JOB.catalog].index(task)
    assert code_marks.running(code_marks.number(7, index), REPLICA) == ("j", task)


@given(st.integers(0, 1 << 20), st.integers(0, (1 << code_marks.TASK_BITS) - 1))
def test_a_mark_is_never_the_word_of_no_code(job, task):
    value = code_marks.number(job, task)
    assert value is not None
    assert value > 0


def test_a_mark_a_worker_enters_is_read_by_its_member_and_cleared_as_it_leaves(monkeypatch):
    monkeypatch.setattr(code_marks._PROCESS, "word", None)
    word = multiprocessing.get_context("spawn").RawArray(code_marks.WORD, 1)
    code_marks.install(word)
    with code_marks.mark_for(7, 1):
        seen = word[0]
    assert code_marks.running(seen, REPLICA) == ("j", "f")
    assert word[0] == 0


def test_a_spark_pools_threads_mark_each_in_a_word_of_its_own(monkeypatch):
    """Two pool threads run the same task's fn at once, each marking its own word while the
    group thread's stays clear; a death then blames that task, and nothing is left marked."""
    monkeypatch.setattr(code_marks._PROCESS, "word", None)
    monkeypatch.setattr(code_marks, "_THREADS", threading.local())
    monkeypatch.setattr(code_marks, "_CLAIMED", itertools.count(1))
    words = multiprocessing.get_context("spawn").RawArray(code_marks.WORD, code_marks.WORDS)
    code_marks.install(words)
    mark = code_marks.mark_for(7, 1).elsewhere()
    inside = threading.Barrier(3)

    def fn() -> None:
        with mark:
            inside.wait(timeout=10)  # both threads are in the fn, the test looks
            inside.wait(timeout=10)  # the test has looked

    with ThreadPoolExecutor(2) as pool:
        running = [pool.submit(fn) for _ in range(2)]
        inside.wait(timeout=10)
        seen = list(words)
        inside.wait(timeout=10)
        for future in running:
            future.result()
    value = code_marks.number(7, 1)
    assert seen[0] == 0
    assert sorted(seen[1:]) == [0] * (code_marks.WORDS - 3) + [value, value]
    assert code_marks.running(code_marks.blamed(seen), REPLICA) == ("j", "f")
    assert list(words) == [0] * code_marks.WORDS


@pytest.mark.parametrize(
    ("marks", "blamed"),
    [
        ((0, 0, 0), 0),
        ((0, 5, 0), 5),
        ((5, 5, 0), 5),  # the group thread submitted, the pool's runs the same task's fn
        ((5, 0, 9), 0),  # two codes at once: which one ended the process, nobody can tell
    ],
)
def test_a_death_blames_the_one_code_marked_and_none_of_several(marks, blamed):
    assert code_marks.blamed(marks) == blamed


@pytest.mark.parametrize(
    "value",
    [
        0,  # no code ran: a kill from outside blames nobody
        code_marks.number(3, 0),  # a short id of a peer, not of a job
        code_marks.number(99, 0),  # a job the replica no longer knows
        code_marks.number(7, 5),  # a task the job does not have
    ],
)
def test_a_mark_that_names_no_current_job_blames_nobody(value):
    assert code_marks.running(value, REPLICA) is None


class Process(SimpleNamespace):
    """A worker process that is only killed."""

    def kill(self) -> None:
        self.killed = True


def starting(workers: Workers, slot: int, since: float) -> WorkerOutbox:
    """Give ``slot`` a process started ``since`` s ago that has not said it is ready."""
    state = workers.slots[slot]
    conn, _ = Pipe()
    state.process, state.killed = Process(pid=1000 + slot, killed=False), None
    state.outbox = WorkerOutbox(conn, f"worker {slot}", workers.send_timeout)
    state.started, state.site = time.monotonic() - since, None
    return state.outbox


def test_a_worker_still_starting_is_not_pinged_and_is_killed_only_at_the_start_timeout():
    workers = Workers(2, SPEC, MemoryLog().session(), send_timeout=1.0, start_timeout=30.0)
    young, old = starting(workers, 0, 10.0), starting(workers, 1, 31.0)
    workers.kill_stuck()
    assert (young.asked, old.asked) == (0, 0)
    assert not workers.slots[0].process.killed
    assert workers.slots[1].process.killed
    assert workers.slots[1].killed == "not_ready"
    assert workers.not_ready() == (
        "worker 0 (pid 1000) has not said it is ready",
        "worker 1 (pid 1001) has not said it is ready",
    )


class Counted(Workers):
    """Workers whose starts are only counted."""

    def spawn(self, slot: int) -> None:
        state = self.slots[slot]
        state.generation += 1
        state.due, state.started = None, time.monotonic()


def test_a_worker_that_keeps_failing_to_start_waits_longer_each_time_and_says_why():
    workers = Counted(1, SPEC, MemoryLog().session())
    waits = []
    for _ in range(4):
        workers.spawn(0)
        workers.slots[0].started -= RESTART_BACK_OFF  # long enough ago for the least gap
        waits.append(workers.restart(0))
        assert workers.ready() == []
        workers.slots[0].due = None
    assert waits == [BackOff().delay(n) for n in (1, 2, 3, 4)]
    workers.slots[0].due = time.monotonic() + 10
    assert workers.not_ready() == ("worker 0 is to start again (it failed 4 starts in a row)",)


def test_a_worker_that_ran_steadily_is_restarted_at_once():
    workers = Counted(1, SPEC, MemoryLog().session())
    workers.slots[0].failures = 5
    workers.spawn(0)
    workers.slots[0].started -= 100
    workers.slots[0].site, workers.slots[0].ready_at = "127.0.0.1:1", time.monotonic() - 60
    assert workers.restart(0) == 0
    assert workers.slots[0].failures == 1


def test_a_worker_port_in_use_refuses_the_members_start_before_any_worker_starts():
    base = free_udp_ports(2)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", base + 1))
        with pytest.raises(TransportError) as refused:
            member.start(2, replace(SPEC, port_base=base), MemoryLog().session())
    assert str(refused.value) == (
        f"worker 1 cannot receive segments on 127.0.0.1:{base + 1} "
        f"(--bind, --worker-port-base {base}): Address already in use"
    )


def test_a_worker_that_cannot_listen_is_not_ready_and_says_why():
    workers = Counted(1, SPEC, MemoryLog().session())
    workers.spawn(0)
    reason = "worker 0: cannot receive segments on 127.0.0.1:7000: Address already in use"
    workers._heard(workers.slots[0], CannotListen(reason))
    assert workers.refused() == reason
    assert workers.not_ready() == (reason,)
    assert not workers.wait_ready(0)


@pytest.mark.parametrize(
    ("exitcode", "blamable"),
    [(3, True), (0, True), (-signal.SIGSEGV, True), (-signal.SIGABRT, True),
     (-signal.SIGKILL, False), (-signal.SIGTERM, False), (-signal.SIGINT, False), (None, False)],
)  # fmt: skip
def test_only_an_exit_or_a_crash_is_the_codes_doing_never_a_kill_from_outside(exitcode, blamable):
    """An operator's kill -9 or the OOM killer ends a worker whatever code it runs: no job is
    blamed, so three such kills never kill a job."""
    assert the_codes_doing(exitcode) is blamable
