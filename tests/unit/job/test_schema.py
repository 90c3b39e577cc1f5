"""Declared schemas: parsed the same way from a mapping, pairs or a DDL string, refused with a
message naming the field."""

from __future__ import annotations

import pytest

from peer.job.load import from_dict
from peer.job.schema import SchemaError, parse
from peer.job.spec import JobError, Task
from peer.job.validate import validate


def test_a_mapping_pairs_and_ddl_give_one_schema():
    expected = (("user", "string"), ("ts", "timestamp"), ("n", "bigint"))
    assert parse({"user": "string", "ts": "timestamp", "n": "long"}) == expected
    assert parse([["user", "STRING"], ["ts", "timestamp"], ["n", "bigint"]]) == expected
    assert parse("user string, ts TIMESTAMP, `n` long") == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({}, "has no fields"),
        ({"a": "struct"}, "field 'a' has type 'struct'; known types: bigint, binary"),
        ("a string, b", "'b' is not 'name type'"),
        ([["a", "int"], ["a", "string"]], "field 'a' appears twice"),
        (42, "must be a mapping of field to Spark type, or a DDL string"),
        ({"": "int"}, "field name '' is not a non-empty string"),
    ],
)
def test_a_bad_schema_says_what_is_wrong(value, message):
    with pytest.raises(SchemaError, match=message.replace("(", r"\(")):
        parse(value)


def spark_job(**task):
    return {
        "id": "clicks",
        "workflow": [["in", "clean"], ["clean", "out"]],
        "catalog": [
            {"name": "in", "kind": "input", "plugin": "peer.plugins.memory:input", "n_peers": 1},
            {"name": "clean", "kind": "function", "fn": "json:dumps", **task},
            {"name": "out", "kind": "output", "plugin": "peer.plugins.null:output"},
        ],
    }


def test_a_job_keeps_its_schema_in_order_through_the_log():
    job = from_dict(spark_job(engine="spark", schema={"b": "int", "a": "string"}))
    assert job.task("clean").schema == (("b", "int"), ("a", "string"))
    assert list(job.task("clean").to_dict()["schema"]) == ["b", "a"]
    assert from_dict(job.to_dict()) == job


@pytest.mark.parametrize(
    ("task", "message"),
    [
        (
            {"engine": "flink"},
            "job 'clicks': task 'clean': engine 'flink' is not one of 'python', 'arrow', 'spark'",
        ),
        ({"engine": "arrow", "schema": {"a": "map"}}, "task 'clean': schema field 'a' has type"),
        (
            {"engine": "arrow", "schema": "a string", "group_by_key": "b"},
            "task 'clean': group_by_key 'b' is not a field of its schema",
        ),
        ({"engine": "spark", "schema": {"a": "map"}}, "task 'clean': schema field 'a' has type"),
    ],
)
def test_a_bad_engine_or_schema_is_refused_at_submit(task, message):
    with pytest.raises(JobError, match=message):
        from_dict(spark_job(**task))


@pytest.mark.parametrize("engine", ["spark", "arrow"])
def test_spark_and_arrow_are_engines_for_function_tasks_only(engine):
    job = from_dict(spark_job())
    source = Task(name="in", kind="input", plugin="peer.plugins.memory:input", engine=engine)
    bad = job.__class__(job.workflow, (source, *job.catalog[1:]), id="clicks")
    message = f"job 'clicks': task 'in': engine {engine} is for function tasks"
    with pytest.raises(JobError, match=message):
        validate(bad)


def test_an_arrow_task_with_a_schema_is_accepted_and_kept():
    job = from_dict(spark_job(engine="arrow", schema="a string, n bigint", group_by_key="a"))
    assert job.task("clean").engine == "arrow"
    assert from_dict(job.to_dict()) == job
