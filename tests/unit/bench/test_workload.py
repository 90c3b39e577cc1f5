"""The benchmark's workload: its Arrow form is the very computation of its rows, and the limit
loop runs it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bench import baselines, workload

IDS = st.builds(range, st.integers(0, 5000), st.integers(0, 5000), st.integers(1, 7))


@settings(deadline=None)  # a shared machine's pauses are not the code's
@given(IDS)
def test_a_record_batch_holds_the_segments_of_its_ids(ids):
    assert workload.make_record_batch(ids).to_pylist() == [workload.make_segment(i) for i in ids]


@settings(deadline=None)  # a shared machine's pauses are not the code's
@given(IDS)
def test_the_arrow_fns_compute_what_the_row_fns_do(ids):
    batch = workload.make_record_batch(ids)
    out = workload.arrow_f3(workload.arrow_f2(workload.arrow_f1(batch)))
    assert out.to_pylist() == [workload.expected(i) for i in ids]


@settings(deadline=None)  # a shared machine's pauses are not the code's
@given(st.integers(1, 50), st.integers(0, 3), st.integers(1, 4), st.integers(1, 9))
def test_the_input_slots_hand_out_every_segment_once(count, slot, slots, limit):
    slot %= slots
    rows = workload.SegmentInput(count, slot, slots)
    arrow = workload.SegmentInput(count, slot, slots, arrow=True)
    got, got_arrow = [], []
    while not rows.completed():
        got += rows.poll(limit)
        got_arrow += arrow.poll(limit).to_pylist()
    assert got == got_arrow == [workload.make_segment(i) for i in range(slot, count, slots)]


def test_the_limit_loop_runs_with_a_codec_and_without():
    _, encode, decode = baselines.default_codec()
    assert baselines.python_limit(250, 100, encode, decode) > 0
    assert baselines.python_limit(250, 100, baselines._same, baselines._same) > 0
