"""One virtual peer's work on one task: a runner assembled once from parts its task chooses,
stepping through named phases, never waiting.

A peer group drives all its virtual peers from one thread, so each ``step`` does at most one
batch of work and returns whether it did any. The parts, chosen once when the runner is made
(the intake and the emitter) or when its code loads (the apply step):

- intake (peer.runtime.intake): an input polls its plugin, every other task takes from its
  inbox, one queue per upstream peer;
- apply (peer.runtime.apply): the task's engine: a Python fn per segment, or a Spark fn over a
  DataFrame of the batch, run in the group's Spark pool while the runner goes on;
- emitter (peer.runtime.emit): an input or a function routes its batches downstream on credit,
  an output prepares and writes them with its plugin.

A job that recovers locally has these parts chosen with its causal ones (peer.runtime.causal):
an intake that logs its takes or holds its upstream's determinants, an emitter that keeps what
it sent in an in-flight log, and a clock that logs what shapes the task's state.

The phases (peer.runtime.phases), as in Onyx's task lifecycle:

- LOAD: resolve the code, the plugin, the windows and the hooks. A job with checkpoints then
  waits for its coordinator's RECOVER (AWAIT_RECOVERY), fetches the snapshots it names in the
  group's pool (RESTORE) and restores the plugin, the window state and a stateful fn from them;
  a job without starts from the beginning at once. A snapshot says whether its slot had ended:
  that slot's flush went out before the barrier, into the epoch now committed, so its state is
  not restored, and a task whose every slot had ended does not flush again at the end.
- RUN: read a batch, apply, then either assign the segments to the task's windows (only what
  triggers emit goes on) or emit them. Barriers: an input snapshots at the barrier its
  coordinator sends between two batches; other tasks once the same barrier has come from every
  upstream peer (see peer.runtime.inbox). The snapshot is uploaded in the pool and ACKed to the
  coordinator when stored (and, for a plugin whose checkpoint is a Sealing, its epoch durable);
  the barrier goes on downstream at once. Watermarks (the intake's
  mark) go on when they rise. A Spark task keeps up to SPARK_IN_FLIGHT batches in Spark; their
  rows go on in the order read, each batch's with the watermark read with it.
- RECALL and REPLAY, for a peer that took a failed peer's seat over (its job's placement has
  it among ``recovering``): it restores the seat's own snapshot alone, gathers the seat's
  determinants from its downstream peers, has its upstream peers send again what followed the
  snapshot's barrier, and replays in the logged order, sending on only what downstream lacks;
  then RUN (or ENDED, when the log has the input end within the replay: REPLAY_ENDED until the
  log is replayed). A recovery that cannot go on has the job roll back (``rollback``), not killed.
- ENDED: the input side is over (an input's plugin completed and synced; every upstream peer's
  end marker taken): a stateful fn has been flushed, the windows finished, and the end marker
  sent. Barriers still pass. An output then reports: with checkpoints it tells the coordinator
  it is DRAINED and completes the job once the final epoch is committed (so its output is
  published); without, it completes once its plugin is synced (COMPLETED).

Whatever a step raises fails the task (FAILED) with a TaskFailed naming the job, the task and
the peer; the data plane kills the job and closes the runner (CLOSED). That includes what a
task's code raises to end its process (``CODE_EXITS``): the job fails, its group goes on. What no
``except`` catches (``os._exit``, a crash in an extension) ends a worker process; around each
call into its task's code a runner of a worker marks which job's code runs
(peer.code_marks), so that its member can blame the job.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from peer.causal.inflight import LogLost
from peer.code_marks import Mark, mark_for
from peer.job.spec import Job, Task
from peer.log.store import path_component
from peer.messaging.messages import (
    DRAINED,
    END,
    RECALL,
    Ack,
    Barrier,
    Drained,
    Message,
    Recalled,
    Recover,
    ReplayFrom,
    RestorePoint,
    Watermark,
)
from peer.metrics import task_meters
from peer.plugins import NO_PLUGIN, Recovery, joined, load, position, splits_share
from peer.plugins.splits import gather
from peer.runtime.apply import Apply, AsyncApply, Keys, apply_for, function
from peer.runtime.causal import (
    NO_LOCAL_RECOVERY,
    RECOVERY_ERRORS,
    LocalRecovery,
    LoggedClock,
    NoLocalRecovery,
    PlainClock,
    Watchdog,
    causal_parts,
)
from peer.runtime.checkpoints import CheckpointStorage
from peer.runtime.debloat import first_credit
from peer.runtime.emit import LOCAL_WINDOW, Emitter, PluginEmitter, emitter_for, window
from peer.runtime.hooks import Hooks, call, hooks_for
from peer.runtime.inbox import BarrierSkipped
from peer.runtime.intake import Intake, PluginIntake, intake_for
from peer.runtime.logged_emit import LoggedEmitter, Wiring
from peer.runtime.phases import ENDING, INPUT_OVER, REPLAYED, RUNNING, Phase, advance
from peer.runtime.placement import Placement
from peer.runtime.routing import Router
from peer.runtime.snapshot import Chain, Restored, TaskSnapshot
from peer.runtime.state_shelf import Shelved, Slot, StateShelf
from peer.runtime.task_windows import UNWINDOWED, Windows, windows_for
from peer.state.backends import Backend, backend_for
from peer.state.key_groups import groups_of, key_group, overlap
from peer.state.keyed import KeyedState, Parts
from peer.storage import StorageError
from peer.values.columnar import Segment
from peer.values.epoch import Epoch

log = logging.getLogger(__name__)

ROLLBACK_REASONS: dict[type, str] = {
    BarrierSkipped: "cannot go on",
    StorageError: "cannot reach its checkpoint storage",
}
ROLLS_BACK = (*RECOVERY_ERRORS, BarrierSkipped, StorageError)
"""What a runner cannot go on from, but its job can: by rolling back to its last commit (for a
store out of reach, once it is back)."""


SPARK_IN_FLIGHT = 3
"""Batches a Spark task may have in Spark at once: a batch spends most of its time waiting on
Spark's scheduling, so a few in flight keep Spark busy; their rows still go on in order."""

