"""One virtual peer's work on one task, as a state machine that never waits.

A peer group drives all its virtual peers from one thread, so each ``step`` does at most one
batch of work and returns whether it did any. The states:

- ``start``: load the code and the plugin. A job with checkpoints then waits for its
  coordinator's RECOVER, fetches the snapshots it names (in the group's pool, without blocking)
  and restores the plugin, the window state and a stateful fn from them; a job without starts
  from the beginning at once.
- ``run``: read a batch (an input polls its plugin; other tasks take from their inbox, one
  queue per upstream peer), apply the fn, then either assign the segments to the task's windows
  (only what triggers emit goes on) or route them downstream; an output prepares and writes
  them. Barriers: an input snapshots at the barrier its coordinator sends between two batches;
  other tasks once the same barrier has come from every upstream peer (see peer.runtime.inbox).
  Batches flow on credit: a peer sends at most WINDOW batches down an edge beyond what the
  receiver has taken, and the receiver gives credit back as it takes them.
  The snapshot is uploaded in the pool and ACKed to the coordinator when stored; the barrier goes
  on downstream at once. An input's watermark comes from its plugin's ``watermark()`` or, failing
  that, is the largest its task's ``assign_watermark_fn`` gave over the segments read; other
  tasks take the smallest over their upstream peers; each passes it on when it rises.
- the end: when the input side is over (an input's plugin completed and synced; every upstream
  peer's end marker taken), a stateful fn is flushed and the windows finished, and the end marker
  goes downstream. An output then reports: with checkpoints it tells the coordinator it is
  DRAINED and completes the job once the final epoch is committed (so its output is published);
  without, it completes once its plugin is synced.

A Spark task's (``engine: spark``) fn takes a DataFrame of a batch and returns one; the batch
runs in the group's Spark pool while the peer waits for it without blocking (peer.spark.function).

A task's ``fn`` takes one segment and returns a segment, a list of them, or None. When the path
names a class, each start makes a fresh instance, whose state lives as long as the allocation;
``flush()`` (if any) runs when the input ends, ``snapshot()`` and ``restore(snapshots, keep)``
(if any) let its state survive failures like window state does. Functions must not change the
segments they are given.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import msgpack

from peer.job.imports import resolve
from peer.job.spec import ALL, HOOKS, Job, Task
from peer.messaging.messages import END, Barrier, Watermark
from peer.metrics import TaskMeters, task_meters
from peer.plugins import Epoch, Recovery, load
from peer.runtime.checkpoints import CheckpointStorage
from peer.runtime.inbox import Inbox
from peer.runtime.routing import Router, key_hash
from peer.spark.function import SparkFunction
from peer.state import TaskState

log = logging.getLogger(__name__)

Segment = Any

WINDOW = 64
"""Batches a peer may have in flight to one downstream peer before it waits for credit: what
bounds every inbox, so a barrier never queues behind more than a window of batches per edge."""


SPARK_IN_FLIGHT = 3
"""Batches a Spark task may have in Spark at once: a batch spends most of its time waiting on
Spark's scheduling, so a few in flight keep Spark busy; their rows still go on in order."""


class TaskFailed(RuntimeError):
    """The job's work on this group failed (its code, its data, its coordinator): the job cannot
    go on. The message names the job, the task and peer (or the coordinator) and the error."""


@dataclass
class TaskContext:
    """What a runner needs from its group: where it stands and how to reach the world."""

    job: Job
    task: Task
    peer: str
    version: int
    slot: int
    slots: int
    upstream: frozenset[int]
    """Short ids of every peer that sends to this one."""
    router: Router
    send: Callable[[str, Any], None]
    """Send a batch (a list) or a Barrier, Watermark or END to a downstream peer."""
    report: Callable[[str, int], None]
    """Tell the coordinator: "ack" (with the epoch) or "drained"."""
    grant: Callable[[int, int], None]
    """Give an upstream peer (by short id) credit for this many more batches."""
    congested: Callable[[], bool]
    complete: Callable[[], None]
    key_of: Callable[[Segment], Any] | None = None
    storage: CheckpointStorage | None = None
    fetch: Callable[[str, Epoch, int], Future[bytes]] | None = None
    """Fetch the snapshot of (job, epoch, slot) of this task."""
    imports: Callable[[], AbstractContextManager[None]] = nullcontext
    """Where the job's code imports from while the task loads it: the installed packages, or
    the archive shipped with the job (peer.job.code)."""

    @property
    def checkpointed(self) -> bool:
        return self.storage is not None


