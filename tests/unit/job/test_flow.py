"""A job written in Python is the job its YAML loads into: the same value, checked alike; code
given as callables is named by import path, or refused naming the task; a Python file that
defines ``job`` is a job file."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from peer.job.flow import Flow
from peer.job.load import from_file, from_yaml
from peer.job.spec import JobError

REPO = Path(__file__).resolve().parents[3]


def test_the_word_count_written_in_python_is_the_one_its_yaml_loads_into():
    assert from_file(REPO / "examples/wordcount/job.py") == from_file(
        REPO / "examples/wordcount/job.yaml"
    )


def test_its_yaml_loads_back_into_the_same_job():
    flow = runpy.run_path(str(REPO / "examples/wordcount/job.py"))["job"]
    assert from_yaml(flow.to_yaml()) == flow.job()


def test_a_lambda_cannot_be_named_and_is_refused_naming_the_task():
    flow = Flow()
    with pytest.raises(JobError, match=r"task 'double' fn: .* cannot be named by an import path"):
        flow.input("read", "peer.plugins.memory:input", count=3).map("double", lambda s: s)


def test_a_task_defined_twice_is_refused():
    flow = Flow()
    numbers = flow.input("read", "peer.plugins.memory:input", count=3)
    numbers.map("step")
    with pytest.raises(JobError, match="task 'step' is defined twice"):
        numbers.map("step")


def test_a_function_s_unknown_setting_is_refused_naming_it():
    flow = Flow()
    with pytest.raises(JobError, match="task 'step' has no setting 'path'"):
        flow.input("read", "peer.plugins.memory:input", count=3).map("step", path="x")


def test_the_job_is_checked_as_a_file_is():
    flow = Flow(barrier_period=-1)
    flow.input("read", "peer.plugins.memory:input", count=3).output(
        "write", "peer.plugins.null:output"
    )
    with pytest.raises(JobError, match="barrier_period"):
        flow.job()


def test_a_python_file_that_defines_job_is_a_job_file(tmp_path):
    source = tmp_path / "numbers.py"
    source.write_text(
        "from peer.job.flow import Flow\n"
        "job = Flow('numbers', barrier_period=None)\n"
        "job.input('read', 'peer.plugins.memory:input', count=3)"
        ".output('write', 'peer.plugins.null:output')\n"
    )
    job = from_file(source)
    assert job.name == "numbers"
    assert [task.name for task in job.catalog] == ["read", "write"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (None, "cannot read"),
        ("x = 1\n", "defines no job (a Flow or a Job named 'job' at module level), got NoneType"),
        ("raise OSError('no disk')\n", "failed: OSError: no disk"),
    ],
)
def test_a_python_file_without_a_job_is_refused_naming_it(tmp_path, text, says):
    source = tmp_path / "broken.py"
    if text is not None:
        source.write_text(text)
    with pytest.raises(JobError) as raised:
        from_file(source)
    assert str(source) in str(raised.value)
    assert says in str(raised.value)


def test_a_window_s_unknown_setting_is_refused_naming_the_window():
    flow = Flow()
    counts = flow.input("read", "peer.plugins.memory:input", count=3).map("count")
    with pytest.raises(JobError, match=r"window 'w': .*'rnage'"):
        counts.window("w", "fixed", key="t", rnage=10)


def test_a_map_s_when_is_a_flow_condition_on_the_edge_to_it():
    flow = Flow(barrier_period=None)
    read = flow.input("read", "peer.plugins.memory:input", count=3)
    read.map("odd", "builtins:dict", when="builtins:callable").output(
        "write", "peer.plugins.null:output"
    )
    (condition,) = flow.job().flow_conditions
    assert (condition.from_task, condition.to, condition.predicate) == (
        "read",
        ("odd",),
        "builtins:callable",
    )
