"""Properties of the phi accrual detector over arbitrary settings and heartbeat histories:
suspicion never falls while the silence goes on, the window stays bounded, and the running
statistics are those of the intervals kept."""

from __future__ import annotations

import itertools
import math
import statistics

from hypothesis import given, settings
from hypothesis import strategies as st

from peer.membership.phi import PHI_CAP, HeartbeatHistory, PhiAccrualDetector, PhiSettings

intervals = st.lists(st.floats(0.0, 100.0), max_size=60)
silence = st.one_of(st.floats(-10.0, 60.0), st.floats(60.0, 1e6))


@st.composite
def phi_settings(draw: st.DrawFn) -> PhiSettings:
    return PhiSettings(
        threshold=draw(st.floats(0.5, 20.0)),
        max_sample_size=draw(st.integers(2, 30)),
        min_std_deviation=draw(st.floats(1e-3, 2.0)),
        acceptable_heartbeat_pause=draw(st.floats(0.0, 10.0)),
        first_heartbeat_estimate=draw(st.floats(1e-2, 10.0)),
    )


def detector_after(config: PhiSettings, gaps: list[float]) -> PhiAccrualDetector:
    detector = PhiAccrualDetector(config)
    for time in itertools.accumulate(gaps, initial=0.0):
        detector = detector.heartbeat(time)
    return detector


@settings(deadline=None)
@given(phi_settings(), intervals, st.lists(silence, min_size=2, max_size=20))
def test_phi_never_falls_as_the_silence_goes_on(config, gaps, silences):
    detector = detector_after(config, gaps)
    last = detector.last_heartbeat or 0.0
    phis = [detector.phi(last + silence) for silence in sorted(silences)]
    assert all(0.0 <= phi <= PHI_CAP for phi in phis)
    assert phis == sorted(phis)


@settings(deadline=None)
@given(phi_settings(), intervals)
def test_the_window_never_exceeds_max_sample_size(config, gaps):
    detector = PhiAccrualDetector(config)
    for time in itertools.accumulate(gaps, initial=0.0):
        detector = detector.heartbeat(time)
        assert detector.history is not None
        assert len(detector.history.intervals) <= config.max_sample_size


@settings(deadline=None)
@given(st.integers(1, 40), st.lists(st.floats(0.0, 100.0), min_size=1, max_size=200))
def test_running_statistics_are_those_of_the_kept_intervals(size, values):
    history = HeartbeatHistory(size)
    for value in values:
        history = history.add(value)
    kept = values[-size:]
    assert history.intervals == tuple(kept)
    scale = max(1.0, *kept)
    assert math.isclose(history.mean, statistics.fmean(kept), rel_tol=1e-9, abs_tol=1e-12 * scale)
    expected = statistics.pvariance(kept)
    assert math.isclose(history.variance, expected, rel_tol=1e-6, abs_tol=1e-9 * scale**2)
