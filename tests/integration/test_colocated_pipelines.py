"""A colocated job on two `onyx peer start` processes runs one whole pipeline in each: every
ungrouped batch stays in the process of the input slot that read it, and the output is exact."""

from __future__ import annotations

import json
from collections import defaultdict
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from peer import api
from tests.support import PeerProcess, wait_for

pytestmark = pytest.mark.integration

COUNT = 6000
FNS = "tests.integration.colocation"


def job(out: Path) -> dict[str, Any]:
    """in -> first -> second -> out, each fn noting its process id; two of each task."""
    doc = {
        "workflow": [["in", "first"], ["first", "second"], ["second", "out"]],
        "catalog": [
            {"name": "in", "kind": "input", "plugin": "peer.plugins.memory:input",
             "params": {"count": COUNT}, "batch_size": 50},
            {"name": "first", "kind": "function", "fn": f"{FNS}:first", "batch_size": 50},
            {"name": "second", "kind": "function", "fn": f"{FNS}:second", "batch_size": 50},
            {"name": "out", "kind": "output", "plugin": "peer.plugins.jsonl:output",
             "params": {"path": str(out / "slot-{slot}.jsonl")}},
        ],
        "task_scheduler": "colocated",
    }  # fmt: skip
    for task in doc["catalog"]:
        task["n_peers"] = 2  # one pipeline per process
    return doc


def test_each_group_runs_its_own_pipeline_and_the_output_is_exact(zookeeper, tenancy, tmp_path):
    processes = [PeerProcess(zookeeper.address, tenancy, tmp_path, vpeers=4) for _ in range(2)]
    out = tmp_path / "out"
    out.mkdir()
    try:
        with closing(api.connect(zookeeper.address, tenancy, create=True)) as store:
            wait_for(lambda: len(api.replica(store).peers) >= 8, 60, "eight active peers")
            job_id = api.submit(store, job(out))
            assert api.wait(store, job_id, 180).state == "completed"
    finally:
        for process in processes:
            process.kill()
    files = {path.name: [json.loads(line) for line in path.read_text().splitlines()]
             for path in sorted(out.glob("slot-*.jsonl"))}  # fmt: skip
    segments = [s for lines in files.values() for s in lines]
    assert sorted(s["n"] for s in segments) == list(range(COUNT))
    assert all(s["first"] == s["second"] for s in segments), "a batch crossed between processes"
    by_input_slot = defaultdict(set)  # item n is read by input slot n % 2
    for s in segments:
        by_input_slot[s["n"] % 2].add(s["first"])
    assert sorted(len(pids) for pids in by_input_slot.values()) == [1, 1]
    assert len(set.union(*by_input_slot.values())) == 2, "both processes ran a pipeline"
    assert all(len({s["second"] for s in lines}) == 1 for lines in files.values())
