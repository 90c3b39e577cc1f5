"""Nexmark's events as the reference makes them: kinds in their proportions by id, people and
auctions numbered in id order, sellers, auctions and bidders among the recent or hot ones,
event time out of order only within a group, every event a function of the settings and its
number; and settings out of range refused, naming the setting."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from peer.nexmark.config import OUT_OF_ORDER_PRIME, NexmarkConfig, SettingError
from peer.nexmark.events import (
    CITIES,
    FIRST_AUCTION_ID,
    FIRST_PERSON_ID,
    FUTURE_IDS,
    STATES,
    event,
    event_id,
    event_time,
    last_auction,
    last_person,
)

configs = st.builds(
    NexmarkConfig,
    rate=st.sampled_from([1.0, 10_000.0, 1e7]),
    seed=st.integers(0, 2**64 - 1),
    person_proportion=st.integers(1, 4),
    auction_proportion=st.integers(1, 6),
    bid_proportion=st.integers(1, 50),
    num_in_flight_auctions=st.integers(1, 200),
    num_active_people=st.integers(1, 2000),
    out_of_order_group_size=st.integers(1, 100),
)


@given(configs, st.integers(0, 10**6), st.integers(1, 300))
def test_each_run_of_ids_holds_the_kinds_in_their_proportions(config, start, length):
    """Of ids ``start`` to ``start + length * T``, people, auctions and bids come P, A and B in
    each T, people first: the reference's order by id."""
    total = config.total_proportion
    first = start - start % total
    kinds = [event(config, n)["kind"] for n in range(first, first + total)]
    group = config.out_of_order_group_size
    assume(group == 1)  # in order, numbers are ids
    assert kinds == (["person"] * config.person_proportion
                     + ["auction"] * config.auction_proportion
                     + ["bid"] * config.bid_proportion)  # fmt: skip


@given(configs, st.integers(0, 10**5))
def test_ids_are_permuted_within_their_group_and_nowhere_else(config, group_index):
    group = config.out_of_order_group_size
    numbers = range(group_index * group, (group_index + 1) * group)
    assert sorted(event_id(config, n) for n in numbers) == list(numbers)


@given(configs, st.integers(0, 10**6), st.integers(0, 10**6))
def test_event_time_never_goes_back_across_groups(config, a, b):
    """An event's time is at least that of the first id of its group: what the input's
    watermark stands at until the group is read."""
    assume(a != b)
    group = config.out_of_order_group_size
    low, high = sorted((a, b))
    assume(low // group < high // group)
    later = event(config, high)["dateTime"]
    assert later >= event_time(config, (low // group) * group)
    assert later >= event_time(config, (high // group) * group)


@given(configs, st.integers(0, 10**6))
def test_an_event_is_a_function_of_the_settings_and_its_number(config, number):
    assert event(config, number) == event(config, number)
    other = NexmarkConfig(seed=(config.seed + 1) % 2**64)
    assert event(other, number)["dateTime"] == event(NexmarkConfig(), number)["dateTime"]


@given(configs, st.integers(0, 10**6))
def test_people_and_auctions_are_numbered_in_the_order_of_their_ids(config, number):
    made = event_id(config, number)
    row = event(config, number)
    if row["kind"] == "person":
        assert row["id"] == last_person(config, made) + FIRST_PERSON_ID
        assert row["id"] - FIRST_PERSON_ID == last_person(config, made - 1) + 1, "the next one"
        assert row["city"] in CITIES
        assert row["state"] in STATES
        assert len(row["creditCard"]) == 19
    elif row["kind"] == "auction":
        assert row["id"] == last_auction(config, made) + FIRST_AUCTION_ID
        assert 10 <= row["category"] <= 14
        assert row["initialBid"] < row["reserve"]
        assert row["expires"] > row["dateTime"]


@given(configs, st.integers(0, 10**6))
def test_sellers_auctions_and_bidders_are_hot_or_recent(config, number):
    made = event_id(config, number)
    row = event(config, number)
    people = last_person(config, made) + 1
    if row["kind"] == "auction":
        seller = row["seller"] - FIRST_PERSON_ID
        hot = (people - 1) // 100 * 100
        assert seller == hot or people - config.num_active_people <= seller < people + FUTURE_IDS
    if row["kind"] == "bid":
        auction, last = row["auction"] - FIRST_AUCTION_ID, last_auction(config, made)
        recent = last - config.num_in_flight_auctions <= auction <= last + FUTURE_IDS
        assert auction == last // 100 * 100 or recent
        bidder = row["bidder"] - FIRST_PERSON_ID
        hot = (people - 1) // 100 * 100 + 1
        assert bidder == hot or people - config.num_active_people <= bidder < people + FUTURE_IDS
        assert 100 <= row["price"] <= 100_000_000


def test_twenty_thousand_events_hold_the_reference_s_shares():
    """Bids are 46 in 50 of the events; half of them on a hot auction, about three quarters
    by a hot bidder; prices log-uniform (their median near $1,000)."""
    config = NexmarkConfig(events=20_000)
    bids = [row for row in (event(config, n) for n in range(20_000)) if row["kind"] == "bid"]
    assert len(bids) == 20_000 * 46 // 50
    hot_auctions = sum(1 for b in bids if (b["auction"] - FIRST_AUCTION_ID) % 100 == 0)
    assert 0.45 < hot_auctions / len(bids) < 0.6
    prices = sorted(b["price"] for b in bids)
    assert 50_000 < prices[len(prices) // 2] < 200_000
    sizes = [len(b["extra"]) for b in bids]
    assert min(sizes) >= 54
    assert max(sizes) <= 81


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        ("rate", 0, "nexmark rate must be a number of events per second"),
        ("rate", math.inf, "nexmark rate must be"),
        ("events", -1, "nexmark events must be None or an int"),
        ("person_proportion", 0, "nexmark person_proportion must be an int from 1"),
        ("hot_auction_ratio", 1.5, "nexmark hot_auction_ratio must be an int"),
        ("out_of_order_group_size", OUT_OF_ORDER_PRIME, "must not be a multiple of 953"),
        ("seed", -1, "nexmark seed must be an int from 0"),
        ("avg_bid_byte_size", True, "nexmark avg_bid_byte_size must be an int"),
    ],
)
def test_a_setting_out_of_range_is_refused_naming_it(setting, value, says):
    with pytest.raises(SettingError, match=says):
        NexmarkConfig.of({setting: value})


def test_an_unknown_setting_is_refused_naming_it():
    with pytest.raises(SettingError, match="nexmark has no setting 'bids_per_second'"):
        NexmarkConfig.of({"bids_per_second": 3})
