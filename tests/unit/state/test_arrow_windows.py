"""Windows fed Arrow batches: they fire exactly what the same rows fire, and turn into Python
only the columns their key, event time and aggregation read."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from peer.job.spec import Trigger, Window
from peer.values.columnar import FieldKey
from tests.unit.state.windowed import FNS, by_user, closed, state

WINDOWS = {
    "count": Window("w", "agg", "fixed", "count", key="t", range=10),
    "sum": Window("w", "agg", "sliding", "sum", key="t", range=10, slide=5, field="v"),
    "average": Window("w", "agg", "session", "average", key="t", gap=3, field="v"),
    "collect": Window("w", "agg", "global", "collect"),
    "distinct": Window("w", "agg", "fixed", f"{FNS}:DISTINCT", key="t", range=10, field="v"),
}
TRIGGERS = (Trigger("w", "segment", threshold=2), Trigger("w", "watermark"))

segments = st.lists(
    st.fixed_dictionaries(
        {
            "user": st.sampled_from(["a", "b", "c"]),
            "t": st.integers(0, 40).map(float),
            "v": st.integers(-5, 5),
            "note": st.text(max_size=3),
        }
    ),
    min_size=1,
    max_size=20,
)


@given(
    st.lists(segments, min_size=1, max_size=3),
    st.sampled_from(sorted(WINDOWS)),
    st.sampled_from(["field", "fn", "none"]),
)
def test_arrow_batches_fire_what_their_rows_fire(batches, window, key):
    key_of = {"field": FieldKey("user"), "fn": by_user, "none": None}[key]
    by_rows = state((WINDOWS[window],), TRIGGERS, key_of)
    by_arrow = state((WINDOWS[window],), TRIGGERS, key_of)
    for batch in batches:
        assert by_arrow.apply(pa.RecordBatch.from_pylist(batch), 0) == by_rows.apply(batch, 0)
    assert closed(by_arrow.finish()) == closed(by_rows.finish())
    assert by_arrow.snapshot() == by_rows.snapshot()


@pytest.mark.parametrize(
    ("window", "key_of", "triggers", "reads"),
    [
        ("count", FieldKey("user"), TRIGGERS, ["user", "t"]),
        ("sum", FieldKey(("user", "note")), TRIGGERS, ["user", "note", "t", "v"]),
        ("collect", None, TRIGGERS, None),
        ("distinct", None, TRIGGERS, None),
        ("count", by_user, TRIGGERS, None),
        ("count", None, (Trigger("w", "punctuation", predicate=f"{FNS}:is_last"),), None),
    ],
)
def test_only_the_columns_the_windows_read_become_python(window, key_of, triggers, reads):
    assert state((WINDOWS[window],), triggers, key_of).reads == reads


def test_a_missing_time_column_names_the_window_and_field():
    s = state((WINDOWS["count"],), TRIGGERS, FieldKey("user"))
    with pytest.raises(ValueError, match="window 'w': a segment has no time field 't'"):
        s.apply(pa.RecordBatch.from_pylist([{"user": "a"}]), 0)
