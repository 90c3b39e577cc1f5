"""A peer group's data plane: the task runners of its virtual peers and the frames between them.

The log says who works on what; after every batch of entries the group hands the replica to
``sync``, which keeps one runner per (peer, job, allocation version) and drops the others, so a
reallocation restarts a job's tasks everywhere at once. ``step`` does one round of work: take in
frames, step every runner, offer queued frames. Frames carry the allocation version: those of a
stale allocation are dropped, those of an allocation this group has not read yet wait for it.

Segments for a peer of this same group never leave the process. Frames for other groups queue
per destination and are offered in order; a refused offer (back-pressure, or a publication not
yet connected) leaves the frame at the head of its queue for the next round, and while queues
are long the runners stop producing, so pressure travels upstream instead of into memory.

Liveness: the group sends a heartbeat to every group it shares a job with (any frame counts as
one, so a heartbeat refused under back-pressure is no loss), and reports with
leave-cluster the peers of a group it has not heard from for ``peer_timeout`` seconds. A group
that finds it has not run for a while itself (stopped, swapped out) restarts those clocks
instead: the silence was its own.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from peer.log.entries.jobs import COMPLETE_JOB, KILL_JOB
from peer.log.entries.virtual_peers import LEAVE_CLUSTER
from peer.log.entry import Entry
from peer.log.replica import Replica
from peer.messaging.frame import FrameError, Header, MessageType, decode, encode
from peer.runtime.routing import Router, conditions, routes
from peer.runtime.task import TaskContext, TaskFailed, TaskRunner

log = logging.getLogger(__name__)

RunnerKey = tuple[str, str, int]
"""(peer, job, allocation version)"""


class Transport(Protocol):
    address: str

    def offer(self, address: str, frame: bytes) -> bool: ...

    def poll(self, handler: Callable[[bytes], None], limit: int = 64) -> int: ...

    def forget(self, address: str) -> None: ...


@dataclass(frozen=True)
class DataPlaneConfig:
    heartbeat_interval: float = 0.5
    peer_timeout: float = 5.0
    """Seconds without a heartbeat before a connected group's peers are reported gone."""
    max_queued: int = 64
    """Frames queued for one destination before this group's runners stop producing."""


