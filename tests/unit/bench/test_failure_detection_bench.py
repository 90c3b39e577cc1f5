"""The gossip simulation of the failure-detection benchmark reaches convergence on every member,
and its figures and last line mean what the benchmark says."""

from __future__ import annotations

import contextlib
import io
import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from bench import failure_detection as bench

TIMING = bench.Timing(interval=1.0, latency=0.001)


@settings(deadline=None, max_examples=20)  # a shared machine's pauses are not the code's
@given(st.sampled_from(sorted(bench.SIMULATIONS)), st.integers(2, 30), st.integers(0, 2**32))
def test_every_member_ends_holding_the_change_converged(kind, n, seed):
    simulation = bench.SIMULATIONS[kind](n, TIMING, random.Random(seed))
    result = simulation.run()
    assert all(
        state.version == simulation.target and state.converged()
        for state in simulation.states.values()
    )
    assert 0 < result.dissemination_s <= result.convergence_s
    assert result.states > 0
    assert result.merges > 0
    assert result.merge_wall_s > 0


@settings(deadline=None, max_examples=10)
@given(st.integers(2, 20), st.integers(0, 2**32))
def test_a_run_depends_only_on_its_seed(n, seed):
    first, second = (bench.simulate("pushpull", n, TIMING, seed) for _ in range(2))
    assert (first.convergence_s, first.states, first.statuses) == (
        second.convergence_s,
        second.states,
        second.statuses,
    )


def test_push_pull_sends_statuses_first_and_naive_push_only_states():
    pushpull = bench.simulate("pushpull", 40, TIMING, 5)
    naive = bench.simulate("naive", 40, TIMING, 5)
    assert pushpull.statuses >= pushpull.states > 0
    assert naive.statuses == naive.requests == 0
    assert naive.states > 0


def test_a_spread_is_the_median_and_the_range():
    assert bench.Spread.of([3.0, 1.0, 2.0]) == bench.Spread(2.0, 1.0, 3.0)
    assert bench.Spread.of([4.0, 1.0, 2.0, 9.0]) == bench.Spread(3.0, 1.0, 9.0)
    assert bench.Spread.of([0.5]) == bench.Spread(0.5, 0.5, 0.5)


def test_the_last_line_holds_the_figures_and_the_options():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        bench.main(["--parts", "gossip", "--sizes", "6,12", "--repeat", "2", "--jobs", "1",
                    "--seed", "3"])  # fmt: skip
    figures = json.loads(out.getvalue().splitlines()[-1])
    for name in (
        "detection_s_median_phi",
        "detection_s_min_fixed",
        "reallocation_s_max_fixed",
        "needless_reallocations_per_hour_phi",
        "needless_reallocations_per_hour_fixed",
    ):
        assert figures[name] is None  # the detection part was left out
    for n in (6, 12):
        for kind in ("", "naive_"):
            for key in bench.PER_RUN:
                median, low, high = (
                    figures[f"gossip_{key}{s}_{kind}{n}"] for s in ("", "_min", "_max")
                )
                assert low <= median <= high
            assert figures[f"gossip_convergence_s_{kind}{n}"] > 0
    assert figures["options"]["sizes"] == [6, 12]
    assert figures["options"]["repeat"] == 2
    assert figures["options"]["parts"] == ["gossip"]
