"""The emitter of an input or a function whose job recovers locally: every in-line message is
kept in the in-flight log before it goes, and goes on credit from there.

Each downstream seat is a channel of the task's in-flight log (peer.causal.inflight), which
numbers what goes down it. A batch, barrier, watermark or end marker is recorded first and sent
while the seat's peer has credit and its group's queue is not full; what cannot go yet waits in
the log, and the emitter is blocked (the task reads no more) while any channel has something
waiting, as a plain emitter is while a peer lacks credit. So what waits behind a barrier is
bounded by the credit the receivers give (sized by their throughput, peer.runtime.debloat), not
by the log's budget: a barrier never queues behind the whole budget of unsent data. A channel
paused for a replacement (below) does not block: what comes for it waits in the log, up to the
budget, until the replacement asks.

What a channel keeps once a message has gone depends on where its peer runs, decided when the
emitter is wired: for a peer of another process, batches of rows are packed into their frame's
body as they are recorded (peer.messaging.frame.pack) and kept so until their epoch commits; for
a peer of this process, nothing (peer.causal.inflight's ``keep``).

Before each message down a channel go the determinants its receiver has not yet seen (the
``deltas`` of peer.runtime.causal), so a receiver holds the sender's determinants for every
message it has.

When a replacement takes a downstream seat over, the channel pauses (``rewire``) until the
replacement asks for its messages again (``replay_from``): everything after the barrier its
snapshot was taken at is sent again, and new messages queue behind. An emitter made while a
downstream seat's peer is still recovering (a takeover under the very allocation the emitter is
made for) starts with that channel paused, for the same reason: the replacement will ask for
everything from the allocation's first message, and what went before it asked would go twice.
A replacement's own emitter is told, per channel, how many messages its receiver already has
(``suppress``): those it makes again while it replays are recorded, never sent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from peer.causal.inflight import InFlightLog
from peer.messaging.frame import Packed
from peer.messaging.messages import Batch, Determinants
from peer.runtime.routing import Router

ROW_BYTES = 128
"""What a row of a batch of rows is taken to hold, for the in-flight log's budget: measuring
every dict would cost more than the send. Arrow batches count their buffers."""

MARKER_BYTES = 16
"""What a barrier, watermark or end marker counts for."""


def size_of(batch: Any) -> int:
    if isinstance(batch, Packed):
        return len(batch.data)
    if isinstance(batch, pa.RecordBatch):
        return batch.nbytes
    return len(batch) * ROW_BYTES


def _as_is(batch: Any) -> Any:
    return batch


@dataclass(frozen=True)
class Wiring:
    """Where an emitter's messages go under one placement: the router, how to send to a peer,
    whether a peer's group has its queue full, each peer's seat, whether a peer runs in this
    process, and what a batch for one that does not is kept as. A takeover brings new wiring;
    the channels, by seat, stay."""

    router: Router
    send: Callable[[str, Any], None]
    congested: Callable[[str], bool]
    seats: Mapping[str, int]
    in_process: Callable[[str], bool] = lambda peer: False
    pack: Callable[[Any], Any] = _as_is
    recovering: frozenset[str] = frozenset()
    """The peers that took a seat over and have not yet replayed it: each will ask."""


class LoggedEmitter:
    """Batches to the peers the router picks, through the in-flight log, on credit."""

    staged = False

    def __init__(
        self,
        wiring: Wiring,
        window: Callable[[str], int],
        *,
        log: InFlightLog,
        deltas: Callable[[int], list[Any]],
        overflowed: Callable[[], None] = lambda: None,
    ) -> None:
        """``overflowed`` is told each time the log drops what it held, over its budget."""
        self.log, self.deltas, self.overflowed = log, deltas, overflowed
        self.window = window
        self.suppressed: dict[int, int] = {}
        """Per seat, the messages its receiver has already: recorded, not sent again."""
        self._wire(wiring)
        self.paused = {seat for seat, peer in self.peer_of.items() if peer in wiring.recovering}
        """The seats whose new peer has not yet asked for its messages (``replay_from``)."""
        self.backlogged: set[int] = set()
        """The seats, not paused, with something waiting that their peer cannot take now."""
        self.credits = {seat: window(peer) for seat, peer in self.peer_of.items()}

    def _wire(self, wiring: Wiring) -> None:
        self.router, self.send, self.congested = wiring.router, wiring.send, wiring.congested
        self.seat_of = {peer: wiring.seats[peer] for peer in wiring.router.peers()}
        self.peer_of = {seat: peer for peer, seat in self.seat_of.items()}
        self.held_as: dict[int, Callable[[Any], Any]] = {}
        """Per seat, what a batch is recorded as."""
        for seat, peer in sorted(self.peer_of.items()):
            near = wiring.in_process(peer)
            self.log.keep(seat, not near)
            self.held_as[seat] = _as_is if near else wiring.pack

    def rewire(self, wiring: Wiring) -> None:
        """A takeover: the seats whose peer changed pause until their new peer asks. The new
        router takes turns on from where the old one was."""
        before = dict(self.peer_of)
        wiring.router.turn = self.router.turn
        self._wire(wiring)
        for seat, peer in sorted(self.peer_of.items()):
            if before.get(seat) != peer:
                self.paused.add(seat)
                self.backlogged.discard(seat)

    def replay_from(self, peer: str, epoch: int) -> None:
        """``peer``, which took a seat over, wants again what went down it after ``epoch``'s
        barrier; a LogLost when the log no longer holds it."""
        seat = self.seat_of[peer]
        self.log.rewind(seat, epoch)
        self.paused.discard(seat)
        self.credits[seat] = self.window(peer)
        self._pump(seat)

    def suppress(self, counts: Mapping[int, int]) -> None:
        self.suppressed = dict(counts)

    def emit(self, segments: Any) -> None:
        seat_of, held_as = self.seat_of, self.held_as
        for peer, batch in self.router.split(segments).items():
            seat = seat_of[peer]
            held = held_as[seat](batch)
            self._record(seat, Batch(held), size_of(held))

    def broadcast(self, item: Any) -> None:
        for seat in sorted(self.peer_of):
            self._record(seat, item, MARKER_BYTES)

    def _record(self, seat: int, item: Any, nbytes: int) -> None:
        log = self.log
        overflows = log.overflows
        seq = log.record(seat, item, nbytes)
        if log.overflows != overflows:
            self.overflowed()
        if seq <= self.suppressed.get(seat, 0):
            self.log.sent(seat, seq)
        self._pump(seat)

    def _pump(self, seat: int) -> bool:
        """Send what waits down ``seat`` while its group has room, batches while its peer has
        credit (markers take none); whether any went."""
        if seat in self.paused:
            return False
        peer, log, credits = self.peer_of[seat], self.log, self.credits
        went = False
        while (waiting := log.next_unsent(seat)) is not None:
            seq, item = waiting
            batch = isinstance(item, Batch)
            if (batch and credits[seat] <= 0) or self.congested(peer):
                self.backlogged.add(seat)
                return went
            deltas = self.deltas(seat)
            if deltas:
                self.send(peer, Determinants(deltas))
            self.send(peer, item)
            log.sent(seat, seq)
            if batch:
                credits[seat] -= 1
            went = True
        self.backlogged.discard(seat)
        return went

    def pump(self) -> bool:
        """Send what credit or room that came since allows."""
        went = False
        for seat in self.log.channels():
            went = self._pump(seat) or went
        return went

    def credit(self, peer: str, batches: int) -> None:
        seat = self.seat_of.get(peer)
        if seat is not None:
            self.credits[seat] += batches
            self._pump(seat)

    def blocked(self) -> bool:
        return bool(self.backlogged) or self.log.blocked()

    def write(self) -> bool:
        return False

    @property
    def turn(self) -> int:
        return self.router.turn

    @turn.setter
    def turn(self, value: int) -> None:
        self.router.turn = value
