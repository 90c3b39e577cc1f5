"""The phi accrual failure detector (Hayashibara et al.), as Akka Cluster uses it.

A fixed timeout answers "is it down?" with yes or no, and the same answer has to fit a quiet
network and a busy machine. An accrual detector keeps the history of heartbeat inter-arrival
times instead and answers with phi, the suspicion that the member is gone: phi = -log10 of the
probability that a heartbeat arrives later than the silence seen so far, were the member alive.
The threshold (phi 8: the silence has odds of 1 in 10^8) is where a caller stops trusting the
member; the detector adapts to the intervals it sees, so a member on a jittery link is given
more slack than one on a steady link, with the same threshold.

Everything here is a value: time is passed in (seconds on a monotonic clock), and a heartbeat
gives a new detector, so a monitor can keep one per subject in a plain mapping and tests need no
clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

#: Phi when the probability of a later heartbeat underflows to 0.0. Above every phi a double can
#: express (-log10 of the least positive double is 323.3), so phi stays finite and monotonic.
PHI_CAP = float(math.ceil(-math.log10(math.ulp(0.0))))


@dataclass(frozen=True, slots=True)
class PhiSettings:
    """How a detector judges. Durations are in seconds.

    ``threshold``: phi from which a member counts as unavailable (8 in Akka; 12 suits a cloud
    network that stalls now and then). ``max_sample_size``: inter-arrival times kept; old ones
    drop out so the detector follows a change of load. ``min_std_deviation``: a floor on the
    standard deviation, as a perfectly regular history would otherwise make one late heartbeat
    look certain death. ``acceptable_heartbeat_pause``: added to the mean interval, the silence
    tolerated before suspicion grows at all (a GC pause, a busy disk). ``first_heartbeat_estimate``:
    the interval assumed before any has been measured.
    """

    threshold: float = 8.0
    max_sample_size: int = 1000
    min_std_deviation: float = 0.1
    acceptable_heartbeat_pause: float = 3.0
    first_heartbeat_estimate: float = 1.0

    def __post_init__(self) -> None:
        _require(self.threshold > 0, "threshold", self.threshold, "a positive number")
        # The first heartbeat seeds two intervals (see HeartbeatHistory.seeded).
        _require(self.max_sample_size >= 2, "max_sample_size", self.max_sample_size, "at least 2")
        _require(
            self.min_std_deviation > 0, "min_std_deviation", self.min_std_deviation, "positive"
        )
        _require(
            self.acceptable_heartbeat_pause >= 0,
            "acceptable_heartbeat_pause",
            self.acceptable_heartbeat_pause,
            "zero or more",
        )
        _require(
            self.first_heartbeat_estimate > 0,
            "first_heartbeat_estimate",
            self.first_heartbeat_estimate,
            "positive",
        )


def _require(holds: bool, name: str, value: object, expected: str) -> None:
    finite = not isinstance(value, float) or math.isfinite(value)
    if not (holds and finite):
        raise ValueError(f"phi settings: {name} must be {expected} and finite, not {value!r}")


@dataclass(frozen=True, slots=True)
class HeartbeatHistory:
    """The last ``max_sample_size`` inter-arrival times, with their running sum and sum of
    squares, so that mean and variance cost O(1) however often phi is asked for.

    A heartbeat copies the window (at most ``max_sample_size`` references): cheap next to a
    network round trip, and it keeps the history a value. The running sums drift by rounding
    only, far below ``min_std_deviation``, which is what the variance is compared with.
    """

    max_sample_size: int
    intervals: tuple[float, ...] = ()
    interval_sum: float = 0.0
    squared_interval_sum: float = 0.0

    @classmethod
    def seeded(cls, settings: PhiSettings) -> HeartbeatHistory:
        """The history at the first heartbeat, before any interval was measured: two intervals
        around the estimate, mean = estimate and standard deviation = estimate / 4, so phi means
        something from the start instead of being undefined or zero until the second heartbeat.
        """
        mean = settings.first_heartbeat_estimate
        deviation = mean / 4
        empty = cls(settings.max_sample_size)
        return empty.add(mean - deviation).add(mean + deviation)

    def add(self, interval: float) -> HeartbeatHistory:
        """The history with ``interval`` appended, the oldest dropped past the window."""
        kept, total, squares = self.intervals, self.interval_sum, self.squared_interval_sum
        if len(kept) >= self.max_sample_size:
            dropped, kept = kept[0], kept[1:]
            total, squares = total - dropped, squares - dropped * dropped
        return HeartbeatHistory(
            self.max_sample_size,
            (*kept, interval),
            total + interval,
            squares + interval * interval,
        )

    @property
    def mean(self) -> float:
        return self.interval_sum / len(self.intervals)

    @property
    def variance(self) -> float:
        """Population variance; never negative, though rounding in the sums could make it so."""
        return max(0.0, self.squared_interval_sum / len(self.intervals) - self.mean**2)

    @property
    def std_deviation(self) -> float:
        return math.sqrt(self.variance)


@dataclass(frozen=True, slots=True)
class PhiAccrualDetector:
    """One monitor's view of one subject. Build it with settings only; ``heartbeat`` gives the
    next one. Before the first heartbeat phi is 0: the detector has nothing to judge by (its
    monitor judges a member that never answers: peer.membership.heartbeat).
    """

    settings: PhiSettings = field(default_factory=PhiSettings)
    history: HeartbeatHistory | None = None
    last_heartbeat: float | None = None

    @property
    def is_monitoring(self) -> bool:
        """Whether any heartbeat has arrived, so phi reflects a history."""
        return self.last_heartbeat is not None

    def heartbeat(self, now: float) -> PhiAccrualDetector:
        """The detector after a heartbeat at ``now``.

        As in Akka, the interval is learned only if the subject was still available when the
        heartbeat came: a heartbeat that ends a silence already judged a failure (a long pause,
        a healed partition) does not teach the detector that such silences are normal, which
        would blunt it for the next ``max_sample_size`` heartbeats.
        """
        if self.last_heartbeat is None or self.history is None:
            return PhiAccrualDetector(self.settings, HeartbeatHistory.seeded(self.settings), now)
        if now < self.last_heartbeat:
            raise ValueError(f"heartbeat at {now} is before the last one, {self.last_heartbeat}")
        history = self.history
        if self.available(now):
            history = history.add(now - self.last_heartbeat)
        return PhiAccrualDetector(self.settings, history, now)

    def phi(self, now: float) -> float:
        """Suspicion at ``now``: -log10 P(the next heartbeat comes later than it has so far).

        Inter-arrival times are taken as normal, with mean = mean interval + acceptable pause and
        standard deviation = max(measured, ``min_std_deviation``). P is computed exactly as
        0.5 * erfc(z / sqrt 2) rather than with the logistic approximation Akka uses: math has
        erfc, it matches the paper's formula, and unlike 1 - cdf it keeps its precision far into
        the tail (to phi about 320, not 16), so phi keeps rising with the silence. Where P
        underflows to 0.0, phi is ``PHI_CAP``.
        """
        if self.last_heartbeat is None or self.history is None:
            return 0.0
        mean = self.history.mean + self.settings.acceptable_heartbeat_pause
        deviation = max(self.history.std_deviation, self.settings.min_std_deviation)
        return phi_of(now - self.last_heartbeat, mean, deviation)

    def available(self, now: float) -> bool:
        """Whether the subject is still trusted at ``now``: phi below the threshold."""
        return self.phi(now) < self.settings.threshold


def phi_of(elapsed: float, mean: float, std_deviation: float) -> float:
    """-log10 of the probability that a normal(mean, std_deviation) variable exceeds
    ``elapsed``; ``PHI_CAP`` where that probability underflows, never below 0."""
    later = 0.5 * math.erfc((elapsed - mean) / (std_deviation * math.sqrt(2)))
    if later == 0.0:
        return PHI_CAP
    return max(0.0, -math.log10(later))
