"""The data plane between `onyx peer start` processes over a real ZooKeeper and Aeron: segments
over one Aeron message travel, what a job's data does wrong kills the job and never a group,
and segments keep moving while ZooKeeper is away."""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from peer import api
from peer.messaging.aeron import MAX_FRAME_LENGTH
from peer.messaging.fragments import MAX_SEGMENT
from tests.support import PeerProcess, ZooKeeperServer, wait_for

pytestmark = pytest.mark.integration

MB = 1024 * 1024


def job(out: Path, segments: list[dict[str, Any]], middle: str, **extra: Any) -> dict[str, Any]:
    """in (group a) -> middle (group b) -> measure (a) -> out (a): every segment the middle
    task makes crosses from one process to the other over Aeron."""
    return {
        "workflow": [["in", "middle"], ["middle", "measure"], ["measure", "out"]],
        "catalog": [
            {"name": "in", "kind": "input", "plugin": "peer.plugins.memory:input",
             "params": {"segments": segments}, "batch_size": 40, "required_tags": ["a"],
             "n_peers": 1},
            {"name": "middle", "kind": "function", "fn": middle, "batch_size": 40,
             "required_tags": ["b"], "max_peers": 1},
            {"name": "measure", "kind": "function", "fn": "tests.integration.bulky:measure",
             "required_tags": ["a"], "max_peers": 1},
            {"name": "out", "kind": "output", "plugin": "peer.plugins.jsonl:output",
             "params": {"path": str(out)}, "required_tags": ["a"], "max_peers": 1},
        ],
        **extra,
    }  # fmt: skip


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def written(path: Path) -> int:
    """Lines written so far, whole ones only: the output may be half way through a write."""
    return path.read_bytes().count(b"\n") if path.exists() else 0


def two_groups(zookeeper: str, tenancy: str, tmp_path: Path, **options: Any) -> list[PeerProcess]:
    """Group a (three peers) and group b (one), each an `onyx peer start` of its own."""
    return [
        PeerProcess(zookeeper, tenancy, tmp_path, vpeers=3, extra=["--tags", "a"], **options),
        PeerProcess(zookeeper, tenancy, tmp_path, vpeers=1, extra=["--tags", "b"], **options),
    ]


def test_large_segments_travel_and_bad_ones_kill_only_their_job(zookeeper, tenancy, tmp_path):
    processes = two_groups(zookeeper.address, tenancy, tmp_path)
    try:
        with closing(api.connect(zookeeper.address, tenancy, create=True)) as store:
            wait_for(lambda: len(api.replica(store).peers) >= 4, 60, "four active peers")
            groups = set(api.replica(store).groups)

            too_big = api.submit(store, job(tmp_path / "big.jsonl", [{"n": 0, "size": 65 * MB}],
                                            "tests.integration.bulky:inflate"))  # fmt: skip
            assert api.wait(store, too_big, 120).state == "killed"
            unencodable = api.submit(store, job(tmp_path / "set.jsonl", [{"n": 0, "size": 1}],
                                                "tests.integration.bulky:unencodable"))  # fmt: skip
            assert api.wait(store, unencodable, 120).state == "killed"

            sizes = [12 * MB] + [MB] * 30
            large = api.submit(store, job(tmp_path / "out.jsonl",
                                          [{"n": n, "size": s} for n, s in enumerate(sizes)],
                                          "tests.integration.bulky:inflate"))  # fmt: skip
            assert api.wait(store, large, 180).state == "completed"
            assert set(api.replica(store).groups) == groups
        assert all(p.process.poll() is None for p in processes)
    finally:
        for process in processes:
            process.kill()
    assert 12 * MB > MAX_FRAME_LENGTH
    assert sorted(lines(tmp_path / "out.jsonl"), key=lambda d: d["n"]) == [
        {"n": n, "size": s, "whole": True} for n, s in enumerate(sizes)
    ]
    log = processes[1].output()
    assert f"job {too_big!r}: task 'middle'" in log
    assert f"is over the {MAX_SEGMENT:,}-byte limit" in log
    assert f"job {unencodable!r}: task 'middle'" in log
    assert "segment 0, field 'tags': value of type set cannot travel" in log
    assert not lines(tmp_path / "big.jsonl")


def test_segments_keep_moving_while_zookeeper_is_away(tenancy, tmp_path):
    own = ZooKeeperServer().start()
    processes = two_groups(own.address, tenancy, tmp_path, session_timeout=20.0)
    out, count = tmp_path / "out.jsonl", 5000
    try:
        connect = api.connect(own.address, tenancy, create=True, connect_timeout=30)
        with closing(connect) as store:
            wait_for(lambda: len(api.replica(store).peers) >= 4, 60, "four active peers")
            groups = set(api.replica(store).groups)
            # No checkpoints: a checkpointed job cannot commit while ZooKeeper is away, and past
            # its tolerated abandoned epochs it stops to roll back; what moves here is the data.
            segments = [{"n": n, "size": 10} for n in range(count)]
            unchecked = job(out, segments, "tests.integration.bulky:paced", barrier_period=None)
            job_id = api.submit(store, unchecked)
            wait_for(lambda: written(out) >= 200, 120, "the output to begin")
        own.process.kill()
        own.process.wait()
        while_away = written(out)
        assert while_away < count - 1500, "the job ran out before ZooKeeper went away"
        wait_for(lambda: written(out) >= while_away + 1000, 60,
                 "segments to keep moving with ZooKeeper away")  # fmt: skip
        assert own.process.poll() is not None
        own.start()
        with closing(api.connect(own.address, tenancy)) as store:
            assert api.wait(store, job_id, 180).state == "completed"
            assert set(api.replica(store).groups) == groups
    finally:
        for process in processes:
            process.kill()
        own.stop()
    assert sorted(d["n"] for d in lines(out)) == list(range(count))
