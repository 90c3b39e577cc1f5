"""peer.testing runs a job in this process on the segments a test gives and returns what each
output task wrote; a job that is killed or too slow raises one error naming it and why."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from examples.wordcount.words import split
from peer.job.load import load
from peer.job.spec import JobError
from peer.testing import JobFailed, run_job, with_test_plugins
from tests.support import REPO

WORDCOUNT = REPO / "examples/wordcount/job.yaml"
FNS = "tests.unit.testing.testing_fns"


def counts(outputs: list[dict]) -> dict[str, int]:
    return {c["word"]: c["count"] for c in outputs}


def expected(lines: list[dict]) -> dict[str, int]:
    return dict(Counter(w["word"] for line in lines for w in split(line) if w["word"]))


def test_the_wordcount_job_counts_the_lines_it_is_given():
    lines = [{"line": f"word{i % 7} and Word{i % 3}, again."} for i in range(200)]
    outputs = run_job(WORDCOUNT, inputs={"read": lines}, timeout=60)
    assert set(outputs) == {"write"}
    assert counts(outputs["write"]) == expected(lines)
    assert len(outputs["write"]) == len(expected(lines))


def test_an_input_not_given_keeps_its_plugin(monkeypatch):
    monkeypatch.chdir(REPO)  # the job's file input is relative to the repository
    text = (REPO / "examples/wordcount/lines.jsonl").read_text().splitlines()
    outputs = run_job(str(WORDCOUNT.relative_to(REPO)), timeout=60)
    assert counts(outputs["write"]) == expected([json.loads(line) for line in text])


def job(fn: str, **extra) -> dict:
    return {
        "workflow": [["in", "step"], ["step", "out"], ["in", "copy"]],
        "catalog": [
            {"name": "in", "kind": "input", "plugin": "peer.plugins.jsonl:input",
             "params": {"path": "/nonexistent/never-read.jsonl"}, "n_peers": 1},
            {"name": "step", "kind": "function", "fn": f"{FNS}:{fn}"},
            {"name": "out", "kind": "output", "plugin": "peer.plugins.null:output"},
            {"name": "copy", "kind": "output", "plugin": "peer.plugins.jsonl:output",
             "params": {"path": "/nonexistent/never-written.jsonl"}},
        ],
        **extra,
    }  # fmt: skip


def test_every_output_task_is_collected_and_no_plugin_of_the_job_runs():
    segments = [{"n": i} for i in range(1, 51)]
    outputs = run_job(job("double"), inputs={"in": segments}, timeout=60)
    assert sorted(s["n"] for s in outputs["out"]) == [2 * i for i in range(1, 51)]
    assert sorted(s["n"] for s in outputs["copy"]) == list(range(1, 51))


def test_a_job_whose_fn_raises_fails_naming_the_job_task_and_error():
    with pytest.raises(JobFailed) as failed:
        run_job(job("invert", id="inverse"), inputs={"in": [{"n": 1}, {"n": 0}]}, timeout=60)
    message = str(failed.value)
    assert message.startswith("job 'inverse' was killed: task 'step' on peer ")
    assert message.endswith("ZeroDivisionError: division by zero")
    assert "\n" not in message


def test_a_job_that_does_not_finish_in_time_fails_naming_it_and_its_file(tmp_path):
    path = tmp_path / "slow.json"
    path.write_text(json.dumps(job("slow", id="slow")))
    segments = [{"n": i} for i in range(10_000)]  # 100 s of work
    with pytest.raises(JobFailed, match=rf"^job 'slow' \({path}\) did not finish within 1 s"):
        run_job(path, inputs={"in": segments}, timeout=1)


def test_inputs_must_name_input_tasks():
    with pytest.raises(JobError, match=r"job 'j': inputs names 'step', .*\(its input tasks: in\)"):
        with_test_plugins(load(job("double", id="j")), {"step": []}, "c")


def test_input_segments_must_be_json_data():
    with pytest.raises(JobError, match=r"job 'j': inputs\['in'\]\[1\] is not JSON data \(.*set"):
        with_test_plugins(load(job("double", id="j")), {"in": [{"n": 1}, {"n": {2}}]}, "c")
