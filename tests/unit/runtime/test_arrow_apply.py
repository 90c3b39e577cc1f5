"""The Arrow apply step: rows become one record batch of the task's schema, Arrow goes in as it
is, and whatever Arrow the fn returns (a batch, a table, a polars frame) goes on as one batch."""

from __future__ import annotations

import pyarrow as pa
import pytest

from peer.job.schema import SchemaError
from peer.job.spec import Task
from peer.messaging.messages import END, Batch
from peer.runtime.apply import ArrowApply
from peer.runtime.task import TaskFailed
from peer.values.columnar import rows
from tests.unit.runtime.test_task import World, run, runner

FNS = "tests.unit.runtime.arrow_fns"


def arrow(fn: str, **task) -> ArrowApply:
    return ArrowApply(Task("f", "function", fn=f"{FNS}:{fn}", engine="arrow", **task))


def test_rows_become_one_record_batch_and_the_result_is_one():
    out = arrow("doubled").apply([{"n": 1}, {"n": 2}])
    assert isinstance(out, pa.RecordBatch)
    assert out.to_pylist() == [{"n": 2}, {"n": 4}]


def test_an_arrow_batch_goes_in_as_it_is():
    batch = pa.RecordBatch.from_arrays([pa.array([1, 2], pa.int32())], names=["n"])
    out = arrow("schema_of").apply(batch)
    assert out.to_pylist() == [{"schema": "n: int32", "rows": 2}]


def test_a_declared_schema_types_rows_and_arrow_alike():
    apply = arrow("schema_of", schema="n int, ts timestamp")
    expected = "n: int32\nts: timestamp[us, tz=UTC]"
    assert apply.apply([{"n": 1, "ts": 1.5}]).to_pylist() == [{"schema": expected, "rows": 1}]
    batch = pa.RecordBatch.from_pylist([{"n": 1}])
    assert apply.apply(batch).to_pylist() == [{"schema": expected, "rows": 1}]


def test_an_inferred_schema_is_kept_from_the_first_batch():
    apply = arrow("schema_of")
    apply.apply([{"n": 1, "s": "a"}])
    assert rows(apply.apply([{"n": 2}])) == [{"schema": "n: int64\ns: string", "rows": 1}]


@pytest.mark.parametrize(
    ("task", "batch", "message"),
    [
        ({}, [{"n": 1}, {"n": "x"}], "no schema declared and cannot infer"),
        ({"schema": "n int"}, [{"n": "x"}], "a segment does not fit the schema: field 'n'"),
        ({"schema": "n int"}, [{"n": 1, "m": 2}], "field 'm' is not in the schema"),
        (
            {"schema": "n int"},
            pa.RecordBatch.from_pylist([{"n": "x"}]),
            "field 'n' holds string, which is not int32",
        ),
    ],
)
def test_a_batch_that_does_not_fit_names_the_field(task, batch, message):
    with pytest.raises(SchemaError, match=message):
        arrow("doubled", **task).apply(batch)


def test_a_fn_told_params_may_return_a_table():
    out = arrow("scaled", params={"by": 3}).apply([{"n": 1}, {"n": 2}])
    assert out.to_pylist() == [{"n": 3}, {"n": 6}]


def test_a_polars_frame_comes_back_as_arrow():
    people = [{"name": "a", "age": 12}, {"name": "b", "age": 30}]
    out = arrow("adults").apply(people)
    assert isinstance(out, pa.RecordBatch)
    assert rows(out) == [{"name": "b", "age": 30}]


def test_a_result_that_is_not_arrow_names_the_fn():
    with pytest.raises(TypeError, match=f"fn '{FNS}:not_arrow' returned int, not a RecordBatch"):
        arrow("not_arrow").apply([{"n": 1}])


def test_an_arrow_task_sends_arrow_and_a_python_task_after_it_gets_rows():
    world = World()
    task = Task("f", "function", fn=f"{FNS}:doubled", engine="arrow")
    r = runner(task, world, upstream={1})
    r.deliver(1, Batch([{"n": 1}, {"n": 2}]))
    r.deliver(1, END)
    run(r)
    (batch,) = [item for _, item in world.sent if isinstance(item, pa.RecordBatch)]
    assert rows(batch) == [{"n": 2}, {"n": 4}]

    after = World()
    python = runner(Task("g", "function", fn="tests.unit.runtime.runtime_fns:double"), after,
                    upstream={1})  # fmt: skip
    python.deliver(1, Batch(batch))
    run(python)
    assert after.batches() == [("d1", [{"n": 2}, {"n": 2}, {"n": 4}, {"n": 4}])]


def test_an_arrow_fn_that_fails_fails_its_task_naming_it():
    world = World()
    r = runner(Task("f", "function", fn=f"{FNS}:not_arrow", engine="arrow"), world, upstream={1})
    r.deliver(1, Batch([{"n": 1}]))
    with pytest.raises(TaskFailed, match="job 'j': task 'f' on peer p: TypeError: fn"):
        run(r)
