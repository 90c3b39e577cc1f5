"""The failure-detection benchmark's judges of recorded heartbeat arrivals: the fixed detector
suspects exactly a silence longer than its timeout, the phi judge where the formula crosses its
threshold, both forgive the observer's own stalls, and for either a suspicion reallocates only
once it has lasted the same grace, the shipped auto-down time."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench import failure_detection as bench
from peer.membership.agent import MembershipSettings
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


def test_a_suspicion_reallocates_once_it_lasts_the_grace_and_one_still_open_counts_so_far():
    found = [bench.Suspicion(1.0, 1.5), bench.Suspicion(10.0, 16.0), bench.Suspicion(30.0, None)]
    assert bench.needless(found, 32.0, 5.0) == 1
    assert bench.needless(found, 40.0, 5.0) == 2
    assert bench.needless(found, 32.0, 0.0) == 3  # no grace: the old code's rule


def test_the_grace_is_the_shipped_auto_down_time():
    assert MembershipSettings().auto_down_unreachable_after == bench.GRACE


def test_a_reallocation_is_a_suspicion_of_the_death_lasting_the_grace_and_a_cut_one_starts_over():
    arrivals = (*beats(0.0, 2.0, 0.1), *beats(3.5, 5.0, 0.1))
    # The first suspicion after the last reply (about 6.0) ends when the observer forgives its
    # stall (6.5 to 7.2); the next starts about 8.2 and lasts until the trace ends at 12.
    stalled = trace(arrivals, 12.0, stalls=[(6.5, 7.2)])
    short = bench.reallocation_after(stalled, bench.FixedJudge(1.0), 5.05, 1.0)
    assert short == pytest.approx(6.0 + 1.0 - 5.05, abs=STEP + 1e-9)
    cut = bench.reallocation_after(stalled, bench.FixedJudge(1.0), 5.05, 3.0)
    assert cut == pytest.approx(8.2 + 3.0 - 5.05, abs=STEP + 1e-9)
    assert bench.reallocation_after(stalled, bench.FixedJudge(1.0), 5.05, 4.0) is None


def load_of(observer: str, arrivals: tuple[float, ...], end: float) -> bench.LoadRun:
    traces = {observer: trace(arrivals, end)}
    return bench.LoadRun(0.0, end, (), traces, unreachable=0, downs=0, others_unreachable=0,
                         stalls=0)  # fmt: skip


def test_the_fixed_detector_reallocates_after_the_same_grace_as_phi():
    observer = bench.FIXED.observer
    killed = 5.05
    kill = bench.Kill("subject-01", killed, 0.0, 0.0,
                      {observer: trace(beats(0.0, 5.0, 0.1), killed + bench.HORIZON)})  # fmt: skip
    # Two silences under load: 2 s (a suspicion of about 1 s) and the grace and 2 s more.
    resumed = 22.0 + bench.GRACE
    arrivals = (*beats(0.0, 10.0, 0.1), *beats(12.0, 20.0, 0.1), *beats(resumed, resumed + 3, 0.1))
    judged = bench.judge_runs(bench.FIXED, [kill], load_of(observer, arrivals, resumed + 3))
    assert judged.suspicions == 2
    assert judged.reallocations == 1
    assert judged.detection[0] == pytest.approx(0.95, abs=STEP + 1e-9)
    assert judged.reallocation[0] == pytest.approx(judged.detection[0] + bench.GRACE, abs=1e-9)


def judged(detection: float, reallocations: int) -> bench.Judged:
    return bench.Judged([detection], [detection + bench.GRACE], suspicions=reallocations,
                        reallocations=reallocations, hours=1.0, longest=0.0)  # fmt: skip


def test_the_goal_is_detection_no_slower_and_a_tenth_of_the_reallocations_at_equal_grace():
    assert bench.meets_goal(judged(0.9, 0), judged(1.0, 0))
    assert not bench.meets_goal(judged(1.1, 0), judged(1.0, 0))
    assert not bench.meets_goal(judged(0.9, 1), judged(1.0, 0))
    assert bench.meets_goal(judged(0.9, 2), judged(1.0, 20))
    assert not bench.meets_goal(judged(0.9, 3), judged(1.0, 20))


def test_the_grid_starts_with_the_shipped_settings_and_holds_each_point_once():
    points = bench.grid()
    assert points[0] == bench.SHIPPED_SETTING
    assert points[0].phi == bench.SHIPPED.phi
    assert len({p.name for p in points}) == len(points)
    intervals = {p.phi.first_heartbeat_estimate for p in points}
    assert intervals == {bench.SHIPPED.heartbeat_interval, *bench.RECORDERS.values()}
