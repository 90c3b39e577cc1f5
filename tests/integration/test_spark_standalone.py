"""A peer group's Spark session on a real Spark standalone cluster: a master and a worker from
the pyspark distribution (as roles/spark runs them), and `onyx run --spark-master spark://...`
running a Spark task there."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from tests.support import free_port, onyx, wait_for

pytestmark = pytest.mark.integration

PEOPLE = [{"name": f"p{i}", "age": i} for i in range(40)]
SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"


def state(ui: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as reply:
        return json.load(reply)


def alive(ui: int) -> dict | None:
    try:
        return state(ui)
    except OSError:
        return None


@pytest.fixture(scope="module")
def standalone(tmp_path_factory) -> Iterator[tuple[str, int]]:
    """A master and one worker with one core, until the module's tests are done."""
    logs = tmp_path_factory.mktemp("spark-standalone")
    port, ui = free_port(), free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
    master_url = f"spark://127.0.0.1:{port}"
    commands = [
        ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
         "--webui-port", str(ui)],
        ["org.apache.spark.deploy.worker.Worker", master_url, "--cores", "1", "--memory", "1g",
         "--webui-port", str(free_port()), "--work-dir", str(logs / "work")],
    ]  # fmt: skip
    processes = [
        subprocess.Popen(
            [str(SPARK_CLASS), *command],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(logs / f"{index}.log").open("wb"),
        )
        for index, command in enumerate(commands)
    ]
    try:
        wait_for(lambda: (s := alive(ui)) and s["aliveworkers"] == 1, 120, "a worker to register")
        yield master_url, ui
    finally:
        for process in processes:
            process.kill()
            process.wait()


def test_a_spark_task_runs_on_a_standalone_cluster(standalone, tmp_path):
    master_url, ui = standalone
    out = tmp_path / "out.jsonl"
    job = {
        "workflow": [["people", "clean"], ["clean", "out"]],
        "catalog": [
            {"name": "people", "kind": "input", "plugin": "peer.plugins.memory:input",
             "n_peers": 1, "params": {"segments": PEOPLE}},
            {"name": "clean", "kind": "function", "engine": "spark",
             "fn": "tests.integration.spark_fns:adults", "schema": "name string, age int"},
            {"name": "out", "kind": "output", "plugin": "peer.plugins.jsonl:output",
             "params": {"path": str(out)}},
        ],
    }  # fmt: skip
    (tmp_path / "job.json").write_text(json.dumps(job))
    result = onyx("run", str(tmp_path / "job.json"), "--spark-master", master_url,
                  "--spark-conf", "spark.app.name=onyx-standalone-test", timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    names = sorted(json.loads(line)["name"] for line in out.read_text().splitlines())
    assert names == sorted(f"P{i}" for i in range(18, 40))
    apps = [app["name"] for app in state(ui)["completedapps"] + state(ui)["activeapps"]]
    assert "onyx-standalone-test" in apps
