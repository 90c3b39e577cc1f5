"""Local recovery under kill -9: a keyed, windowed job with timers on `onyx peer start`
processes over a real ZooKeeper and Aeron. The member running one slot of its middle task is
killed; the slot's standby takes the seat over and replays it, and nothing else restores: the
job's allocation version never moves, an at-least-once sink downstream gets no record twice,
and the published output equals a failure-free run's."""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from peer import api
from peer.log.entry import Transition
from peer.log.replica import Replica
from peer.runtime.checkpoints import Commits
from tests.chaos.test_exactly_once import USERS, progressed
from tests.integration.test_metrics import Scrape
from tests.support import free_port, onyx, wait_for

pytestmark = pytest.mark.integration


EVENTS = 40_000


def write_events(path: Path) -> None:
    with path.open("w") as f:
        for i in range(EVENTS):
            f.write(json.dumps({"user": f"u{(i * 7) % USERS}", "ts": i}) + "\n")


def job(events: Path, out: Path, loose: Path) -> dict:
    return {
        "workflow": [["read", "count"], ["count", "write"], ["count", "loose"]],
        "catalog": [
            {"name": "read", "kind": "input", "plugin": "peer.plugins.jsonl:input",
             "params": {"path": str(events)}, "n_peers": 1},
            {"name": "count", "kind": "function", "fn": "tests.chaos.pacing:pace",
             "group_by_key": "user", "n_peers": 2, "standby": True},
            {"name": "write", "kind": "output", "plugin": "peer.plugins.jsonl:exactly_once_output",
             "params": {"path": str(out)}, "n_peers": 1},
            {"name": "loose", "kind": "output", "plugin": "peer.plugins.jsonl:output",
             "params": {"path": str(loose)}, "n_peers": 1},
        ],
        "windows": [
            {"id": "visits", "task": "count", "type": "fixed", "aggregation": "count",
             "key": "ts", "range": 5000},
            {"id": "pulse", "task": "count", "type": "fixed", "aggregation": "count",
             "key": "ts", "range": 1_000_000_000},
        ],
        "triggers": [{"window": "visits", "on": "segment", "threshold": 20},
                     {"window": "visits", "on": "watermark"},
                     {"window": "pulse", "on": "timer", "period": 0.2,
                      "refinement": "discarding"},
                     {"window": "pulse", "on": "watermark"}],
        "barrier_period": 0.5,
        "local_recovery": True,
    }  # fmt: skip


def records(out: Path) -> list[dict]:
    """Every record in the file, or in every published file of the directory."""
    files = sorted(out.glob("*.jsonl")) if out.is_dir() else [out]
    return [json.loads(line) for f in files for line in f.read_text().splitlines()]


def visits(found: list[dict]) -> Counter:
    """The watermark and count triggers' records: the same in every run, as a multiset."""
    return Counter(json.dumps(r, sort_keys=True) for r in found if r["window"] == "visits")


def pulses(found: list[dict]) -> dict[str, int]:
    """What the timer fired (and the watermark at the end), summed per user: when the timer
    fired is the run's, what they counted in all is every event of the user, once."""
    total: Counter = Counter()
    for r in found:
        if r["window"] == "pulse":
            total[r["key"]] += r["value"]
    return dict(total)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Counter, dict[str, int]]:
    base = tmp_path_factory.mktemp("reference")
    write_events(base / "events.jsonl")
    doc = job(base / "events.jsonl", base / "out", base / "loose.jsonl")
    (base / "job.yaml").write_text(yaml.safe_dump(doc))
    result = onyx("run", str(base / "job.yaml"), "--vpeers", "5", timeout=600)
    assert result.returncode == 0, result.stderr
    found = records(base / "out")
    assert visits(found) == visits(records(base / "loose.jsonl"))
    return visits(found), pulses(found)


@pytest.fixture(params=["single process"])
def cluster(request, start_peer, zookeeper, tenancy, monkeypatch):
    """Seven members of one peer each, serving metrics: a job's four tasks take five peers,
    the middle task's two slots have a standby each on the others. "with workers": each
    member runs its peer in a worker process, as members do by default."""
    monkeypatch.setenv("ONYX_TEST_PACE", "0.02")
    workers = ["--workers", "1"] if request.param == "with workers" else []
    ports = [free_port() for _ in range(7)]
    groups = [
        start_peer(vpeers=1, extra=["--auto-down-unreachable-after", "1", "--metrics-port",
                                    str(port), "--metrics-address", "127.0.0.1", *workers])
        for port in ports
    ]  # fmt: skip
    store = api.connect(zookeeper.address, tenancy, create=True)
    wait_for(lambda: len(api.replica(store).peers) >= 7, 60, "7 peers")
    yield groups, ports, store
    store.close()


def submitted(store, base: Path) -> str:
    write_events(base / "events.jsonl")
    job_id = api.submit(store, job(base / "events.jsonl", base / "out", base / "loose.jsonl"))
    progressed(store, Commits(store, job_id), job_id)
    time.sleep(random.uniform(0, 1))  # a random moment of the run, not a wait for anything
    return job_id


def kill(groups, replica, peer: str) -> int:
    """kill -9 of the member running ``peer``; its index."""
    victim = replica.group_of(peer)
    index = next(i for i, g in enumerate(groups) if g.runs(victim))
    groups[index].signal(signal.SIGKILL)
    return index


