"""One member's heartbeat monitor: the members it watches and a phi detector for each.

A member watches its receivers on the hashed ring (peer.membership.monitors): it sends each a
heartbeat request every interval and feeds the reply into that receiver's detector, so what is
measured is a round trip through both members' loops, as in Akka. The monitor is a value: the
agent holding it passes the time in and keeps the new monitor each call returns.

A member that never answers must be suspected too (it joined, then died or stopped before its
first reply), yet its detector has no history to judge by. So the monitor remembers when it first
asked each member it has not heard from, and judges that member as though it had answered at
once: silence from then on raises phi as it would after a reply. Its detector stays untouched,
so the first real reply starts the history without an interval that never happened.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from peer.membership.monitors import DEFAULT_MONITORS, receivers
from peer.membership.phi import PhiAccrualDetector, PhiSettings


@dataclass(frozen=True)
class HeartbeatMonitor:
    me: str
    settings: PhiSettings = field(default_factory=PhiSettings)
    monitors: int = DEFAULT_MONITORS
    detectors: dict[str, PhiAccrualDetector] = field(default_factory=dict)
    """One per receiver, sorted by id; replaced whole, never changed in place."""
    first_asked: dict[str, float] = field(default_factory=dict)
    """When each receiver not heard from yet was first asked for a heartbeat."""

    def for_members(self, members: Iterable[str]) -> HeartbeatMonitor:
        """The monitor of ``members`` (this member among them): the receivers the ring gives it
        now, each keeping its detector if it had one."""
        everyone = set(members) | {self.me}
        watched = receivers(everyone, self.me, self.monitors) if len(everyone) > 1 else ()
        detectors = {
            subject: self.detectors.get(subject, PhiAccrualDetector(self.settings))
            for subject in sorted(watched)
        }
        asked = {s: t for s, t in self.first_asked.items() if s in detectors}
        return replace(self, detectors=detectors, first_asked=asked)

    def asked(self, now: float) -> HeartbeatMonitor:
        """The monitor after asking every receiver for a heartbeat at ``now``."""
        new = [
            s
            for s, d in self.detectors.items()
            if not d.is_monitoring and s not in self.first_asked
        ]
        if not new:
            return self
        return replace(self, first_asked={**self.first_asked, **dict.fromkeys(new, now)})

    @property
    def receivers(self) -> tuple[str, ...]:
        """Whom to send heartbeat requests to."""
        return tuple(self.detectors)

    def replied(self, subject: str, now: float) -> HeartbeatMonitor:
        """A reply from ``subject`` at ``now``; one from a member no longer watched is ignored."""
        detector = self.detectors.get(subject)
        if detector is None:
            return self
        asked = {s: t for s, t in self.first_asked.items() if s != subject}
        detectors = {**self.detectors, subject: detector.heartbeat(now)}
        return replace(self, detectors=detectors, first_asked=asked)

    def reachability(self, now: float) -> dict[str, bool]:
        """Each watched member's verdict at ``now``: reachable while its phi is below the
        threshold. One not heard from yet is judged from when it was first asked; one not even
        asked yet has no verdict."""
        verdicts = {}
        for subject, detector in self.detectors.items():
            if detector.is_monitoring:
                verdicts[subject] = detector.available(now)
            elif subject in self.first_asked:
                verdicts[subject] = detector.heartbeat(self.first_asked[subject]).available(now)
        return verdicts

    def forgive(self, since: float, now: float) -> HeartbeatMonitor:
        """The monitor after this member itself was silent from ``since`` to ``now`` (its loop
        stalled, its process was stopped): that stretch said nothing of the others, so every
        clock moves forward by it (never past ``now``: a reply taken in as the loop resumed is
        the latest word). A member heard from just before the stall is judged as if it had
        not happened; one already silent for long before it stays suspected, so a
        member whose observers keep stalling is still found dead."""
        gap = now - since
        detectors = {
            subject: replace(detector, last_heartbeat=min(detector.last_heartbeat + gap, now))
            if detector.last_heartbeat is not None
            else detector
            for subject, detector in self.detectors.items()
        }
        asked = {subject: min(t + gap, now) for subject, t in self.first_asked.items()}
        return replace(self, detectors=detectors, first_asked=asked)
