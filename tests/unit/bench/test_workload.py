"""The benchmark's workload: its Arrow form is the very computation of its rows, the limit
loop runs it, and its plugins' marks time a run as Bytewax's is timed."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import baselines, workload
from peer.plugins import Recovery
from peer.values.epoch import Epoch

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
@given(st.integers(1, 50), st.integers(0, 3), st.integers(1, 4), st.integers(1, 9),
       st.integers(4, 12))  # fmt: skip
def test_an_input_slot_hands_out_the_segments_of_its_splits_once_each(
    count, slot, slots, limit, splits
):
    """Rows and record batches alike: segment i is in split i % splits, and a slot hands out
    those of the splits it owns, in order, at most ``limit`` per poll."""
    slot %= slots
    owned = workload.splits_of(slot, slots, splits)
    rows = workload.SegmentInput(count, owned, slot)
    arrow = workload.SegmentInput(count, owned, slot, arrow=True)
    got, got_arrow = [], []
    while not rows.completed():
        polled, batch = rows.poll(limit), arrow.poll(limit).to_pylist()
        assert len(polled) <= limit
        got += polled
        got_arrow += batch
    mine = [workload.make_segment(i) for i in range(count) if i % splits in owned.owned]
    assert got == got_arrow == mine
    assert rows.poll(limit) == []
    assert arrow.poll(limit).num_rows == 0


def test_the_limit_loop_runs_with_a_codec_and_without():
    _, encode, decode = baselines.default_codec()
    assert baselines.python_limit(250, 100, encode, decode) > 0
    assert baselines.python_limit(250, 100, baselines._same, baselines._same) > 0


@settings(deadline=None)  # a shared machine's pauses are not the code's
@given(st.integers(1, 300), st.integers(1, 3), st.integers(1, 50))
def test_the_marks_time_a_run_from_the_first_read_to_the_last_write(count, slots, limit):
    with tempfile.TemporaryDirectory() as directory:
        inputs = [workload.SegmentInput(count, workload.splits_of(s, slots), s, marks=directory)
                  for s in range(slots)]  # fmt: skip
        outputs = [workload.DiscardingOutput(s, directory) for s in range(slots)]
        for source, sink in zip(inputs, outputs, strict=True):
            while not source.completed():
                sink.prepare(source.poll(limit))
                assert sink.write()
            source.close()
            sink.close()
        marks = workload.read_marks(Path(directory))
    assert marks.written() == count
    assert sum(m.items for m in marks.of("read")) == count
    reads, writes = marks.of("read"), marks.of("write")
    assert marks.seconds() == max(m.last for m in writes) - min(m.first for m in reads) >= 0


def test_a_restarted_output_slot_counts_once_by_its_latest_instance():
    with tempfile.TemporaryDirectory() as directory:
        first = workload.DiscardingOutput(0, directory)
        first.prepare([workload.make_segment(0)])
        first.write()
        first.close()
        second = workload.DiscardingOutput(0, directory)
        second.recover(Recovery(checkpoint=first.checkpoint(Epoch(1, 1)), committed=None,
                                start=Epoch(1, 1)))  # fmt: skip
        second.prepare([workload.make_segment(1)])
        second.write()
        second.close()
        assert workload.read_marks(Path(directory)).written() == 2


def test_without_a_directory_nothing_is_noted():
    source = workload.SegmentInput(10, workload.splits_of(0, 1), 0)
    source.poll(10)
    source.close()
    assert source.marker.items == 0


@pytest.mark.parametrize("arrow", [False, True])
def test_an_output_whose_last_segment_is_wrong_fails_the_check(arrow):
    def made(ids: range) -> list | pa.RecordBatch:
        rows = [workload.expected(i) for i in ids]
        return pa.RecordBatch.from_pylist(rows) if arrow else rows

    with tempfile.TemporaryDirectory() as directory:
        sink = workload.DiscardingOutput(0, directory, checked=True)
        sink.prepare(made(range(3)))
        sink.write()
        sink.close()
        workload.read_marks(Path(directory)).check(3, "the engine")
        wrong = workload.DiscardingOutput(1, directory, checked=True)
        wrong.prepare([workload.make_segment(3)])  # not through f1, f2, f3
        wrong.write()
        wrong.close()
        with pytest.raises(AssertionError, match=r"output slots \[1\]"):
            workload.read_marks(Path(directory)).check(4, "the engine")


@settings(deadline=None)  # a shared machine's pauses are not the code's
@given(st.lists(st.builds(range, st.integers(0, 5000), st.integers(0, 5000)), max_size=6))
def test_a_record_batch_of_runs_holds_their_segments_in_order(runs):
    made = workload.record_batch_of(runs).to_pylist()
    assert made == [workload.make_segment(i) for run in runs for i in run]
