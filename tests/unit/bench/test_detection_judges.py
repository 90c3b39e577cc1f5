"""The failure-detection benchmark's judges of recorded heartbeat arrivals: the fixed detector
suspects exactly a silence longer than its timeout, the phi judge where the formula crosses its
threshold, both forgive the observer's own stalls, and reallocations are counted per detector."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench import failure_detection as bench
from peer.membership.phi import PhiSettings, phi_of

STEP = bench.TICK


def beats(start: float, end: float, every: float) -> tuple[float, ...]:
    count = round((end - start) / every)
    return tuple(start + i * every for i in range(count + 1))


def trace(arrivals: tuple[float, ...], end: float, stalls=()) -> bench.Trace:
    return bench.Trace(arrivals, tuple(stalls), arrivals[0], end)


def test_the_fixed_judge_suspects_a_silence_past_its_timeout_at_the_first_look_after_it():
    arrivals = beats(0.0, 5.0, 0.1)
    found = bench.suspicions(trace(arrivals, 10.0), bench.FixedJudge(1.0))
    assert len(found) == 1
    assert found[0].end is None
    assert 6.0 < found[0].start <= 6.0 + STEP + 1e-9


def test_a_gap_shorter_than_the_timeout_is_no_suspicion_and_a_longer_one_heals():
    arrivals = (*beats(0.0, 2.0, 0.1), *beats(2.9, 4.0, 0.1), *beats(5.4, 8.0, 0.1))
    found = bench.suspicions(trace(arrivals, 8.0), bench.FixedJudge(1.0))
    assert len(found) == 1
    assert 5.0 < found[0].start <= 5.0 + STEP + 1e-9
    assert found[0].end == pytest.approx(5.4, abs=STEP + 1e-9)


def test_a_stall_of_the_observer_is_forgiven_by_the_fixed_judge_past_half_its_timeout():
    arrivals = (*beats(0.0, 2.0, 0.1), *beats(3.5, 5.0, 0.1))
    judged = trace(arrivals, 5.0, stalls=[(2.05, 2.7)])
    assert bench.suspicions(judged, bench.FixedJudge(1.0)) == []
    short = trace(arrivals, 5.0, stalls=[(2.05, 2.4)])
    assert len(bench.suspicions(short, bench.FixedJudge(1.0))) == 1


def test_the_phi_judge_suspects_where_phi_reaches_the_threshold():
    settings = PhiSettings(
        threshold=8.0,
        min_std_deviation=0.1,
        acceptable_heartbeat_pause=0.5,
        first_heartbeat_estimate=0.25,
    )
    arrivals = beats(0.0, 10.0, 0.25)
    killed = 10.1
    seconds = bench.detection_after(trace(arrivals, 20.0), bench.PhiJudge(settings), killed)
    # Regular intervals of 0.25 s: mean 0.25 (the seeded pair averages the estimate), and the
    # deviation is under the minimum, so phi is the formula's at mean 0.75, deviation 0.1.
    crossing = next(t / 1000 for t in range(0, 5000) if phi_of(t / 1000, 0.25 + 0.5, 0.1) >= 8.0)
    assert seconds is not None
    expected = 10.0 + crossing - killed
    assert expected - 0.001 <= seconds <= expected + STEP + 1e-9


def test_a_larger_threshold_or_pause_detects_later_on_the_same_trace():
    base = PhiSettings(acceptable_heartbeat_pause=0.3, first_heartbeat_estimate=0.1)
    judged = trace(beats(0.0, 5.0, 0.1), 15.0)
    times = [
        bench.detection_after(judged, bench.PhiJudge(s), 5.0)
        for s in (
            base,
            replace(base, threshold=12.0),
            replace(base, acceptable_heartbeat_pause=1.0),
        )
    ]
    assert times[0] < times[1]
    assert times[0] < times[2]


def test_a_detection_is_the_first_suspicion_after_the_last_reply():
    arrivals = (*beats(0.0, 2.0, 0.1), *beats(3.5, 5.0, 0.1))
    assert bench.detection_after(trace(arrivals, 5.9), bench.FixedJudge(1.0), 5.05) is None
    stalled = trace(arrivals, 12.0, stalls=[(6.5, 7.2)])
    seconds = bench.detection_after(stalled, bench.FixedJudge(1.0), 5.05)
    assert seconds == pytest.approx(0.95, abs=STEP + 1e-9)
    assert len(bench.suspicions(stalled, bench.FixedJudge(1.0))) == 3


def test_every_fixed_suspicion_reallocates_and_phi_only_those_lasting_the_auto_down_time():
    found = [bench.Suspicion(1.0, 1.5), bench.Suspicion(10.0, 16.0), bench.Suspicion(30.0, None)]
    assert bench.needless(found, 32.0, 0.0) == 3
    assert bench.needless(found, 32.0, 5.0) == 1
    assert bench.needless(found, 40.0, 5.0) == 2
    assert bench.needless(found, 40.0, None) == 0


def test_the_grid_starts_with_the_shipped_settings_and_holds_each_point_once():
    points = bench.grid()
    assert points[0] == bench.SHIPPED_SETTING
    assert points[0].phi == bench.SHIPPED.phi
    assert len({p.name for p in points}) == len(points)
    intervals = {p.phi.first_heartbeat_estimate for p in points}
    assert intervals == {bench.SHIPPED.heartbeat_interval, *bench.RECORDERS.values()}
