"""What a task peer sent since its last committed barrier, per downstream seat, so it can send
it again to a peer that takes over a failed downstream's seat.

A replacement restores the failed task's last committed snapshot; everything its upstreams sent
it after that snapshot's barrier is gone with the failed peer. Each upstream keeps those items
here, numbered per channel (one channel per downstream seat), and resends them from the
barrier on (``rewind``). The numbers also let the replacement's own output skip what its
downstreams already have (``suppress``): a replay redoes the sends, and the receivers must not
get them twice.

Items that could not be sent yet (no credit, a congested link, a receiver gone) wait here too,
in order, until their receiver can take them (peer.runtime.logged_emit).

A channel to a peer in the sender's own process keeps nothing once it is sent (``keep``): the
two fail together, and two adjacent tasks failing at once roll the job back (peer.log.takeover),
so nobody would ask for it again. The items wait there only until they go.

Memory is bounded: past ``budget`` bytes held, the items already sent are dropped (the unsent
never are: they are the job's data) and the log is ``lost`` until an epoch whose barrier came
after the loss commits; meanwhile a failure downstream falls back to global rollback, which
``overflows`` counts for a metric.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from peer.messaging.messages import Barrier


class LogLost(RuntimeError):
    """What a replacement needs was dropped: recovery falls back to global rollback."""


@dataclass
class _Channel:
    """One downstream seat's items: seqs ``first`` to ``count``; those up to ``sent`` count as
    sent (``sent`` may pass ``count``: a receiver already has items not yet recorded again)."""

    count: int = 0
    sent: int = 0
    items: list[tuple[Any, int]] = field(default_factory=list)

    @property
    def first(self) -> int:
        return self.count + 1 - len(self.items)

    def bytes_between(self, low: int, high: int) -> int:
        """Bytes of the held items with seq in (low, high]."""
        first = self.first
        low, high = max(low, first - 1), min(high, self.count)
        return sum(n for _, n in self.items[low + 1 - first : high + 1 - first])

    def barrier(self, epoch: int, upto: int) -> int | None:
        """The seq of the last held Barrier of ``epoch`` or earlier, up to seq ``upto``."""
        first = self.first
        for index in range(min(upto, self.count) - first, -1, -1):
            item = self.items[index][0]
            if isinstance(item, Barrier) and item.epoch <= epoch:
                return first + index
        return None

    def drop_through(self, seq: int) -> int:
        """Drop the items up to ``seq``; their bytes."""
        cut = max(seq + 1 - self.first, 0)
        dropped = sum(n for _, n in self.items[:cut])
        del self.items[:cut]
        return dropped


class InFlightLog:
    """The items a task peer sent (or has still to send) since its last commit, per
    downstream seat, with per-channel sequence numbers counted from the allocation's start."""

    def __init__(self, budget: int) -> None:
        if not isinstance(budget, int) or budget < 1:
            raise ValueError(f"an in-flight log's budget {budget!r} is not an integer >= 1")
        self.budget = budget
        self.lost = False
        self.overflows = 0
        self._channels: dict[int, _Channel] = {}
        self._nbytes = 0
        self._unsent = 0
        self._committed = 0
        self._records = 0
        self._lost_at = 0
        self._barriers: dict[int, int] = {}
        """Each epoch's first Barrier, by record number: it tells when a loss is behind us."""
        self._unkept: set[int] = set()
        """The seats whose items are dropped as they go (``keep``)."""
        self._forgotten: set[int] = set()
        """The seats that have had sent items dropped that way: they cannot be rewound."""

    @property
    def nbytes(self) -> int:
        return self._nbytes

    @property
    def unsent_bytes(self) -> int:
        return self._unsent

    def keep(self, seat: int, kept: bool) -> None:
        """Whether what goes down ``seat`` is kept until its epoch commits (a peer of another
        process) or dropped as it goes (a peer of this one). Told again when another peer takes
        the seat over: what was kept so far stays for that peer's rewind."""
        if kept:
            self._unkept.discard(seat)
        else:
            self._unkept.add(seat)

    def blocked(self) -> bool:
        """Too much waits to be sent: the task stops taking input until some goes out."""
        return self._unsent >= self.budget

    def record(self, seat: int, item: Any, nbytes: int) -> int:
        """Keep ``item`` for ``seat``, unsent unless the receiver already has it; its seq."""
        if not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"an item for seat {seat} has size {nbytes!r}, not bytes >= 0")
        channel = self._channels.setdefault(seat, _Channel())
        channel.count += 1
        channel.items.append((item, nbytes))
        self._records += 1
        self._nbytes += nbytes
        if channel.count > channel.sent:
            self._unsent += nbytes
        if isinstance(item, Barrier):
            self._barriers.setdefault(item.epoch, self._records)
        if self._nbytes > self.budget:
            self._overflow()
        return channel.count

    def _overflow(self) -> None:
        """Drop every sent item: what is needed for a local recovery is gone until a commit."""
        dropped = 0
        for seat in sorted(self._channels):
            channel = self._channels[seat]
            dropped += len(channel.items)
            self._nbytes -= channel.drop_through(min(channel.sent, channel.count))
            dropped -= len(channel.items)
        if dropped:
            self.lost = True
            self._lost_at = self._records
            self.overflows += 1

    def next_unsent(self, seat: int) -> tuple[int, Any] | None:
        """The first item ``seat`` has not been sent, with its seq."""
        channel = self._channels.get(seat)
        if channel is None or channel.count <= channel.sent:
            return None
        seq = channel.sent + 1
        return seq, channel.items[seq - channel.first][0]

    def sent(self, seat: int, seq: int) -> None:
        """The items up to ``seq`` went out to ``seat``."""
        channel = self._channels.get(seat)
        count = 0 if channel is None else channel.count
        if seq > count:
            raise ValueError(f"seq {seq} for seat {seat} is past the {count} items recorded")
        self._advance(seat, seq)

    def suppress(self, seat: int, upto: int) -> None:
        """``seat`` has every item up to ``upto`` already (a replay sends them again): they, and
        those recorded later with such seqs, count as sent."""
        self._advance(seat, upto)

    def _advance(self, seat: int, seq: int) -> None:
        channel = self._channels.setdefault(seat, _Channel())
        if seq > channel.sent:
            self._unsent -= channel.bytes_between(channel.sent, seq)
            channel.sent = seq
            if seat in self._unkept and channel.items:
                self._nbytes -= channel.drop_through(min(seq, channel.count))
                self._forgotten.add(seat)

    def channels(self) -> list[int]:
        """The seats with items to send."""
        return [
            s for s in sorted(self._channels) if self._channels[s].count > self._channels[s].sent
        ]

    def committed(self, epoch: int) -> None:
        """Per channel, drop the sent items up to and including the Barrier of ``epoch`` (or
        the latest earlier one sent): nobody will ask for them again."""
        for seat in sorted(self._channels):
            channel = self._channels[seat]
            seq = channel.barrier(epoch, channel.sent)
            if seq is not None:
                self._nbytes -= channel.drop_through(seq)
        if self.lost and any(e <= epoch and at > self._lost_at for e, at in self._barriers.items()):
            self.lost = False
        self._barriers = {e: at for e, at in self._barriers.items() if e > epoch}
        self._committed = max(self._committed, epoch)

    def rewind(self, seat: int, after_epoch: int) -> None:
        """Every item held for ``seat`` after its Barrier of ``after_epoch`` is unsent again (and
        those before count as sent): a replacement restored that epoch needs exactly those.
        When the barrier went with the last commit, which was of ``after_epoch``, that is
        everything held. A LogLost naming seat and epoch when what is needed was dropped."""
        if self.lost:
            raise LogLost(
                f"the in-flight log overflowed its budget of {self.budget} bytes: "
                f"seat {seat} cannot get again what followed epoch {after_epoch}"
            )
        if seat in self._forgotten:
            raise LogLost(f"seat {seat}'s peer ran in this process: what went to it was not kept")
        channel = self._channels.setdefault(seat, _Channel())
        held = channel.barrier(after_epoch, channel.count)
        if held is not None and channel.items[held - channel.first][0].epoch == after_epoch:
            self._rewind_to(channel, held)
        elif after_epoch == self._committed:
            self._rewind_to(channel, channel.first - 1)
        else:
            raise LogLost(f"seat {seat}'s items after epoch {after_epoch} were dropped (last "
                          f"commit: epoch {self._committed})")  # fmt: skip

    def _rewind_to(self, channel: _Channel, seq: int) -> None:
        self._unsent += channel.bytes_between(seq, channel.sent) - channel.bytes_between(
            channel.sent, seq
        )
        channel.sent = seq

    def counts(self) -> dict[int, int]:
        """Each channel's seq so far, for a snapshot: a replacement numbers on from there."""
        return {seat: self._channels[seat].count for seat in sorted(self._channels)}

    def restore(self, counts: Mapping[int, int]) -> None:
        """Number on from a snapshot's ``counts`` (on a log that holds nothing yet). After a
        restore of epoch E, ``committed(E)`` tells the log that what it holds follows E."""
        for seat, count in sorted(counts.items()):
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise ValueError(f"seat {seat}'s restored count {count!r} is not an integer >= 0")
            if self._channels.get(seat, _Channel()).items:
                raise ValueError(f"seat {seat}'s in-flight log holds items: it cannot restore")
        for seat, count in counts.items():
            self._channels[seat] = _Channel(count=count, sent=count)
