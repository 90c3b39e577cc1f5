"""What one virtual peer has received from each upstream peer, in the order it was sent.

Barriers, watermarks and end markers travel in line with the batches, so each upstream peer
gets its own queue: a barrier holds back what its sender sent after it, and only that, until the
same barrier has come from every upstream peer (alignment). The receiver aligns, not the
sender, because only the receiver sees all its inputs: senders never wait, and a fast input
cannot push segments of the next epoch into state before the snapshot of this one.

The inbox also counts the batches taken from each sender, which the runner hands back to the
sender as credit (peer.runtime.emit): no sender has more than a window of batches in flight to
one receiver.

It holds the messages as they came (peer.messaging.messages), and ``take`` joins the batches it
takes into one: rows stay rows, Arrow batches of one schema stay one Arrow batch, and only a mix
becomes rows.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from peer.messaging.messages import Barrier, Batch, End, Watermark
from peer.runtime import columnar

InLine = Batch | Barrier | Watermark | End
"""What an upstream peer sends along an edge, in order."""


class Inbox:
    def __init__(self, sources: frozenset[int]) -> None:
        self.sources = sources
        self.queues: dict[int, deque[InLine]] = {s: deque() for s in sorted(sources)}
        self.ended: set[int] = set()
        self.watermarks: dict[int, float] = {}
        self.consumed: dict[int, int] = dict.fromkeys(self.queues, 0)
        self.turn = 0

    def put(self, source: int, item: InLine) -> None:
        """Items from a peer that is not upstream of this one (a stale sender) are ignored."""
        queue = self.queues.get(source)
        if queue is not None:
            queue.append(item)

    def take(self, limit: int) -> columnar.Batch:
        """Whole batches, round-robin over the senders not held at a barrier, until they hold
        ``limit`` rows or more, as one batch; watermarks and end markers met on the way are
        recorded."""
        taken: list[columnar.Batch] = []
        order = list(self.queues)
        self.turn = (self.turn + 1) % max(len(order), 1)
        rows = 0
        for source in order[self.turn :] + order[: self.turn]:
            rows = self._drain(source, taken, rows, limit)
            if rows >= limit:
                break
        return columnar.concat(taken)

    def _drain(self, source: int, taken: list[Any], rows: int, limit: int) -> int:
        queue = self.queues[source]
        while queue and rows < limit:
            item = queue[0]
            if isinstance(item, Barrier):
                break
            queue.popleft()
            if isinstance(item, Batch):
                taken.append(item.batch)
                rows += len(item.batch)
                self.consumed[source] += 1
            elif isinstance(item, Watermark):
                self.watermarks[source] = max(item.value, self.watermarks.get(source, item.value))
            elif isinstance(item, End):
                self.ended.add(source)
            else:
                raise TypeError(f"a {type(item).__name__} from peer {source} is not a message "
                                "that travels along an edge")  # fmt: skip
        return rows

    def aligned(self) -> Barrier | None:
        """The barrier every sender has reached, once they all have reached the same one."""
        heads = {q[0] for q in self.queues.values() if q and isinstance(q[0], Barrier)}
        waiting = sum(1 for q in self.queues.values() if q and isinstance(q[0], Barrier))
        if waiting == len(self.queues) and len(heads) == 1:
            return next(iter(heads))
        return None

    def release(self) -> None:
        for queue in self.queues.values():
            queue.popleft()

    def watermark(self) -> float | None:
        """The smallest watermark over every sender, once every sender has sent one."""
        if len(self.watermarks) < len(self.queues) or not self.queues:
            return None
        return min(self.watermarks.values())

    def returned(self, at_least: Mapping[int, int]) -> dict[int, int]:
        """The batches taken from each sender since it was last told, for senders owed at least
        ``at_least[sender]``: the credit to give back (see peer.runtime.emit)."""
        owed = {s: n for s, n in self.consumed.items() if n >= at_least[s]}
        for source in owed:
            self.consumed[source] = 0
        return owed

    def drained(self) -> bool:
        """Every sender has ended and everything it sent has been taken."""
        return self.ended >= self.sources and not any(self.queues.values())
