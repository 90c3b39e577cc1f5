"""A scheduling server's cache of answers: exact keys, a bound, and the oldest positions
evicted first, checked against a plain dict model over random runs of puts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.scheduling import freeze
from peer.scheduling.answers import AnswerCache

DIGESTS = ("aa", "bb", "cc")


def answer(position: int, digest: str):
    return freeze({f"job-{position}-{digest}": {"t": ["p0"]}})


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 6),
    st.lists(st.tuples(st.integers(0, 12), st.sampled_from(DIGESTS)), max_size=40),
)
def test_the_cache_keeps_the_newest_answers_under_their_exact_keys(capacity, puts):
    cache, model = AnswerCache(capacity), {}
    for position, digest in puts:
        before = cache
        cache = cache.put(position, digest, answer(position, digest))
        model.setdefault((position, digest), answer(position, digest))
        kept = sorted(model)[-capacity:]
        assert sorted(cache.answers) == kept
        assert before.put(position, digest, answer(position, digest)) == cache, "puts are pure"
    for position in range(13):
        for digest in DIGESTS:
            found = cache.get(position, digest)
            assert found is None or found == answer(position, digest)
            assert (found is not None) == ((position, digest) in cache.answers)


def test_a_lookup_under_another_digest_at_the_same_position_finds_nothing():
    cache = AnswerCache(4).put(7, "aa", answer(7, "aa"))
    assert cache.get(7, "aa") == answer(7, "aa")
    assert cache.get(7, "bb") is None
    assert cache.get(8, "aa") is None


def test_a_full_cache_drops_its_oldest_position_first():
    cache = AnswerCache(2).put(5, "aa", answer(5, "aa")).put(3, "aa", answer(3, "aa"))
    cache = cache.put(9, "aa", answer(9, "aa"))
    assert sorted(cache.answers) == [(5, "aa"), (9, "aa")]


def test_a_cache_must_hold_something():
    with pytest.raises(ValueError, match="capacity must be at least 1, not 0"):
        AnswerCache(0)
