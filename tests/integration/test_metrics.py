"""What a peer group serves on /metrics, scraped from real `onyx peer start` processes on a real
ZooKeeper while a checkpointed job runs across them, each value checked against the cluster's
own state: the replica, the job's commits, the segments the job moved."""

from __future__ import annotations

import signal
import urllib.request
from collections import defaultdict

import pytest
from prometheus_client.parser import text_string_to_metric_families

from peer import __version__, api
from peer.runtime.checkpoints import Commits
from tests.support import free_port, onyx, wait_for

pytestmark = pytest.mark.integration

COUNT = 20_000


class Scrape:
    """One scrape: every sample by name, as {frozenset(labels): value}."""

    def __init__(self, port: int) -> None:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        self.samples: dict[str, dict[frozenset, float]] = defaultdict(dict)
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self.samples[sample.name][frozenset(sample.labels.items())] = sample.value

    def __call__(self, name: str, **labels: str) -> float:
        series = self.samples.get(name)
        assert series is not None, f"{name} is not served"
        assert frozenset(labels.items()) in series, f"{name}{labels} not in {sorted(series)}"
        return series[frozenset(labels.items())]

    def total(self, name: str, **labels: str) -> float:
        """The sum over every series of ``name`` whose labels include ``labels``."""
        wanted = set(labels.items())
        return sum(v for k, v in self.samples.get(name, {}).items() if wanted <= k)


def job(out) -> dict:
    return {
        "workflow": [["read", "pace"], ["pace", "write"]],
        "catalog": [
            {"name": "read", "kind": "input", "plugin": "peer.plugins.memory:input",
             "params": {"count": COUNT}, "n_peers": 1},
            {"name": "pace", "kind": "function", "fn": "tests.chaos.pacing:pace_view",
             "n_peers": 1},
            {"name": "write", "kind": "output", "plugin": "peer.plugins.jsonl:exactly_once_output",
             "params": {"path": str(out)}, "n_peers": 2},
        ],
        "barrier_period": 0.2,
    }  # fmt: skip


@pytest.fixture
def groups(start_peer, zookeeper, tenancy, monkeypatch):
    """Two groups of two peers, each serving its metrics, and a client on their log."""
    monkeypatch.setenv("ONYX_TEST_PACE", "0.01")
    ports = [free_port(), free_port()]
    peers = [
        start_peer(vpeers=2, extra=["--metrics-port", str(port), "--metrics-address", "127.0.0.1"])
        for port in ports
    ]
    store = api.connect(zookeeper.address, tenancy, create=True)
    wait_for(lambda: len(api.replica(store).groups) == 2, 60, "two groups in the ring")
    yield peers, ports, store
    store.close()


def test_every_metric_is_served_with_the_cluster_s_own_values(groups, zookeeper, tenancy, tmp_path):
    peers, ports, store = groups
    job_id = api.submit(store, job(tmp_path / "out"))
    commits = Commits(store, job_id)
    wait_for(lambda: (r := commits.read()[0]) and r.committed, 60, "a committed epoch")
    coordinator = next(p for p in ports if Scrape(p).samples.get("onyx_job_epoch"))
    check_running(Scrape(coordinator), api.replica(store), job_id)

    assert api.wait(store, job_id, 120).state == "completed"
    final = api.replica(store)
    wait_for(lambda: all(Scrape(p)("onyx_log_position") == final.version for p in ports), 30,
             "every group to apply the log's last entry")  # fmt: skip
    scrapes = [Scrape(p) for p in ports]
    for scrape in scrapes:
        check_settled(scrape, final)
    check_data_plane(scrapes, job_id)

    assert onyx("gc", "--zookeeper", zookeeper.address, "--tenancy", tenancy).returncode == 0
    origin = store.origin().version
    wait_for(lambda: Scrape(ports[0])("onyx_log_origin_position") == origin, 30, "the gc")
    after = Scrape(ports[0])
    assert after("onyx_log_gc_total") == 1
    assert after("onyx_log_length") == after("onyx_log_tail_position") - origin

    peers[1].signal(signal.SIGKILL)
    wait_for(lambda: Scrape(ports[0])("onyx_ring_groups") == 1, 60, "the dead group's removal")
    assert Scrape(ports[0])("onyx_ring_deaths_detected_total") == 1


