"""Where a task's batches come from: the intake part of its runner, chosen once by its kind.

An input polls its plugin, and takes its barriers from the coordinator, passing each between
two batches; its watermark is the plugin's ``watermark()`` or, failing that, the largest its
``assign_watermark_fn`` gave over the segments read. Every other task takes from its inbox, one
queue per upstream peer (peer.runtime.inbox): a barrier passes once it has come from every
upstream peer and nothing before it is left to read, the watermark is the smallest over the
upstream peers, and the batches taken go back to their senders as credit. An output of a job
that recovers locally takes its barriers unaligned instead (peer.runtime.unaligned), so that a
failed upstream seat holds back none of the others.

How much credit each sender gets is chosen once, by the job: fixed windows (``InboxIntake``,
``debloat_target`` null) or windows the intake sizes by its own throughput, so that a barrier
waits behind about ``debloat_target`` seconds of its work (``DebloatedIntake``, see
peer.runtime.debloat). Either way the intake keeps the count of what each sender may have in
flight (a Ledger), and a replay that must take more from a sender than it has in flight gives
it the credit for it first.
"""

from __future__ import annotations

import functools
import math
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from peer.job.spec import Task
from peer.messaging.messages import Barrier, Batch
from peer.metrics import TaskMeters
from peer.runtime.debloat import WEIGHT, Ledger, Throughput, first_credit, row_limit, sized
from peer.runtime.emit import WINDOW
from peer.runtime.idleness import idleness_for
from peer.runtime.inbox import Inbox, SidedInbox
from peer.runtime.unaligned import UnalignedInbox
from peer.values.columnar import Segment, concat, rows

Grant = Callable[[int, int, int], None]
"""Give an upstream peer (by short id) credit for this many more batches, and the most rows a
batch to this peer should hold (0: no limit)."""


def read_limit(batch_size: int, *asked: int) -> int:
    """The most rows a read takes: the task's ``batch_size``, or fewer where a limit asked for
    asks fewer (0: no limit)."""
    return min((batch_size, *(rows for rows in asked if rows)))


class Intake(Protocol):
    def deliver(self, source: int, item: Any) -> None:
        """A batch, Barrier, Watermark or END from an upstream peer (for an input, a Barrier
        from the coordinator)."""

    def next_barrier(self) -> Barrier | None:
        """A barrier to pass before reading on: an input's, from its coordinator."""

    def read(self) -> Any:
        """The next batch, empty when there is none now."""

    def aligned(self) -> Barrier | None:
        """A barrier every upstream peer has reached, released, once nothing is left to read."""

    def sealed(self) -> list[Any] | None:
        """What the snapshot of the barrier last passed keeps of the channels (batches of rows
        taken after it from upstream peers whose copy of it had not come), once every copy
        has come; None until then. Aligned intakes keep nothing: [] at once."""

    def mark(self) -> float | None:
        """The watermark as of what has been read."""

    def finished(self) -> bool:
        """Whether the input side is over: nothing more will come."""

    def end(self) -> None:
        """The runner has ended its input: read no more."""

    def follow(self, rows: int) -> None:
        """Read batches of at most ``rows`` rows (0: the task's batch_size): what the
        downstream peers asked for, so that no batch takes them longer than their target."""

    def patience(self) -> float:
        """Seconds until a read holding rows back must let them go (inf: it holds none)."""


