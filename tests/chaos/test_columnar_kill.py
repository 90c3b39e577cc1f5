"""A columnar job under kill -9: Spark reads Parquet files, Arrow fns drop the bots' rows and
price the purchases on whole batches, a tumbling window sums each user's spend, and the
exactly-once Parquet sink writes the table, on `onyx peer start` processes over a real ZooKeeper
and Aeron. Tags put the input, the first Arrow fn, and the window (whose fn is an Arrow fn as well)
with the sink in three groups, so Arrow batches cross between processes on both edges into the
window. The group holding the first Arrow fn and the one holding the window and the sink are
killed mid-run, once each, and replaced: the window's state, the sink's staged epochs and the
input's position all come back from the checkpoints. The table must hold exactly the rows
computed here row by row from the same purchases, apart from the engine."""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from peer import api
from peer.runtime.checkpoints import Commits
from tests.support import wait_for

pytestmark = pytest.mark.integration

FNS = "tests.chaos.columnar_fns"
ROWS = 40_000
FILES = 8
USERS = 40
RANGE = 1000
"""Seconds of event time per window: the rows' times are their indices, one a second."""
GROUPS = {"edge": 1, "arrow": 2, "window": 3}
"""The cluster's groups by the tag their peers offer, and their peers: the input's, the Arrow
fn's two, and the window's two with the sink's."""


def purchase(i: int) -> dict[str, Any]:
    return {
        "user": f"u{(i * 7) % USERS}",
        "ts": i,
        "kind": "bot" if i % 11 == 0 else "buy",
        "quantity": 1 + i % 5,
        "price_cents": 100 + (i * 13) % 900,
    }


def write_purchases(directory: Path) -> None:
    """FILES Parquet files in time order, each a run of consecutive times."""
    directory.mkdir()
    per_file = ROWS // FILES
    for f in range(FILES):
        rows = [purchase(i) for i in range(f * per_file, (f + 1) * per_file)]
        pq.write_table(pa.Table.from_pylist(rows), directory / f"part-{f:02}.parquet")


def expected() -> list[dict[str, Any]]:
    """The table the job must write, computed here row by row."""
    spent: Counter[tuple[str, int]] = Counter()
    for row in map(purchase, range(ROWS)):
        if row["kind"] != "bot":
            spent[row["user"], row["ts"] // RANGE] += row["quantity"] * row["price_cents"]
    return [
        {"user": user, "start": k * RANGE, "end": (k + 1) * RANGE, "cents": cents}
        for (user, k), cents in sorted(spent.items())
    ]


def job(base: Path) -> dict[str, Any]:
    """The job over ``base/purchases`` into ``base/spend``, its tasks placed by tags in the
    cluster's three groups."""
    placed = {"read": ["edge"], "buys": ["arrow"], "totals": ["window"], "write": ["window"]}
    catalog = [
        {"name": "read", "kind": "input", "plugin": "peer.spark.source:input", "n_peers": 1,
         "batch_size": 500, "assign_watermark_fn": f"{FNS}:event_time",
         "params": {"path": str(base / "purchases"), "format": "parquet"}},
        {"name": "buys", "kind": "function", "engine": "arrow", "fn": f"{FNS}:purchases",
         "max_peers": 2},
        {"name": "totals", "kind": "function", "engine": "arrow", "fn": f"{FNS}:priced",
         "group_by_key": "user", "max_peers": 2},
        {"name": "write", "kind": "output", "plugin": "peer.plugins.parquet:output",
         "schema": {"user": "string", "start": "bigint", "end": "bigint", "cents": "bigint"},
         "params": {"path": str(base / "spend")}, "max_peers": 1},
    ]  # fmt: skip
    for task in catalog:
        if task["name"] in placed:
            task["required_tags"] = placed[task["name"]]
    return {
        "workflow": [["read", "buys"], ["buys", "totals"], ["totals", "write"]],
        "catalog": catalog,
        "windows": [{"id": "spend", "task": "totals", "type": "fixed", "key": "ts",
                     "range": RANGE, "aggregation": "sum", "field": "cents"}],
        "triggers": [{"window": "spend", "on": "watermark", "emit": f"{FNS}:spend"}],
        "barrier_period": 0.5,
    }  # fmt: skip


def table(base: Path) -> list[dict[str, Any]]:
    """The table as any Parquet reader reads it, sorted: which epoch wrote a row differs
    between runs; the rows must not."""
    rows = ds.dataset(base / "spend", format="parquet").to_table().to_pylist()
    return sorted(rows, key=lambda row: (row["user"], row["start"]))


@pytest.fixture
def cluster(start_peer, zookeeper, tenancy, monkeypatch):
    """The GROUPS (Spark on one core where the input runs), the workload paced; and a client on
    their log."""
    monkeypatch.setenv("ONYX_TEST_PACE", "0.04")

    def start(tag: str):
        extra = ["--auto-down-unreachable-after", "1", "--spark-master", "local[1]", "--tags", tag]
        return start_peer(vpeers=GROUPS[tag], extra=extra)

    groups = {tag: start(tag) for tag in GROUPS}
    store = api.connect(zookeeper.address, tenancy, create=True)
    peers = sum(GROUPS.values())
    wait_for(lambda: len(api.replica(store).peers) >= peers, 60, f"{peers} peers")
    yield groups, start, store
    store.close()


def test_kill_9_of_the_arrow_and_window_groups_changes_nothing_in_the_table(cluster, tmp_path):
    groups, start, store = cluster
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    write_purchases(tmp_path / "purchases")
    job_id = api.submit(store, job(tmp_path))
    commits = Commits(store, job_id)
    killed, published = None, 0
    for task, tag in rng.sample([("buys", "arrow"), ("totals", "window")], 2):
        published = flowing(
            store, commits, job_id, tmp_path / "spend", killed=killed, published=published
        )
        time.sleep(rng.uniform(0, 1))  # a random moment of the run, not a wait for anything
        current = api.replica(store)
        assert job_id in current.jobs, f"seed {seed}: the job ended before {task} was killed"
        holders = {current.group_of(p) for p in current.allocations[job_id][task]}
        assert len(holders) == 1, f"seed {seed}: {task} is in groups {holders}"
        killed = holders.pop()
        assert killed in groups[tag].output(), f"seed {seed}"
        groups[tag].signal(signal.SIGKILL)
        groups[tag] = start(tag)
    final = api.wait(store, job_id, 300)
    assert final.state == "completed", f"seed {seed}"
    rows = table(tmp_path)
    assert len({(row["user"], row["start"]) for row in rows}) == len(rows), f"seed {seed}"
    assert rows == expected(), f"seed {seed}"


def flowing(
    store, commits: Commits, job_id: str, spend: Path, *, killed: str | None, published: int
) -> int:
    """Wait until rows flow: the job, on an allocation without the ``killed`` group, has
    committed an epoch and published more files of the table than ``published`` (or it is
    over); the files published."""

    def moved_on() -> int | None:
        replica = api.replica(store)
        files = len(list(spend.glob("*.parquet")))
        if job_id not in replica.jobs:
            return files or 1
        record, _ = commits.read()
        version = replica.allocation_versions.get(job_id)
        recovered = killed not in {
            replica.group_of(p) for ps in replica.allocations[job_id].values() for p in ps
        }
        committed = bool(record and record.committed and record.committed.version == version)
        return files if recovered and committed and files > published else None

    return wait_for(moved_on, 120, "the job to publish rows on its current allocation", 0.2)
