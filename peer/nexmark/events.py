"""Nexmark's events, each a pure function of the configuration and its event number, as the
reference generator makes them: an event's kind and ids follow from its id, its time from its
number, and what it draws at random from the seed and its id. So any slot makes any event
without the others, a replay makes the same events, and an independent engine given the same
events computes the same answers.

Numbers and ids. Event number n (0, 1, 2, ...) is the n-th event read. Within each group of
``out_of_order_group_size`` numbers the ids are permuted (``event_id``: the reference's
adjusted event number), and the event's time is that of its id: event time runs out of order
within a group, never across groups. An id's kind is fixed by where it falls in each run of
``total_proportion`` ids: first people, then auctions, then bids (1:3:46 by default). People
and auctions are numbered in the order their ids come (from 1000, the reference's first ids);
an auction's seller and a bid's auction and bidder are a hot one (the first of the last
hundred) or one drawn among the recent ones (the last ``num_active_people`` people, the last
``num_in_flight_auctions`` auctions, and up to ten to come).

Fields. People carry a name, an email address, a credit card, a city and a state drawn from
the reference's lists; auctions an item name, a description, an initial bid and a reserve (in
cents, log-uniform from $1 to $1M), a category (10 to 14) and an expiry about as long after
their start as it takes a hundred more auctions to come; bids a price, and a channel and URL,
half of them among four hot ones. ``extra`` pads each to its average size.

Where this differs from the reference: ids start at event number 0, so person 1000 and auction
1000 exist (the reference skips them); a bidder is its person's id (the reference adds 1000
twice); what is drawn at random comes from a stream seeded by the seed and the event's id
(SplitMix64), where the reference draws from one unseeded stream per generator, so its runs
differ from one another; strings are cut from fixed pools of the reference's alphabet."""

from __future__ import annotations

import functools
import math
import random
from typing import TYPE_CHECKING, Any

from peer.nexmark.config import NexmarkConfig

if TYPE_CHECKING:
    import numpy as np

FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
HOT_RATIO = 100
"""Hot sellers, auctions and bidders are the first of each hundred."""
FUTURE_IDS = 10
"""How many ids to come a drawn person or auction may have."""
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
CHANNELS = 10_000
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah",
               "Deiter", "Walter")  # fmt: skip
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones",
              "Noris")  # fmt: skip
CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond",
          "Seattle", "Kent", "Cheyenne")  # fmt: skip
STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
POOL = 1 << 18
"""Characters in each pool strings are cut from: more than the longest padding a size allows."""
MIN_STRING = 3

GOLDEN = 0x9E3779B97F4A7C15
MASK = (1 << 64) - 1


def mix[W: (int, "np.ndarray")](z: W) -> W:
    """SplitMix64's finaliser, of an int, or of every word of a uint64 array (whose
    multiplications wrap as the mask does; peer.nexmark.columns)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


class Draws:
    """The random stream of one event: SplitMix64 from the seed and the event's id."""

    __slots__ = ("state",)

    def __init__(self, seed: int, event_id: int) -> None:
        self.state = mix((seed + (event_id + 1) * GOLDEN) & MASK)

    def below(self, n: int) -> int:
        """Uniform on 0 .. n - 1."""
        self.state = (self.state + GOLDEN) & MASK
        return mix(self.state) % n

    def unit(self) -> float:
        """Uniform on [0, 1)."""
        self.state = (self.state + GOLDEN) & MASK
        return (mix(self.state) >> 11) * 2.0**-53


@functools.cache
def pools() -> tuple[str, str]:
    """The pool of words (a space in 13 characters, the rest a to z) and of padding (a to z),
    the same in every process."""
    draw = random.Random(0x4E45584D41524B)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = "".join(draw.choices(" " + letters, weights=[2] + [1] * 26, k=POOL))
    return words, "".join(draw.choices(letters, k=POOL))


