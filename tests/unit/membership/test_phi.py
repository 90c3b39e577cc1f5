"""The phi accrual detector against the formula, computed here independently (through
statistics.NormalDist's cdf, not erfc), and its behaviour over heartbeat schedules."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest

from peer.membership.phi import PHI_CAP, HeartbeatHistory, PhiAccrualDetector, PhiSettings

SEED = [0.75, 1.25]  # what the first heartbeat seeds with the default estimate of 1 s


def beats(times: list[float], settings: PhiSettings | None = None) -> PhiAccrualDetector:
    detector = PhiAccrualDetector(settings or PhiSettings())
    for time in times:
        detector = detector.heartbeat(time)
    return detector


def reference_phi(intervals: list[float], elapsed: float, settings: PhiSettings) -> float:
    mean = statistics.fmean(intervals) + settings.acceptable_heartbeat_pause
    deviation = max(statistics.pstdev(intervals), settings.min_std_deviation)
    later = 1 - statistics.NormalDist(mean, deviation).cdf(elapsed)
    return -math.log10(later)


SCHEDULES = {
    "first heartbeat only": [0.0],
    "regular": [float(i) for i in range(20)],
    "jittery": [0.0, 0.5, 1.9, 2.2, 3.8, 4.1, 5.5, 6.9, 7.0],
    "slow": [0.0, 2.5, 5.5, 9.0, 12.0],
}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
@pytest.mark.parametrize("sigmas", [-1.0, 0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0])
def test_phi_follows_the_formula(name, sigmas):
    settings = PhiSettings(acceptable_heartbeat_pause=0.5)
    times = SCHEDULES[name]
    intervals = SEED + [b - a for a, b in itertools.pairwise(times)]
    mean = statistics.fmean(intervals) + settings.acceptable_heartbeat_pause
    deviation = max(statistics.pstdev(intervals), settings.min_std_deviation)
    elapsed = mean + sigmas * deviation
    detector = beats(times, settings)
    assert detector.history is not None
    assert list(detector.history.intervals) == pytest.approx(intervals)
    expected = reference_phi(intervals, elapsed, settings)
    assert detector.phi(times[-1] + elapsed) == pytest.approx(expected, rel=1e-6, abs=1e-9)


def test_the_first_heartbeat_seeds_mean_estimate_and_deviation_a_quarter_of_it():
    history = HeartbeatHistory.seeded(PhiSettings(first_heartbeat_estimate=2.0))
    assert history.mean == pytest.approx(2.0)
    assert history.std_deviation == pytest.approx(0.5)
    # At mean + pause, a later heartbeat is as likely as not: phi is log10(2).
    detector = beats([10.0], PhiSettings(first_heartbeat_estimate=2.0))
    assert detector.phi(10.0 + 2.0 + 3.0) == pytest.approx(math.log10(2))


def test_phi_is_zero_before_the_first_heartbeat():
    detector = PhiAccrualDetector()
    assert not detector.is_monitoring
    assert detector.phi(0.0) == 0.0
    assert detector.phi(1e9) == 0.0
    assert detector.available(1e9)
    assert detector.heartbeat(5.0).is_monitoring


def test_regular_heartbeats_keep_phi_low_and_a_long_silence_crosses_the_threshold():
    detector = PhiAccrualDetector()
    for i in range(200):
        now = i * 1.0
        assert detector.phi(now) < 0.5, f"heartbeat {i} arrived suspected"
        detector = detector.heartbeat(now)
    last = 199.0
    assert detector.available(last + 4.0)  # within the mean and the acceptable pause
    assert not detector.available(last + 6.0)
    assert detector.phi(last + 6.0) >= PhiSettings().threshold


def test_a_heartbeat_after_a_judged_failure_is_not_learned():
    detector = beats([0.0, 1.0, 2.0, 3.0])
    assert not detector.available(60.0)
    back = detector.heartbeat(60.0)
    assert back.history == detector.history
    assert back.last_heartbeat == 60.0
    assert back.available(61.0)


def test_a_jittery_member_is_given_more_slack_than_a_steady_one():
    steady = beats([float(i) for i in range(50)])
    jittery = beats([i + (0.4 if i % 2 else -0.4) for i in range(50)])
    assert jittery.phi(49.4 + 4.6) < steady.phi(49.0 + 4.6)


def test_phi_is_capped_and_finite_where_the_probability_underflows():
    detector = beats([0.0, 1.0, 2.0])
    assert detector.phi(1e6) == PHI_CAP
    assert math.isfinite(PHI_CAP)
    assert detector.phi(50.0) <= PHI_CAP


def test_the_window_drops_the_oldest_interval():
    detector = beats([0.0, 1.0, 3.0, 4.5], PhiSettings(max_sample_size=3))
    assert detector.history is not None
    # The seed (0.75, 1.25), then 1.0, 2.0 and 1.5: the first two seeded ones have gone.
    assert detector.history.intervals == (1.0, 2.0, 1.5)


def test_a_heartbeat_from_the_past_is_refused():
    detector = beats([0.0, 1.0])
    with pytest.raises(ValueError, match="before the last one"):
        detector.heartbeat(0.5)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("threshold", 0.0),
        ("threshold", -1.0),
        ("threshold", math.inf),
        ("max_sample_size", 1),
        ("max_sample_size", 0),
        ("min_std_deviation", 0.0),
        ("min_std_deviation", math.nan),
        ("acceptable_heartbeat_pause", -0.1),
        ("acceptable_heartbeat_pause", math.inf),
        ("first_heartbeat_estimate", 0.0),
        ("first_heartbeat_estimate", -2.0),
    ],
)
def test_bad_settings_are_refused_naming_the_field_and_value(name, value):
    with pytest.raises(ValueError, match=rf"{name} .*{value!r}") as raised:
        PhiSettings(**{name: value})
    assert name in str(raised.value)


def test_default_settings_are_akkas():
    settings = PhiSettings()
    assert (settings.threshold, settings.max_sample_size) == (8.0, 1000)
    assert (settings.min_std_deviation, settings.acceptable_heartbeat_pause) == (0.1, 3.0)
    assert settings.first_heartbeat_estimate == 1.0