CLOSE_SLICE = 0.05
"""Seconds a step spends at most on a close of windows under way (``TaskRunner.closing``)."""


CODE_EXITS = (SystemExit, KeyboardInterrupt, GeneratorExit)
"""What a task's code may raise besides an Exception, each as much its job's failure as any
exception: not one of them can mean that the process is being stopped, since none comes from
anywhere but the code. `onyx peer start` handles SIGINT and SIGTERM itself, its workers ignore
them, and `onyx run` and tests run their groups on threads of their own, where Python raises no
KeyboardInterrupt; a pool hands whatever its call raised back through ``result()``."""
FAILURES = (Exception, *CODE_EXITS)
"""Whatever fails a task when its step (or a message it takes) raises it."""

PendingSnapshot = tuple[Epoch, TaskSnapshot, Parts, Future[Any] | None]
"""A snapshot being taken: its epoch, the snapshot, its keyed state's parts, and the plugin's
durability of the epoch (None: durable at once)."""


def describe(error: BaseException) -> str:
    """What a task raised, for its job's kill: an exit says that a task's code may not end its
    process, lest the reader look for who stopped the group."""
    if isinstance(error, Exception):
        return f"{type(error).__name__}: {error}"
    said = f": {error}" if str(error) else ""
    return f"{type(error).__name__}{said} (a task's code may not end its process)"


class TaskFailed(RuntimeError):
    """The job's work on this group failed (its code, its data, its coordinator): the job cannot
    go on. The message names the job, the task and peer (or the coordinator) and the error."""


@dataclass(frozen=True)
class Fetched:
    """What a restoring slot fetches: the snapshots of these old slots, in order, and which of
    their group keys it keeps."""

    slots: range
    snapshots: list[Future[Restored]]
    keep: Callable[[Any], bool]
    owned: Callable[[int], bool]
    """Which key groups of their keyed state it keeps."""
    kept: Shelved | None = None
    """The keyed state it held already, taken from its process's shelf (peer.runtime.state_shelf):
    those key groups are not fetched again."""


@dataclass(frozen=True)
class Upload:
    """A snapshot on its way to storage: its acknowledgement, the upload (joined with the
    plugin's durability of the epoch), and its keyed state's parts, measured once stored."""

    ack: Ack
    done: Future[Any]
    parts: Parts


class Stored:
    """A slot's snapshots on their way to storage: the uploads not yet acknowledged, oldest
    first, and the chain the next one's keyed state adds to (a runner starts it anew, as its
    first snapshot follows a start or a restore)."""

    def __init__(self) -> None:
        self.uploads: deque[Upload] = deque()
        self.chain = Chain()


def _everything(key: Any) -> bool:
    """Every group key: what a slot restoring from its own snapshot alone keeps."""
    return True


NOTHING_FETCHED = Fetched(range(0), [], _everything, _everything)


@dataclass
class TaskContext:
    """What a runner needs from its group: where it stands and how to reach the world."""

    placement: Placement
    peer: str
    router: Router
    send: Callable[[str, Any], None]
    """Send a batch or a Barrier, Watermark or END to a downstream peer."""
    report: Callable[[Ack | Drained], None]
    """Tell the coordinator: a snapshot is stored, or the output drained."""
    grant: Callable[[int, int, int], None]
    """Give an upstream peer (by short id) credit for this many more batches, telling it the most
    rows a batch to this peer should hold (0: no limit)."""
    congested: Callable[[], bool]
    complete: Callable[[], None]
    key_of: Callable[[Segment], Any] | None = None
    storage: CheckpointStorage | None = None
    fetch: Callable[[str, Epoch, int, range | None], Future[Restored]] | None = None
    """Fetch the snapshot of (job, epoch, slot) of this task, with the keyed state of the key
    groups in the range (None: all of it)."""
    state_dir: Path = field(default_factory=lambda: Path(tempfile.gettempdir(), "onyx-state"))
    """Where a job with ``state_backend: disk`` holds its keyed state, a directory per slot."""
    imports: Callable[[], AbstractContextManager[None]] = nullcontext
    """Where the job's code imports from while the task loads it: the installed packages, or
    the archive shipped with the job (peer.job.code)."""
    congested_peer: Callable[[str], bool] = lambda peer: False
    """Whether the frames waiting for this one peer's group fill their queue."""
    in_process: Callable[[str], bool] = lambda peer: False
    """Whether a peer runs in this process: what goes to it is handed over, never encoded."""
    pack: Callable[[Any], Any] = lambda batch: batch
    """What a batch for a peer of another process is kept as until its epoch commits
    (peer.messaging.frame.pack)."""
    recovered: Callable[[], None] = lambda: None
    """Say in the log that this peer, which took its seat over, has replayed it."""
    rollback: Callable[[str], None] = lambda reason: None
    """Have the job roll back to its last commit, everywhere, for this reason: local recovery
    cannot go on (a log it needs was dropped, or the replay went another way)."""
    shelf: StateShelf | None = None
    """Where a keyed slot closing under a new allocation leaves its state for the next one's
    slots in this process, and where a restoring slot finds it (peer.runtime.state_shelf)."""
    job: Job = field(init=False)
    job_id: str = field(init=False)
    task: Task = field(init=False)
    version: int = field(init=False)
    slot: int = field(init=False)
    slots: int = field(init=False)
    upstream: frozenset[int] = field(init=False)
    """Short ids of every peer that sends to this one."""
    seat: int = field(init=False)
    takes_over: bool = field(init=False)
    """Whether this peer took its seat over from a failed one (it restores and replays)."""
    keyed: bool = field(init=False)
    """Whether the task's state is kept by key group (peer.job.spec.Job.keyed)."""
    key_groups: int = field(init=False)
    """The task's number of key groups (peer.state.key_groups)."""
    owned: range = field(init=False)
    """The key groups this slot owns: the keys whose state it holds."""

    def __post_init__(self) -> None:
        """Read from the placement once: the frames path asks for the version of every frame."""
        placement = self.placement
        self.job, self.job_id, self.version = placement.job, placement.job_id, placement.version
        self.task = placement.job.task(placement.tasks[self.peer])
        self.slot = placement.slots[self.peer]
        self.slots = len(placement.peers[self.task.name])
        self.upstream = placement.upstream_ids(self.task.name)
        self.seat = placement.seats[self.peer]
        self.takes_over = self.peer in placement.recovering
        self.keyed = self.job.keyed(self.task.name)
        self.key_groups = self.job.key_groups(self.task.name)
        self.owned = groups_of(self.slot, self.slots, self.key_groups)

    def upstream_seats(self) -> dict[int, int]:
        """Each upstream peer's seat, by its short id."""
        p = self.placement
        return {p.short_ids[u]: p.seats[u] for u in p.upstream.get(self.task.name, ())}

    def upstream_sides(self) -> dict[int, int] | None:
        """A join's task: the side of each upstream peer, by its short id (None for others)."""
        p, join = self.placement, self.job.join_of(self.task.name)
        if join is None:
            return None
        return {p.short_ids[u]: join.side(p.tasks[u]) for u in p.upstream.get(self.task.name, ())}

    def downstream_peers(self) -> tuple[str, ...]:
        return tuple(sorted(p for d in self.placement.downstream.get(self.task.name, ())
                            for p in d.peers))  # fmt: skip

    @property
    def checkpointed(self) -> bool:
        return self.storage is not None


