"""Spark is an optional extra (`onyx-peer[spark]`): with pyspark hidden from the interpreter (a
finder at the front of sys.meta_path that refuses it, as if it were not installed), the CLI, a
peer group's modules and a pure-Python job run, and a job that needs Spark is refused at submit
with one line saying what to install."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from peer.job.load import YamlLoader
from peer.job.validate import SPARK_EXTRA
from tests.support import REPO, assert_one_line_error

# Runs `python -m peer.cli ARGS` (or the code given with -c) with pyspark hidden.
HIDDEN = """
import runpy, sys

class HidePyspark:
    def find_spec(self, name, path=None, target=None):
        if name == "pyspark" or name.startswith("pyspark."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, HidePyspark())
if sys.argv[1] == "-c":
    exec(sys.argv[2])
else:
    sys.argv = ["onyx", *sys.argv[1:]]
    runpy.run_module("peer.cli", run_name="__main__")
"""
GROUP_MODULES = ("peer.cli", "peer.cluster.group", "peer.runtime.task", "peer.spark.session",
                 "peer.spark.source", "peer.plugins.parquet", "peer.spark.function")  # fmt: skip


def without_spark(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", HIDDEN, *args],
        capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False,
    )  # fmt: skip


def test_the_cli_and_a_groups_modules_import_without_pyspark():
    code = (
        f"import importlib\nfor m in {GROUP_MODULES!r}: importlib.import_module(m)\n"
        "import sys; print(sorted(m for m in sys.modules if m.startswith('pyspark')))"
    )
    result = without_spark("-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
    result = without_spark("--version")
    assert result.returncode == 0, result.stderr


def test_the_hidden_pyspark_cannot_be_imported():
    """The test's own premise: the finder really hides pyspark."""
    result = without_spark("-c", "import pyspark")
    assert result.returncode != 0
    assert "No module named 'pyspark'" in result.stderr


def wordcount(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "lines.jsonl").write_text(
        "".join(json.dumps({"line": "to be or not to be"}) + "\n" for _ in range(50))
    )
    job = yaml.load((REPO / "examples/wordcount/job.yaml").read_text(), Loader=YamlLoader)
    job["catalog"][0]["params"]["path"] = str(tmp_path / "lines.jsonl")
    out = tmp_path / "out" / "counts.jsonl"
    job["catalog"][3]["params"]["path"] = str(out)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path, out


@pytest.mark.integration
def test_a_pure_python_job_runs_without_pyspark(tmp_path):
    job, out = wordcount(tmp_path)
    result = without_spark("run", str(job), "--vpeers", "4")
    assert result.returncode == 0, result.stderr
    assert any(line.endswith(": completed") for line in result.stdout.splitlines())
    last = {}
    for line in out.read_text().splitlines():
        doc = json.loads(line)
        last[doc["word"]] = doc["count"]
    assert last == {"to": 100, "be": 100, "or": 50, "not": 50}


def spark_job(tmp_path: Path, task: dict) -> Path:
    job = {
        "id": "clicks",
        "workflow": [["read", "clean"], ["clean", "write"]],
        "catalog": [
            {"name": "read", "kind": "input", "plugin": "peer.plugins.memory:input",
             "params": {"count": 3}, "n_peers": 1},
            {"name": "clean", "kind": "function", "fn": "examples.wordcount.words:split"},
            {"name": "write", "kind": "output", "plugin": "peer.plugins.null:output"},
        ],
    }  # fmt: skip
    job["catalog"] = [{**t, **task} if t["name"] == task["name"] else t for t in job["catalog"]]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


@pytest.mark.parametrize(
    ("task", "uses"),
    [
        ({"name": "clean", "engine": "spark"}, "engine spark"),
        ({"name": "read", "plugin": "peer.spark.source:input", "params": {"path": "x"}},
         "plugin 'peer.spark.source:input'"),
    ],
)  # fmt: skip
def test_a_spark_job_is_refused_at_submit_saying_what_to_install(tmp_path, task, uses):
    result = without_spark("run", str(spark_job(tmp_path, task)))
    assert_one_line_error(
        result, 1, f"job 'clicks': task {task['name']!r}: {uses} needs Spark", SPARK_EXTRA
    )


def test_with_pyspark_the_same_job_passes_the_check(tmp_path):
    """Where pyspark is installed the check lets the job through (to the imports that follow)."""
    from peer.job.load import load  # noqa: PLC0415

    job = load(spark_job(tmp_path, {"name": "clean", "engine": "spark"}))
    assert job.catalog[1].engine == "spark"
