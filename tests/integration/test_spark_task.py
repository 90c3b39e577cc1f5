"""Spark tasks in a running local cluster on a local[2] session: each batch goes through Arrow
into a DataFrame, the fn runs on Spark, and its rows flow on to the output."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pytest

from peer import api, code_marks
from peer.cluster.local import LocalCluster
from peer.job.load import from_dict
from peer.job.spec import Task
from peer.messaging.messages import END, Batch, Watermark
from peer.values.columnar import rows as rows_of
from tests.integration import spark_fns
from tests.unit.runtime.test_task import World, run_until, runner

PEOPLE = [{"name": f"p{i}", "age": i % 40, "city": ["oslo", "lima"][i % 2]} for i in range(500)]


def job(out: Path, *, segments=PEOPLE, fn="tests.integration.spark_fns.adults", schema=None):
    spark_task = {
        "name": "clean",
        "kind": "function",
        "engine": "spark",
        "fn": fn,
        "batch_size": 200,
    }
    if schema is not None:
        spark_task["schema"] = schema
    return from_dict(
        {
            "workflow": [["people", "clean"], ["clean", "out"]],
            "catalog": [
                {
                    "name": "people",
                    "kind": "input",
                    "plugin": "peer.plugins.memory:input",
                    "n_peers": 1,
                    "params": {"segments": segments},
                },
                spark_task,
                {
                    "name": "out",
                    "kind": "output",
                    "plugin": "peer.plugins.jsonl:output",
                    "params": {"path": str(out)},
                },
            ],
            "barrier_period": None,
        }
    )


def run(spark, job_value) -> str:
    cluster = LocalCluster(groups=1, vpeers=3)
    cluster.start()
    try:
        cluster.await_ring(30)
        job_id = api.submit(cluster.reader, job_value)
        return api.wait(cluster.reader, job_id, 120).state
    finally:
        cluster.stop()


def rows(path: Path) -> list[dict]:
    return sorted(
        (json.loads(line) for line in path.read_text().splitlines()), key=lambda r: r["name"]
    )


def expected() -> list[dict]:
    adults = [{**p, "name": p["name"].upper()} for p in PEOPLE if p["age"] >= 18]
    return sorted(adults, key=lambda r: r["name"])


def test_a_spark_task_with_a_declared_schema(spark, tmp_path):
    out = tmp_path / "out.jsonl"
    schema = {"name": "string", "age": "int", "city": "string"}
    assert run(spark, job(out, schema=schema)) == "completed"
    assert rows(out) == expected()


def test_a_spark_task_with_an_inferred_schema(spark, tmp_path):
    out = tmp_path / "out.jsonl"
    assert run(spark, job(out)) == "completed"
    assert rows(out) == expected()


def test_a_declared_timestamp_comes_back_as_seconds(spark, tmp_path):
    out = tmp_path / "out.jsonl"
    clicks = [{"name": "a", "age": 30, "city": "oslo", "ts": 1700000000.25}]
    schema = "name string, age bigint, city string, ts timestamp"
    value = job(out, segments=clicks, fn="tests.integration.spark_fns.identity", schema=schema)
    assert run(spark, value) == "completed"
    assert rows(out) == clicks


@pytest.mark.parametrize(
    ("segments", "fn", "message"),
    [
        (
            [{"name": "a", "age": "old", "city": "x"}],
            "tests.integration.spark_fns.adults",
            "field 'age' must hold int values",
        ),
        (
            [{"name": "a", "age": 3, "city": "x", "zip": 1}],
            "tests.integration.spark_fns.adults",
            "field 'zip' is not in the schema",
        ),
        (PEOPLE[:5], "tests.integration.spark_fns.not_a_frame", "returned int, not a DataFrame"),
    ],
)
def test_a_batch_that_fails_kills_the_job_naming_the_task(
    spark, tmp_path, caplog, *, segments, fn, message
):
    caplog.set_level(logging.WARNING)
    schema = {"name": "string", "age": "int", "city": "string"}
    assert (
        run(spark, job(tmp_path / "out.jsonl", segments=segments, fn=fn, schema=schema)) == "killed"
    )
    failures = [r.getMessage() for r in caplog.records if "task 'clean'" in r.getMessage()]
    assert any(message in failure for failure in failures), failures


def test_batches_in_spark_at_once_go_on_in_order_each_with_its_own_watermark(spark):
    """Up to three batches are in Spark together: their rows must leave in the order read, and
    a watermark must not overtake rows of a batch still in Spark, or they would arrive late."""
    world = World()
    task = Task("clean", "function", fn="tests.integration.spark_fns:identity", engine="spark")
    r = runner(task, world, upstream=[1], batch=10)
    for k in range(12):
        r.deliver(1, Batch([{"n": n} for n in range(k * 10, k * 10 + 10)]))
        r.deliver(1, Watermark(k * 10 + 9))
    r.deliver(1, END)
    run_until(r, lambda: any(item == END for _, item in world.sent))
    rows, mark, late = [], -1, []
    for _, item in world.sent:
        if isinstance(item, Watermark):
            mark = item.value
        elif isinstance(item, pa.RecordBatch):
            rows += [s["n"] for s in rows_of(item)]
            late += [s["n"] for s in rows_of(item) if s["n"] < mark]
    assert rows == list(range(120))
    assert late == []
    assert mark == 119


def test_a_spark_task_takes_arrow_as_it_is_and_gives_arrow(spark):
    """No rows either way: an Arrow batch goes into Spark in its own types, and the DataFrame
    comes back as one record batch."""
    world = World()
    task = Task("clean", "function", fn="tests.integration.spark_fns:adults", engine="spark")
    r = runner(task, world, upstream=[1])
    people = pa.RecordBatch.from_pylist(PEOPLE[:40])
    r.deliver(1, Batch(people))
    r.deliver(1, END)
    run_until(r, lambda: any(item == END for _, item in world.sent))
    (batch,) = [item for _, item in world.sent if isinstance(item, pa.RecordBatch)]
    assert batch.schema == people.schema
    adults = [{**p, "name": p["name"].upper()} for p in PEOPLE[:40] if p["age"] >= 18]
    assert batch.to_pylist() == adults


def test_a_spark_tasks_fn_is_marked_in_its_pool_threads_word_as_it_runs(spark, monkeypatch):
    """In a worker, a fn that ends its process from the Spark pool is blamed on its task as one
    on the group's thread is: the pool's thread marks the task in a word of its own."""
    words = (code_marks.WORD * code_marks.WORDS)()
    monkeypatch.setattr(code_marks._PROCESS, "word", memoryview(words).cast("B").cast("Q"))
    monkeypatch.setattr(spark_fns, "WORDS", [words])
    spark_fns.MARKS.clear()
    world = World()
    task = Task("clean", "function", fn="tests.integration.spark_fns:note_marks", engine="spark")
    r = runner(task, world, upstream=[1])
    r.deliver(1, Batch([{"n": 1}]))
    r.deliver(1, END)
    run_until(r, lambda: any(item == END for _, item in world.sent))
    (seen,) = spark_fns.MARKS
    assert code_marks.blamed(seen) == code_marks.number(100, 0), seen
    assert list(words) == [0] * code_marks.WORDS
