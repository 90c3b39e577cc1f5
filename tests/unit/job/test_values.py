"""The canonical text of a value: compact JSON with sorted keys, the same whichever path makes
it."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from peer.job.values import canonical

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=10,
)


@given(JSON)
def test_the_canonical_text_is_compact_json_with_sorted_keys(value) -> None:
    assert canonical(value) == json.dumps(value, sort_keys=True, separators=(",", ":"))


def test_a_bool_is_not_taken_for_an_int() -> None:
    assert (canonical(True), canonical(1), canonical("é")) == ("true", "1", '"\\u00e9"')