class TaskRunner:
    def __init__(self, ctx: TaskContext, broken: BaseException | None = None) -> None:
        self.ctx = ctx
        self.broken = broken
        """What building this runner's routing raised; its first step fails the task with it."""
        task = ctx.task
        self.meters = task_meters(ctx.job_id, task.name)
        local = ctx.job.local_recovery_on and ctx.checkpointed
        self.intake: Intake = intake_for(
            task, ctx.upstream, self._grant, self.meters, window=self._window_from,
            target=ctx.job.debloat_target, unaligned=local and task.unaligned,
            sides=ctx.upstream_sides(),
        )  # fmt: skip
        self.emitter: Emitter = emitter_for(
            task, ctx.router, ctx.send, ctx.congested, self._first_credit
        )
        self.told: dict[str, int] = {}
        """The row limit each downstream peer gave with its last credit (peer.runtime.debloat)."""
        self.local: LocalRecovery | NoLocalRecovery = NO_LOCAL_RECOVERY
        """Its part in local recovery (peer.runtime.causal)."""
        self.clock: PlainClock | LoggedClock = PlainClock()
        if local:
            parts = causal_parts(
                ctx.job, task, ctx.seat, intake=self.intake, emitter=self.emitter,
                upstream_seats=ctx.upstream_seats(), make_emitter=self._logged_emitter,
            )  # fmt: skip
            self.local, self.intake, self.emitter = parts.local, parts.intake, parts.emitter
            self.clock = parts.clock
        self.mark: Mark = mark_for(ctx.placement.short_ids.get(ctx.job_id, -1),
                                   _index(ctx.job, task))  # fmt: skip
        """Entered around each call into the task's code (peer.code_marks)."""
        self._read, self._write = self._plugin_calls(task)
        self.waiting: list[tuple[str, Message]] = []
        """Recalls and replay requests from a peer this runner does not yet know in its seat:
        taken up when the log's takeover reaches it."""
        self.replay_epoch = 0
        self.watchdog = Watchdog()
        self._unassembled()
        self.event = {"job": ctx.job.id, "task": task.name, "peer": ctx.peer}
        """What every hook is told, besides the batch."""
        self.output = task.kind == "output"
        self.recovery: Recover | None = None
        self.fetched = NOTHING_FETCHED
        self.stored = Stored()
        self.snapshotted: Epoch | None = None
        """The epoch of the last barrier this runner snapshotted at."""
        self.sealing: PendingSnapshot | None = None
        """A snapshot taken at a barrier whose copies have not all come (an unaligned
        intake's): stored with its channel state once they have."""
        self.in_flight: deque[tuple[Future[Any], float | None, float]] = deque()
        """An asynchronous apply's batches, oldest first, each with the watermark read with it
        and when it was read."""
        self.watermark: float | None = None
        self.final: int | None = None
        self.flushed = False
        """Restored from snapshots all taken after their slots had ended: whatever flushing the
        fn and finishing the windows emitted is in the committed epoch already, so the end that
        comes again after recovery must not emit it twice."""
        self.completed = False
        self.blocked = False
        """Whether the last step found downstream congested or out of credit."""
        self.closing: tuple[Iterator[list[Any]], Callable[[], None]] | None = None
        """A close of windows under way (a watermark's, the end's), and what follows once it is
        done: the step emits what it gives for CLOSE_SLICE seconds at most, and reads and
        passes nothing else until it is through."""
        self._take: Callable[[Any, float], None] = self._apply_now
        self.phase = Phase.LOAD
        self._steps = self._phase_table()
        self._step = self._load

    @property
    def awaits_restore_point(self) -> bool:
        """Whether it has yet to learn where to restore from: it may still take keyed state
        from the shelf."""
        return self.phase in (Phase.LOAD, Phase.AWAIT_RECOVERY)

    @property
    def heir(self) -> Slot:
        """This slot, as the shelf knows the slots that may take from it."""
        c = self.ctx
        return Slot(c.job_id, c.task.name, c.slot, c.slots)

    def _unassembled(self) -> None:
        """The parts LOAD assembles from the task's code (``_assemble``), none until then."""
        self.apply: Apply = Apply()
        self.plugin: Any = NO_PLUGIN
        self.splits = False
        """Whether the plugin is an input that splits its share (peer.plugins.splits): its
        positions go on to another number of slots."""
        self.windows: Windows = UNWINDOWED
        self.keyed = KeyedState(self.ctx.key_groups)
        """The slot's keyed state: the fn's and the windows' (one that holds nothing when the
        task keeps none), snapshotted by key group at each barrier."""
        self.hooks = Hooks()

    def _phase_table(self) -> Mapping[Phase, Callable[[], bool]]:
        """What each phase's step is, fixed once built: only ``_enter`` changes the step."""
        return MappingProxyType({
            Phase.LOAD: self._load,
            Phase.AWAIT_RECOVERY: self._await_recovery,
            Phase.RESTORE: self._restore,
            Phase.RECALL: self._recall,
            Phase.REPLAY: self._replay,
            Phase.REPLAY_ENDED: self._replay,
            Phase.RUN: self._run,
            Phase.ENDED: self._run,
            Phase.COMPLETED: self._nothing,
            Phase.FAILED: self._nothing,
            Phase.CLOSED: self._nothing,
        })  # fmt: skip

    def _enter(self, phase: Phase) -> None:
        self.phase = advance(self.phase, phase)
        self._step = self._steps[phase]

    def _plugin_calls(self, task: Task) -> tuple[Callable[[], Any], Callable[[], bool]]:
        """How the runner reads and writes: an input's reads and an output's writes are its
        plugin's code, so they are marked; other tasks' are the runner's own, and are not."""
        read = self._read_marked if task.kind == "input" else self.intake.read
        return read, self._write_marked if task.kind == "output" else self.emitter.write

    def _grant(self, upstream: int, batches: int, rows: int) -> None:
        """Through the context of now: a takeover brings a new one, with the new peer's id."""
        self.ctx.grant(upstream, batches, rows)

    def _window_from(self, source: int) -> int:
        """The fixed credit window of the edge from upstream peer ``source`` (by short id), as
        the placement of now has it: a takeover brings a sender the first one did not have."""
        c = self.ctx
        placement = c.placement
        ids = placement.short_ids
        upstream = placement.upstream.get(c.task.name, ())
        sender = next((p for p in upstream if ids.get(p) == source), None)
        if sender is None:  # the smaller window: a count of less in flight only gives credit early
            return LOCAL_WINDOW
        return window(placement, sender, c.peer)

    def _first_credit(self, to: str) -> int:
        """The credit the edge to downstream peer ``to`` starts with, as its receiver reckons it
        (peer.runtime.debloat)."""
        c = self.ctx
        return first_credit(window(c.placement, c.peer, to), c.job.debloat_target)

    @staticmethod
    def _wiring(c: TaskContext) -> Wiring:
        return Wiring(c.router, c.send, c.congested_peer, c.placement.seats, c.in_process, c.pack,
                      c.placement.recovering)  # fmt: skip

    def _logged_emitter(self, log: Any, deltas: Callable[[int], list[Any]]) -> LoggedEmitter:
        c = self.ctx
        return LoggedEmitter(
            self._wiring(c),
            self._first_credit,
            log=log,
            deltas=deltas,
            overflowed=self.meters.in_flight_overflows.inc,
        )

    # -- what the group hands in ----------------------------------------------------------------

    def deliver(self, source: int, item: Any) -> None:
        """A batch, Barrier, Watermark or END from an upstream peer; a Barrier for an input
        comes from the coordinator."""
        self.intake.deliver(source, item)

    def credit(self, peer: str, batches: int, rows: int = 0) -> None:
        """Credit from a downstream peer, with the row limit it asks for: batches are read no
        larger than the smallest limit asked (peer.runtime.debloat)."""
        self.emitter.credit(peer, batches)
        if self.told.get(peer, 0) != rows:
            self.told[peer] = rows
            self._follow()

    def _follow(self) -> None:
        self.intake.follow(min((r for r in self.told.values() if r), default=0))

    def _follow_only(self, peers: frozenset[str]) -> None:
        """Forget the row limits of downstream peers that are gone (their seat taken over)."""
        if not self.told.keys() <= peers:
            self.told = {p: rows for p, rows in self.told.items() if p in peers}
            self._follow()

    def recover_from(self, message: Recover) -> None:
        """The coordinator's word on where to restore from (``recovery``, None until it comes)."""
        self.recovery = message

    def determinants(self, source: int, deltas: list[Any]) -> None:
        """Determinants from an upstream peer, ahead of the message they precede."""
        self.local.hold(source, deltas)

    def asked(self, sender: str, message: Message) -> None:
        """A Recall or a ReplayFrom from ``sender``, a peer that took a neighbouring seat over:
        answered once this runner's placement has it in that seat."""
        placement = self.ctx.placement
        if sender not in placement.recovering or sender not in placement.seats:
            self.waiting.append((sender, message))
        elif isinstance(message, ReplayFrom):
            try:
                self.local.replay_from(sender, message.epoch)
            except LogLost as e:
                self._roll_back(e)
        else:
            self.local.answer(placement.seats[sender], lambda a: self.ctx.send(sender, a))

    def recalled(self, sender: str, answer: Recalled) -> None:
        """A downstream peer's answer to this runner's Recall."""
        seat = self.ctx.placement.seats.get(sender)
        if seat is not None:
            self.local.answered(seat, answer)

    def rewire(self, ctx: TaskContext) -> None:
        """A takeover under the same allocation: the same seats, another peer in some of them.
        The runner keeps its state and goes on; channels to and from a moved seat follow it."""
        self.ctx = ctx
        self.local.rewire(ctx.upstream_seats(), self._wiring(ctx))
        self._follow_only(frozenset(ctx.router.peers()))
        waiting, self.waiting = self.waiting, []
        for sender, message in waiting:
            self.asked(sender, message)

    def committed(self, epoch: int) -> None:
        self.local.committed(epoch)
        self.plugin.committed(Epoch(self.ctx.version, epoch))
        if self.final is not None and epoch >= self.final:
            self.final = None
            self.completed = True

    # -- the phases -----------------------------------------------------------------------------

    def step(self) -> bool:
        try:
            return self._step()
        except ROLLS_BACK as e:
            self._enter(Phase.FAILED)
            self._roll_back(e)
            return True
        except FAILURES as e:
            self._enter(Phase.FAILED)
            c = self.ctx
            raise TaskFailed(
                f"job {c.job.id!r}: task {c.task.name!r} on peer {c.peer}: {describe(e)}"
            ) from e

    def patience(self) -> float:
        """Seconds until this runner has work that no message brings: rows its input holds back,
        or a timer trigger; the loop it runs in sleeps no longer (inf: none)."""
        if self.phase not in RUNNING:
            return math.inf
        return min(self.intake.patience(), self.windows.due_at() - time.time())

    def _roll_back(self, error: Exception) -> None:
        c = self.ctx
        what = ROLLBACK_REASONS.get(type(error), "cannot recover locally")
        reason = (f"job {c.job.id!r}: task {c.task.name!r} on peer {c.peer} {what}: "
                  f"{type(error).__name__}: {error}")  # fmt: skip
        log.warning("%s; rolling the job back", reason)
        c.rollback(reason)

    def _load(self) -> bool:
        c = self.ctx
        if self.broken is not None:
            raise self.broken
        with c.imports(), self.mark:
            self._assemble()
        if not c.checkpointed:
            return self._begin(Recovery(None, None, Epoch(c.version, 1)), [])
        self._enter(Phase.AWAIT_RECOVERY)
        return True

    def _state_backend(self) -> Backend:
        """Where the keyed state the engine keeps for this slot is held: a disk backend's
        directory is this runner's own, so a restarted slot never reads a stale one."""
        c = self.ctx
        name = f"{c.job_id}.{c.task.name}.{c.slot}.{c.version}.{uuid.uuid4().hex[:12]}"
        where = c.state_dir / str(os.getpid()) / path_component(name)
        return backend_for(c.job.state_backend, where)

    def _assemble(self) -> None:
        """The task's code and plugin, resolved from the job's paths, and the parts that use
        them."""
        c, task = self.ctx, self.ctx.task
        keys = None if not c.keyed else Keys(c.key_of, c.key_groups, lambda: self.watermark,
                                             self._state_backend, c.checkpointed)  # fmt: skip
        apply = self.apply = apply_for(task, keys)
        self._take = self._submitter(apply) if isinstance(apply, AsyncApply) else self._apply_now
        assign = function(task.assign_watermark_fn)
        self.hooks = hooks_for(c.job, task.name)
        self.windows = windows_for(c.job, task, keys)
        if keys is not None:
            self.keyed = keys.made()
        if task.kind != "function":
            self.plugin = load(task, c.slot, c.slots, c.key_groups)
            self.splits = splits_share(task)
        if isinstance(self.intake, PluginIntake):
            self.intake.attach(self.plugin, assign)
        if isinstance(self.emitter, PluginEmitter):
            self.emitter.attach(self.plugin)

    def _await_recovery(self) -> bool:
        """Waiting for the coordinator to say where to restore from; a replacement waits no
        longer than a recall would, and the job rolls back instead."""
        c = self.ctx
        if self.recovery is None:
            if c.takes_over:
                self.watchdog.check(0, "the wait for where to restore the seat from")
            return False
        point = self.recovery.point
        if point is None:
            self._kept(None)  # nothing to restore: what was shelved for this slot goes
            fresh = Recovery(None, None, Epoch(c.version, 1))
            if c.takes_over:
                return self._take_over(fresh, [], None, None)
            return self._begin(fresh, [])
        old = point.slots.get(c.task.name, 0)
        if c.task.kind == "input" and old != c.slots and not self.splits:
            raise ValueError(
                f"its checkpoint was taken by {old} peers and it now runs on {c.slots}: an "
                "input whose plugin does not split its share needs n_peers for its positions "
                "to be restored"
            )
        fetch = c.fetch
        if fetch is None:
            raise RuntimeError("it has no way to fetch the snapshots its coordinator named")
        epoch = Epoch(point.version, point.number)
        slots = self._to_fetch(point, old)
        # restored from its own snapshot alone, a slot keeps all of it: it is exactly its own
        own = len(slots) == 1 and old == c.slots
        kept = self._kept(point)
        groups = c.owned if c.keyed and not own else None
        fetched = [fetch(point.job, epoch, slot, groups if kept is None else
                         self._gained(slot, old, kept)) for slot in slots]  # fmt: skip
        self.fetched = Fetched(slots, fetched, _everything if own else self._mine,
                               _everything if own else c.owned.__contains__, kept)  # fmt: skip
        self._enter(Phase.RESTORE)
        return True

    def _kept(self, point: RestorePoint | None) -> Shelved | None:
        """The keyed state this slot's process shelved for it that is exactly the restore
        point's (peer.runtime.state_shelf): a keyed task restoring its own job's commit, taken
        with key groups, not taking a failed seat over. Whatever else was shelved for it is
        closed."""
        c = self.ctx
        if c.shelf is None:
            return None
        if (point is None or not c.keyed or c.takes_over or point.job != c.job_id
                or point.groups.get(c.task.name) != c.key_groups):  # fmt: skip
            return c.shelf.take(self.heir, None)
        return c.shelf.take(self.heir, Epoch(point.version, point.number))

    def _gained(self, slot: int, old: int, kept: Shelved) -> range:
        """The key groups this slot reads of old slot ``slot``'s snapshot: those it owns now,
        but none of the slot whose state it kept (its header alone is read)."""
        if slot == kept.slot:
            return range(0)
        return overlap(groups_of(slot, old, self.ctx.key_groups), self.ctx.owned)

    def _to_fetch(self, point: RestorePoint, old: int) -> range:
        """The old slots whose snapshots this slot restores from: its own alone when the task
        runs on as many slots as took the checkpoint and splits its keys alike, since it then
        held exactly what it holds now; after a change of slots, a keyed task's old slots that
        held some of the key groups it owns now (it reads those key groups alone), and every
        old slot of any other task, each key kept by the slot that owns it now."""
        c = self.ctx
        taken = point.groups.get(c.task.name)
        if taken is not None and taken != c.key_groups:
            raise ValueError(
                f"its checkpoint split its keys into {taken} key groups and it now has "
                f"{c.key_groups}: a keyed task keeps its max_parallelism for the life of its "
                "state, in the jobs resumed from it too"
            )
        if c.keyed and taken is None:
            return range(old)  # keys split by hash modulo slots
        if old != c.slots and (c.keyed or self.splits):
            return _holding(c.owned, old, c.key_groups)
        if old != c.slots:
            return range(old)
        return range(c.slot, c.slot + 1)

    def _restore(self) -> bool:
        if not all(f.done() for f in self.fetched.snapshots):
            return False
        point = self._restore_point()
        committed = Epoch(point.version, point.number)
        restored = [f.result() for f in self.fetched.snapshots]
        c, fetched = self.ctx, self.fetched.slots
        own = restored[c.slot - fetched.start].snapshot if c.slot in fetched else None
        old = point.slots.get(c.task.name, 0)
        if self.splits and old != c.slots:
            held = {slot: r.snapshot.plugin for slot, r in zip(fetched, restored, strict=True)}
            recovery = Recovery(gather(held, old, c.owned, c.key_groups), committed,
                                Epoch(c.version, 1))  # fmt: skip
        else:
            adopted = tuple(restored[old - fetched.start].snapshot.plugin
                            for old in range(c.slots + c.slot, fetched.stop, c.slots))  # fmt: skip
            recovery = Recovery(
                own.plugin if own is not None else None, committed, Epoch(c.version, 1),
                adopted=() if c.takes_over else adopted,
            )  # fmt: skip
        if c.takes_over:
            return self._take_over(recovery, restored, own, committed)
        return self._begin(recovery, restored, scope=point.scope)

    def _restore_point(self) -> RestorePoint:
        """Where the coordinator said to restore from: RESTORE comes only once it named one."""
        point = self.recovery.point if self.recovery is not None else None
        if point is None:
            raise RuntimeError("it restores with no restore point from its coordinator")
        return point

    def _take_over(
        self,
        recovery: Recovery,
        restored: list[Restored],
        own: TaskSnapshot | None,
        committed: Epoch | None,
    ) -> bool:
        """Restore the seat, then recall: its channels start where its snapshot left them
        when that snapshot is of this allocation, else from this allocation's beginning."""
        c, local = self.ctx, self._seat()
        self._begin(recovery, restored, then=Phase.RECALL)
        self.replay_epoch = 0
        if own is not None and committed is not None and committed.version == c.version:
            saved = own.causal
            if saved is not None:
                self.replay_epoch = committed.number
                local.take_over(saved, committed.number)
                self.windows.restore_timers(saved.timers)
                self.watermark = saved.watermark
        placement = c.placement
        downstream = c.downstream_peers()
        local.recall(frozenset(placement.seats[p] for p in downstream))
        for peer in downstream:
            c.send(peer, RECALL)
        for peer in placement.upstream.get(c.task.name, ()):
            c.send(peer, ReplayFrom(self.replay_epoch))
        return True

    def _recall(self) -> bool:
        """Waiting for every downstream peer's answer; then replay."""
        local = self._seat()
        if not local.recalled():
            self.watchdog.check(local.answers(), "the recall of the downstream peers")
            return False
        local.replay()
        self._enter(Phase.REPLAY)
        return True

    def _seat(self) -> LocalRecovery:
        """The part in local recovery of a runner that took a seat over, which has one."""
        if not isinstance(self.local, LocalRecovery):
            raise RuntimeError("it took a seat over in a job without local recovery")
        return self.local

    def _replay(self) -> bool:
        """Run as the log says until it is replayed (the input may end within the replay:
        REPLAY_ENDED), then carry on live (RUN, or ENDED)."""
        local = self._seat()
        if self.closing is not None:
            self.watchdog.restart()  # a close of windows under way is the replay moving
            return self._run()
        if self.clock.replaying:
            self.watchdog.check(local.replayed_to(), "the replay")
            return self._run()
        self._advance_watermark(self.intake.mark())  # as the seat did after its last take
        local.check_replayed()
        self._enter(REPLAYED[self.phase])
        self.meters.local_recoveries.inc()
        self.ctx.recovered()
        log.info("peer %s replayed seat %d of task %r of job %s and goes on",
                 self.ctx.peer, self.ctx.seat, self.ctx.task.name, self.ctx.job.id)  # fmt: skip
        return True

    def _begin(
        self, recovery: Recovery, restored: list[Restored], then: Phase = Phase.RUN,
        scope: str = "local",
    ) -> bool:  # fmt: skip
        """Restore from the snapshots (none: start afresh) and run (or ``then``), counting the
        restore in its ``scope``: a seat taken over (local), or the whole job's (global, or
        handover when the job stood still at the commit)."""
        c = self.ctx
        live = [r for r in restored if not r.snapshot.ended]
        self.flushed = len(live) < len(restored) and not live
        with self.mark:
            self._recover(recovery, live)
        channel = self._channel(restored)
        self.fetched = NOTHING_FETCHED
        if channel:
            self._take(channel, time.perf_counter())
        if restored:
            self.meters.restores[scope].inc()
            start = recovery.committed.describe() if recovery.committed else "its start"
            log.info("peer %s restored task %r of job %s from %s, scope %s",
                     c.peer, c.task.name, c.job.id, start, scope)  # fmt: skip
        with self.mark:
            call(self.hooks.before_task, self.event)
        self._enter(then)
        log.debug("peer %s runs task %r of job %s", c.peer, c.task.name, c.job.id)
        return True

    def _recover(self, recovery: Recovery, live: list[Restored]) -> None:
        """The plugin, the windows and the fn given back their state, and the keyed state each
        old slot's chain holds."""
        self.plugin.recover(recovery)
        kept = self.fetched.kept
        if kept is not None:
            self.fetched = replace(self.fetched, kept=None)
            if live:
                c, stays = self.ctx, overlap(kept.held, self.ctx.owned)
                self.keyed.adopt(kept.backend, c.owned)
                log.info("peer %s keeps key groups %d to %d of task %r of job %s, held here",
                         c.peer, stays.start, stays.stop - 1, c.task.name, c.job.id)  # fmt: skip
            else:
                kept.backend.close()
        if live:
            keep = self.fetched.keep
            self.windows.restore([r.snapshot.windows for r in live], keep)
            self.apply.restore([r.snapshot.fn for r in live], keep)
            layers = [layer for r in live for layer in r.layers]
            self.keyed.restore(layers, self.fetched.owned)

    def _channel(self, restored: list[Restored]) -> list[Segment]:
        """The rows of the restored snapshots' channel state that are this slot's to take
        again, first (peer.runtime.unaligned): of a keyed task, those whose key routes here;
        otherwise an old slot's all go to one new slot, old modulo new."""
        c = self.ctx
        held = [(old, row) for old, r in zip(self.fetched.slots, restored, strict=True)
                for batch in r.snapshot.channel for row in batch]  # fmt: skip
        if c.key_of is not None:
            return [row for _, row in held if self.fetched.keep(c.key_of(row))]
        return [row for old, row in held if old % c.slots == c.slot]

    def _mine(self, key: Any) -> bool:
        """Whether a group key's key group is this slot's: what a restoring slot keeps."""
        return key_group(key, self.ctx.key_groups) in self.ctx.owned

    def _run(self) -> bool:
        """One round of RUN (and of ENDED, where the intake has nothing more to read)."""
        busy = self._acknowledge()
        if self.sealing is not None:
            busy = self._seal(self.sealing) or busy
        busy = self.emitter.pump() or busy
        if self.closing is not None:
            return self._go_on_closing(*self.closing) or busy
        self._emit(self.windows.due(self.clock))
        in_flight = self.in_flight
        if in_flight and in_flight[0][0].done():
            return self._returned()
        emitter = self.emitter
        if emitter.staged:
            return self._write() or busy
        barrier = self.intake.next_barrier()
        if barrier is not None:
            return self._pass_barrier(barrier)
        if len(in_flight) >= SPARK_IN_FLIGHT:
            return busy
        if emitter.blocked():
            if not self.blocked:
                self.blocked = True
                self.meters.backpressure.inc()
            return busy
        self.blocked = False
        batch = self._read()
        if batch:
            self.meters.segments_in.inc(len(batch))
            self._take(batch, time.perf_counter())
            return True
        if in_flight:
            return busy
        return self._between_batches() or busy

    def _between_batches(self) -> bool:
        """Nothing to read: pass a new watermark, an aligned barrier, the end, or complete.
        The watermark goes first, so that a barrier's snapshot holds the watermark of what was
        taken before it, passed on: a replacement replaying from that snapshot then passes
        each later watermark where the seat did, before or after the takes that follow."""
        if self._advance_watermark(self.intake.mark()):
            return True
        barrier = self.intake.aligned()
        if barrier is not None:
            return self._pass_barrier(barrier)
        if self.phase not in INPUT_OVER and self.clock.may_end(self.intake.finished):
            self._end()
            return True
        if self.completed and self.plugin.synced():
            self.completed = False
            self.ctx.complete()
            self._enter(Phase.COMPLETED)
            return True
        return False

    def _nothing(self) -> bool:
        """Completed, failed or closed: nothing is left to do."""
        return False

    # -- batches --------------------------------------------------------------------------------

    def _read_marked(self) -> Any:
        with self.mark:
            return self.intake.read()

    def _write_marked(self) -> bool:
        with self.mark:
            return self.emitter.write()

    def _apply_now(self, batch: Any, started: float) -> None:
        with self.mark:
            if self.hooks.before_batch:
                call(self.hooks.before_batch, self.event, batch)
            with self.clock.active():
                out = self.apply.apply(batch)
            self._processed(out, self.intake.mark(), started)
            self.keyed.bound()

    def _submitter(self, apply: AsyncApply) -> Callable[[Any, float], None]:
        """How a batch is taken by ``apply``, the runner's asynchronous apply part: submitted,
        its future queued behind those in flight."""

        def submit(batch: Any, started: float) -> None:
            with self.mark:
                if self.hooks.before_batch:
                    call(self.hooks.before_batch, self.event, batch)
                future = apply.submit(batch, self.mark.elsewhere())  # the pool's thread marks
                self.in_flight.append((future, self.intake.mark(), started))

        return submit

    def _returned(self) -> bool:
        """The oldest batch submitted is back: pass its rows on, then the watermark that came
        with it (not a later one, which batches still in flight may not have reached)."""
        future, mark, started = self.in_flight.popleft()
        with self.mark:
            self._processed(future.result(), mark, started)
        return True

    def _processed(self, out: Any, mark: float | None, started: float) -> None:
        self._emit(self.windows.apply(out, self.clock))
        self.meters.batch_seconds.observe(time.perf_counter() - started)
        self._advance_watermark(mark)
        if self.hooks.after_batch:
            call(self.hooks.after_batch, self.event, out)

    def _emit(self, segments: Any) -> None:
        if not segments:
            return
        self.meters.segments_out.inc(len(segments))
        self.emitter.emit(segments)

    # -- barriers, watermarks, the end ----------------------------------------------------------

    def _pass_barrier(self, barrier: Barrier) -> bool:
        """Send the barrier on at once, then snapshot (what went down each channel, the barrier
        included, is part of it) and upload in the background."""
        c = self.ctx
        self.clock.barrier(barrier.epoch)
        self.emitter.broadcast(barrier)
        epoch = self.snapshotted = Epoch(c.version, barrier.epoch)
        plugin, durable = position(self.plugin.checkpoint(epoch))
        windows, apply, chain = self.windows, self.apply, self.stored.chain
        whole = chain.whole()
        parts = self.keyed.parts(whole)
        snapshot = TaskSnapshot(plugin, windows.snapshot(), apply.snapshot(),
                                self.phase in INPUT_OVER, self.local.kept(windows, self.watermark),
                                chain=chain.taken(barrier.epoch, whole, parts.size))  # fmt: skip
        self.sealing = sealing = (epoch, snapshot, parts, durable)
        self._seal(sealing)
        if barrier.final and self.output:
            self.final = barrier.epoch
        return True

    def _seal(self, sealing: PendingSnapshot) -> bool:
        """Store ``sealing``, the snapshot being taken, with its channel state, once the intake
        has it."""
        channel = self.intake.sealed()
        if channel is None:
            return False
        c = self.ctx
        storage = c.storage
        if storage is None:
            raise RuntimeError("it passed a barrier with no checkpoint storage to store it in")
        epoch, snapshot, parts, durable = sealing
        self.sealing = None
        if channel:
            snapshot = replace(snapshot, channel=channel)
        stored = snapshot  # the snapshot as stored, channel included
        upload = storage.put(c.job_id, epoch, c.task.name, c.slot,
                             lambda: stored.chunks(parts.read()))  # fmt: skip
        upload.add_done_callback(lambda _: parts.release())
        since = snapshot.chain[0] if snapshot.chain else epoch.number
        ack = Ack(epoch.number, since)
        self.stored.uploads.append(Upload(ack, joined(upload, durable), parts))
        return True

    def _acknowledge(self) -> bool:
        acked = False
        uploads, chain = self.stored.uploads, self.stored.chain
        while uploads and uploads[0].done.done():
            upload = uploads.popleft()
            self.meters.snapshot_bytes.observe(upload.done.result())
            if upload.parts.size is not None:  # read whole at least once, as it was stored
                chain.measured(upload.ack.epoch, upload.parts.size)
            self.ctx.report(upload.ack)
            acked = True
        return acked

    def _advance_watermark(self, mark: float | None) -> bool:
        if mark is None or (self.watermark is not None and mark <= self.watermark):
            return False
        self.watermark = mark
        self.meters.watermark.set(mark)
        self._close(self.windows.watermark(mark), lambda: self.emitter.broadcast(Watermark(mark)))
        return True

    def _close(self, closing: Iterator[list[Any]], then: Callable[[], None]) -> None:
        """Emit what a close of windows gives, then do ``then``: at once, unless it takes more
        than CLOSE_SLICE seconds (a large keyed state's keys), when the next steps go on with
        it. A step that runs long keeps its group from answering heartbeats."""
        self.closing = (closing, then)
        self._go_on_closing(closing, then)

    def _go_on_closing(self, closing: Iterator[list[Any]], then: Callable[[], None]) -> bool:
        """Emit what the close under way gives for CLOSE_SLICE seconds at most, while
        downstream takes it; once it is through, do what follows it."""
        until = time.perf_counter() + CLOSE_SLICE
        with self.mark:
            for out in closing:
                self._emit(out)
                if time.perf_counter() >= until or self.emitter.blocked():
                    return True
        self.closing = None
        then()
        return True

    def _end(self) -> None:
        self._enter(ENDING[self.phase])
        self.intake.end()
        if self.flushed:
            self._ended()
            return
        with self.mark:
            self._emit(self.apply.flush())
        self._close(self.windows.finish(), self._ended)

    def _ended(self) -> None:
        """The end, once the fn is flushed and the windows finished: sent on, and, for an
        output, the drain reported."""
        c = self.ctx
        with self.mark:
            self.emitter.broadcast(END)
            call(self.hooks.after_task, self.event)
        if self.output:
            if c.checkpointed:
                c.report(DRAINED)
            else:
                self.completed = True

    def _shelve(self) -> bool:
        """Leave the slot's keyed state on its process's shelf for the next allocation's slots
        (peer.runtime.state_shelf), if it is exactly what its last snapshot holds: it runs, passed a
        barrier, and wrote nothing since. Whether it did."""
        c, keyed, epoch = self.ctx, self.keyed, self.snapshotted
        if c.shelf is None or epoch is None or not c.keyed or self.phase is not Phase.RUN:
            return False
        if keyed.changed() or self.sealing is not None or not keyed.backend.groups():
            return False  # written since its last snapshot, still sealing it, or holding none
        c.shelf.put(Shelved(c.job_id, c.task.name, epoch, c.slot, c.slots, c.key_groups,
                            keyed.backend))  # fmt: skip
        return True

    def close(self) -> None:
        if self.phase is Phase.CLOSED:
            return
        self.closing = None  # a close under way stops reading the keyed state, its iterators go
        shelved = self._shelve()
        self._enter(Phase.CLOSED)
        try:
            self.plugin.close()
        except FAILURES as e:
            log.warning("task %r: closing its plugin raised %s", self.ctx.task.name, e)
        self.plugin = NO_PLUGIN
        kept = self.fetched.kept
        try:
            if kept is not None:
                kept.backend.close()
            if not shelved:
                self.keyed.close()
        except FAILURES as e:
            log.warning("task %r: closing its keyed state raised %s", self.ctx.task.name, e)
        for upload in self.stored.uploads:
            upload.done.cancel()
        if self.sealing is not None:
            self.sealing[2].release()
        for fetch in self.fetched.snapshots:
            fetch.cancel()
        for future, *_ in self.in_flight:
            future.cancel()


def _holding(owned: range, old: int, key_groups: int) -> range:
    """The old slots, of ``old``, that held some of the key groups in ``owned``: a contiguous
    run, since each slot owns a contiguous range of key groups."""
    held = [o for o in range(old) if overlap(groups_of(o, old, key_groups), owned)]
    return range(held[0], held[-1] + 1) if held else range(0)


def _index(job: Job, task: Task) -> int:
    """Where ``task`` stands in its job's catalog: how a mark names it."""
    return next(i for i, t in enumerate(job.catalog) if t.name == task.name)
