"""Where a task's batches come from: the intake part of its runner, chosen once by its kind.

An input polls its plugin, and takes its barriers from the coordinator, passing each between
two batches; its watermark is the plugin's ``watermark()`` or, failing that, the largest its
``assign_watermark_fn`` gave over the segments read. Every other task takes from its inbox, one
queue per upstream peer (peer.runtime.inbox): a barrier passes once it has come from every
upstream peer and nothing before it is left to read, the watermark is the smallest over the
upstream peers, and the batches taken go back to their senders as credit. An output of a job
that recovers locally takes its barriers unaligned instead (peer.runtime.unaligned), so that a
failed upstream seat holds back none of the others.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from peer.job.spec import Task
from peer.messaging.messages import Barrier
from peer.metrics import TaskMeters
from peer.runtime.columnar import Segment, rows
from peer.runtime.emit import WINDOW
from peer.runtime.inbox import Inbox
from peer.runtime.unaligned import UnalignedInbox


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


class PluginIntake:
    """An input's: its plugin (attached when it loads) polled, barriers from the coordinator."""

    def __init__(self, task: Task) -> None:
        self.limit = task.batch_size
        self.plugin: Any = None
        self.assign: Callable[[Segment], float] | None = None
        self.source: Callable[[], float | None] | None = None
        self.assigned: float | None = None
        self.barriers: deque[Barrier] = deque()
        self.over = False

    def attach(self, plugin: Any, assign: Callable[[Segment], float] | None) -> None:
        self.plugin, self.assign = plugin, assign
        self.source = getattr(plugin, "watermark", None)

    def deliver(self, source: int, item: Any) -> None:
        """Only barriers come to an input: it has no upstream peers."""
        if isinstance(item, Barrier):
            self.barriers.append(item)

    def next_barrier(self) -> Barrier | None:
        return self.barriers.popleft() if self.barriers else None

    def read(self) -> Any:
        if self.over:
            return []
        batch = self.plugin.poll(self.limit)
        if batch and self.assign is not None:
            self.assigned = max(self.assigned or -math.inf, *map(self.assign, rows(batch)))
        return batch

    def aligned(self) -> Barrier | None:
        return None

    def sealed(self) -> list[Any] | None:
        return []

    def mark(self) -> float | None:
        return self.source() if self.source is not None else self.assigned

    def finished(self) -> bool:
        return self.plugin.completed() and self.plugin.synced()

    def end(self) -> None:
        self.over = True


class InboxIntake:
    """A function's or an output's: what its upstream peers sent, aligned at barriers."""

    def __init__(
        self,
        task: Task,
        upstream: frozenset[int],
        grant: Callable[[int, int], None],
        meters: TaskMeters,
        *,
        window: Callable[[int], int] = lambda source: WINDOW,
        inbox: Callable[[frozenset[int]], Inbox] = Inbox,
    ) -> None:
        self.limit = task.batch_size
        self.inbox = inbox(upstream)
        self.owed_at = {source: max(window(source) // 2, 1) for source in upstream}
        """Credit goes back to a sender once half its window has been taken."""
        self.grant, self.meters = grant, meters
        self.barrier_since: float | None = None
        """When the first upstream peer's barrier of the epoch being aligned arrived."""

    def deliver(self, source: int, item: Any) -> None:
        if self.barrier_since is None and isinstance(item, Barrier):
            self.barrier_since = time.perf_counter()
        self.inbox.put(source, item)

    def next_barrier(self) -> Barrier | None:
        """An unaligned inbox's barrier that opens an epoch."""
        return self.inbox.opened()

    def read(self) -> Any:
        batch = self.inbox.take(self.limit)
        for source, batches in self.inbox.returned(self.owed_at).items():
            self.grant(source, batches)
        return batch

    def read_exact(self, counts: Sequence[tuple[int, int]]) -> Any:
        """Exactly ``counts`` (source, messages) from the inbox, as a replay takes them; None
        while they have not all come."""
        batch = self.inbox.take_exact(counts)
        if batch is not None:
            for source, batches in self.inbox.returned(self.owed_at).items():
                self.grant(source, batches)
        return batch

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


def intake_for(
    task: Task,
    upstream: frozenset[int],
    grant: Callable[[int, int], None],
    meters: TaskMeters,
    *,
    window: Callable[[int], int] = lambda source: WINDOW,
    unaligned: bool = False,
) -> PluginIntake | InboxIntake:
    """``window`` gives each upstream peer's (by short id) credit window; ``unaligned``, that
    barriers are taken unaligned (peer.runtime.unaligned)."""
    if task.kind == "input":
        return PluginIntake(task)
    inbox = UnalignedInbox if unaligned else Inbox
    return InboxIntake(task, upstream, grant, meters, window=window, inbox=inbox)
