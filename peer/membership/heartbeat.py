"""One member's heartbeat monitor: the members it watches and a phi detector for each.

A member watches its receivers on the hashed ring (peer.membership.monitors): it sends each a
heartbeat request every interval and feeds the reply into that receiver's detector, so what is
measured is a round trip through both members' loops, as in Akka. The monitor is a value: the
agent holding it passes the time in and keeps the new monitor each call returns.
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

    def for_members(self, members: Iterable[str]) -> HeartbeatMonitor:
        """The monitor of ``members`` (this member among them): the receivers the ring gives it
        now, each keeping its detector if it had one."""
        everyone = set(members) | {self.me}
        watched = receivers(everyone, self.me, self.monitors) if len(everyone) > 1 else ()
        detectors = {
            subject: self.detectors.get(subject, PhiAccrualDetector(self.settings))
            for subject in sorted(watched)
        }
        return replace(self, detectors=detectors)

    @property
    def receivers(self) -> tuple[str, ...]:
        """Whom to send heartbeat requests to."""
        return tuple(self.detectors)

    def replied(self, subject: str, now: float) -> HeartbeatMonitor:
        """A reply from ``subject`` at ``now``; one from a member no longer watched is ignored."""
        detector = self.detectors.get(subject)
        if detector is None:
            return self
        return replace(self, detectors={**self.detectors, subject: detector.heartbeat(now)})

    def reachability(self, now: float) -> dict[str, bool]:
        """Each watched member's verdict at ``now``: reachable while its phi is below the
        threshold. A member not yet heard from has none: whether it ever came up is joining's
        business, not this monitor's."""
        return {
            subject: detector.available(now)
            for subject, detector in self.detectors.items()
            if detector.is_monitoring
        }

    def forgive(self, now: float) -> HeartbeatMonitor:
        """The monitor after this member itself was silent (its loop stalled, its process was
        stopped): every detector restarts its clock at ``now`` without learning the gap, which
        said nothing of the others."""
        detectors = {
            subject: replace(detector, last_heartbeat=now) if detector.is_monitoring else detector
            for subject, detector in self.detectors.items()
        }
        return replace(self, detectors=detectors)
