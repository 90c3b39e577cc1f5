"""A worker process of a member: its share of the member's virtual peers, in a data plane with
a transport (a site) of its own, and no ZooKeeper session.

The member feeds it the entries it reads (peer.cluster.ipc); the worker applies them to its own
replica with the same pure function every member uses, and hands its data plane the replica and
its peers, exactly as a single-process group does. Whatever its peers want written goes back to
the member, and so do its coordinators' commit records (``StoreCalls``).

A worker never outlives its member: the kernel kills it when the member dies (PR_SET_PDEATHSIG),
and it stops when the member closes its pipe. Signals meant for the member (a terminal's Ctrl-C,
systemd's SIGTERM to the whole unit) are left to the member, which stops its workers itself.

A worker whose port is taken says so (``CannotListen``) and exits, instead of dying with a
traceback.
Its runners mark, in a word shared with the member, which job's code runs at each moment
(peer.code_marks): a worker that a job's code kills is that job's failure.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import queue
import signal
import socket
import sys
import threading
from dataclasses import dataclass, field
from functools import partial
from multiprocessing.connection import Connection
from typing import Any

from prometheus_client import REGISTRY

from peer import code_marks, log_output
from peer.cluster.ipc import (
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
    Scrape,
    Stop,
)
from peer.cluster.switchboard import Switchboard
from peer.cluster.worker_metrics import families, worker_state
from peer.log.apply import apply_entry
from peer.log.entry import Entry
from peer.log.replica import Replica
from peer.log.store import StoreError
from peer.messaging.aeron import AeronTransport, TransportError
from peer.runtime import collector
from peer.runtime.checkpoints import CheckpointStorage
from peer.runtime.dataplane import DataPlane, DataPlaneConfig
from peer.spark import session as spark_session

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
EXIT_GRACE = 10.0
"""Seconds a worker whose member has closed its pipe has to close before it exits anyway."""


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker needs to start: its slot among the member's workers and its settings."""

    slot: int
    tenancy: str
    checkpoints: str
    bind: str = "127.0.0.1"
    port_base: int | None = None
    """Worker i receives on UDP port ``port_base`` + i, so a firewall can name the range; None
    picks a free port each start."""
    aeron_dir: str | None = None
    mtu: int | None = None
    dataplane: DataPlaneConfig = field(default_factory=DataPlaneConfig)
    idle_wait: float = 0.01
    """As the group's (peer.cluster.group.GroupConfig.idle_wait)."""
    log_level: str = "info"
    log_format: str = "text"
    spark_master: str = spark_session.DEFAULT_MASTER
    spark_conf: tuple[tuple[str, str], ...] = ()

    @property
    def port(self) -> int | None:
        return None if self.port_base is None else self.port_base + self.slot


def check_port(spec: WorkerSpec) -> None:
    """Whether the worker's fixed port is free now, as the member's own ``--port`` is checked
    (peer.messaging.aeron): a port in use, most often by another member given the same
    ``--worker-port-base``, is refused in one line naming the worker, not met by a worker that
    dies with a page of the driver's call sites."""
    if spec.port is None:
        return
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((spec.bind, spec.port))
    except OSError as e:
        raise TransportError(
            f"worker {spec.slot} cannot receive segments on {spec.bind}:{spec.port} "
            f"(--bind, --worker-port-base {spec.port_base}): {e.strerror or e}"
        ) from None


