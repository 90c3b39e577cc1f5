"""How deep and how large a job may be, checked where it is read, and its name, metadata and
hash: a job that passes fits one log entry, and one that does not is refused in one line
naming the job, the field, its size and the limit."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyrsistent import pmap

from peer.job.limits import MAX_VALUE_DEPTH, deeper_than
from peer.job.load import from_dict, from_json, from_yaml
from peer.job.spec import JobError, Task
from peer.job.validate import validate
from peer.log.entries.jobs import SUBMIT_JOB
from peer.values.limits import MAX_ENTRY_BYTES, MAX_ENTRY_DEPTH
from peer.values.limits import deeper_than as entry_deeper_than
from tests.unit.job import wordcount


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


def with_params(params: object) -> dict:
    doc = wordcount.document()
    doc["catalog"][0]["params"] = params
    return doc


def refused(doc: dict) -> str:
    with pytest.raises(JobError) as caught:
        from_dict(doc)
    return str(caught.value)


def test_params_at_the_depth_limit_load_and_deeper_ones_are_refused():
    assert from_dict(with_params(nested(MAX_VALUE_DEPTH))).task("read").params
    assert refused(with_params(nested(MAX_VALUE_DEPTH + 1))) == (
        "job 'wc': task 'read': params nests deeper than the limit of 32 levels"
    )


def test_params_a_thousand_levels_deep_are_refused_in_one_line_from_every_source():
    doc = with_params(nested(1000))
    message = "job 'wc': task 'read': params nests deeper than the limit of 32 levels"
    assert refused(doc) == message
    with pytest.raises(JobError, match="^" + message + "$"):
        from_json(json.dumps(doc))


def test_yaml_too_deep_for_the_parser_is_refused_in_one_line():
    text = wordcount.YAML.replace("params: {path: lines.txt", "params: {p: " + "[" * 2000)
    with pytest.raises(JobError, match=r"^job: YAML nests too deeply to read \(params and"):
        from_yaml(text + "]" * 2000)


def test_a_job_built_in_python_is_held_to_the_same_depth():
    job = wordcount.built()
    deep = Task(name="read", kind="input", plugin=f"{wordcount.FNS}:read_lines", n_peers=1,
                params=nested(MAX_VALUE_DEPTH + 1))  # fmt: skip
    catalog = (deep, *job.catalog[1:])
    with pytest.raises(JobError, match="task 'read': params nests deeper than the limit of 32"):
        validate(dataclasses.replace(job, catalog=catalog))


def test_params_that_contain_themselves_are_refused_not_walked_forever():
    loop: dict = {}
    loop["again"] = loop
    assert deeper_than(loop, MAX_VALUE_DEPTH)


def test_params_too_large_for_a_log_entry_are_refused_naming_field_size_and_limit():
    doc = with_params({"blob": "x" * 5_000_000})
    message = refused(doc)
    assert message.startswith("job 'wc': task 'read': params is 5,000,012 bytes encoded, ")
    assert f"bytes over the limit of {MAX_ENTRY_BYTES:,} of a log entry" in message


def test_a_job_of_many_small_parts_too_large_is_refused_as_a_whole():
    doc = wordcount.document()
    doc["catalog"][1]["params"] = {"a": "x" * 600_000}
    doc["catalog"][2]["params"] = {"b": "y" * 600_000}
    assert refused(doc).startswith("job 'wc': is 1,200,")


def test_params_that_are_not_json_are_refused_naming_the_field():
    job = wordcount.built()
    odd = Task(name="read", kind="input", plugin=f"{wordcount.FNS}:read_lines", n_peers=1,
               params={"when": object()})  # fmt: skip
    with pytest.raises(JobError, match="task 'read': params must hold JSON values only"):
        validate(dataclasses.replace(job, catalog=(odd, *job.catalog[1:])))


@settings(deadline=None)
@given(st.integers(min_value=1, max_value=MAX_VALUE_DEPTH))
def test_a_job_within_the_limits_makes_an_entry_within_the_log_limits(depth):
    doc = with_params(nested(depth))
    doc["metadata"] = nested(depth)
    job = from_dict(doc)
    entry = SUBMIT_JOB.entry(id="wc", job=job.to_dict(), hash=job.digest()).encode()
    assert not entry_deeper_than(entry, MAX_ENTRY_DEPTH)


def test_name_and_metadata_load_freeze_and_round_trip():
    doc = {**wordcount.document(), "name": "word count", "metadata": {"owner": ["a", {"b": 1}]}}
    job = from_dict(doc)
    assert job.name == "word count"
    assert job.metadata == pmap({"owner": job.metadata["owner"]})
    assert isinstance(hash(job), int)
    assert from_dict(job.to_dict()) == job
    assert job.to_dict()["metadata"] == {"owner": ["a", {"b": 1}]}


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("name", "", "job 'wc': name must be a non-empty string or absent, got ''"),
        ("name", 3, "job 'wc': name must be a non-empty string or absent, got 3"),
        ("metadata", [1], "job 'wc': metadata must be a mapping with string keys, got [1]"),
        ("metadata", nested(40), "job 'wc': metadata nests deeper than the limit of 32 levels"),
    ],
)
def test_bad_name_or_metadata_is_refused_naming_the_field(field, value, expected):
    assert refused({**wordcount.document(), field: value}) == expected


def test_the_digest_is_the_content_without_the_id():
    job = from_dict(wordcount.document())
    same = from_dict({**wordcount.document(), "id": "other"})
    changed = from_dict(with_params({"path": "elsewhere.txt"}))
    assert job.digest() == same.digest()
    assert job.digest() != changed.digest()
    assert len(job.digest()) == 64
    assert b'"id"' not in job.canonical()


def deep_list(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda doc: doc["catalog"][1].update(required_tags=deep_list(1000)), "catalog"),
        (lambda doc: doc["workflow"].append(deep_list(1000)), "workflow"),
        (lambda doc: doc["catalog"].append(deep_list(1000)), "catalog"),
        (lambda doc: doc.update(lifecycles=deep_list(1000)), "lifecycles"),
    ],
    ids=["tags", "workflow", "catalog-entry", "lifecycles"],
)
def test_any_field_too_deep_is_refused_in_one_line_before_it_is_read(change, field):
    """Left to the checks that follow, quoting such a value in a message would recurse."""
    doc = wordcount.document()
    change(doc)
    assert refused(doc) == f"job 'wc': {field} nests deeper than a job may (35 levels in all)"


def test_params_as_deep_as_a_job_allows_are_refused_as_params():
    doc = with_params(nested(MAX_VALUE_DEPTH + 3))
    assert refused(doc) == "job 'wc': task 'read': params nests deeper than the limit of 32 levels"