@pytest.mark.parametrize("cluster", ["single process", "with workers"], indirect=True)
def test_a_killed_slot_is_taken_over_and_nothing_else_rolls_back(reference, cluster, tmp_path):
    groups, ports, store = cluster
    job_id = submitted(store, tmp_path)
    before = api.replica(store)
    version = before.allocation_versions[job_id]
    slot = random.choice(before.allocations[job_id]["count"])
    assert slot in before.standbys[job_id], "the slot has a standby on another member"
    killed = kill(groups, before, slot)

    versions: list[int] = []
    recovered: list[Replica] = []

    def note(t: Transition) -> None:
        """Every state on the way: the job may end right after its replacement recovers."""
        if t.entry.position > before.version:
            versions.append(t.new.allocation_versions.get(job_id, -1))
            seats = t.new.allocations.get(job_id, {}).get("count", (slot,))
            if slot not in seats and job_id not in t.new.recovering:
                recovered.append(t.new)

    api.follow(store, lambda _: bool(recovered), 120, each=note)
    assert recovered[0].takeovers[job_id], "the log records the takeover"
    assert set(versions) <= {version, -1}, "no allocation version moved"
    final = api.wait(store, job_id, 300)
    assert final.state == "completed"
    found, loose = records(tmp_path / "out"), records(tmp_path / "loose.jsonl")
    assert visits(found) == reference[0]
    assert visits(loose) == reference[0], "the at-least-once sink got nothing twice"
    assert pulses(found) == pulses(loose) == reference[1]
    survivors = [Scrape(port) for i, port in enumerate(ports) if i != killed]
    restores = sum(s.total("onyx_task_restores_total", onyx_job=job_id, scope="global")
                   for s in survivors)  # fmt: skip
    local = sum(s.total("onyx_task_restores_total", onyx_job=job_id, scope="local")
                for s in survivors)  # fmt: skip
    assert (restores, local) == (0, 1), "only the replacement restored, from its seat's snapshot"


def test_two_members_killed_at_once_roll_the_job_back_and_the_output_stays_exact(
    reference, cluster, tmp_path
):
    """With causal_depth 1 the logs cover one failure at a time: the second slot's member
    going down while the first is replaced rolls the whole job back to its last commit."""
    groups, _, store = cluster
    job_id = submitted(store, tmp_path)
    before = api.replica(store)
    for slot in before.allocations[job_id]["count"]:
        kill(groups, before, slot)
    after = api.follow(
        store, lambda r: r.allocation_versions.get(job_id) != before.allocation_versions[job_id]
        or job_id not in r.jobs, 120,
    )  # fmt: skip
    assert job_id not in after.takeovers, "the job rolled back instead"
    final = api.wait(store, job_id, 300)
    assert final.state == "completed"
    assert visits(records(tmp_path / "out")) == reference[0]
    assert pulses(records(tmp_path / "out")) == reference[1]


def chain_job(events: Path, out: Path, loose: Path) -> dict:
    """Two function tasks that run as one chain (``draw+pace``, two slots with standbys), the
    first drawing a random number through its context for every event."""
    return {
        "workflow": [["read", "draw"], ["draw", "pace"], ["pace", "write"], ["pace", "loose"]],
        "catalog": [
            {"name": "read", "kind": "input", "plugin": "peer.plugins.jsonl:input",
             "params": {"path": str(events)}, "n_peers": 1},
            {"name": "draw", "kind": "function", "fn": "tests.chaos.pacing:draw", "n_peers": 2},
            {"name": "pace", "kind": "function", "fn": "tests.chaos.pacing:pace", "n_peers": 2},
            {"name": "write", "kind": "output", "plugin": "peer.plugins.jsonl:exactly_once_output",
             "params": {"path": str(out)}, "n_peers": 1},
            {"name": "loose", "kind": "output", "plugin": "peer.plugins.jsonl:output",
             "params": {"path": str(loose)}, "n_peers": 1},
        ],
        "barrier_period": 0.5,
        "standby": True,
    }  # fmt: skip


def test_a_killed_slot_of_a_chain_is_taken_over_alone(cluster, tmp_path):
    """The chain's slot, whose first fn logs its draws, is taken over alone: no allocation
    version moves, and both sinks hold every event once, the very same records."""
    groups, _, store = cluster
    write_events(tmp_path / "events.jsonl")
    doc = chain_job(tmp_path / "events.jsonl", tmp_path / "out", tmp_path / "loose.jsonl")
    job_id = api.submit(store, doc)
    progressed(store, Commits(store, job_id), job_id)
    before = api.replica(store)
    assert sorted(before.allocations[job_id]) == ["draw+pace", "loose", "read", "write"]
    version = before.allocation_versions[job_id]
    slot = random.choice(before.allocations[job_id]["draw+pace"])
    assert slot in before.standbys[job_id], "the chain's slot has a standby on another member"
    kill(groups, before, slot)
    after = api.follow(store, lambda r: bool(r.takeovers.get(job_id)), 120)
    assert after.allocation_versions[job_id] == version, "no allocation version moved"
    assert api.wait(store, job_id, 300).state == "completed"
    found, loose = records(tmp_path / "out"), records(tmp_path / "loose.jsonl")
    assert sorted(r["ts"] for r in found) == list(range(EVENTS))
    assert as_texts(loose) == as_texts(found), "the at-least-once sink got nothing twice"


def as_texts(found: list[dict]) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in found)
