"""kill -9 of a member holding a large keyed state on disk: a windowed count of each user's
visits on the disk backend, each user holding a block of incompressible bytes in keyed state,
on `onyx peer start` processes over a real ZooKeeper and Aeron. A member running a slot of the
count is killed once the checkpoint storage holds as many bytes as the whole state (by then
most users' blocks are in a committed epoch), and a new one takes its place; the published
counts must be exactly each user's visits.

The state's size is the environment's ONYX_CHAOS_STATE_MB: 8 in the suite, and the run at
size is

    ONYX_CHAOS_STATE_MB=2048 .venv/bin/pytest tests/chaos/test_large_state.py

(about 2 GiB of blocks; its members are told a member is down only after 10 s unreachable, as
a process that writes gigabytes stalls for seconds at a time)."""

from __future__ import annotations

import json
import os
import signal
from contextlib import closing
from pathlib import Path

import pytest

from peer import api
from peer.runtime.checkpoints import Commits
from tests.chaos.large_state import BLOCK_BYTES
from tests.chaos.test_exactly_once import progressed
from tests.integration.test_keyed_state import restore_scopes
from tests.support import wait_for

pytestmark = pytest.mark.integration

STATE_MB = int(os.environ.get("ONYX_CHAOS_STATE_MB", "8"))
USERS = STATE_MB * 2**20 // BLOCK_BYTES
VISITS = 2
"""Each user's visits: the first writes its block, the later ones read it back."""
AT_SIZE = STATE_MB > 64
"""A run at size: unpaced, with detection that tolerates its stalls, and an hour to end."""


def write_events(path: Path) -> None:
    """USERS x VISITS visits, the users in turn, ``ts`` counting them."""
    with path.open("w") as f:
        for i in range(USERS * VISITS):
            f.write(f'{{"user": "u{i % USERS}", "ts": {i}}}\n')


def job(events: Path, out: Path) -> dict:
    return {
        "workflow": [["read", "hold"], ["hold", "write"]],
        "catalog": [
            {"name": "read", "kind": "input", "plugin": "peer.plugins.jsonl:input",
             "params": {"path": str(events)}, "n_peers": 1, "batch_size": 500},
            {"name": "hold", "kind": "function", "fn": "tests.chaos.large_state:Blocks",
             "group_by_key": "user", "n_peers": 2, "batch_size": 500},
            {"name": "write", "kind": "output", "plugin": "peer.plugins.jsonl:exactly_once_output",
             "params": {"path": str(out)}, "n_peers": 1, "batch_size": 500},
        ],
        "windows": [{"id": "visits", "task": "hold", "type": "fixed", "aggregation": "count",
                     "key": "ts", "range": USERS * VISITS}],
        "triggers": [{"window": "visits", "on": "watermark"}],
        "barrier_period": 1.0,
        "checkpoint_timeout": 600,
        "state_backend": "disk",
    }  # fmt: skip


def stored_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


@pytest.mark.timeout(3600 if AT_SIZE else 300)
def test_kill_9_of_a_member_holding_a_large_state_on_disk_changes_no_count(
    start_peer, zookeeper, tenancy, tmp_path, monkeypatch
):
    if not AT_SIZE:
        monkeypatch.setenv("ONYX_TEST_PACE", "0.1")  # 0.1 s per hundred visits
    down_after = "10" if AT_SIZE else "1"
    options = {"vpeers": 2, "extra": ["--auto-down-unreachable-after", down_after,
                                      "--state-dir", str(tmp_path / "state")]}  # fmt: skip
    groups = [start_peer(**options) for _ in range(3)]
    events, out = tmp_path / "events.jsonl", tmp_path / "out"
    write_events(events)
    with closing(api.connect(zookeeper.address, tenancy, create=True)) as store:
        wait_for(lambda: len(api.replica(store).peers) >= 6, 60, "6 peers")
        job_id = api.submit(store, job(events, out))
        commits = Commits(store, job_id)
        progressed(store, commits, job_id)
        whole = USERS * BLOCK_BYTES
        wait_for(lambda: stored_bytes(tmp_path / "checkpoints") >= whole, 1800,
                 "as many bytes checkpointed as the state holds", interval=1)  # fmt: skip
        current = api.replica(store)
        assert job_id in current.jobs, "the job ended before the kill"
        victim = min(current.group_of(p) for p in current.allocations[job_id]["hold"])
        next(g for g in groups if g.runs(victim)).signal(signal.SIGKILL)
        groups.append(start_peer(**options))
        final = api.wait(store, job_id, 3600)
    assert final.state == "completed", final.reason
    counts = {}
    for path in out.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            assert record["key"] not in counts, f"{record['key']} published twice"
            counts[record["key"]] = record["value"]
    assert counts == {f"u{u}": VISITS for u in range(USERS)}
    assert "global" in restore_scopes(groups, "hold", job_id), "no slot of hold was restored"
