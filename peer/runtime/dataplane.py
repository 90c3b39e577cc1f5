"""A peer group's data plane: the task runners of its virtual peers, the coordinators of the
jobs whose coordinator peer lives here, and the frames between them all.

The log says who works on what; after every batch of entries the group hands the replica to
``sync``, which keeps one runner per (peer, job, allocation version) and one coordinator per
(job, allocation version) and drops the others, so a reallocation restarts a job's tasks
everywhere at once. The group's switchboard (peer.cluster.switchboard) hands it the frames of
task data that come in (``receive``) and has it do one round of work (``step``): step every
coordinator and runner, and offer queued frames. Frames carry the allocation version: those of a
stale allocation are dropped, those of an allocation this group has not read yet wait for it.
The data plane carries data only: membership, the join side channel and log rumors have owners
of their own in the cluster layer.

Runners and coordinators send typed messages (peer.messaging.messages). A message for a peer of
this same group never leaves the process: it is handed over as it is, never encoded (an Arrow
batch stays the batch it was). Messages for other groups become frames through the message
table, queue per destination and are offered in order; one over the transport's largest message
goes as several (peer.messaging.fragments), which the receiver puts back together. A refused
offer (back-pressure, or a publication not yet connected) leaves the frame at the head of its
queue for the next round, and while queues are long the runners stop producing, so pressure
travels upstream instead of into memory. Inboxes are bounded by credit between peers
(peer.runtime.emit); the group always reads every frame that arrives, so no group ever waits
on another's reading.

Nothing a job does ends the group: whatever a runner or a coordinator raises, a segment that
cannot be encoded or is over the limit, a frame that cannot be delivered, fails that job
(``_fail`` writes kill-job, naming the job, the task and what went wrong) and the group and its
other jobs go on. A frame whose body cannot be read fails the job of the runner it was for, if
that runner is here and current; any other frame that cannot be read is dropped with a short
warning.
"""

from __future__ import annotations

import contextlib
import logging
import math
import operator
import time
from collections import defaultdict, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from peer.job.code import imports_from
from peer.job.spec import Job
from peer.log.entries.grow import grow_job
from peer.log.entries.jobs import COMPLETE_JOB, kill_job
from peer.log.entries.recovery import TASK_RECOVERED
from peer.log.entries.rollback import rollback_job
from peer.log.entry import Entry
from peer.log.replica import Replica
from peer.log.store import CommitRecords
from peer.messaging import fragments, messages
from peer.messaging.frame import BodyError, FrameError, decode_header, pack
from peer.messaging.messages import (
    Ack,
    Address,
    Barrier,
    Batch,
    Committed,
    Credit,
    Determinants,
    Drained,
    End,
    Message,
    Recall,
    Recalled,
    Recover,
    ReplayFrom,
    Watermark,
)
from peer.messaging.transport import Transport
from peer.runtime.checkpoints import CheckpointStorage, Commits
from peer.runtime.coordinator import Coordinator
from peer.runtime.placement import Placement, placements
from peer.runtime.routing import Router, conditions, key_function, router_for, routes
from peer.runtime.shipped_code import CodeShelf
from peer.runtime.snapshot import Restored
from peer.runtime.standby import Standbys
from peer.runtime.state_shelf import StateShelf
from peer.runtime.task import FAILURES, TaskContext, TaskFailed, TaskRunner, describe
from peer.state.backends import sweep
from peer.values.epoch import Epoch

log = logging.getLogger(__name__)

RunnerKey = tuple[str, str, int]
"""(peer, job, allocation version)"""

AS_IS = (Batch, Barrier, Watermark, End, Determinants, ReplayFrom, Recall, Recalled)
"""What a runner sends to another peer as it is: a bare batch is wrapped in a Batch."""


@dataclass(frozen=True)
class DataPlaneConfig:
    max_queued: int = 64
    """Frames queued for one destination before this group's runners stop producing."""
    code_cache: Path = field(default_factory=lambda: Path("~/.onyx/code").expanduser())
    """Where the code archives shipped with jobs are unpacked, one directory per hash."""
    state_dir: Path = field(default_factory=lambda: Path("~/.onyx/state").expanduser())
    """Where the keyed state of jobs with ``state_backend: disk`` is held, one directory per
    slot, deleted when the slot's runner closes."""