class DataPlane:
    def __init__(
        self,
        group: str,
        transport: Transport | None,
        write: Callable[[Entry], None],
        config: DataPlaneConfig | None = None,
    ) -> None:
        self.group, self.transport, self.write = group, transport, write
        self.config = config or DataPlaneConfig()
        self.replica = Replica()
        self.runners: dict[RunnerKey, TaskRunner] = {}
        self.by_short: dict[int, TaskRunner] = {}
        self.waiting: dict[int, list[tuple[Header, list[Any]]]] = defaultdict(list)
        self.queues: dict[str, deque[bytes]] = defaultdict(deque)
        self.heard: dict[str, float] = {}
        self.reported: set[str] = set()
        self.next_heartbeat = 0.0
        self.peer_sites: dict[str, str] = {}
        self.last_round = time.monotonic()
        self.short_groups: dict[int, str] = {}

    # -- following the log ----------------------------------------------------------------------

    def sync(self, replica: Replica, mine: list[str]) -> None:
        self.replica = replica
        wanted = self._wanted(replica, mine)
        for key in sorted(set(self.runners) - set(wanted)):
            self.runners.pop(key).close()
        for key in sorted(set(wanted) - set(self.runners)):
            self.runners[key] = TaskRunner(self._context(replica, *key, wanted[key]))
        self.by_short = {replica.short_ids[key[0]]: r for key, r in self.runners.items()}
        self.peer_sites = {
            p: replica.sites[g]
            for g in replica.groups
            if g in replica.sites
            for p in replica.group_peers.get(g, ())
        }
        self.short_groups = {
            replica.short_ids[p]: g
            for g in replica.groups
            for p in replica.group_peers.get(g, ())
            if p in replica.short_ids
        }
        self._release_waiting(replica)
        self._drop_queues(replica)
        self._track_liveness(replica)

    def _release_waiting(self, replica: Replica) -> None:
        """Frames that arrived before this group read their allocation: hand over those of a
        current runner, keep those still ahead of the log, drop the stale and those of jobs
        that have finished (short ids are never reused, so a smaller unknown one is gone)."""
        versions = {replica.short_ids[j]: v for j, v in replica.allocation_versions.items()}
        held, self.waiting = self.waiting, defaultdict(list)
        for short, frames in held.items():
            runner = self.by_short.get(short)
            for header, segments in frames:
                current = versions.get(header.job)
                if runner is not None and header.allocation_version == runner.ctx.version:
                    self._hand(runner, header, segments)
                elif (current is None and header.job >= replica.next_short_id) or (
                    current is not None and header.allocation_version > current
                ):
                    self.waiting[short].append((header, segments))

    def _drop_queues(self, replica: Replica) -> None:
        live = set(replica.sites.values())
        for site in sorted(set(self.queues) - live):
            del self.queues[site]
            if self.transport is not None:
                self.transport.forget(site)

    @staticmethod
    def _wanted(replica: Replica, mine: list[str]) -> dict[RunnerKey, str]:
        wanted = {}
        for peer in mine:
            placed = replica.task_of(peer)
            if placed is not None and peer in replica.short_ids:
                job, task = placed
                wanted[(peer, job, replica.allocation_versions[job])] = task
        return wanted

    def _context(
        self, replica: Replica, peer: str, job_id: str, version: int, task: str
    ) -> TaskContext:
        job, allocation = replica.jobs[job_id], replica.allocations[job_id]
        peers = allocation[task]
        upstream = [
            p for parent, child in job.workflow if child == task for p in allocation[parent]
        ]
        job_short, source = replica.short_ids[job_id], replica.short_ids[peer]

        def send(to: str, segments: list[Any]) -> None:
            header = Header(MessageType.BATCH, version, source, replica.short_ids[to], 0, job_short)
            self._send(to, header, segments)

        def send_done(to: str) -> None:
            header = Header(MessageType.DONE, version, source, replica.short_ids[to], 0, job_short)
            self._send(to, header, [])

        def complete() -> None:
            self.write(COMPLETE_JOB.entry(id=job_id, peer=peer, version=version))

        return TaskContext(
            job=job,
            task=job.task(task),
            peer=peer,
            version=version,
            slot=peers.index(peer),
            slots=len(peers),
            upstream=frozenset(replica.short_ids[p] for p in upstream),
            router=Router(routes(job, task, allocation), conditions(job, task)),
            send=send,
            send_done=send_done,
            congested=self._congested,
            complete=complete,
        )

    # -- one round ------------------------------------------------------------------------------

    def step(self) -> bool:
        busy = self.transport.poll(self._receive) > 0 if self.transport else False
        for key, runner in list(self.runners.items()):
            try:
                busy = runner.step() or busy
            except TaskFailed as e:
                self._fail(key, e)
        busy = self._flush() or busy
        self._heartbeat()
        return busy

    def _fail(self, key: RunnerKey, error: TaskFailed) -> None:
        log.error("%s; killing the job", error)
        self.runners.pop(key).close()
        self.write(KILL_JOB.entry(id=key[1]))

    def _congested(self) -> bool:
        return any(len(q) >= self.config.max_queued for q in self.queues.values())

    # -- frames ---------------------------------------------------------------------------------

    def _send(self, to: str, header: Header, segments: list[Any]) -> None:
        local = self.by_short.get(header.destination)
        if local is not None:
            self._hand(local, header, segments)
            return
        site = self.peer_sites.get(to)
        if site is None:
            raise RuntimeError(f"peer {to} is in a group that announced no site to send to")
        self.queues[site].append(encode(header, segments))

    def _flush(self) -> bool:
        sent = False
        for site, queue in self.queues.items():
            while queue and self.transport.offer(site, queue[0]):
                queue.popleft()
                sent = True
        return sent

    def _receive(self, frame: bytes) -> None:
        try:
            header, segments = decode(frame)
        except FrameError as e:
            log.warning("group %s dropped an unreadable frame: %s", self.group, e)
            return
        if header.type == MessageType.HEARTBEAT:
            if segments and segments[0] in self.heard:
                self.heard[segments[0]] = time.monotonic()
            return
        sender = self.short_groups.get(header.source)
        if sender in self.heard:
            self.heard[sender] = time.monotonic()
        runner = self.by_short.get(header.destination)
        if runner is None or header.allocation_version > runner.ctx.version:
            self.waiting[header.destination].append((header, segments))
            return
        self._hand(runner, header, segments)

    @staticmethod
    def _hand(runner: TaskRunner, header: Header, segments: list[Any]) -> None:
        if header.allocation_version != runner.ctx.version:
            return
        if header.type == MessageType.DONE:
            runner.deliver_done(header.source)
        elif segments:
            runner.deliver(segments)

    # -- liveness -------------------------------------------------------------------------------

    def _connected(self, replica: Replica) -> set[str]:
        jobs = {key[1] for key in self.runners}
        peers = {p for j in jobs for ps in replica.allocations.get(j, {}).values() for p in ps}
        return {
            g
            for g in replica.groups
            if g != self.group and not peers.isdisjoint(replica.group_peers.get(g, ()))
        }

    def _track_liveness(self, replica: Replica) -> None:
        connected = self._connected(replica)
        now = time.monotonic()
        self.heard = {g: self.heard.get(g, now) for g in connected}
        self.reported &= set(replica.groups)

    def _heartbeat(self) -> None:
        now = time.monotonic()
        if now - self.last_round > self.config.peer_timeout / 2:
            log.warning("group %s did not run for %.1f s", self.group, now - self.last_round)
            self.heard = dict.fromkeys(self.heard, now)
        self.last_round = now
        if now < self.next_heartbeat or self.transport is None:
            return
        self.next_heartbeat = now + self.config.heartbeat_interval
        beat = encode(Header(MessageType.HEARTBEAT, 0, 0, 0, 0, 0), [self.group])
        for group, heard in sorted(self.heard.items()):
            site = self.replica.sites.get(group)
            if site is not None:
                self.transport.offer(site, beat)
            if now - heard > self.config.peer_timeout and group not in self.reported:
                self._report(group)

    def _report(self, group: str) -> None:
        log.warning("group %s: no heartbeat from group %s; reporting its peers", self.group, group)
        self.reported.add(group)
        for peer in sorted(self.replica.group_peers.get(group, ())):
            self.write(LEAVE_CLUSTER.entry(id=peer, group=group))

    def close(self) -> None:
        for runner in self.runners.values():
            runner.close()
        self.runners.clear()
