"""Jobs with Arrow fns (``engine: arrow``): whole batches through pyarrow and polars, grouped by a
key column, counted by a window, and read by Python fns and outputs as rows, in one process and
across two over Aeron."""

from __future__ import annotations

import json
from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from peer import api
from peer.cluster.local import LocalCluster
from peer.job.load import from_dict
from tests.support import PeerProcess, wait_for

pytestmark = pytest.mark.integration

FNS = "tests.integration.arrow_fns"
PEOPLE = [{"name": f"p{i}", "age": i % 40, "city": ["oslo", "lima", "pune"][i % 3]}
          for i in range(600)]  # fmt: skip
ADULTS = [p for p in PEOPLE if p["age"] >= 18]


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_arrow_fns_a_grouped_window_and_an_output_in_one_process(tmp_path):
    """people -> adults (polars) -> upper (pyarrow, grouped by city, counted per city) -> out:
    the window (over age, for want of a time) takes the Arrow batches upper returns."""
    out = tmp_path / "out.jsonl"
    job = from_dict({
        "workflow": [["people", "adults"], ["adults", "upper"], ["upper", "out"]],
        "catalog": [
            {"name": "people", "kind": "input", "plugin": "peer.plugins.memory:input",
             "n_peers": 1, "batch_size": 50, "params": {"segments": PEOPLE}},
            {"name": "adults", "kind": "function", "engine": "arrow", "fn": f"{FNS}:adults",
             "params": {"age": 18}, "n_peers": 2},
            {"name": "upper", "kind": "function", "engine": "arrow", "fn": f"{FNS}:upper",
             "group_by_key": "city", "n_peers": 2, "schema": "name string, age int, city string"},
            {"name": "out", "kind": "output", "plugin": "peer.plugins.jsonl:output",
             "params": {"path": str(out)}},
        ],
        "windows": [{"id": "per-city", "task": "upper", "type": "fixed", "key": "age",
                     "range": 100, "aggregation": "count"}],
        "triggers": [{"window": "per-city", "on": "watermark"}],
        "barrier_period": 0.2,
    })  # fmt: skip
    cluster = LocalCluster(groups=1, vpeers=6)
    cluster.start()
    try:
        cluster.await_ring(30)
        assert api.wait(cluster.reader, api.submit(cluster.reader, job), 120).state == "completed"
    finally:
        cluster.stop()
    counts = {row["key"]: row["value"] for row in lines(out)}
    assert counts == Counter(p["city"] for p in ADULTS)


def test_an_arrow_fn_s_batches_cross_to_another_process(zookeeper, tenancy, tmp_path):
    """in (group a) -> adults (b, Arrow) -> tagged (a, Python, grouped by city) -> out (a)."""
    out = tmp_path / "out.jsonl"
    job = {
        "workflow": [["in", "adults"], ["adults", "tagged"], ["tagged", "out"]],
        "catalog": [
            {"name": "in", "kind": "input", "plugin": "peer.plugins.memory:input",
             "params": {"segments": PEOPLE}, "batch_size": 40, "required_tags": ["a"],
             "n_peers": 1},
            {"name": "adults", "kind": "function", "engine": "arrow", "fn": f"{FNS}:adults",
             "params": {"age": 18}, "required_tags": ["b"], "max_peers": 1},
            {"name": "tagged", "kind": "function", "fn": f"{FNS}:tagged",
             "group_by_key": "city", "required_tags": ["a"], "max_peers": 2},
            {"name": "out", "kind": "output", "plugin": "peer.plugins.jsonl:output",
             "params": {"path": str(out)}, "required_tags": ["a"], "max_peers": 1},
        ],
    }  # fmt: skip
    processes = [
        PeerProcess(zookeeper.address, tenancy, tmp_path, vpeers=4, extra=["--tags", "a"]),
        PeerProcess(zookeeper.address, tenancy, tmp_path, vpeers=1, extra=["--tags", "b"]),
    ]
    try:
        with closing(api.connect(zookeeper.address, tenancy, create=True)) as store:
            wait_for(lambda: len(api.replica(store).peers) >= 5, 60, "five active peers")
            assert api.wait(store, api.submit(store, job), 120).state == "completed"
    finally:
        for process in processes:
            process.kill()
    expected = [{**p, "tag": f"{p['city']}-{p['age']}"} for p in ADULTS]
    assert sorted(lines(out), key=lambda r: r["name"]) == sorted(expected, key=lambda r: r["name"])
