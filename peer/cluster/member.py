"""One member per machine: the machine's only ZooKeeper session, pulse and ring position, and
the worker processes that run its virtual peers (docs/architecture/member-and-workers.md;
`onyx peer start --workers N`).

The member is a peer group whose data plane runs no peer of its own: it keeps the membership
(gossip and monitoring over its own transport) and carries out its decisions, while its peers
are shared out among ``Workers``, each a process with a data plane and a site of its own
(peer.cluster.worker). ``MemberIncarnation`` announces each peer with its worker's site, feeds
each worker the entries it applies (peer.cluster.ipc), writes what the workers' peers want
appended, and answers their coordinators' commit-record calls from its store.

A worker that dies is reported for its peers with leave-cluster; as each is applied, the member
gives the peer's place to a fresh id in the worker it restarted in the meantime, announced once
that worker listens. A worker that stops reading what the member sends it is killed and goes
the same way: the member only ever queues messages for a worker (peer.cluster.worker_outbox),
so it never waits on one. When an identity ends its workers close its peers at once; the next
identity gives them fresh ones, and what the old peers still wanted appended is dropped.
The member's /metrics include its workers' (peer.cluster.worker_metrics). The workers are
started from the member's main thread and die with it.

A worker is judged only once it has said it is ready (its Hello): it reads nothing until its
transport is up, which takes seconds of imports and Aeron, so until then it is given the start
timeout instead, and killed if it has not said it by then. A worker killed so, or dead soon
after it started, is started again after a back-off that doubles (peer.cluster.supervision), and
until it is ready the member is not ready either (``not_ready``, read by /readyz). A worker that
dies while a job's code runs in it (its runners mark it, peer.code_marks) died of that
code: after a few such deaths the member kills the job, naming the task and how the worker
ended. A worker that the member killed, or that died while no job's code ran, blames no job.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from multiprocessing.connection import Connection
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from peer import code_marks
from peer.cluster import worker
from peer.cluster.group import Incarnation, new_id
from peer.cluster.ipc import (
    STORE_CALLS,
    Answer,
    Append,
    ApplyEntries,
    Assign,
    Call,
    CannotListen,
    Ended,
    Failure,
    Hello,
    Ping,
    Pong,
    Reset,
    Samples,
    Stop,
)
from peer.cluster.supervision import BackOff, CodeDeaths, how_it_ended, the_codes_doing
from peer.cluster.worker_metrics import RESTARTS, WORKER, MemberRegistry, WorkerScrapes
from peer.cluster.worker_outbox import WorkerOutbox
from peer.log.entries.jobs import kill_job
from peer.log.entries.virtual_peers import LEAVE_CLUSTER
from peer.log.entry import Entry, Transition
from peer.log.store import LogStore
from peer.messaging.aeron import TransportError

log = logging.getLogger(__name__)

STOP_TIMEOUT = 10.0
"""Seconds a stopping member waits for each worker to close before killing it."""
PING_EVERY = 1.0
"""Seconds between a member's pings of each worker: a worker that stops answering is killed
after the send timeout (peer.cluster.worker_outbox), even while the log is idle."""
RESTART_BACK_OFF = 2.0
"""The least time between two starts of one worker: one that dies as it starts is not started
again in a tight loop."""
SEND_TIMEOUT = 10.0
"""How long a worker may leave what the member sends it unread before it is killed and started
again (the member passes its session timeout: how long a member may be silent itself)."""
START_TIMEOUT = 60.0
"""How long a worker may take to say it is ready before it is killed and started again (the
member passes --worker-start-timeout): a worker starts in seconds, more on a loaded machine."""
BACK_OFF = BackOff()
"""How long a worker that failed to start waits before the next start."""
EXIT_WAIT = 2.0
"""How long the member waits for a worker whose pipe has closed to have exited, to learn how."""


@dataclass(frozen=True)
class Died:
    """The worker in ``slot`` (its ``generation``-th process) has gone."""

    slot: int
    generation: int


@dataclass(frozen=True)
class Death:
    """How a worker ended, and the mark its runners left (peer.code_marks): not 0 when
    it died in a job's code."""

    ended: str
    mark: int


