"""Which extents of a window a segment's event time falls in.

An extent is a half-open interval ``(start, end)`` of event time: ``t`` is in it when
``start <= t < end``. State is kept per extent, across batches, peers and restores, so the same
extent must always come out as the same pair of floats: fixed and sliding extents are computed
from an integer index (``start = k * range``, ``k * slide``), never by adding steps up, and the
index is corrected where the float division ``t / step`` rounds across a boundary.

Fixed, sliding and global extents depend on ``t`` alone. Sessions depend on what the key has
already seen: each segment stands for the extent ``[t, t + gap)``, and every session that extent
overlaps is merged with it into one, so a session ends ``gap`` after its last segment and a pause
of exactly ``gap`` closes it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from peer.job.spec import Window

Extent = tuple[float, float]
GLOBAL: Extent = (-math.inf, math.inf)


def extents(window: Window, t: float) -> list[Extent]:
    """Every extent of the window that holds ``t``, earliest first; for a session window, the
    segment's own ``[t, t + gap)``, which ``absorb`` merges into the key's sessions."""
    if window.type == "fixed":
        return [extent_at(window, _index(t, window.range))]  # type: ignore[arg-type]
    if window.type == "sliding":
        return _sliding(window, t)
    if window.type == "global":
        return [GLOBAL]
    return [(t, t + window.gap)]  # type: ignore[operator]


def extent_at(window: Window, k: int) -> Extent:
    """A fixed or sliding window's ``k``-th extent, from its index alone (module docstring):
    what taking rows and taking columns (peer.state.window_columns) both place state under."""
    if window.type == "fixed":
        return (k * window.range, (k + 1) * window.range)  # type: ignore[operator]
    start = k * window.slide  # type: ignore[operator]
    return (start, start + window.range)  # type: ignore[operator]


def _index(t: float, step: float) -> int:
    """The ``k`` with ``k * step <= t < (k + 1) * step``, as computed in floats."""
    k = math.floor(t / step)
    while k * step > t:
        k -= 1
    while (k + 1) * step <= t:
        k += 1
    return k


def _sliding(window: Window, t: float) -> list[Extent]:
    range_, slide = window.range, window.slide
    k = _index(t, slide)  # type: ignore[arg-type]
    out: list[Extent] = []
    while k * slide + range_ > t:  # type: ignore[operator]
        out.append(extent_at(window, k))
        k -= 1
    out.reverse()
    return out


@dataclass(slots=True)
class SessionMerge:
    """A key's sessions after one more extent joined them: ``extent`` is the session it ended up
    in, made of itself and the old sessions ``merged`` (earliest first; none when it opened a new
    session, one when it fell in or extended one, more when it bridged them); ``kept`` are the
    other sessions, as they were. Not frozen: one is made per segment, and a frozen dataclass
    takes four times as long to make."""

    kept: list[Extent]
    extent: Extent
    merged: list[Extent]

    @property
    def sessions(self) -> list[Extent]:
        """Every session of the key now, earliest first."""
        return sorted([*self.kept, self.extent])


def session(sessions: Iterable[Extent], t: float, gap: float) -> SessionMerge:
    """Where a segment at ``t`` goes among a key's non-overlapping ``sessions``."""
    return absorb(sessions, (t, t + gap))


def absorb(sessions: Iterable[Extent], extent: Extent) -> SessionMerge:
    """Merge ``extent`` with every session it overlaps. The sessions that overlap it are
    consecutive, so the union overlaps no other and the sessions stay disjoint. Only the few
    merged are sorted: this runs once per segment."""
    start, end = extent
    merged: list[Extent] = []
    kept: list[Extent] = []
    for old in sessions:
        if old[0] < extent[1] and extent[0] < old[1]:
            merged.append(old)
            start, end = min(start, old[0]), max(end, old[1])
        else:
            kept.append(old)
    merged.sort()
    return SessionMerge(kept, (start, end), merged)