def check_running(s: Scrape, running, job_id: str) -> None:
    """The job's gauges, and its epochs from the group running its coordinator."""
    assert s("onyx_job_allocation_version", onyx_job=job_id) == running.allocation_versions[job_id]
    assert s("onyx_job_barrier_period_seconds", onyx_job=job_id) == 0.2
    assert s("onyx_job_peers", onyx_job=job_id) == 3  # read and pace run as one chain
    assert s("onyx_job_waiting", onyx_job=job_id) == 0
    assert s("onyx_jobs", state="running") == 1
    assert s("onyx_job_committed_epoch", onyx_job=job_id) >= 1
    assert s("onyx_job_epoch", onyx_job=job_id) >= s("onyx_job_committed_epoch", onyx_job=job_id)
    assert 0 <= s("onyx_job_seconds_since_commit", onyx_job=job_id) < 60
    assert s("onyx_job_last_commit_timestamp_seconds", onyx_job=job_id) > 1.7e9
    assert s("onyx_checkpoint_duration_seconds_count", onyx_job=job_id) >= 1


def check_settled(s: Scrape, final) -> None:
    """Ring and log gauges of a group that has applied the whole log."""
    assert s("onyx_build_info", version=__version__) == 1
    assert s("onyx_ring_member") == 1
    assert s("onyx_ring_groups") == len(final.groups) == 2
    assert s("onyx_ring_watch_pairs") == len(final.pairs)
    assert s("onyx_ring_watch_target_alive") == 1
    assert s("onyx_ring_joins_in_flight") == 0
    assert s("onyx_group_virtual_peers") == 2
    assert s("onyx_log_tail_position") == s("onyx_log_position") == final.version
    assert s("onyx_log_lag") == 0
    assert s("onyx_log_origin_position") == -1
    assert s("onyx_log_length") == final.version + 1
    assert s("onyx_log_entries_applied_total", kind="submit-job") == 1
    assert s("onyx_log_entries_applied_total", kind="complete-job") >= 1
    assert s("onyx_log_apply_seconds_count") == s.total("onyx_log_entries_applied_total")
    assert s("onyx_jobs", state="running") == 0
    for name in (
        "onyx_ring_joins_aborted_total",
        "onyx_ring_deaths_detected_total",
        "onyx_log_gc_total",
        "onyx_aeron_offers_back_pressured_total",
        "onyx_aeron_publications",
    ):
        assert s(name) >= 0  # fmt: skip


def check_data_plane(scrapes: list[Scrape], job_id: str) -> None:
    """Segments, batches, snapshots and frames, summed over both groups."""

    def total(name: str, **labels: str) -> float:
        return sum(s.total(name, **labels) for s in scrapes)

    for name in (
        "onyx_aeron_frames_sent_total",
        "onyx_aeron_frames_received_total",
        "onyx_aeron_sent_bytes_total",
        "onyx_aeron_received_bytes_total",
    ):
        assert total(name) > 0, name  # fmt: skip
    assert total("onyx_task_segments_in_total", onyx_job=job_id, task="read+pace") == COUNT
    assert total("onyx_task_segments_in_total", onyx_job=job_id, task="write") == COUNT
    for task in ("read+pace", "write"):
        assert total("onyx_task_batch_seconds_count", onyx_job=job_id, task=task) > 0
        assert total("onyx_checkpoint_size_bytes_count", onyx_job=job_id, task=task) > 0
    assert total("onyx_barrier_alignment_seconds_count", onyx_job=job_id, task="write") > 0
    series = [k for s in scrapes for k in s.samples.get("onyx_task_backpressure_events_total", {})]
    assert {("onyx_job", job_id), ("task", "read+pace")} <= set().union(*series)