class PluginIntake:
    """An input's: its plugin (attached when it loads) polled, barriers from the coordinator."""

    def __init__(self, task: Task) -> None:
        self.batch_size = self.limit = task.batch_size
        self.plugin: Any = None
        self.assign: Callable[[Segment], float] | None = None
        self.source: Callable[[], float | None] | None = None
        self.assigned: float | None = None
        self.idle = idleness_for(task)
        self.barriers: deque[Barrier] = deque()
        self.over = False
        self.paused = False
        """A hand-over's pause came last: nothing is read until a barrier that is not one."""

    def attach(self, plugin: Any, assign: Callable[[Segment], float] | None) -> None:
        self.plugin, self.assign = plugin, assign
        self.source = getattr(plugin, "watermark", None)

    def deliver(self, source: int, item: Any) -> None:
        """Only barriers come to an input: it has no upstream peers."""
        if isinstance(item, Barrier):
            self.barriers.append(item)
            self.paused = item.pause

    def next_barrier(self) -> Barrier | None:
        return self.barriers.popleft() if self.barriers else None

    def read(self) -> Any:
        """Nothing once the input is over or paused. A pause stops reads from its delivery on,
        and the next barrier starts them again: barriers are passed ahead of any read, so
        nothing is read between the two."""
        if self.over or self.paused:
            return []
        return self._poll(self.limit)

    def _poll(self, limit: int) -> Any:
        batch = self.plugin.poll(limit)
        if batch:
            self.idle.read()
            if self.assign is not None:
                self.assigned = max(self.assigned or -math.inf, *map(self.assign, rows(batch)))
        return batch

    def aligned(self) -> Barrier | None:
        return None

    def sealed(self) -> list[Any] | None:
        return []

    def mark(self) -> float | None:
        return self.idle.mark(self.source() if self.source is not None else self.assigned)

    def finished(self) -> bool:
        return self.plugin.completed() and self.plugin.synced()

    def end(self) -> None:
        self.over = True

    def follow(self, rows: int) -> None:
        self.limit = read_limit(self.batch_size, rows)

    def patience(self) -> float:
        return math.inf