@dataclass
class WorkerSlot:
    """One worker's place: its current process, the pipe to it, and its site once it listens."""

    process: Any = None
    conn: Connection | None = None
    outbox: WorkerOutbox | None = None
    """What the member has yet to send this process (peer.cluster.worker_outbox)."""
    killed: str | None = None
    """Why the member killed this process, if it did: it was "unresponsive" (it stopped reading
    or answering), or "not_ready" (it did not say it was ready within the start timeout)."""
    generation: int = 0
    site: str | None = None
    """Where this process listens, once it has said it is ready."""
    started: float = -math.inf
    ready_at: float | None = None
    pinged: float = -math.inf
    """When the member last asked this process whether it still reads."""
    due: float | None = None
    """When a worker that died is to be started again."""
    failures: int = 0
    """Failed starts in a row (peer.cluster.supervision.BackOff)."""
    refused: str | None = None
    """Why this process could not listen, if it said so."""
    word: Any = None
    """The words this process's runners mark a job's code in (peer.code_marks)."""

    def not_ready(self, slot: int) -> str | None:
        """Why this worker is not ready, in a line that stays the same while it waits."""
        if self.site is not None:
            return None
        if self.refused is not None:
            return self.refused
        if self.due is not None and self.failures > 1:
            return f"worker {slot} is to start again (it failed {self.failures} starts in a row)"
        if self.due is not None:
            return f"worker {slot} is to start again"
        pid = getattr(self.process, "pid", None)
        return f"worker {slot} (pid {pid}) has not said it is ready"

    def starting(self, now: float) -> float:
        """How long this process has been starting without saying it is ready."""
        if self.site is not None or self.due is not None or self.process is None:
            return 0.0
        return max(now - self.started, 0.0)


