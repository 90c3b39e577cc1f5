"""An output's barriers in a job that recovers locally: taken unaligned.

An aligned receiver holds every sender whose barrier has come until the same barrier has come
from all of them. When one upstream seat fails, its barrier comes only once its replacement
has replayed up to it, so an aligned output would hold every other seat's batches for the
whole detection and replay: the slots that did not fail would stop. An output of such a job
takes its barriers unaligned instead, as the first of them arrives:

- it snapshots at once (the epoch opens) and lets that sender go on: what it sends next belongs
  to the next epoch, and the output writes it as it comes;
- it goes on taking from the senders whose barrier has not come yet (the late ones), and keeps
  a copy of each batch it takes from them: the epoch's channel state;
- once every sender's barrier has come the epoch closes, and the channel state goes into the
  snapshot. The snapshot is stored, and acknowledged, only then.

A restore from such a snapshot writes its channel state again before anything new: the late
senders restore from their own snapshots of that epoch, taken after those batches were sent, and
send them no more. So every batch is written once, in the epoch of its sender's barrier or in
the next one, and what an epoch's commit publishes stays exact. One epoch at most is open: a
sender that reaches the next barrier before the open epoch closes is held there.
"""

from __future__ import annotations

from typing import Any

from peer.messaging.messages import Barrier, Batch
from peer.runtime.inbox import BarrierSkipped, Inbox, InLine
from peer.values import columnar


class UnalignedInbox(Inbox):
    """An inbox whose barriers open and close an epoch rather than hold the senders."""

    def __init__(self, sources: frozenset[int]) -> None:
        super().__init__(sources)
        self.open: int | None = None
        """The epoch whose barrier some senders have passed and others not yet."""
        self.late: set[int] = set()
        """The senders whose barrier of the open epoch has not come."""
        self.channel: list[columnar.Batch] = []
        """The batches taken from late senders since the epoch opened, in the order taken."""

    def opened(self) -> Barrier | None:
        """A barrier that opens an epoch, taken off its sender's queue, when no epoch is open
        and a sender has reached one; the late senders' barriers of the open epoch otherwise."""
        if self.open is not None:
            self._pass_late()
            return None
        for source, queue in self.queues.items():
            barrier = queue[0] if queue else None
            if isinstance(barrier, Barrier):
                queue.popleft()
                self.open, self.channel = barrier.epoch, []
                self.late = set(self.queues) - {source}
                self._pass_late()
                return barrier
        return None

    def _pass_late(self) -> None:
        """Each late sender's barrier of the open epoch, once it comes; another epoch's barrier
        from a late sender means it skipped the open one (BarrierSkipped)."""
        for source in sorted(self.late):
            queue = self.queues[source]
            if queue and isinstance(queue[0], Barrier):
                if queue[0].epoch != self.open:
                    raise BarrierSkipped(
                        f"peer {source}'s next barrier is of epoch {queue[0].epoch}, not of the "
                        f"open epoch {self.open}"
                    )
                queue.popleft()
                self.late.discard(source)

    def sealed(self) -> list[columnar.Batch] | None:
        """The open epoch's channel state once every sender has passed its barrier, which
        closes the epoch; None while one has not."""
        self._pass_late()
        if self.open is None or self.late:
            return None
        channel, self.open, self.channel = self.channel, None, []
        return channel

    def _consume(self, source: int, item: InLine, taken: list[Any]) -> int:
        if source in self.late and isinstance(item, Batch):
            self.channel.append(item.batch)
        return super()._consume(source, item, taken)

    def rekey(self, old: int, new: int) -> None:
        super().rekey(old, new)
        if old in self.late:
            self.late = (self.late - {old}) | {new}

    def aligned(self) -> Barrier | None:
        """Barriers open and close epochs here (``opened``, ``sealed``): none is aligned."""
        return None

    def release(self) -> None:
        raise RuntimeError("an unaligned inbox has no aligned barrier to release")