def _hooks(job: Job, task: str, name: str) -> list[Callable[[dict[str, Any]], Any]]:
    return [
        resolve(getattr(lc, name))
        for lc in job.lifecycles
        if lc.task in (ALL, task) and getattr(lc, name)
    ]


def _function(path: str | None) -> Callable[[Segment], Any] | None:
    if path is None:
        return None
    target = resolve(path)
    return target() if isinstance(target, type) else target


def _collect(results: Iterable[Any]) -> list[Segment]:
    """What fns returned, flattened: a segment, a list of segments, or None for none."""
    out: list[Segment] = []
    append, extend = out.append, out.extend
    for result in results:
        if isinstance(result, list):
            extend(result)
        elif result is not None:
            append(result)
    return out


@dataclass
class TaskRunner:
    ctx: TaskContext
    state: str = "start"
    inbox: Inbox = field(init=False)
    plugin: Any = None
    fn: Callable[[Segment], Any] | None = None
    windows: TaskState | None = None
    staged: bool = False
    hooks: dict[str, list[Callable[[dict[str, Any]], Any]]] = field(default_factory=dict)
    barriers: deque[Barrier] = field(default_factory=deque)
    """Barriers from the coordinator, for an input."""
    recovery: list[Any] | None = None
    fetching: list[Future[bytes]] = field(default_factory=list)
    uploads: deque[tuple[int, Future[Any]]] = field(default_factory=deque)
    watermark: float | None = None
    assign: Callable[[Segment], float] | None = None
    assigned: float | None = None
    ended: bool = False
    final: int | None = None
    completed: bool = False
    credits: dict[str, int] = field(init=False)
    meters: TaskMeters | None = None
    blocked: bool = False
    """Whether the last step found downstream congested or out of credit."""
    barrier_since: float | None = None
    """When the first upstream peer's barrier of the epoch being aligned arrived."""
    spark: SparkFunction | None = None
    pending: deque[tuple[Future[list[Segment]], float | None, float]] = field(default_factory=deque)
    """A Spark task's batches in Spark, oldest first, each with the watermark read with it and
    when it was read."""
    broken: Exception | None = None
    """What building this runner's routing raised; its first step fails the task with it."""

    def __post_init__(self) -> None:
        self.inbox = Inbox(self.ctx.upstream)
        self.credits = dict.fromkeys(self.ctx.router.peers(), WINDOW)

    # -- what the group hands in ----------------------------------------------------------------

    def deliver(self, source: int, item: Any) -> None:
        """A batch, Barrier, Watermark or END from an upstream peer; a Barrier for an input
        comes from the coordinator."""
        if self.ctx.task.kind == "input" and isinstance(item, Barrier):
            self.barriers.append(item)
            return
        if isinstance(item, Barrier) and self.barrier_since is None:
            self.barrier_since = time.perf_counter()
        self.inbox.put(source, item)

    def _aligned(self) -> None:
        """The barrier has come from every upstream peer: how long the first one waited."""
        if self.barrier_since is not None and self.meters is not None:
            self.meters.alignment_seconds.observe(time.perf_counter() - self.barrier_since)
        self.barrier_since = None

    def credit(self, peer: str, batches: int) -> None:
        if peer in self.credits:
            self.credits[peer] += batches

    def recover_from(self, body: list[Any]) -> None:
        self.recovery = body

    def committed(self, epoch: int) -> None:
        if self.plugin is not None:
            self.plugin.committed(Epoch(self.ctx.version, epoch))
        if self.final is not None and epoch >= self.final:
            self.final = None
            self.completed = True

    # -- the state machine ----------------------------------------------------------------------

    def step(self) -> bool:
        try:
            return getattr(self, f"_{self.state}")()
        except Exception as e:
            c = self.ctx
            raise TaskFailed(
                f"job {c.job.id!r}: task {c.task.name!r} on peer {c.peer}: {type(e).__name__}: {e}"
            ) from e

    def _start(self) -> bool:
        c = self.ctx
        if self.broken is not None:
            raise self.broken
        self.meters = task_meters(c.job.id, c.task.name)
        with c.imports():
            self._load()
        if not c.checkpointed:
            return self._restore(Recovery(None, None, Epoch(c.version, 1)), [])
        self.state = "awaiting"
        return True

    def _load(self) -> None:
        """The task's code and plugin, resolved from the job's paths."""
        c = self.ctx
        if c.task.engine == "spark":
            self.spark = SparkFunction(c.task)
        else:
            self.fn = _function(c.task.fn)
        self.assign = _function(c.task.assign_watermark_fn)
        self.hooks = {name: _hooks(c.job, c.task.name, name) for name in HOOKS}
        if any(w.task == c.task.name for w in c.job.windows):
            self.windows = TaskState(c.job, c.task.name, c.key_of)
        if c.task.kind != "function":
            self.plugin = load(c.task, c.slot, c.slots)

    def _awaiting(self) -> bool:
        """Waiting for the coordinator to say where to restore from."""
        if self.recovery is None:
            return False
        if not self.recovery:
            return self._restore(Recovery(None, None, Epoch(self.ctx.version, 1)), [])
        source, version, number, slots = self.recovery
        old = slots.get(self.ctx.task.name, 0)
        if self.ctx.task.kind == "input" and old != self.ctx.slots:
            raise ValueError(
                f"its checkpoint was taken by {old} peers and it now runs on {self.ctx.slots}: "
                "an input task needs n_peers for its positions to be restored"
            )
        epoch = Epoch(version, number)
        self.fetching = [self.ctx.fetch(source, epoch, slot) for slot in range(old)]
        self.state = "restoring"
        return True

    def _restoring(self) -> bool:
        if not all(f.done() for f in self.fetching):
            return False
        snapshots = [msgpack.unpackb(f.result(), strict_map_key=False) for f in self.fetching]
        _, version, number, _ = self.recovery
        own = snapshots[self.ctx.slot] if self.ctx.slot < len(snapshots) else None
        committed = Epoch(version, number)
        recovery = Recovery(own["plugin"] if own else None, committed, Epoch(self.ctx.version, 1))
        return self._restore(recovery, snapshots)

    def _restore(self, recovery: Recovery, snapshots: list[dict[str, Any]]) -> bool:
        c = self.ctx
        if self.plugin is not None:
            self.plugin.recover(recovery)
        if snapshots and self.windows is not None:
            self.windows.restore([s["windows"] for s in snapshots], self._mine)
        restore = getattr(self.fn, "restore", None)
        if snapshots and restore is not None:
            restore([s["fn"] for s in snapshots], self._mine)
        self.fetching = []
        self._call_hooks("before_task")
        self.state = "run"
        log.debug("peer %s runs task %r of job %s", c.peer, c.task.name, c.job.id)
        return True

    def _mine(self, key: Any) -> bool:
        """Whether a group key routes to this slot: what a restoring slot keeps."""
        return key_hash(key) % self.ctx.slots == self.ctx.slot

    def _run(self) -> bool:
        busy = self._acknowledge()
        if self.windows is not None:
            self._emit(self.windows.tick(time.time()))
        if self.pending and self.pending[0][0].done():
            return self._spark_done()
        if self.staged:
            return self._write() or busy
        if self.ctx.task.kind == "input" and self.barriers:
            return self._pass_barrier(self.barriers.popleft())
        if len(self.pending) >= SPARK_IN_FLIGHT:
            return busy
        if self.ctx.congested() or min(self.credits.values(), default=1) <= 0:
            if not self.blocked:
                self.blocked = True
                self.meters.backpressure.inc()
            return busy
        self.blocked = False
        batch = self._read()
        if batch:
            self.meters.segments_in.inc(len(batch))
            self._process(batch, time.perf_counter())
            return True
        if self.pending:
            return busy
        return self._between_batches() or busy

    def _between_batches(self) -> bool:
        """Nothing to read: pass an aligned barrier, a new watermark, or the end."""
        if self.ctx.task.kind != "input":
            barrier = self.inbox.aligned()
            if barrier is not None:
                self.inbox.release()
                self._aligned()
                return self._pass_barrier(barrier)
        if self._advance_watermark(self._mark()):
            return True
        if not self.ended and self._input_finished():
            self._end()
            return True
        if self.completed and (self.plugin is None or self.plugin.synced()):
            self.completed = False
            self.ctx.complete()
            return True
        return False

    # -- batches --------------------------------------------------------------------------------

    def _read(self) -> list[Segment]:
        if self.ctx.task.kind != "input":
            batch = self.inbox.take(self.ctx.task.batch_size)
            for source, batches in self.inbox.returned(WINDOW // 2).items():
                self.ctx.grant(source, batches)
            return batch
        batch = [] if self.ended else self.plugin.poll(self.ctx.task.batch_size)
        if batch and self.assign is not None:
            self.assigned = max(self.assigned or -math.inf, *map(self.assign, batch))
        return batch

    def _input_finished(self) -> bool:
        if self.ctx.task.kind == "input":
            return self.plugin.completed() and self.plugin.synced()
        return self.inbox.drained()

    def _process(self, batch: list[Segment], started: float) -> None:
        self._call_hooks("before_batch", batch)
        if self.spark is not None:
            self.pending.append((self.spark.submit(batch), self._mark(), started))
        else:
            self._processed(self._apply(batch), self._mark(), started)

    def _spark_done(self) -> bool:
        """The oldest batch in Spark is back: pass its rows on, then the watermark that came
        with it (not a later one, which batches still in Spark may not have reached)."""
        future, mark, started = self.pending.popleft()
        self._processed(future.result(), mark, started)
        return True

    def _processed(self, out: list[Segment], mark: float | None, started: float) -> None:
        if self.windows is not None:
            self._emit(self.windows.apply(out, time.time()))
        else:
            self._emit(out)
        self.meters.batch_seconds.observe(time.perf_counter() - started)
        self._advance_watermark(mark)
        self._call_hooks("after_batch", out)

    def _emit(self, segments: list[Segment]) -> None:
        if not segments:
            return
        self.meters.segments_out.inc(len(segments))
        if self.ctx.task.kind == "output":
            self.plugin.prepare(segments)
            self.staged = True
            self._write()
            return
        for peer, batch in self.ctx.router.split(segments).items():
            self.credits[peer] -= 1
            self.ctx.send(peer, batch)

    def _apply(self, batch: list[Segment]) -> list[Segment]:
        return batch if self.fn is None else _collect(map(self.fn, batch))

    def _write(self) -> bool:
        if self.plugin.write():
            self.staged = False
            return True
        return False

    # -- barriers, watermarks, the end ----------------------------------------------------------

    def _pass_barrier(self, barrier: Barrier) -> bool:
        """Snapshot, upload in the background, and send the barrier on at once."""
        c = self.ctx
        epoch = Epoch(c.version, barrier.epoch)
        snapshot = {
            "plugin": self.plugin.checkpoint(epoch) if self.plugin is not None else None,
            "windows": self.windows.snapshot() if self.windows is not None else None,
            "fn": self.fn.snapshot() if hasattr(self.fn, "snapshot") else None,
        }
        blob = msgpack.packb(snapshot)
        self.meters.snapshot_bytes.observe(len(blob))
        upload = c.storage.put(c.job.id, epoch, c.task.name, c.slot, blob)
        self.uploads.append((barrier.epoch, upload))
        for peer in c.router.peers():
            c.send(peer, barrier)
        if barrier.final and c.task.kind == "output":
            self.final = barrier.epoch
        return True

    def _acknowledge(self) -> bool:
        acked = False
        while self.uploads and self.uploads[0][1].done():
            epoch, upload = self.uploads.popleft()
            upload.result()
            self.ctx.report("ack", epoch)
            acked = True
        return acked

    def _mark(self) -> float | None:
        """The watermark as of what this peer has read so far."""
        if self.ctx.task.kind == "input":
            source = getattr(self.plugin, "watermark", None)
            return source() if source is not None else self.assigned
        return self.inbox.watermark()

    def _advance_watermark(self, mark: float | None) -> bool:
        if mark is None or (self.watermark is not None and mark <= self.watermark):
            return False
        self.watermark = mark
        if self.windows is not None:
            self._emit(self.windows.watermark(mark))
        for peer in self.ctx.router.peers():
            self.ctx.send(peer, Watermark(mark))
        return True

    def _end(self) -> None:
        c = self.ctx
        self.ended = True
        flush = getattr(self.fn, "flush", None)
        if flush is not None:
            self._emit(_collect([flush()]))
        if self.windows is not None:
            self._emit(self.windows.finish())
        for peer in c.router.peers():
            c.send(peer, END)
        self._call_hooks("after_task")
        if c.task.kind == "output":
            if c.checkpointed:
                c.report("drained", 0)
            else:
                self.completed = True

    def _call_hooks(self, name: str, batch: list[Segment] | None = None) -> None:
        hooks = self.hooks.get(name)
        if hooks:
            event = {"job": self.ctx.job.id, "task": self.ctx.task.name, "peer": self.ctx.peer}
            if batch is not None:
                event["batch"] = batch
            for hook in hooks:
                hook(event)

    def close(self) -> None:
        if self.plugin is not None:
            try:
                self.plugin.close()
            except Exception as e:
                log.warning("task %r: closing its plugin raised %s", self.ctx.task.name, e)
            self.plugin = None
        for _, upload in self.uploads:
            upload.cancel()
        for fetch in self.fetching:
            fetch.cancel()
        for future, *_ in self.pending:
            future.cancel()
