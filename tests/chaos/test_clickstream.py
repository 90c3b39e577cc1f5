"""The README's main job, the clickstream pipeline, run as a user runs it and then under kill -9:
Spark reads the views, an Arrow task cleans them, the peers gather visits, and the exactly-once
Parquet sink writes the sessions table. With peer groups killed mid-run and replaced, the table
must hold exactly the rows of the failure-free run."""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest
import yaml

from examples.clickstream import generate
from peer import api
from peer.job.load import YamlLoader
from peer.runtime.checkpoints import Commits
from tests.chaos.test_exactly_once import progressed
from tests.support import REPO, onyx

pytestmark = pytest.mark.integration

EVENTS = 30_000
USERS = 300


def example(base: Path) -> dict:
    """Fresh input under ``base`` and the example's job reading it and writing there."""
    generate.write(base, EVENTS, USERS, files=8, seed=11)
    text = (REPO / "examples/clickstream/job.yaml").read_text()
    job = yaml.load(text, Loader=YamlLoader)
    tasks = {task["name"]: task for task in job["catalog"]}
    tasks["views"]["params"]["path"] = str(base / "events")
    tasks["clean"]["params"]["pages"] = str(base / "pages.csv")
    tasks["sessions"]["params"]["path"] = str(base / "sessions")
    return job


def sessions(base: Path) -> list[dict]:
    """The sessions table as Spark would read it, sorted: which epoch wrote a row differs
    between runs; the rows must not."""
    table = ds.dataset(base / "sessions", partitioning="hive").to_table()
    return sorted(table.to_pylist(), key=lambda row: (row["user_id"], row["start"]))


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> list[dict]:
    """The failure-free run, through `onyx run` as the README runs the example."""
    base = tmp_path_factory.mktemp("reference")
    (base / "job.json").write_text(json.dumps(example(base)))
    result = onyx("run", str(base / "job.json"), "--spark-master", "local[2]", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = sessions(base)
    assert len(rows) > USERS, result.stdout
    for words in (
        "progress: ",
        "segments read",
        "committed",
        "completed",
        f"output of task 'sessions': {base / 'sessions'}",
        "spark sql> SELECT `day`",
    ):
        assert words in result.stdout, result.stdout
    return rows


def test_the_example_runs_on_the_embedded_default(reference):
    days = {row["day"] for row in reference}
    assert all(row["views"] >= 1 and row["start"] <= row["end"] for row in reference)
    assert all(row["start"].date().isoformat() == row["day"] for row in reference), days


@pytest.fixture
def cluster(start_peer, zookeeper, tenancy, monkeypatch):
    """Three groups of two peers, each with Spark on one core, and a client on their log."""
    monkeypatch.setenv("ONYX_TEST_PACE", "0.03")
    options = {
        "vpeers": 2,
        "extra": ["--auto-down-unreachable-after", "3", "--spark-master", "local[1]"],
    }
    groups = [start_peer(**options) for _ in range(3)]
    store = api.connect(zookeeper.address, tenancy, create=True)
    yield groups, lambda: groups.append(start_peer(**options)), store
    store.close()


def test_kill_9_of_peer_groups_changes_nothing_in_the_sessions_table(reference, cluster, tmp_path):
    groups, replace, store = cluster
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    job = example(tmp_path)
    job["catalog"][2]["fn"] = "tests.chaos.pacing:pace_views"
    job_id = api.submit(store, job)
    commits = Commits(store, job_id)
    for kill in range(2):
        progressed(store, commits, job_id)
        time.sleep(rng.uniform(0, 1))  # a random moment of the run, not a wait for anything
        current = api.replica(store)
        assert job_id in current.jobs, f"seed {seed}: the job ended before kill {kill + 1}"
        working = sorted(
            {current.group_of(p) for ps in current.allocations[job_id].values() for p in ps}
        )
        victim = rng.choice(working)
        next(g for g in groups if g.runs(victim)).signal(signal.SIGKILL)
        replace()
    final = api.wait(store, job_id, 600)
    assert final.state == "completed", f"seed {seed}"
    assert sessions(tmp_path) == reference, f"seed {seed}"