class DataPlane:
    def __init__(
        self,
        group: str,
        transport: Transport | None,
        write: Callable[[Entry], None],
        config: DataPlaneConfig | None = None,
        *,
        store: CommitRecords | None = None,
        storage: CheckpointStorage | None = None,
    ) -> None:
        self.group, self.transport, self.write = group, transport, write
        self.config = config or DataPlaneConfig()
        self.store, self.storage = store, storage
        self.pool = ThreadPoolExecutor(2, thread_name_prefix="onyx-coordinator")
        self.replica = Replica()
        self.placements: dict[str, Placement] = {}
        """Every allocated job's, as of the replica last synced."""
        self.mine: list[str] = []
        self.resync = False
        """Set from the pool when shipped code has arrived: the next step makes its runners."""
        self.code = CodeShelf(self.config.code_cache, storage, self.pool, self._code_arrived)
        for swept in sweep(self.config.state_dir):
            log.info("deleted the keyed state %s left by a process no longer running", swept)
        self.runners: dict[RunnerKey, TaskRunner] = {}
        self.shelf = StateShelf()
        """Keyed state closed runners left for the next allocation's (peer.runtime.state_shelf)."""
        self.coordinators: dict[tuple[str, int], Coordinator] = {}
        self.grown_at_once: set[tuple[str, int]] = set()
        """Held-back jobs under a version, without checkpoints here, this group let grow."""
        self.by_short: dict[int, TaskRunner] = {}
        self.coordinator_by_job: dict[int, Coordinator] = {}
        self.standbys = Standbys(storage)
        self.standby_shorts: dict[int, str] = {}
        """This group's standby peers by short id: a commit told them fetches a snapshot."""
        self.waiting: dict[int, list[tuple[Address, Message]]] = defaultdict(list)
        self.assembly = fragments.Assembly()
        self.queues: dict[str, deque[bytes]] = defaultdict(deque)
        self.peer_sites: dict[str, str] = {}
        self.short_peers: dict[int, str] = {}
        self.indexed: tuple[object, ...] | None = None
        """The replica's parts ``peer_sites`` and ``short_peers`` were made from (immutable)."""
        self.pack: Callable[[Any], Any] = (
            partial(pack, limit=transport.max_frame) if transport is not None else lambda b: b
        )
        """What a batch for a peer of another group is kept as until its epoch commits."""
        self.closed = False

    # -- following the log ----------------------------------------------------------------------

    def sync(self, replica: Replica, mine: list[str]) -> None:
        self._remove_finished_code(replica, set(mine))
        self.replica, self.mine = replica, mine
        self.placements = placements(replica, self.placements)
        self._index(replica)
        wanted = self._wanted(mine)
        for key in sorted(set(self.runners) - wanted):
            self.runners.pop(key).close()
        for key in sorted(wanted - set(self.runners)):
            runner = self._runner(self.placements[key[1]], key[0])
            if runner is not None:
                self.runners[key] = runner
        self.shelf.prune(r.heir for r in self.runners.values() if r.awaits_restore_point)
        self._rewire()
        self.standbys.sync(self.placements, mine)
        self.standby_shorts = {
            replica.short_ids[p]: p
            for p in sorted(self.standbys.watching)
            if p in replica.short_ids
        }
        self.code.keep_only(job.code["sha256"] for job in replica.jobs.values() if job.code)
        self.by_short = {replica.short_ids[key[0]]: r for key, r in self.runners.items()}
        self._sync_coordinators(set(mine))
        self._release_waiting(replica)
        self._drop_queues(replica)
        self.assembly.forget(lambda s: s < replica.next_short_id and s not in self.short_peers)

    def _rewire(self) -> None:
        """Runners whose job's placement changed under the same allocation version (a seat
        taken over, a standby named) go on under the new one."""
        for (peer, job_id, _), runner in sorted(self.runners.items()):
            placement = self.placements[job_id]
            if runner.ctx.placement is not placement and runner.local.on:
                runner.rewire(self._context(placement, peer, imports=runner.ctx.imports))

    def _code_arrived(self) -> None:
        self.resync = True

    def _remove_finished_code(self, new: Replica, mine: set[str]) -> None:
        """The code shipped with a job that has just finished goes from checkpoint storage,
        removed by the group of the job's coordinator peer as of its last placement (every
        group agrees on it), in the background."""
        for job_id in sorted(set(new.finished) - set(self.replica.finished)):
            placement = self.placements.get(job_id)
            if placement is None or placement.job.code is None or self.storage is None:
                continue
            if placement.coordinator in mine:
                self.pool.submit(self.storage.delete_code, job_id)

    def _index(self, replica: Replica) -> None:
        """Where each peer listens (its own site, else its group's), and each short id's peer.
        Rebuilt only when the replica's groups, sites, peers or short ids changed: most entries
        change none of them, and at 10,000 peers rebuilding takes tens of milliseconds of every
        member's loop."""
        inputs = (
            replica.groups, replica.sites, replica.peer_sites, replica.group_peers,
            replica.short_ids,
        )  # fmt: skip
        if self.indexed is not None and all(map(operator.is_, inputs, self.indexed)):
            return
        self.indexed = inputs
        self.peer_sites, self.short_peers = {}, {}
        sites, short_ids = dict(replica.sites), dict(replica.short_ids)  # one pass each
        own = dict(replica.peer_sites)
        for group, peers in replica.group_peers.items():
            if group not in replica.groups:
                continue
            for peer in peers:
                site = own.get(peer) or sites.get(group)
                if site is not None:
                    self.peer_sites[peer] = site
                if peer in short_ids:
                    self.short_peers[short_ids[peer]] = peer

    def _wanted(self, mine: list[str]) -> set[RunnerKey]:
        """The runners this group's peers should have: one per allocated peer."""
        return {
            (peer, job_id, placement.version)
            for job_id, placement in self.placements.items()
            for peer in mine
            if peer in placement.tasks and peer in placement.short_ids
        }

    def _checkpointed(self, job: Job) -> bool:
        return self.storage is not None and job.barrier_period is not None

    def _sync_coordinators(self, mine: set[str]) -> None:
        wanted = {
            (job_id, placement.version)
            for job_id, placement in self.placements.items()
            if self._checkpointed(placement.job) and placement.coordinator in mine
        }
        for key in sorted(set(self.coordinators) - wanted):
            self.coordinators.pop(key).close()
        for job_id, _ in sorted(wanted - set(self.coordinators)):
            placement = self.placements[job_id]
            self.coordinators[(job_id, placement.version)] = self._coordinator(placement)
        leaving, held = self.replica.leaving, self.replica.held_back
        for (job_id, _), coordinator in sorted(self.coordinators.items()):
            if coordinator.placement is not self.placements[job_id]:
                coordinator.rewire(self.placements[job_id])
            groups = coordinator.placement.groups.values()
            coordinator.handing_over = not leaving.isdisjoint(groups)
            coordinator.held_back = job_id in held
        self._grow_at_once(mine)
        self.coordinator_by_job = {
            c.placement.job_short: c for (job_id, _), c in self.coordinators.items()
        }

    def _grow_at_once(self, mine: set[str]) -> None:
        """The held-back jobs whose coordinator peer is here but that have no checkpoints here
        (no coordinator paces them) grow at once: there is no commit to stand still at."""
        held = {
            (job_id, placement.version)
            for job_id, placement in self.placements.items()
            if job_id in self.replica.held_back
            and placement.coordinator in mine
            and not self._checkpointed(placement.job)
        }
        for job_id, version in sorted(held - self.grown_at_once):
            self.write(grow_job(job_id, version))
        self.grown_at_once = held

    @staticmethod
    def _addresses(placement: Placement, sender: str) -> Callable[[str], Address]:
        """The addresses of what ``sender`` sends for the job under ``placement``, by receiving
        peer (made once per receiver)."""
        version, short_ids = placement.version, placement.short_ids
        source, job_short = short_ids[sender], placement.job_short
        made: dict[str, Address] = {}

        def address(to: str) -> Address:
            found = made.get(to)
            if found is None:
                found = made[to] = Address(job_short, source, short_ids[to], version)
            return found

        return address

    def _coordinator(self, placement: Placement) -> Coordinator:
        """Made only for a job with checkpoints (``_checkpointed``) in a group with a store."""
        job_id, version, job_short = placement.job_id, placement.version, placement.job_short
        store, storage = self.store, self.storage
        if store is None or storage is None:
            raise RuntimeError(f"job {job_id!r}: a coordinator needs the store's commit records "
                               "and checkpoint storage")  # fmt: skip

        def send(to: str, message: Message) -> None:
            """By the short ids of now: a takeover or a standby brings peers the coordinator's
            first placement did not have."""
            ids = self.replica.short_ids
            source = ids[self.placements[job_id].coordinator]
            self._send(to, Address(job_short, source, ids[to], version), message)

        def rollback(reason: str) -> None:
            self.write(rollback_job(job_id, version, reason))

        return Coordinator(
            placement=placement,
            commits=Commits(store, job_id),
            storage=storage,
            pool=self.pool,
            send=send,
            rollback=rollback,
            grow=lambda: self.write(grow_job(job_id, version)),
        )

    def _runner(self, placement: Placement, peer: str) -> TaskRunner | None:
        """A runner for ``peer``, importing from the code shipped with its job if it has some;
        None while that code is still being fetched (``sync`` runs again once it is here). One
        whose code cannot be had, or whose routing code does not resolve in this process (a
        group-by or flow-condition fn), is made without it and fails at its first step, so its
        job is killed and the group goes on."""
        try:
            imports = self._imports(placement)
            if imports is None:
                return None
            with imports():
                return TaskRunner(self._context(placement, peer, imports=imports))
        except FAILURES as e:
            return TaskRunner(self._context(placement, peer, routing=False), broken=e)

    def _imports(self, placement: Placement) -> Callable[[], AbstractContextManager[None]] | None:
        """How the job's code imports here: from the installed packages, or from its shipped
        archive once that is unpacked (None until then)."""
        code = placement.job.code
        if code is None:
            return nullcontext
        directory = self.code.directory(placement.job_id, code)
        return None if directory is None else partial(imports_from, directory)

    def _context(
        self,
        placement: Placement,
        peer: str,
        *,
        routing: bool = True,
        imports: Callable[[], AbstractContextManager[None]] = nullcontext,
    ) -> TaskContext:
        job, version, task = placement.job, placement.version, placement.tasks[peer]
        job_id, coordinator = placement.job_id, placement.coordinator
        address = self._addresses(placement, peer)
        storage = self.storage if self._checkpointed(job) else None

        def send(to: str, item: Any) -> None:
            self._send(to, address(to), item if isinstance(item, AS_IS) else Batch(item))

        def grant(upstream: int, batches: int, rows: int) -> None:
            to = self.short_peers[upstream]
            self._send(to, address(to), Credit(batches, rows))
            self._offer_now(to)

        def report(message: Ack | Drained) -> None:
            if coordinator is None:
                raise RuntimeError(f"job {job_id!r}: task {task!r} on peer {peer} reports to a "
                                   "coordinator its placement does not have")  # fmt: skip
            self._send(coordinator, address(coordinator), message)

        def complete() -> None:
            self.write(COMPLETE_JOB.entry(id=job_id, peer=peer, version=version))

        def recovered() -> None:
            self.write(TASK_RECOVERED.entry(job=job_id, peer=peer, version=version))

        def rollback(reason: str) -> None:
            self.write(rollback_job(job_id, version, reason))

        def fetch(
            source_job: str, epoch: Epoch, slot: int, groups: range | None
        ) -> Future[Restored]:
            held = self.standbys.fetch(source_job, epoch, task, slot) if groups is None else None
            if held is not None:
                return held
            if storage is None:
                raise RuntimeError(f"job {job_id!r}: task {task!r} on peer {peer} restores "
                                   "without checkpoint storage")  # fmt: skip
            return storage.restore(source_job, epoch, task, slot, groups)

        spec = job.task(task)
        router = (
            router_for(
                routes(placement, task, peer), conditions(placement, task), job.late_outputs(task)
            )
            if routing
            else Router(())
        )
        return TaskContext(
            placement=placement,
            peer=peer,
            router=router,
            send=send,
            report=report,
            grant=grant,
            congested=lambda: self._congested(router.peers()),
            complete=complete,
            congested_peer=lambda to: self._congested([to]),
            in_process=frozenset(self.mine).__contains__,
            pack=self.pack,
            recovered=recovered,
            rollback=rollback,
            key_of=key_function(spec.group_by_key, spec.group_by_fn, task) if routing else None,
            imports=imports,
            storage=storage,
            fetch=fetch,
            state_dir=self.config.state_dir,
            shelf=self.shelf,
        )

    def _release_waiting(self, replica: Replica) -> None:
        """Frames that arrived before this group read their allocation: hand over those of a
        current runner, keep those still ahead of the log, drop the stale and those of jobs
        that have finished (short ids are never reused, so a smaller unknown one is gone).
        A frame of the current allocation for a peer of this group that runs nothing of the
        job yet is ahead too: a takeover keeps the allocation version, and the peer's new
        seat reaches the sender's group first when that one reads the log sooner."""
        versions = {p.job_short: p.version for p in self.placements.values()}
        own = {replica.short_ids[p] for p in self.mine if p in replica.short_ids}
        held, self.waiting = self.waiting, defaultdict(list)
        for short, frames in held.items():
            runner = self.by_short.get(short)
            for header, body in frames:
                current = versions.get(header.job)
                if runner is not None and header.allocation_version == runner.ctx.version:
                    self._hand(runner, header, body)
                elif (
                    (current is None and header.job >= replica.next_short_id)
                    or (current is not None and header.allocation_version > current)
                    or (header.allocation_version == current and short in own and runner is None)
                ):
                    self.waiting[short].append((header, body))

    def _drop_queues(self, replica: Replica) -> None:
        if not self.queues:  # nothing to drop; listing the sites is the cost at 1,000 groups
            return
        live = {*replica.sites.values(), *replica.peer_sites.values()}
        for site in sorted(set(self.queues) - live):
            del self.queues[site]
            if self.transport is not None:
                self.transport.forget(site)

    # -- one round ------------------------------------------------------------------------------

    def step(self) -> bool:
        """One round: every coordinator and runner steps, and the queued frames are offered;
        whether anything was done."""
        if self.resync:
            self.resync = False
            self.sync(self.replica, self.mine)
        busy = False
        now = time.monotonic()
        for job_version, coordinator in list(self.coordinators.items()):
            busy = self._step_coordinator(job_version, coordinator, now) or busy
        for key, runner in list(self.runners.items()):
            if self.runners.get(key) is not runner:  # failed earlier in this round
                continue
            try:
                busy = runner.step() or busy
            except TaskFailed as e:
                self._fail(key, e)
        return self._flush() or busy

    def patience(self) -> float:
        """Seconds until a runner here has work that no message brings (inf: none): how long
        the loop may sleep while nothing comes."""
        return min((runner.patience() for runner in self.runners.values()), default=math.inf)

    def _step_coordinator(self, key: tuple[str, int], coordinator: Coordinator, now: float) -> bool:
        try:
            return coordinator.step(now)
        except Exception as e:
            job = coordinator.job_id
            self.coordinators.pop(key).close()
            self.coordinator_by_job = {
                s: c for s, c in self.coordinator_by_job.items() if c is not coordinator
            }
            peer = coordinator.placement.coordinator
            error = TaskFailed(
                f"job {job!r}: its coordinator on peer {peer} (allocation {key[1]}) failed: "
                f"{type(e).__name__}: {e}"
            )
            error.__cause__ = e
            self._fail_job(job, error)
            return True

    def _fail_job(self, job: str, error: TaskFailed) -> None:
        """Fail ``job`` through one of its runners here; with none left, its work here is over
        and its kill-job is on its way already."""
        keys = sorted(k for k in self.runners if k[1] == job)
        if keys:
            self._fail(keys[0], error)
        else:
            log.error("%s (the job has no task left in this group)", error)

    def _fail(self, key: RunnerKey, error: TaskFailed) -> None:
        """The failure's message becomes the kill's reason, so the submitter sees it."""
        log.error("%s; killing the job", error)
        self.runners.pop(key).close()
        self.write(kill_job(key[1], str(error)))

    def _congested(self, peers: list[str]) -> bool:
        """Whether the frames waiting for any of these peers' groups fill their queue."""
        limit = self.config.max_queued
        return any(len(self.queues.get(self.peer_sites.get(p, ""), ())) >= limit for p in peers)

    # -- frames ---------------------------------------------------------------------------------

    def _send(self, to: str, address: Address, message: Message) -> None:
        """Hand over in memory within the group; queue the frames for another group, a
        FrameError for what cannot travel (the caller's job fails with it)."""
        if self._local(address, message):
            self._dispatch(address, messages.in_process(message))
            return
        site = self.peer_sites.get(to)
        if site is None:
            raise RuntimeError(f"peer {to} is in a group that announced no site to send to")
        if self.transport is None:
            raise RuntimeError(f"peer {to} is in another group, and group {self.group} has no "
                               "transport to send over")  # fmt: skip
        self.queues[site].extend(messages.encode(address, message, self.transport.max_frame))

    def _local(self, address: Address, message: Message) -> bool:
        if isinstance(message, (Ack, Drained)):
            coordinator = self.coordinator_by_job.get(address.job)
            return coordinator is not None and coordinator.version == address.allocation_version
        return address.destination in self.by_short or address.destination in self.standby_shorts

    def _flush(self) -> bool:
        """Offer every site's queued frames; there are none without a transport (``_send``)."""
        transport, sent = self.transport, False
        if transport is None:
            return False
        for site, queue in list(self.queues.items()):
            try:
                sent = self._offer(transport, site, queue) or sent
            except Exception as e:
                self._undeliverable(site, e)
        return sent

    def _offer(self, transport: Transport, site: str, queue: deque[bytes]) -> bool:
        """Offer ``site``'s frames in order until the transport refuses one; whether any went.
        What the transport raises (it cannot send there at all) is the caller's to handle."""
        sent = False
        while queue and transport.offer(site, queue[0]):
            queue.popleft()
            sent = True
        return sent

    def _offer_now(self, to: str) -> None:
        """Offer what waits for ``to``'s group at once, not at the end of the round: credit is
        given as a batch is taken, and the sender should have it while the batch is being done,
        not after, or a receiver with little in flight runs dry. A transport that cannot send
        there is left to the round's flush, which fails the jobs concerned."""
        queue = self.queues.get(self.peer_sites.get(to, ""))
        if not queue or self.transport is None:
            return
        with contextlib.suppress(Exception):
            self._offer(self.transport, self.peer_sites[to], queue)

    def _undeliverable(self, site: str, error: Exception) -> None:
        """The transport cannot send to ``site`` at all (not merely not yet): the jobs with
        frames queued for it fail, naming the site; the frames go with them."""
        names = {short: name for name, short in self.replica.short_ids.items()}
        jobs = {names.get(j) for j in _jobs_of(self.queues.pop(site))}
        for job in sorted(j for j in jobs if j is not None):
            self._fail_job(
                job,
                TaskFailed(f"job {job!r}: frames for the group at {site} cannot be sent: "
                           f"{type(error).__name__}: {error}"),
            )  # fmt: skip

    def receive(self, frame: bytes) -> None:
        """A frame of task data (peer.messaging.demux), or a fragment of one."""
        try:
            whole = self.assembly.add(frame)
            if whole is None:
                return
            header, message = whole[0], messages.read(*whole)
        except BodyError as e:
            self._unreadable(e)
            return
        except FrameError as e:
            log.warning("group %s dropped an unreadable frame of %d bytes: %.200s",
                        self.group, len(frame), e)  # fmt: skip
            return
        self._dispatch(messages.address_of(header), message)

    def _unreadable(self, error: BodyError) -> None:
        """A body that does not read fails the job of the current runner it was for (its
        sender wrote what no peer writes); without one here, the frame is dropped."""
        header = error.header
        runner = self.by_short.get(header.destination)
        if runner is None or runner.ctx.version != header.allocation_version:
            log.warning("group %s dropped a %s frame whose body does not read: %.200s",
                        self.group, header.type.name, error)  # fmt: skip
            return
        sender = self.short_peers.get(header.source, f"#{header.source}")
        self._fail_runner(
            runner, f"a {header.type.name} frame from peer {sender} does not read", error
        )

    def _dispatch(self, address: Address, message: Message) -> None:
        if isinstance(message, (Ack, Drained)):
            self._to_coordinator(address, message)
            return
        standby = self.standby_shorts.get(address.destination)
        if standby is not None and isinstance(message, Committed):
            self.standbys.committed(standby, Epoch(address.allocation_version, message.epoch))
            return
        runner = self.by_short.get(address.destination)
        if runner is None or address.allocation_version > runner.ctx.version:
            self.waiting[address.destination].append((address, message))
            return
        self._hand(runner, address, message)

    def _to_coordinator(self, address: Address, message: Ack | Drained) -> None:
        coordinator = self.coordinator_by_job.get(address.job)
        peer = self.short_peers.get(address.source)
        if coordinator is None or coordinator.version != address.allocation_version or peer is None:
            return
        if isinstance(message, Ack):
            coordinator.on_ack(peer, message.epoch, message.since)
        else:
            coordinator.on_drained(peer)

    def _hand(self, runner: TaskRunner, address: Address, message: Message) -> None:
        if address.allocation_version != runner.ctx.version:
            return
        try:
            self._deliver(runner, address.source, message)
        except FAILURES as e:
            self._fail_runner(runner, f"taking a {type(message).__name__}", e)

    def _fail_runner(self, runner: TaskRunner, doing: str, error: BaseException) -> None:
        """Fail ``runner``'s job, naming its task and what it was ``doing``, if it is still
        current."""
        c = runner.ctx
        key = (c.peer, c.job_id, c.version)
        if self.runners.get(key) is runner:
            failure = TaskFailed(f"job {c.job_id!r}: task {c.task.name!r} on peer {c.peer}: "
                                 f"{doing}: {describe(error)}")  # fmt: skip
            failure.__cause__ = error
            self._fail(key, failure)

    def _deliver(self, runner: TaskRunner, source: int, message: Message) -> None:
        match message:
            case Batch() | Barrier() | Watermark() | End():
                runner.deliver(source, message)
            case Recover():
                runner.recover_from(message)
            case Committed(epoch):
                runner.committed(epoch)
            case Credit(batches, rows):
                runner.credit(self.short_peers.get(source, ""), batches, rows)
            case Determinants(deltas):
                runner.determinants(source, deltas)
            case ReplayFrom() | Recall():
                runner.asked(self.short_peers.get(source, ""), message)
            case Recalled():
                runner.recalled(self.short_peers.get(source, ""), message)

    def close(self) -> None:
        self.closed = True
        for runner in self.runners.values():
            runner.close()
        self.runners.clear()
        self.shelf.close()
        for coordinator in self.coordinators.values():
            coordinator.close()
        self.coordinators.clear()
        self.pool.shutdown(wait=False, cancel_futures=True)


def _jobs_of(queue: deque[bytes]) -> set[int]:
    """The short ids of the jobs whose frames these are."""
    return {decode_header(frame).job for frame in queue}