class FillingIntake(PluginIntake):
    """An input's with a ``max_batch_delay``: a poll that comes back short is held, and the
    plugin is not polled again until the delay has passed, when what that poll adds leaves with
    it. So a source trickling rows in is polled once a delay, not at every step, and makes
    batches of what came in that time, each costing the plugin's poll and every stage once; no
    row waits longer than the delay after a poll could have read it (and the loop's wake-up,
    which ``patience`` brings forward). A full poll leaves at once.

    Nothing read may pass a barrier, the end or a watermark before it leaves: a barrier lets the
    batch held go at once, ahead of it, the input ends only once nothing is held, and the
    watermark stays where it was when the holding began."""

    def __init__(self, task: Task, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(task)
        self.delay, self.clock = task.max_batch_delay, clock
        self.held: list[Any] = []
        """The polls held, each a batch (rows or Arrow), in order."""
        self.rows = 0
        self.since = 0.0
        self.before: float | None = None
        """The watermark when the holding began, passed on until the rows held have left."""

    def next_barrier(self) -> Barrier | None:
        return None if self.held else super().next_barrier()

    def read(self) -> Any:
        if self.held:
            return self._go_on()
        if self.over or self.paused:
            return []
        self.before = super().mark()
        batch = self._poll(self.limit)
        if not batch or len(batch) >= self.limit:
            return batch
        self.held, self.rows, self.since = [batch], len(batch), self.clock()
        return []

    def _go_on(self) -> Any:
        """With rows held: let them go, with what one more poll adds once the delay is over."""
        if self.barriers or self.rows >= self.limit or self.plugin.completed():
            return self._release()
        if self.clock() - self.since < self.delay:
            return []
        more = self._poll(self.limit - self.rows)
        if more:
            self.held.append(more)
        return self._release()

    def _release(self) -> Any:
        batch = concat(self.held)
        self.held, self.rows = [], 0
        return batch

    def mark(self) -> float | None:
        return self.before if self.held else super().mark()

    def finished(self) -> bool:
        return not self.held and super().finished()

    def patience(self) -> float:
        return self.since + self.delay - self.clock() if self.held else math.inf


class InboxIntake:
    """A function's or an output's: what its upstream peers sent, aligned at barriers, each
    sender on a fixed credit window (``window``)."""

    target: float | None = None
    """Seconds of this task's work its senders may have in flight: none, the windows are fixed."""

    def __init__(
        self,
        task: Task,
        upstream: frozenset[int],
        grant: Grant,
        meters: TaskMeters,
        *,
        window: Callable[[int], int] = lambda source: WINDOW,
        inbox: Callable[[frozenset[int]], Inbox] = Inbox,
    ) -> None:
        self.batch_size = self.limit = task.batch_size
        self.inbox = inbox(upstream)
        self.window = window
        """Each upstream peer's (by short id) fixed window: its credit's ceiling."""
        ceilings = {source: window(source) for source in sorted(upstream)}
        self.ledger = Ledger({s: self.first(c) for s, c in ceilings.items()}, ceilings)
        self.owed_at = self.ledger.owed_at
        """How many batches taken from each sender make it owed credit (peer.runtime.debloat)."""
        self.rows = 0
        """The row limit told to senders with their credit: none."""
        self.grant, self.meters = grant, meters
        self.barrier_since: float | None = None
        """When the first upstream peer's barrier of the epoch being aligned arrived."""

    def first(self, ceiling: int) -> int:
        """The credit a sender starts with, on an edge whose fixed window is ``ceiling``."""
        return first_credit(ceiling, self.target)

    def deliver(self, source: int, item: Any) -> None:
        if isinstance(item, Barrier):
            self._barrier_came(source)
        self.inbox.put(source, item)

    def _barrier_came(self, source: int) -> None:
        """A barrier waits behind what its sender sent before it: counted as it arrives."""
        if self.barrier_since is None:
            self.barrier_since = time.perf_counter()
        queue = self.inbox.queues.get(source, ())
        self.meters.queued_at_barrier.observe(sum(type(item) is Batch for item in queue))

    def next_barrier(self) -> Barrier | None:
        """An unaligned inbox's barrier that opens an epoch."""
        return self.inbox.opened()

    def read(self) -> Any:
        batch = self.inbox.take(self.limit)
        self._give_back()
        return batch

    def _give_back(self) -> None:
        """Credit back for the batches taken since the inbox last counted them, if any."""
        consumed = self.inbox.returned(self.owed_at)
        if consumed:
            self._give(consumed)

    def _give(self, consumed: dict[int, int]) -> None:
        """Credit back for the batches taken, as the ledger has it owed."""
        for source, batches in self.ledger.returned(consumed):
            self.grant(source, batches, self.rows)

    def read_exact(self, counts: Sequence[tuple[int, int]]) -> Any:
        """Exactly ``counts`` (source, messages) from the inbox, as a replay takes them; None
        while they have not all come. A sender with fewer in flight than the take needs (its
        window shrank since, or the take was larger than a window) is given credit for them."""
        self._ensure(counts)
        batch = self.inbox.take_exact(counts)
        if batch is not None:
            self._give_back()
        return batch

    def _ensure(self, counts: Sequence[tuple[int, int]]) -> None:
        needed: dict[int, int] = {}
        for source, n in counts:
            needed[source] = needed.get(source, 0) + n
        taken = self.inbox.consumed
        for source, n in sorted(needed.items()):
            if source in self.owed_at:
                more = self.ledger.ensure(source, taken[source], n)
                if more:
                    self.grant(source, more, self.rows)

    def rekey(self, old: int, new: int) -> None:
        """Sender ``old`` is now ``new`` (a replacement took its seat over): its queue moves,
        and its count starts from the new peer's first credit and what the old one sent that
        is still queued."""
        self.inbox.rekey(old, new)
        queued = sum(type(item) is Batch for item in self.inbox.queues[new])
        ceiling = self.window(new)
        first = self.first(ceiling)
        self.ledger.rekey(old, new, first + queued + self.inbox.consumed[new], first, ceiling)

    def follow(self, rows: int) -> None:
        self.limit = read_limit(self.batch_size, rows)

    def patience(self) -> float:
        """An inbox holds nothing back: what came is read at once."""
        return math.inf

    def aligned(self) -> Barrier | None:
        """The aligned barrier, and how long the first of its copies waited for the others."""
        barrier = self.inbox.aligned()
        if barrier is None:
            return None
        self.inbox.release()
        self._all_came()
        return barrier

    def sealed(self) -> list[Any] | None:
        """An unaligned inbox's channel state, as rows, once the epoch closes (how long it was
        open is the alignment it saved); [] at once for an aligned one."""
        channel = self.inbox.sealed()
        if channel is None:
            return None
        self._all_came()
        return [rows(batch) for batch in channel]

    def _all_came(self) -> None:
        if self.barrier_since is not None:
            self.meters.alignment_seconds.observe(time.perf_counter() - self.barrier_since)
        self.barrier_since = None

    def mark(self) -> float | None:
        return self.inbox.watermark()

    def finished(self) -> bool:
        return self.inbox.drained()

    def end(self) -> None:
        """Markers (a late watermark) may still follow the end: the inbox goes on taking."""


class DebloatedIntake(InboxIntake):
    """An inbox intake whose senders' windows follow its throughput (peer.runtime.debloat):
    each may have in flight its share of ``target`` seconds of this task's work, and, with
    ``smaller``, no batch to it, nor any read of it, holds more rows than it does in ``target``
    seconds."""

    target: float
    """Seconds of this task's work its senders may have in flight: what the windows follow."""

    def __init__(
        self,
        task: Task,
        upstream: frozenset[int],
        grant: Grant,
        meters: TaskMeters,
        *,
        target: float,
        window: Callable[[int], int] = lambda source: WINDOW,
        inbox: Callable[[frozenset[int]], Inbox] = Inbox,
        clock: Callable[[], float] = time.perf_counter,
        smaller: bool = True,
    ) -> None:
        self.target, self.clock, self.smaller = target, clock, smaller
        super().__init__(task, upstream, grant, meters, window=window, inbox=inbox)
        self.meter = Throughput()
        self.per_batch = 0.0
        """Rows per batch taken, a moving average: what turns rows of work into batches."""
        self.taken_rows = self.counted_rows = 0
        self.given = self.counted = 0
        """Batches taken whose credit went back, and batches taken as of the last sample."""
        self.told = 0
        """The row limit the downstream peers asked for (0: none)."""

    def read(self) -> Any:
        batch = self.inbox.take(self.limit)
        meter = self.meter
        if batch or meter.since is not None:
            taken = len(batch)
            self.taken_rows += taken
            if meter.took(self.clock(), taken):
                self._resize()
        self._give_back()
        return batch

    def read_exact(self, counts: Sequence[tuple[int, int]]) -> Any:
        batch = super().read_exact(counts)
        if batch is not None:
            self.taken_rows += len(batch)
        return batch

    def _give(self, consumed: dict[int, int]) -> None:
        self.given += sum(consumed.values())
        super()._give(consumed)

    def _resize(self) -> None:
        """A new throughput: every sender's window and the row limit follow it."""
        batches = self.given + sum(self.inbox.consumed.values())
        if batches > self.counted:
            size = (self.taken_rows - self.counted_rows) / (batches - self.counted)
            per = self.per_batch
            self.per_batch = size if not per else per + WEIGHT * (size - per)
            self.counted, self.counted_rows = batches, self.taken_rows
        if not self.per_batch:
            return
        rate = self.meter.rate
        self.ledger.resize(sized(rate, self.target, self.per_batch, self.ledger.ceilings))
        if self.smaller:
            self.rows = row_limit(rate, self.target)
            self._limit()

    def follow(self, rows: int) -> None:
        self.told = rows
        self._limit()

    def _limit(self) -> None:
        """Reads no larger than this task does in its target, nor than downstream asked."""
        self.limit = read_limit(self.batch_size, self.rows, self.told)


def intake_for(
    task: Task,
    upstream: frozenset[int],
    grant: Grant,
    meters: TaskMeters,
    *,
    window: Callable[[int], int] = lambda source: WINDOW,
    target: float | None = None,
    unaligned: bool = False,
    sides: Mapping[int, int] | None = None,
) -> PluginIntake | InboxIntake:
    """``window`` gives each upstream peer's (by short id) fixed credit window; ``target``, the
    seconds of this task's work its senders may have in flight (None: the fixed windows);
    ``unaligned``, that barriers are taken unaligned (peer.runtime.unaligned). A Spark task's
    batches keep their size: each costs Spark's scheduling whatever its rows, so smaller ones
    would cost it throughput, and less throughput smaller batches again. A join's task is
    told each upstream peer's side (``sides``, by short id), which its batches keep."""
    if task.kind == "input":
        return FillingIntake(task) if task.max_batch_delay else PluginIntake(task)
    inbox: Callable[[frozenset[int]], Inbox] = UnalignedInbox if unaligned else Inbox
    if sides is not None:
        inbox = functools.partial(SidedInbox, sides=sides)
    if target is None:
        return InboxIntake(task, upstream, grant, meters, window=window, inbox=inbox)
    return DebloatedIntake(
        task, upstream, grant, meters, target=target, window=window, inbox=inbox,
        smaller=task.engine != "spark",
    )  # fmt: skip