def _string(draws: Draws, longest: int, special: str = " ") -> str:
    """A word of 3 to ``longest`` - 1 characters, a 13th of them ``special``, trimmed of spaces
    at either end (as the reference trims)."""
    words = pools()[0]
    length = MIN_STRING + draws.below(longest - MIN_STRING)
    start = draws.below(POOL - length)
    text = words[start : start + length]
    return text.strip(" ") if special == " " else text.replace(" ", special)


def _extra(draws: Draws, size: int, average: int) -> str:
    """Padding that brings a record of ``size`` bytes to ``average`` bytes on average."""
    if size > average:
        return ""
    short = average - size
    delta = math.floor(short * 0.2 + 0.5)
    length = short - delta + (draws.below(2 * delta) if delta else 0)
    start = draws.below(POOL - length)
    return pools()[1][start : start + length]


def _price(draws: Draws) -> int:
    """Cents, log-uniform from $1 to $1M."""
    return math.floor(10 ** (draws.unit() * 6) * 100 + 0.5)


def event_id[N: (int, "np.ndarray")](config: NexmarkConfig, number: N) -> N:
    """The id of event number ``number``: permuted within its group (the reference's adjusted
    event number). Of an array of numbers (peer.nexmark.columns), the array of their ids."""
    group = config.out_of_order_group_size
    return (number // group) * group + (number * 953) % group


def event_time(config: NexmarkConfig, event: int) -> int:
    """When the event of id ``event`` happens, in milliseconds since the epoch."""
    return config.base_time + int(event * config.inter_event_delay_us) // 1000


def kind_of(config: NexmarkConfig, event: int) -> str:
    offset = event % config.total_proportion
    if offset < config.person_proportion:
        return "person"
    return "auction" if offset < config.person_proportion + config.auction_proportion else "bid"


def last_person(config: NexmarkConfig, event: int) -> int:
    """The 0-based number of the last person whose id is at or before ``event``."""
    epoch, offset = divmod(event, config.total_proportion)
    return epoch * config.person_proportion + min(offset, config.person_proportion - 1)


def last_auction(config: NexmarkConfig, event: int) -> int:
    """The 0-based number of the last auction whose id is at or before ``event``."""
    people, auctions = config.person_proportion, config.auction_proportion
    epoch, offset = divmod(event, config.total_proportion)
    if offset < people:
        epoch, offset = epoch - 1, auctions - 1
    elif offset >= people + auctions:
        offset = auctions - 1
    else:
        offset -= people
    return epoch * auctions + offset


def _person_picked(
    config: NexmarkConfig, event: int, draws: Draws, hot_ratio: int, hot_offset: int
) -> int:
    """A seller or bidder: the hot one (the first of the last hundred people, plus
    ``hot_offset``, which keeps hot bidders apart from hot sellers) but one time in
    ``hot_ratio``, else one of the recent people."""
    if draws.below(hot_ratio) > 0:
        return (last_person(config, event) // HOT_RATIO) * HOT_RATIO + hot_offset
    return _recent_person(config, event, draws)


def _recent_person(config: NexmarkConfig, event: int, draws: Draws) -> int:
    people = last_person(config, event) + 1
    active = min(people, config.num_active_people)
    return people - active + draws.below(active + FUTURE_IDS)


def _recent_auction(config: NexmarkConfig, event: int, draws: Draws) -> int:
    last = last_auction(config, event)
    low = max(last - config.num_in_flight_auctions, 0)
    return low + draws.below(last - low + 1 + FUTURE_IDS)


def event(config: NexmarkConfig, number: int) -> dict[str, Any]:
    """Event number ``number``: a person, an auction or a bid, with its ``kind``."""
    made = event_id(config, number)
    draws = Draws(config.seed, made)
    kind = kind_of(config, made)
    if kind == "bid":
        return _bid(config, made, draws)
    return _person(config, made, draws) if kind == "person" else _auction(config, made, draws)


def _person(config: NexmarkConfig, made: int, draws: Draws) -> dict[str, Any]:
    name = (
        f"{FIRST_NAMES[draws.below(len(FIRST_NAMES))]} {LAST_NAMES[draws.below(len(LAST_NAMES))]}"
    )
    email = f"{_string(draws, 7)}@{_string(draws, 5)}.com"
    card = " ".join(f"{draws.below(10_000):04d}" for _ in range(4))
    city, state = CITIES[draws.below(len(CITIES))], STATES[draws.below(len(STATES))]
    size = 8 + len(name) + len(email) + len(card) + len(city) + len(state)
    return {
        "kind": "person", "id": last_person(config, made) + FIRST_PERSON_ID, "name": name,
        "emailAddress": email, "creditCard": card, "city": city, "state": state,
        "dateTime": event_time(config, made),
        "extra": _extra(draws, size, config.avg_person_byte_size),
    }  # fmt: skip


def _auction(config: NexmarkConfig, made: int, draws: Draws) -> dict[str, Any]:
    seller = _person_picked(config, made, draws, config.hot_sellers_ratio, 0)
    category = FIRST_CATEGORY_ID + draws.below(NUM_CATEGORIES)
    initial = _price(draws)
    start = event_time(config, made)
    lead = config.num_in_flight_auctions * config.total_proportion // config.auction_proportion
    horizon = event_time(config, made + lead) - start
    expires = start + 1 + draws.below(max(2 * horizon, 1))
    item, description = _string(draws, 20), _string(draws, 100)
    reserve = initial + _price(draws)
    return {
        "kind": "auction", "id": last_auction(config, made) + FIRST_AUCTION_ID,
        "itemName": item, "description": description, "initialBid": initial,
        "reserve": reserve, "dateTime": start, "expires": expires,
        "seller": seller + FIRST_PERSON_ID, "category": category,
        "extra": _extra(draws, 8 + len(item) + len(description) + 40,
                        config.avg_auction_byte_size),
    }  # fmt: skip


def _bid(config: NexmarkConfig, made: int, draws: Draws) -> dict[str, Any]:
    if draws.below(config.hot_auction_ratio) > 0:
        auction = (last_auction(config, made) // HOT_RATIO) * HOT_RATIO
    else:
        auction = _recent_auction(config, made, draws)
    bidder = _person_picked(config, made, draws, config.hot_bidders_ratio, 1)
    price = _price(draws)
    if draws.below(2) > 0:
        hot = draws.below(len(HOT_CHANNELS))
        channel, url = HOT_CHANNELS[hot], hot_urls()[hot]
    else:
        number = draws.below(CHANNELS)
        channel, url = f"channel-{number}", channel_urls()[number]
    return {
        "kind": "bid", "auction": auction + FIRST_AUCTION_ID,
        "bidder": bidder + FIRST_PERSON_ID, "price": price, "channel": channel, "url": url,
        "dateTime": event_time(config, made),
        "extra": _extra(draws, 32, config.avg_bid_byte_size),
    }  # fmt: skip


def _url(draws: Draws) -> str:
    parts = "/".join(_string(draws, 5, "_") for _ in range(3))
    return f"https://www.nexmark.com/{parts}/item.htm?query=1"


@functools.cache
def hot_urls() -> tuple[str, ...]:
    return tuple(_url(Draws(0, -1 - i)) for i in range(len(HOT_CHANNELS)))


@functools.cache
def channel_urls() -> tuple[str, ...]:
    """Each channel's URL, nine in ten of them naming the channel (by its number's 32 bits
    reversed, as the reference does)."""
    urls = []
    for number in range(CHANNELS):
        draws = Draws(1, number)
        url = _url(draws)
        if draws.below(10) > 0:
            url += f"&channel_id={_reversed32(number)}"
        urls.append(url)
    return tuple(urls)


def _reversed32(number: int) -> int:
    """The number's 32 bits reversed, as a signed int made positive (the reference's
    ``Math.abs(Integer.reverse(n))``, whose one overflow, for 1, is kept)."""
    value = int(f"{number & 0xFFFFFFFF:032b}"[::-1], 2)
    signed = value - (1 << 32) if value >= 1 << 31 else value
    return -signed if signed != -(1 << 31) else signed
