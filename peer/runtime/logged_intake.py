"""The intake of a function or an output whose job recovers locally.

An output only holds: it keeps the determinants its upstream peers send (peer.causal's
Holdings), counts what each upstream seat has sent it, and answers a replacement's Recall from
both. A function does that and logs: each take from its inbox is a determinant (which upstream
seats, how many messages from each, in order), and while it replays after a takeover it takes
exactly what the log says, in the log's order, and passes a barrier only where the log has it.

The inbox is keyed by the senders' short ids, determinants by seat: a seat outlives the peer in
it, so the logs read the same before and after a takeover. ``rewire`` moves a seat's queue to
the short id of the peer that took it over.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from peer.causal.determinants import BARRIER, TAKE, Holdings
from peer.causal.recorder import Recorder
from peer.messaging.messages import Barrier, Recalled
from peer.runtime.intake import InboxIntake


class HoldingIntake:
    """An inbox intake that holds its upstream seats' determinants."""

    def __init__(self, inner: InboxIntake, holdings: Holdings, seats: Mapping[int, int]) -> None:
        self.inner, self.holdings = inner, holdings
        self.inbox = inner.inbox
        self.seat_of: dict[int, int] = dict(seats)
        """Each upstream short id's seat."""
        self.short_of = {seat: short for short, seat in self.seat_of.items()}

    def rewire(self, seats: Mapping[int, int]) -> None:
        """The upstream peers as they now are: a seat whose peer changed moves in the inbox."""
        moved = {self.short_of[seat]: short for short, seat in seats.items()
                 if self.short_of.get(seat, short) != short}  # fmt: skip
        for old, new in sorted(moved.items()):
            self.inner.rekey(old, new)
        self.seat_of = dict(seats)
        self.short_of = {seat: short for short, seat in self.seat_of.items()}

    def hold(self, source: int, deltas: list[Any]) -> None:
        """Determinants from upstream peer ``source``: kept by origin seat."""
        if source in self.seat_of:
            self.holdings.receive(deltas)

    def recalled(self, seat: int) -> Recalled:
        """What a Recall from ``seat``'s new peer is answered with: the messages had from the
        seat, and the seat's determinants held (offset, events)."""
        short = self.short_of[seat]
        held = self.holdings.recall(seat) or (0, [])
        return Recalled(self.inbox.received.get(short, 0), held[0], [list(e) for e in held[1]])

    def received(self) -> dict[int, int]:
        """Messages had from each upstream seat: what a snapshot keeps."""
        return {seat: self.inbox.received.get(short, 0) for short, seat in self.seat_of.items()}

    def restore_received(self, counts: Mapping[int, int]) -> None:
        self.inbox.restore_received(
            {self.short_of[seat]: n for seat, n in counts.items() if seat in self.short_of}
        )

    def watermarks(self) -> dict[int, float]:
        """The last watermark taken from each upstream seat that sent one: what a snapshot
        keeps."""
        marks = self.inbox.watermarks
        return {seat: marks[short] for short, seat in self.seat_of.items() if short in marks}

    def restore_watermarks(self, marks: Mapping[int, float]) -> None:
        """Start from the watermarks the seat had taken at its snapshot's barrier."""
        self.inbox.restore_watermarks(
            {self.short_of[seat]: m for seat, m in marks.items() if seat in self.short_of}
        )

    # the Intake protocol, as the inbox intake does it

    def deliver(self, source: int, item: Any) -> None:
        self.inner.deliver(source, item)

    def next_barrier(self) -> Barrier | None:
        return self.inner.next_barrier()

    def read(self) -> Any:
        return self.inner.read()

    def aligned(self) -> Barrier | None:
        return self.inner.aligned()

    def sealed(self) -> list[Any] | None:
        return self.inner.sealed()

    def mark(self) -> float | None:
        return self.inner.mark()

    def finished(self) -> bool:
        return self.inner.finished()

    def end(self) -> None:
        self.inner.end()

    def follow(self, rows: int) -> None:
        self.inner.follow(rows)

    def patience(self) -> float:
        return self.inner.patience()


class LoggedIntake(HoldingIntake):
    """A function's: its takes logged, or, while replaying, taken as the log says."""

    def __init__(
        self, inner: InboxIntake, holdings: Holdings, seats: Mapping[int, int], recorder: Recorder
    ) -> None:
        super().__init__(inner, holdings, seats)
        self.recorder = recorder

    def read(self) -> Any:
        recorder = self.recorder
        if recorder.replaying:
            return self._replayed(recorder)
        batch = self.inner.read()
        took = self.inbox.last_take
        if took:
            seat_of = self.seat_of
            recorder.record((TAKE, tuple((seat_of[s], n) for s, n in took)))
        return batch

    def _replayed(self, recorder: Recorder) -> Any:
        event = recorder.next_of(TAKE)
        if event is None:
            return []
        counts = [(self.short_of[seat], n) for seat, n in event[1]]
        batch = self.inner.read_exact(counts)
        if batch is None:
            return []
        recorder.consume(TAKE)
        return batch

    def aligned(self) -> Barrier | None:
        recorder = self.recorder
        if recorder.replaying and not recorder.next_is(BARRIER):
            return None
        return self.inner.aligned()