class Workers:
    """A member's worker processes: started, listened to, restarted, stopped. Their events (a
    hello, an entry to append, a death) queue for the member's thread, which ``wakeup`` rouses."""

    def __init__(self, count: int, spec: worker.WorkerSpec, store: LogStore,
                 send_timeout: float = SEND_TIMEOUT, *, start_timeout: float = START_TIMEOUT,
                 back_off: BackOff = BACK_OFF) -> None:  # fmt: skip
        self.spec, self.store, self.send_timeout = spec, store, send_timeout
        self.start_timeout, self.back_off = start_timeout, back_off
        self.slots = [WorkerSlot() for _ in range(count)]
        self.events: queue.SimpleQueue[tuple[int, int, Any]] = queue.SimpleQueue()
        self.wakeup: threading.Event | None = None
        self.context = multiprocessing.get_context("spawn")
        self.closing = False
        self.hello = threading.Event()
        self.deaths = CodeDeaths()
        """The deaths each job's code caused, across every worker and restart."""
        self.scrapes = WorkerScrapes(count, self._ask)
        """The workers' metrics, asked for at each scrape (peer.cluster.worker_metrics): only of
        the ready ones, as one still starting answers nothing."""

    @property
    def count(self) -> int:
        return len(self.slots)

    def start(self) -> None:
        """Start every worker, once each fixed port is free (peer.cluster.worker.check_port)."""
        for slot in range(self.count):
            worker.check_port(replace(self.spec, slot=slot))
        for slot in range(self.count):
            self.spawn(slot)

    def spawn(self, slot: int) -> None:
        """Start the worker of ``slot``. Only ever from the member's main thread: the kernel kills
        a worker when the thread that started it ends (PR_SET_PDEATHSIG)."""
        state = self.slots[slot]
        state.generation += 1
        state.site, state.due, state.started = None, None, time.monotonic()
        state.ready_at, state.refused = None, None
        state.word = self.context.RawArray(code_marks.WORD, code_marks.WORDS)
        conn, child = self.context.Pipe()
        calls, child_calls = self.context.Pipe()
        spec = replace(self.spec, slot=slot)
        process = self.context.Process(
            target=worker.main, args=(spec, child, child_calls, os.getpid(), state.word),
            name=f"onyx-worker-{slot}", daemon=True,
        )  # fmt: skip
        process.start()
        child.close()
        child_calls.close()
        state.process, state.conn, state.killed = process, conn, None
        state.outbox = WorkerOutbox(conn, f"worker {slot}", self.send_timeout)
        log.info("started worker %d (pid %d)", slot, process.pid)
        generation = state.generation
        threading.Thread(target=self._listen, args=(slot, generation, conn),
                         name=f"onyx-worker-{slot}-pipe", daemon=True).start()  # fmt: skip
        threading.Thread(target=self._serve, args=(slot, calls),
                         name=f"onyx-worker-{slot}-calls", daemon=True).start()  # fmt: skip

    def restart(self, slot: int) -> float:
        """Have the worker of ``slot`` started again (by ``restart_due``): at once after a good
        run (unless it started moments ago), after a back-off once it has failed to start
        (peer.cluster.supervision). The seconds until it starts."""
        state, now = self.slots[slot], time.monotonic()
        RESTARTS.labels(str(slot), state.killed or "died").inc()
        if state.outbox is not None:
            state.outbox.close()
        ready_for = None if state.ready_at is None else now - state.ready_at
        state.failures = self.back_off.failures(state.failures, ready_for)
        state.site, state.conn, state.outbox, state.ready_at = None, None, None, None
        state.due = max(now + self.back_off.delay(state.failures), state.started + RESTART_BACK_OFF)
        return state.due - now

    def death(self, slot: int) -> Death:
        """How the worker of ``slot``, whose pipe has closed, ended, and the mark it left: none
        when the member killed it, or a signal from outside did, as then no job's code is to
        blame."""
        state = self.slots[slot]
        state.process.join(EXIT_WAIT)
        exitcode = state.process.exitcode
        blamable = not state.killed and state.word is not None and the_codes_doing(exitcode)
        return Death(how_it_ended(exitcode), code_marks.blamed(state.word) if blamable else 0)

    def restart_due(self) -> float | None:
        """Start the workers whose time has come (from the member's main thread); the seconds
        until the next is due, if one is waiting."""
        now, waits = time.monotonic(), []
        for slot, state in enumerate(self.slots):
            if state.due is not None and state.due <= now and not self.closing:
                self.spawn(slot)
            elif state.due is not None:
                waits.append(state.due - now)
        return min(waits, default=None)

    def site(self, slot: int) -> str | None:
        return self.slots[slot].site

    def ready(self) -> list[int]:
        return [slot for slot, state in enumerate(self.slots) if state.site is not None]

    def not_ready(self) -> tuple[str, ...]:
        """Why each worker that is not ready is not, one line each."""
        found = (state.not_ready(slot) for slot, state in enumerate(self.slots))
        return tuple(line for line in found if line is not None)

    def refused(self) -> str | None:
        """Why a worker could not listen, if one said so."""
        return next((s.refused for s in self.slots if s.refused is not None), None)

    def wait_ready(self, timeout: float) -> bool:
        """Whether every worker listens within ``timeout`` s; False at once when one cannot."""
        deadline = time.monotonic() + timeout
        while len(self.ready()) < self.count and time.monotonic() < deadline:
            if self.refused() is not None:
                return False
            self.hello.wait(0.05)
            self.hello.clear()
        return len(self.ready()) == self.count

    def take(self) -> list[tuple[int, Any]]:
        """The events of the current workers since last asked, oldest first."""
        taken = []
        while not self.events.empty():
            slot, generation, event = self.events.get()
            if generation == self.slots[slot].generation:
                taken.append((slot, event))
        return taken

    def send(self, slot: int, message: Any) -> bool:
        """A message to a worker, queued without waiting; whether it was. One that has died is
        seen to by its Died event, one that does not read by ``kill_stuck``."""
        outbox = self.slots[slot].outbox
        return outbox is not None and outbox.put(message)

    def _ask(self, slot: int, message: Any) -> bool:
        return self.slots[slot].site is not None and self.send(slot, message)

    def kill_stuck(self) -> None:
        """Kill each worker that has not said it is ready within the start timeout, and each
        ready one that has stopped reading what the member sends, or answering its pings: its
        death is then seen to as any other's (its peers reported, the worker started again)."""
        now = time.monotonic()
        for slot, state in enumerate(self.slots):
            outbox = state.outbox
            if outbox is None or state.killed:
                continue
            if state.site is None:
                self._kill_if_not_ready(slot, state, now)
            else:
                self._kill_if_stuck(slot, state, outbox, now)

    def _kill_if_not_ready(self, slot: int, state: WorkerSlot, now: float) -> None:
        """A worker still starting reads nothing yet, so it is given the start timeout."""
        if now - state.started < self.start_timeout:
            return
        why = f"has not said it is ready within {self.start_timeout:g} s of its start"
        self._kill(slot, state, "not_ready", why)

    def _kill_if_stuck(
        self, slot: int, state: WorkerSlot, outbox: WorkerOutbox, now: float
    ) -> None:
        """``outbox`` is the worker's (``state.outbox``), which a started worker has."""
        if now - state.pinged >= PING_EVERY and not outbox.waiting_answer:
            state.pinged = now
            outbox.ask(Ping())
        if not outbox.stuck(now):
            return
        why = f"has not read what the member sent it for {self.send_timeout:g} s"
        self._kill(slot, state, "unresponsive", why)

    @staticmethod
    def _kill(slot: int, state: WorkerSlot, reason: str, why: str) -> None:
        """Kill a worker the member gave up on; ``reason`` is its restarts metric's label."""
        log.warning("worker %d (pid %s) %s; killing it", slot, state.process.pid, why)
        state.killed = reason
        state.process.kill()

    def _listen(self, slot: int, generation: int, conn: Connection) -> None:
        while True:
            try:
                event = conn.recv()
            except (EOFError, OSError):
                event = Died(slot, generation)
            except Exception as e:
                log.warning("worker %d sent what does not read: %s", slot, e)
                continue
            if isinstance(event, Samples):
                self.scrapes.answered(slot, event)
                continue
            if isinstance(event, Pong):
                outbox = self.slots[slot].outbox
                if outbox is not None and generation == self.slots[slot].generation:
                    outbox.answer()
                continue
            if not isinstance(event, (Hello, CannotListen, Append, Died)):
                log.warning("worker %d sent a message of no known kind: %.200r", slot, event)
                continue
            if generation == self.slots[slot].generation:
                self._heard(self.slots[slot], event)
            self.events.put((slot, generation, event))
            if self.wakeup is not None:
                self.wakeup.set()
            if isinstance(event, Died):
                return

    def _heard(self, state: WorkerSlot, event: Any) -> None:
        """A worker is ready once it says so, from the thread reading its pipe."""
        if isinstance(event, Hello):
            state.site, state.ready_at = event.site, time.monotonic()
            self.hello.set()
        elif isinstance(event, CannotListen):
            state.refused = event.reason
            self.hello.set()

    def _serve(self, slot: int, calls: Connection) -> None:
        """Answer the worker's commit-record calls from the member's store, one at a time."""
        while True:
            try:
                call = calls.recv()
            except (EOFError, OSError):
                return
            except Exception as e:
                log.warning("worker %d made a store call that does not read: %s", slot, e)
                continue
            try:
                calls.send(self._answer(slot, call))
            except OSError:
                return

    def _answer(self, slot: int, call: Any) -> Answer | Failure:
        if not isinstance(call, Call) or call.method not in STORE_CALLS:
            log.warning("worker %d made a store call of no known kind: %.200r", slot, call)
            return Failure(f"the member serves only {sorted(STORE_CALLS)}, not {call!r:.100}")
        try:
            return Answer(getattr(self.store, call.method)(*call.args))
        except Exception as e:
            return Failure(f"{call.method} for worker {slot}: {type(e).__name__}: {e}")

    def abort(self) -> None:
        """Kill every worker at once: the member is not going to run, and none has peers yet."""
        self.closing = True
        for state in self.slots:
            if state.outbox is not None:
                state.outbox.close()
            if state.process is not None:
                state.process.kill()
                state.process.join()

    def close(self) -> None:
        """Stop every worker; kill any that has not stopped in time. The workers stop side by
        side, so they share one deadline: a member never takes longer than STOP_TIMEOUT for them
        however many it has."""
        self.closing = True
        for slot in range(self.count):
            self.send(slot, Stop())
        deadline = time.monotonic() + STOP_TIMEOUT
        for slot, state in enumerate(self.slots):
            if state.process is None:
                continue
            state.process.join(max(0.0, deadline - time.monotonic()))
            if state.process.is_alive():
                log.warning("worker %d did not stop in time; killing it", slot)
                state.process.kill()
                state.process.join()
            if state.outbox is not None:
                state.outbox.close()