def die_with(parent: int) -> None:
    """Have the kernel kill this process when its parent dies; if it died already, exit now."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


class StoreCalls:
    """The commit-record calls of the store, made by the member on the worker's behalf: what a
    worker's coordinators get as their store. Calls come from several threads; one at a time
    goes over the pipe."""

    def __init__(self, conn: Connection) -> None:
        self.conn, self.lock = conn, threading.Lock()

    def _call(self, method: str, *args: Any) -> Any:
        with self.lock:
            try:
                self.conn.send(Call(method, args))
                reply = self.conn.recv()
            except (EOFError, OSError) as e:
                raise StoreError(f"the member is gone; cannot {method}: {e}") from None
        if isinstance(reply, Failure):
            raise StoreError(reply.message)
        return reply.value

    def read_commit(self, job: str) -> tuple[bytes | None, int]:
        return self._call("read_commit", job)

    def write_commit(self, job: str, data: bytes, expected: int) -> int | None:
        return self._call("write_commit", job, data, expected)

    def delete_commit(self, job: str) -> None:
        self._call("delete_commit", job)


class Worker:
    """The worker's loop: take what the member sent, keep the data plane in step, work."""

    def __init__(self, spec: WorkerSpec, conn: Connection, calls: Connection,
                 transport: Any, storage: CheckpointStorage | None) -> None:  # fmt: skip
        self.spec, self.conn, self.transport, self.storage = spec, conn, transport, storage
        self.store = StoreCalls(calls)
        self.inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.wakeup, self.gone = threading.Event(), threading.Event()
        self.send_lock = threading.Lock()
        self.member: str | None = None
        self.replica = Replica()
        self.peers: tuple[str, ...] = ()
        self.switchboard: Switchboard | None = None
        """The member's current identity's data plane here, and the transport's frames into it."""

    def run(self) -> None:
        threading.Thread(target=self._read, name="onyx-worker-pipe", daemon=True).start()
        self._send(Hello(self.transport.address))
        log.info("worker %d (pid %d) listens at %s",
                 self.spec.slot, os.getpid(), self.transport.address)  # fmt: skip
        try:
            while not self.gone.is_set():
                self.wakeup.clear()
                if self._take() and self.switchboard is not None:
                    self.switchboard.sync(self.replica, list(self.peers))
                self._work()
        finally:
            if self.switchboard is not None:
                self.switchboard.close()

    def _read(self) -> None:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                self.gone.set()
                self.wakeup.set()
                return
            if isinstance(message, Scrape):
                self._answer(message)
                continue
            if isinstance(message, Ping):
                self._send(Pong())
                continue
            self.inbox.put(message)
            self.wakeup.set()

    def _answer(self, scrape: Scrape) -> None:
        """Answered here, on the reader's thread: a scrape never waits for a batch to finish."""
        switchboard = self.switchboard
        coordinators = {} if switchboard is None else switchboard.dataplane.coordinators
        found = families(REGISTRY, worker_state(coordinators, self.transport))
        self._send(Samples(scrape.request, found))

    def _take(self) -> bool:
        """Apply what the member sent; True when the replica or the peers changed."""
        changed = False
        while not self.inbox.empty():
            message = self.inbox.get()
            match message:
                case Reset(member, replica, peers):
                    self._reset(member, Replica.from_json(replica), peers)
                case ApplyEntries(entries):
                    for entry in entries:
                        self.replica = apply_entry(self.replica, entry).new
                case Assign(peers):
                    self.peers = peers
                case Ended(member):
                    self._end(member)
                case Stop():
                    self.gone.set()
                case _:
                    log.warning("worker %d dropped a message it does not know: %.200r",
                                self.spec.slot, message)  # fmt: skip
                    continue
            changed = True
        return changed

    def _reset(self, member: str, replica: Replica, peers: tuple[str, ...]) -> None:
        """A new identity of the member starts a new data plane: the old one's peers are gone."""
        if member != self.member:
            if self.switchboard is not None:
                self.switchboard.close()
            self.member = member
            write = partial(self._write, member)
            dataplane = DataPlane(member, self.transport, write, self.spec.dataplane,
                                  store=self.store, storage=self.storage)  # fmt: skip
            self.switchboard = Switchboard(member, self.transport, dataplane)
        self.replica, self.peers = replica, peers

    def _end(self, member: str) -> None:
        """The member's identity has ended: its peers stop now, not when the next one's Reset
        comes (which waits for the member to rejoin)."""
        if member == self.member and self.switchboard is not None:
            log.info("worker %d: member %s has ended; closing its peers", self.spec.slot, member)
            self.switchboard.close()
            self.switchboard, self.member, self.peers = None, None, ()

    def _work(self) -> None:
        """Drive the data plane until the member sends something, backing off while idle."""
        idle = 0.0
        while not self.wakeup.is_set() and not self.gone.is_set():
            if self.switchboard is not None and self.switchboard.step():
                idle = 0.0
                continue
            idle = min(max(2 * idle, 0.0005), self.spec.idle_wait)
            self.wakeup.wait(
                None if self.switchboard is None else min(idle, self.switchboard.patience())
            )

    def _write(self, member: str, entry: Entry) -> None:
        self._send(Append(entry, member))

    def _send(self, message: Any) -> None:
        """From the worker's thread, its coordinators' and its pipe reader's, one at a time."""
        try:
            with self.send_lock:
                self.conn.send(message)
        except OSError:
            self.gone.set()
            self.wakeup.set()


def listen(spec: WorkerSpec, conn: Connection) -> AeronTransport:
    """The worker's transport; one that cannot listen is told to the member (``CannotListen``),
    which says why, and the worker exits."""
    try:
        check_port(spec)
        return AeronTransport(
            aeron_dir=spec.aeron_dir, host=spec.bind, port=spec.port, mtu=spec.mtu
        )
    except TransportError as e:
        reason = str(e) if str(e).startswith("worker ") else f"worker {spec.slot}: {e}"
        with contextlib.suppress(OSError):
            conn.send(CannotListen(reason))
        sys.exit(1)


def main(
    spec: WorkerSpec, conn: Connection, calls: Connection, parent: int, word: Any = None
) -> None:
    """The worker process's entry point (started with the 'spawn' method). ``word`` is where
    its runners mark which job's code runs, shared with the member (peer.code_marks)."""
    die_with(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    log_output.configure(spec.log_level, spec.log_format)
    if word is not None:
        code_marks.install(word)
    spark_session.configure(spec.spark_master, dict(spec.spark_conf))
    transport = listen(spec, conn)
    storage = CheckpointStorage(spec.checkpoints, spec.tenancy)
    collector.tune()
    try:
        Worker(spec, conn, calls, transport, storage).run()
    finally:
        backstop = threading.Timer(EXIT_GRACE, os._exit, (1,))
        backstop.daemon = True
        backstop.start()
        spark_session.stop()
        storage.close()
        transport.close()
        log.info("worker %d stopped", spec.slot)
