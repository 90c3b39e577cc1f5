"""The shared split arithmetic and the job schedulers' counts."""

from __future__ import annotations

import pytest

from peer.scheduling.jobs import Need, balanced, greedy, percentage
from peer.scheduling.spread import spread


def test_spread_is_even_with_the_remainder_to_the_earliest():
    assert spread(10, [1, 1, 1], [None, None, None]) == [4, 3, 3]


def test_spread_hands_a_capped_claimants_surplus_to_the_others():
    assert spread(10, [1, 1, 1], [1, None, 2]) == [1, 7, 2]


def test_spread_stops_when_everyone_is_full():
    assert spread(10, [1, 1], [2, 3]) == [2, 3]


def test_spread_follows_weights_by_largest_remainder():
    assert spread(10, [75, 25], [None, None]) == [8, 2]
    assert spread(3, [50, 30, 20], [None, None, None]) == [1, 1, 1]  # 1.5, .9, .6


def test_spread_gives_nothing_to_zero_weights():
    assert spread(5, [0, 1], [None, None]) == [0, 5]


def test_greedy_saturates_the_earliest_job_first():
    needs = [Need(2, 5), Need(1, 100), Need(1, 3)]
    assert greedy(needs, 10) == [5, 5, 0]


def test_greedy_skips_a_job_it_cannot_start_and_serves_the_next():
    assert greedy([Need(2, 2), Need(9, 20), Need(1, 4)], 10) == [2, 0, 4]


def test_balanced_splits_evenly_and_redistributes_leftovers():
    assert balanced([Need(1, 100), Need(1, 2), Need(1, 100)], 11) == [5, 2, 4]


def test_balanced_drops_the_latest_job_left_below_its_minimum():
    # An even split gives 4, 3, 3: the second job (minimum 4) drops, the others share.
    assert balanced([Need(1, 100), Need(4, 100), Need(1, 100)], 10) == [5, 0, 5]


def test_balanced_backfills_idle_peers_to_a_dropped_job():
    # Split 3, 3, 3 drops the third; the first two saturate at 2 and 3, leaving 4 idle.
    assert balanced([Need(1, 2), Need(1, 3), Need(4, 9)], 9) == [2, 3, 4]


def test_percentage_gives_each_job_its_share():
    needs = [Need(1, 100, 50), Need(1, 100, 25), Need(1, 100, None)]
    assert percentage(needs, 8) == [4, 2, 0]


def test_percentage_hands_a_dropped_jobs_share_to_the_other_percentage_jobs():
    needs = [Need(1, 100, 50), Need(5, 100, 25), Need(1, 100, 25)]
    assert percentage(needs, 8) == [5, 0, 3]


@pytest.mark.parametrize("scheduler", [greedy, balanced, percentage])
def test_no_peers_means_no_job_runs(scheduler):
    assert scheduler([Need(1, 5, 50), Need(1, 5, 50)], 0) == [0, 0]
