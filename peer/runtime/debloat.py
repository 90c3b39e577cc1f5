"""How much a receiving task lets each sender have in flight to it: buffer debloating.

A barrier travels in line with the batches, so it reaches a task only after every batch sent
before it has been taken, and each of those waits for the task to do the batches ahead of it.
Fixed credit windows (peer.runtime.emit: WINDOW to a peer of another group, LOCAL_WINDOW within
one) bound that wait in batches, not in time: behind a slow fn, 64 batches of 100 segments at
0.7 ms each are 4.5 s per edge, every epoch. So, as Flink does, the receiver sizes what its
senders may have in flight by how fast it works:

- it measures its throughput: rows taken per second of the time it is busy (``Throughput``). A
  read that takes rows starts a busy spell that lasts until the next read, whatever delays that
  read (its fn, its own downstream's back-pressure, the group's other runners): that is how fast
  its inbox drains. The time between an empty read and the next one is idle and not counted;
- each sender may have in flight its share of ``target`` seconds of that work (``window``):
  never more than the edge's fixed window (``ceiling``), never fewer than FLOOR batches, so the
  receiver always has the next batch at hand and throughput does not collapse. A fast receiver's
  share is larger than the ceiling, so it grows back as soon as it is fast again;
- the receiver, not the sender, holds the count (``Ledger``): it withholds credit while a
  sender's in flight is over the window and returns what brings it back to the window. The
  sender goes on sending while it has credit, as before;
- a batch longer than the target is made smaller: every grant carries the rows the receiver
  does in ``target`` seconds (``row_limit``), and senders read no more than that per batch, nor
  does the receiver take more per read (peer.runtime.intake ``follow``).

So a barrier waits behind about ``target`` seconds of the receiver's work per task, or FLOOR
batches of at most ``target`` each, instead of a fixed number of batches.
"""

from __future__ import annotations

from collections.abc import Mapping

FLOOR = 2
"""Batches a sender may always have in flight to a debloated receiver: one being taken, one on
its way; it is also what each edge starts with, until the receiver has measured itself."""

SAMPLE = 0.05
"""Seconds of the receiver's wall clock per throughput sample: windows follow it within a few
samples, and a fast receiver that starts at the floor reaches its ceiling after the first."""

WEIGHT = 0.3
"""How much each sample moves the throughput: a moving average over the last few samples, so a
pause (a snapshot, a collection) shrinks the windows a little, not to the floor."""


def window(rate: float, target: float, senders: int, rows: float, ceiling: int) -> int:
    """Batches one of ``senders`` may have in flight: its share of the rows a receiver that takes
    ``rate`` rows per second does in ``target`` seconds, in batches of ``rows`` rows (rounded
    down), between FLOOR and ``ceiling``."""
    share = rate * target / (senders * rows)
    if share >= ceiling:
        return ceiling
    return max(min(FLOOR, ceiling), int(share))


def row_limit(rate: float, target: float) -> int:
    """Rows a receiver that takes ``rate`` rows per second does in ``target`` seconds, at least
    one: no batch to it should be longer than the target."""
    return max(1, int(rate * target))


def first_credit(ceiling: int, target: float | None) -> int:
    """The credit an edge starts with: the fixed window ``ceiling`` without debloating (``target``
    None), else the floor, until the receiver has measured itself. Sender and receiver both read
    it from the job, so they agree on it without a message."""
    return ceiling if target is None else min(FLOOR, ceiling)


