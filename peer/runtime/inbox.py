"""What one virtual peer has received from each upstream peer, in the order it was sent.

Barriers, watermarks and end markers travel in line with the batches, so each upstream peer
gets its own queue: a barrier holds back what its sender sent after it, and only that, until the
same barrier has come from every upstream peer (alignment). The receiver aligns, not the
sender, because only the receiver sees all its inputs: senders never wait, and a fast input
cannot push segments of the next epoch into state before the snapshot of this one. (An output
of a job that recovers locally does not align: peer.runtime.unaligned.)

The inbox also counts the batches taken from each sender, which the runner hands back to the
sender as credit (peer.runtime.emit): no sender has more than a window of batches in flight to
one receiver.

It holds the messages as they came (peer.messaging.messages), and ``take`` joins the batches it
takes into one: rows stay rows, Arrow batches of one schema stay one Arrow batch, and only a mix
becomes rows.

Which sender ``take`` drains first is the network's choice, so a task that must be redone
exactly (local recovery, peer.causal) logs what each ``take`` consumed (``last_take``) and its
replacement consumes the same again with ``take_exact``. ``received`` counts what each sender
put, so a replacement can tell its upstreams where to resend from, and ``rekey`` moves a
sender's queue to the peer that took over its seat.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from itertools import islice
from typing import Any

from peer.messaging.messages import Barrier, Batch, End, Watermark
from peer.values import columnar

InLine = Batch | Barrier | Watermark | End
"""What an upstream peer sends along an edge, in order."""


class BarrierSkipped(RuntimeError):
    """A sender's next barrier is not the one the others are at: it skipped one, so what it
    sent cannot be put in either epoch, and the job rolls back to its last commit."""


class Inbox:
    def __init__(self, sources: frozenset[int]) -> None:
        self.sources = sources
        self.queues: dict[int, deque[InLine]] = {s: deque() for s in sorted(sources)}
        self.ended: set[int] = set()
        self.watermarks: dict[int, float] = {}
        self.consumed: dict[int, int] = dict.fromkeys(self.queues, 0)
        self.received: dict[int, int] = dict.fromkeys(self.queues, 0)
        """In-line items each sender put since the inbox was made, plus a restored base."""
        self._base: dict[int, int] = {}
        self.last_take: list[tuple[int, int]] = []
        """What the last ``take`` (or ``take_exact``) consumed: (sender, items of any kind),
        in the order consumed, senders it took nothing from left out."""
        self.turn = 0

    def put(self, source: int, item: InLine) -> None:
        """Items from a peer that is not upstream of this one (a stale sender) are ignored."""
        queue = self.queues.get(source)
        if queue is not None:
            queue.append(item)
            self.received[source] += 1

    def take(self, limit: int) -> columnar.Batch | columnar.Sided:
        """Whole batches, round-robin over the senders not held at a barrier, until they hold
        ``limit`` rows or more, as one batch; watermarks and end markers met on the way are
        recorded."""
        taken: list[Any] = []
        order = list(self.queues)
        self.turn = (self.turn + 1) % max(len(order), 1)
        rows = 0
        self.last_take = []
        for source in order[self.turn :] + order[: self.turn]:
            rows = self._drain(source, taken, rows, limit)
            if rows >= limit:
                break
        return self._joined(taken)

    def _joined(self, taken: list[Any]) -> columnar.Batch | columnar.Sided:
        """The batches taken as one."""
        return columnar.concat(taken)

    def _drain(self, source: int, taken: list[Any], rows: int, limit: int) -> int:
        queue = self.queues[source]
        n = 0
        while queue and rows < limit:
            item = queue[0]
            if isinstance(item, Barrier):
                break
            queue.popleft()
            n += 1
            rows += self._consume(source, item, taken)
        if n:
            self.last_take.append((source, n))
        return rows

    def _consume(self, source: int, item: InLine, taken: list[Any]) -> int:
        """Take one item off ``source``'s queue into ``taken`` or the inbox's state; its rows."""
        if isinstance(item, Batch):
            taken.append(item.batch)
            self.consumed[source] += 1
            return len(item.batch)
        if isinstance(item, Watermark):
            self.watermarks[source] = max(item.value, self.watermarks.get(source, item.value))
        elif isinstance(item, End):
            self.ended.add(source)
        else:
            raise TypeError(f"a {type(item).__name__} from peer {source} is not a message "
                            "that travels along an edge")  # fmt: skip
        return 0

    def take_exact(
        self, counts: Sequence[tuple[int, int]]
    ) -> columnar.Batch | columnar.Sided | None:
        """Exactly ``n`` items from each ``(sender, n)`` in that order, as ``take`` consumed
        them when it logged ``counts`` as ``last_take``: the batches joined as ``take`` joins
        them. None, consuming nothing, until every sender has that many queued before any
        barrier (a replay waits for its upstreams' resends)."""
        needed: dict[int, int] = {}
        for source, n in counts:
            needed[source] = needed.get(source, 0) + n
        for source, n in needed.items():
            queue = self.queues.get(source)
            if queue is None or len(queue) < n:
                return None
            if any(isinstance(item, Barrier) for item in islice(queue, n)):
                return None
        taken: list[Any] = []
        self.last_take = [(source, n) for source, n in counts if n > 0]
        for source, n in self.last_take:
            queue = self.queues[source]
            for _ in range(n):
                self._consume(source, queue.popleft(), taken)
        return self._joined(taken)

    def aligned(self) -> Barrier | None:
        """The barrier every sender has reached, once they all have reached the same one.
        Barriers travel in line and are released together, so two senders held at different
        ones means one of them skipped a barrier: BarrierSkipped."""
        heads = [q[0] for q in self.queues.values() if q and isinstance(q[0], Barrier)]
        if not heads:
            return None
        first = heads[0]
        for head in heads:
            if head.epoch != first.epoch:
                raise BarrierSkipped(
                    f"senders are held at barriers of epochs {first.epoch} and {head.epoch}"
                )
        return first if len(heads) == len(self.queues) else None

    def release(self) -> None:
        for queue in self.queues.values():
            queue.popleft()

    def opened(self) -> Barrier | None:
        """A barrier to snapshot at before every copy of it has come: never, aligned (see
        peer.runtime.unaligned)."""
        return None

    def sealed(self) -> list[columnar.Batch] | None:
        """What the last snapshot keeps of the channels: nothing, aligned."""
        return []

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

    def restore_received(self, counts: Mapping[int, int]) -> None:
        """Count each sender's items on from a snapshot's ``received`` (replacing any base set
        before): the numbers stay those of the allocation, whoever holds the seat now."""
        for source, count in counts.items():
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise ValueError(f"peer {source}'s received count {count!r} is not an int >= 0")
        for source in self.received:
            base = counts.get(source, 0)
            self.received[source] += base - self._base.get(source, 0)
            self._base[source] = base

    def restore_watermarks(self, marks: Mapping[int, float]) -> None:
        """Each sender's watermark as a snapshot had it (taken already, or not: the higher)."""
        for source, mark in marks.items():
            self.watermarks[source] = max(mark, self.watermarks.get(source, mark))

    def rekey(self, old: int, new: int) -> None:
        """Sender ``old`` is now ``new`` (a replacement took over its seat): its queue,
        watermark, end, and counts move over, and it keeps its place in the round-robin."""
        if old not in self.queues:
            raise ValueError(f"peer {old} is not a sender of this inbox: it cannot become {new}")
        if new in self.queues:
            raise ValueError(f"peer {new} already sends to this inbox: {old} cannot become it")
        self.sources = (self.sources - {old}) | {new}
        self.queues = _renamed(self.queues, old, new)
        self.consumed = _renamed(self.consumed, old, new)
        self.received = _renamed(self.received, old, new)
        if old in self._base:
            self._base[new] = self._base.pop(old)
        if old in self.watermarks:
            self.watermarks[new] = self.watermarks.pop(old)
        if old in self.ended:
            self.ended = (self.ended - {old}) | {new}

    def drained(self) -> bool:
        """Every sender has ended and everything it sent has been taken."""
        return self.ended >= self.sources and not any(self.queues.values())


class SidedInbox(Inbox):
    """A join's inbox: each upstream peer is of the join's left or right task (``sides``, by
    short id), and what ``take`` and ``take_exact`` return keeps each batch's side
    (``columnar.Sided``), in the order taken."""

    def __init__(self, sources: frozenset[int], sides: Mapping[int, int]) -> None:
        super().__init__(sources)
        self.sides = dict(sides)

    def _consume(self, source: int, item: InLine, taken: list[Any]) -> int:
        if isinstance(item, Batch):
            taken.append((self.sides[source], item.batch))
            self.consumed[source] += 1
            return len(item.batch)
        return super()._consume(source, item, taken)

    def _joined(self, taken: list[Any]) -> columnar.Sided:
        return columnar.Sided(taken)

    def rekey(self, old: int, new: int) -> None:
        super().rekey(old, new)
        self.sides[new] = self.sides.pop(old)


def _renamed[V](values: dict[int, V], old: int, new: int) -> dict[int, V]:
    """``values`` with key ``old`` named ``new``, in the same place."""
    return {new if key == old else key: value for key, value in values.items()}