class MemberIncarnation(Incarnation):
    """An identity of a member whose peers run in its worker processes."""

    def __init__(self, *args: Any, workers: Workers, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.workers = workers
        workers.wakeup = self.wakeup
        self.slot_of = {peer: i % workers.count for i, peer in enumerate(self.peers)}
        """Which worker runs each peer of this identity."""
        self.retired: dict[str, int] = {}
        """Peers of a worker that died, until their leave-cluster gives their place to another."""
        self.unannounced: list[str] = []
        """Peers waiting for their worker to listen before they are announced."""
        self.applied: list[Entry] = []
        self.told: dict[int, tuple[str, ...]] = {}
        """The peers each worker was last given; a worker missing here needs a Reset."""

    def _local_peers(self) -> list[str]:
        return []

    def workers_not_ready(self) -> tuple[str, ...]:
        return self.workers.not_ready()

    def _announcements(self) -> list[Entry]:
        ready = [p for p in self.peers if self.workers.site(self.slot_of[p]) is not None]
        self.unannounced = [p for p in self.peers if p not in ready]
        return [self._announce(peer) for peer in ready]

    def _announce(self, peer: str) -> Entry:
        entry = super()._announce(peer)
        site = self.workers.site(self.slot_of[peer])
        return Entry(entry.fn, {**entry.args, "peer_site": site}) if site else entry

    def _step(self, stop: threading.Event) -> None:
        self.workers.kill_stuck()
        self._take_events()
        try:
            super()._step(stop)
        finally:
            self._feed()

    def _handle(self, t: Transition, started: float) -> None:
        super()._handle(t, started)
        self.applied.append(t.entry)

    def _sleep(self) -> float:
        waiting = self.workers.restart_due()
        return super()._sleep() if waiting is None else min(super()._sleep(), waiting)

    def _take_events(self) -> None:
        for slot, event in self.workers.take():
            match event:
                case Hello(site):
                    log.info("member %s: worker %d listens at %s", self.id, slot, site)
                    self._announce_ready(slot)
                case Append(entry, member) if isinstance(entry, Entry) and member == self.id:
                    self._write_work(entry)
                case Append(entry, member):
                    log.info("member %s dropped an entry of its earlier identity %.40s from "
                             "worker %d: %.200r", self.id, member, slot, entry)  # fmt: skip
                case CannotListen(reason):
                    log.error("member %s: %s", self.id, reason)
                case Died():
                    self._worker_died(slot)
                case _:
                    log.warning("member %s dropped what worker %d sent: %.200r",
                                self.id, slot, event)  # fmt: skip

    def _finish(self) -> None:
        """The workers close this identity's peers now: its data plane is gone, and the
        cluster is moving their work elsewhere."""
        super()._finish()
        for slot in range(self.workers.count):
            self.workers.send(slot, Ended(self.id))

    def _announce_ready(self, slot: int) -> None:
        now = [p for p in self.unannounced if self.slot_of.get(p) == slot]
        self.unannounced = [p for p in self.unannounced if p not in now]
        self.outbox.extend(self._announce(peer) for peer in now)

    def _worker_died(self, slot: int) -> None:
        """Report the announced peers of the dead worker and start another in its place; blame
        the job whose code it died in, if it did."""
        if self.workers.closing:
            return
        death = self.workers.death(slot)
        gone = sorted(p for p, s in self.slot_of.items() if s == slot and p not in self.unannounced)
        for peer in gone:
            del self.slot_of[peer]
            self.retired[peer] = slot
            self.outbox.append(LEAVE_CLUSTER.entry(id=peer, group=self.id))
        self.told.pop(slot, None)
        wait = self.workers.restart(slot)
        log.warning("member %s: worker %d died (%s); reporting its peers %s and starting it "
                    "again %s", self.id, slot, death.ended, gone, _when(wait))  # fmt: skip
        self._blame(slot, death)
        self.workers.restart_due()

    def _blame(self, slot: int, death: Death) -> None:
        """A worker that died in a job's code counts against the job; the job is killed once
        its code has ended too many (peer.cluster.supervision.CodeDeaths)."""
        running = code_marks.running(death.mark, self.replica)
        if running is None:
            return
        job, task = running
        deaths = self.workers.deaths
        log.warning("member %s: worker %d died running the code of task %r of job %s",
                    self.id, slot, task, job)  # fmt: skip
        if not deaths.to_blame(job, time.monotonic()):
            return
        reason = (
            f"job {job!r}: task {task!r}: the task's code exits its process ({death.ended}):"
            f" {deaths.limit} worker processes died running it within {deaths.window:g} s"
        )
        log.error("%s; killing the job", reason)
        self.outbox.append(kill_job(job, reason))

    def restart_virtual_peer(self, peer: str) -> None:
        """The peer's place goes to a fresh id in the same worker."""
        if peer not in self.peers:
            return
        slot = self.retired.pop(peer, None)
        if slot is None:
            slot = self.slot_of.pop(peer, 0)
        fresh = new_id()
        self.peers = [fresh if p == peer else p for p in self.peers]
        self.slot_of[fresh] = slot
        self.unannounced.append(fresh)
        if self.workers.site(slot) is not None:
            self._announce_ready(slot)

    def _feed(self) -> None:
        """Bring every listening worker up to this identity's replica and its peers."""
        applied, self.applied = self.applied, []
        for slot in self.workers.ready():
            peers = tuple(sorted(p for p, s in self.slot_of.items() if s == slot))
            if slot not in self.told:
                if not self._start_over(slot, peers):
                    continue
            else:
                if applied:
                    self.workers.send(slot, ApplyEntries(tuple(applied)))
                if peers != self.told[slot]:
                    self.workers.send(slot, Assign(peers))
            self.told[slot] = peers

    def _start_over(self, slot: int, peers: tuple[str, ...]) -> bool:
        """Hand a worker that starts over the last settled replica, then the entries applied
        since it, as one ``ApplyEntries``; whether it went.

        A worker applies every entry itself with ``apply_entry``, the classic apply, allocation
        and all, so the entries fed to it in log order (the order transitions come out of any
        applier) give it exactly the replicas of a classic member. The one replica handed over
        whole must be one with nothing lagging: with allocations in the background this
        identity's ``replica`` may miss an allocation its entries asked for, which the worker
        would then never compute. Holding entries back until their allocations land, or running
        the pipeline in every worker, would do the same with more state and more threads."""
        since: tuple[Entry, ...]
        if self.applier is None:
            base, since = self.replica, ()
        else:
            base, since = self.applier.complete, self.applier.since
        if not self.workers.send(slot, Reset(self.id, base.to_json(), peers)):
            return False
        return not since or self.workers.send(slot, ApplyEntries(since))


def _when(wait: float) -> str:
    return "at once" if wait <= 0 else f"in {wait:.3g} s"


def start(count: int, spec: worker.WorkerSpec, store: LogStore, timeout: float = START_TIMEOUT,
          send_timeout: float = SEND_TIMEOUT) -> Workers:  # fmt: skip
    """``count`` workers started, waited for until they listen (a member announces a peer only
    with its worker's site, so this spares the ring a join without peers), at most the start
    timeout. A fixed port that is taken is a TransportError naming the worker, the member's
    start refused as a taken ``--port`` is."""
    workers = Workers(count, spec, store, send_timeout, start_timeout=timeout)
    workers.start()
    if not workers.wait_ready(timeout):
        refused = workers.refused()
        if refused is not None:
            workers.abort()
            raise TransportError(refused)
        log.warning("not every worker listens after %g s; their peers join once they do", timeout)
    return workers


class WorkerStates:
    """The member's gauges of its workers' starts, read off their slots at each scrape."""

    def __init__(self, workers: Workers) -> None:
        self.workers = workers

    def collect(self) -> list[Metric]:
        ready = GaugeMetricFamily(
            "onyx_worker_ready",
            "1 once the worker has said it is ready (its transport listens); 0 while it starts, "
            "or waits to be started again",
            labels=[WORKER],
        )
        starting = GaugeMetricFamily(
            "onyx_worker_starting_seconds",
            "How long the worker's current process has been starting without saying it is "
            "ready (0 once it has); it is killed at the start timeout",
            labels=[WORKER],
        )
        now = time.monotonic()
        for slot, state in enumerate(self.workers.slots):
            ready.add_metric([str(slot)], float(state.site is not None))
            starting.add_metric([str(slot)], state.starting(now))
        return [ready, starting]


def registry(workers: Workers) -> CollectorRegistry:
    """Where a member's /metrics come from: its own, its workers' with their slots
    (peer.cluster.worker_metrics), and how their starts go (``WorkerStates``)."""
    found = MemberRegistry(workers.scrapes)
    found.register(WorkerStates(workers))
    return found


def incarnations(workers: Workers) -> Callable[..., Incarnation]:
    """What a member's PeerGroup makes each identity with."""
    return partial(MemberIncarnation, workers=workers)