class Throughput:
    """Rows a receiver takes per second of the time it is busy, as a moving average over
    samples of at least SAMPLE seconds of its clock, each from the start of a busy spell."""

    def __init__(self, sample: float = SAMPLE, weight: float = WEIGHT) -> None:
        self.sample, self.weight = sample, weight
        self.rate = 0.0
        """Rows per busy second; 0 until the first sample closes."""
        self.since: float | None = None
        """When the last read that took rows was made; None while idle."""
        self.pending = 0
        """That read's rows: they count once its busy spell ends, at the next read."""
        self.rows = 0
        self.busy = 0.0
        self.started = 0.0

    def took(self, now: float, rows: int) -> bool:
        """A read at ``now`` took ``rows`` rows; whether a sample closed (``rate`` moved)."""
        if self.since is not None:
            self.busy += now - self.since
            self.rows += self.pending
        elif not self.busy:
            self.started = now
        if rows:
            self.since, self.pending = now, rows
        else:
            self.since, self.pending = None, 0
        if self.busy <= 0.0 or now - self.started < self.sample:
            return False
        measured = self.rows / self.busy
        self.rate = measured if not self.rate else self.rate + self.weight * (measured - self.rate)
        self.rows, self.busy, self.started = 0, 0.0, now
        return True


class Ledger:
    """A receiver's count of what each sender may have in flight to it (batches sent, or
    still to be sent on credit given, and not yet taken), and the window each may have.

    Credit goes back to a sender once it is owed at least half its window (``owed_at``, the
    consumed count at which the inbox reports it: peer.runtime.inbox ``returned``), as much as
    brings its in flight back to its window; a sender over its window (the window shrank) gets
    nothing until it is under it. Every sender is owed credit once all it has in flight is
    taken, whatever the windows, so none waits for ever on a receiver that takes everything."""

    def __init__(self, first: Mapping[int, int], ceilings: Mapping[int, int]) -> None:
        """``first``: each sender's starting credit; ``ceilings``: its largest window."""
        self.windows = dict(first)
        self.ceilings = dict(ceilings)
        self.in_flight = dict(first)
        """As of the last grant (or the start): the consumed count since then is the inbox's."""
        self.owed_at: dict[int, int] = {}
        for source in self.windows:
            self._owe(source)

    def _owe(self, source: int) -> None:
        window = self.windows[source]
        self.owed_at[source] = max(1, self.in_flight[source] + max(1, window // 2) - window)

    def resize(self, windows: Mapping[int, int]) -> None:
        """New windows (a new throughput measured): when each sender is owed credit moves."""
        for source, size in windows.items():
            if source in self.windows:
                self.windows[source] = size
                self._owe(source)

    def returned(self, consumed: Mapping[int, int]) -> list[tuple[int, int]]:
        """Batches taken from each sender since it was last counted here: the credit to give
        back, (sender, batches) for each sender owed any."""
        grants = []
        for source, taken in consumed.items():
            left = self.in_flight[source] - taken
            grant = self.windows[source] - left
            self.in_flight[source] = left + max(grant, 0)
            self._owe(source)
            if grant > 0:
                grants.append((source, grant))
        return grants

    def ensure(self, source: int, taken: int, needed: int) -> int:
        """Credit for ``source`` so that ``needed`` batches can come after the ``taken`` since
        its last grant (a replay takes exactly what the log says, which may be more than a
        window): the batches granted, 0 when it has enough in flight."""
        grant = needed - (self.in_flight[source] - taken)
        if grant <= 0:
            return 0
        self.in_flight[source] += grant
        self._owe(source)
        return grant

    def rekey(self, old: int, new: int, in_flight: int, first: int, ceiling: int) -> None:
        """Sender ``old`` is now ``new``, which has ``in_flight`` (its own first credit, and what
        the old one sent that is still queued, with the taken count the inbox moved). The new
        sender starts as any sender does, with its ``first`` credit as its window and the
        ``ceiling`` of its own edge: it runs elsewhere than the old one, and the edge's fixed
        window may differ (peer.runtime.emit ``window``); the next resize sizes it."""
        for values in (self.windows, self.ceilings, self.in_flight, self.owed_at):
            values.pop(old)
        self.windows[new], self.ceilings[new], self.in_flight[new] = first, ceiling, in_flight
        self._owe(new)


def sized(rate: float, target: float, rows: float, ceilings: Mapping[int, int]) -> dict[int, int]:
    """Every sender's window for a receiver of ``rate`` rows per busy second, batches of ``rows``
    rows and ``target`` seconds, each at most its ceiling."""
    senders = len(ceilings)
    return {s: window(rate, target, senders, rows, c) for s, c in ceilings.items()}
