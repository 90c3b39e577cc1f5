"""Loading: YAML, JSON, plain data and Python all give the same frozen job, and a job's own
``to_dict`` loads back into an equal one."""

from __future__ import annotations

import dataclasses
import json

import pytest
from pyrsistent import pmap, pvector

from peer.job.load import from_dict, from_file, from_json, from_yaml, load
from peer.job.spec import JobError
from peer.job.validate import validate
from tests.unit.job import wordcount


def test_yaml_json_and_python_give_equal_jobs():
    from_text = from_yaml(wordcount.YAML)
    assert from_text == from_json(json.dumps(wordcount.document()))
    assert from_text == from_dict(wordcount.document())
    assert from_text == validate(wordcount.built())


def test_loaded_job_is_immutable_and_hashable():
    job = from_yaml(wordcount.YAML)
    read = job.task("read")
    assert read.params == pmap({"path": "lines.txt", "encodings": pvector(["utf-8"])})
    assert job.task("count").required_tags == ("ssd",)
    assert job.task("count").group_by_key == ("word",)
    assert job.flow_conditions[0].to == ("count",)
    assert job.workflow == (("read", "split"), ("split", "count"), ("count", "write"))
    assert isinstance(hash(job), int)
    with pytest.raises(dataclasses.FrozenInstanceError):
        read.batch_size = 5  # type: ignore[misc]


def test_defaults_and_n_peers_fill_the_bounds():
    job = from_yaml(wordcount.YAML)
    split = job.task("split")
    assert (split.min_peers, split.max_peers, split.n_peers) == (2, 2, 2)
    assert (split.max_batch_delay, job.task("read").max_batch_delay) == (0.0, 0.5)
    write = job.task("write")
    assert (write.batch_size, write.flux_policy) == (100, "recover")
    assert (write.min_peers, write.max_peers, write.required_tags) == (1, None, ())
    assert (job.task_scheduler, job.percentage) == ("balanced", None)


def test_to_dict_round_trips_and_is_plain_json():
    job = from_yaml(wordcount.YAML)
    doc = job.to_dict()
    assert load(doc) == job
    assert from_json(json.dumps(doc)) == job
    expected = wordcount.document()
    del expected["catalog"][2]["min_peers"]  # the default, so left out
    assert doc == expected


def test_job_without_id_round_trips():
    doc = wordcount.document()
    del doc["id"]
    job = load(doc)
    assert job.id is None
    assert "id" not in job.to_dict()
    assert load(job.to_dict()) == job


@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".json"])
def test_from_file_by_suffix(tmp_path, suffix):
    path = tmp_path / f"wc{suffix}"
    text = json.dumps(wordcount.document()) if suffix == ".json" else wordcount.YAML
    path.write_text(text)
    assert from_file(path) == from_yaml(wordcount.YAML)
    assert load(path) == from_yaml(wordcount.YAML)


def test_from_file_refuses_unknown_suffix(tmp_path):
    neither = r"is neither .yaml, .yml, .json nor .py$"
    with pytest.raises(JobError, match=r"^job: file '.*wc\.txt' " + neither):
        from_file(tmp_path / "wc.txt")


def test_from_file_refuses_missing_file(tmp_path):
    with pytest.raises(JobError, match=r"^job: cannot read '.*nope\.yaml': "):
        from_file(tmp_path / "nope.yaml")


def test_load_refuses_a_bare_string():
    with pytest.raises(JobError, match=r"^job: load takes a mapping or a path, got str$"):
        load("wc.yaml")  # type: ignore[arg-type]


def test_bad_yaml_and_json_text():
    with pytest.raises(JobError, match=r"^job: YAML does not parse: "):
        from_yaml("catalog: [unclosed")
    with pytest.raises(JobError, match=r"^job: JSON does not parse: "):
        from_json("{")
    with pytest.raises(JobError, match=r"^job: must be a mapping of keys to values, got list$"):
        from_yaml("- a\n- b\n")
