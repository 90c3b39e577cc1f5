"""Jobs on the cluster rolled out to the rig's three test hosts (the session's ``rollout``
fixture): what the engine promises on one machine, kept across machines that share nothing but
the object store the distribution deploys.

A keyed, windowed job with checkpoints, local recovery and standbys, its code shipped with it and
placed anywhere, reads its input from the object store and writes it into the exactly-once
JSON-lines sink there. It goes through every fault in turn: a host cut off briefly, a member
killed -9 with its workers, one host's object store killed -9, a host cut off past the auto-down
time, a stop with a savepoint and a new job resuming from it, and a rolling restart of every host
(deploy/rolling_restart.yml) that rolls the job back nowhere. Its published output then equals
what a failure-free run of the same job on this machine (`onyx run`) publishes. The clickstream
pipeline, the README's main job, runs across the hosts with its Spark step on the Spark cluster
and its input and its sessions table on the object store, and its table equals the one `onyx run`
makes on this machine.

The peer members run with the peer role's membership settings (heartbeats every 0.25 s,
auto-down after 5 s unreachable, ZooKeeper sessions of 20 s). Every host runs a ZooKeeper server,
so the host cut is one whose server follows: the other two keep the quorum and its leader. This
machine talks to the ZooKeeper servers of the hosts left connected: the cut one answers nothing,
or old news. A cut past the auto-down time races the leader's down (detection, a few seconds,
then the auto-down time) against the ZooKeeper leader expiring the cut member's session: the
down comes about 8 s after the cut (16 s seen on a loaded machine), inside the 20 s session.
Right after the brief cut and a member's kill -9, the heartbeat history holds their silences,
and phi accrual then waits longer before it calls the cut member unreachable (13 to 19 s seen):
the session may expire first, and a pulse watch downs the member instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
import s3fs
import yaml

from examples.clickstream import generate
from peer import api
from peer.job.load import YamlLoader
from peer.runtime.checkpoints import Commits
from peer.values.epoch import Epoch
from tests.infra.cluster import (
    CREDENTIALS,
    SPARK_TAG,
    Onyx,
    Rollout,
    follower_host,
    group_on,
    hosts_of,
    journal,
    link_cut,
    logged,
    ring_changes,
    store_of,
    stored_keys,
    wait_until,
)
from tests.infra.rig import REPO, Host, Rig

pytestmark = [pytest.mark.rollout, pytest.mark.timeout(3600)]

EVENTS = 120_000  # the keyed job's input; USERS keys
USERS = 50
THROTTLE = "/var/lib/onyx/rollout-throttle"
SHIPPED = f'''"""The keyed job's per-segment code, shipped with the job: identity, slowed while the
test's throttle file is on the host, so that the job outlasts its faults; once it is removed,
the job runs at full speed to its end."""

import os
import time


def pace(segment):
    if segment["ts"] % 10 == 0 and os.path.exists({THROTTLE!r}):
        time.sleep(0.05)
    return segment
'''


@dataclass
class Store:
    """The members' bucket, seen from this machine through the first host's gateway."""

    fs: s3fs.S3FileSystem
    bucket: str

    @classmethod
    def of(cls, onyx: Onyx) -> Store:
        env = onyx.store_env
        fs = s3fs.S3FileSystem(
            key=env["AWS_ACCESS_KEY_ID"], secret=env["AWS_SECRET_ACCESS_KEY"],
            client_kwargs={"endpoint_url": env["AWS_ENDPOINT_URL"]}, skip_instance_cache=True,
        )  # fmt: skip
        return cls(fs, onyx.bucket)

    def url(self, path: str) -> str:
        return f"s3://{self.bucket}/{path}"

    def published(self, path: str) -> list[str]:
        """Every record the exactly-once JSON-lines sink published under ``path``, as sorted
        canonical JSON (file names hold epochs, which differ between runs; records must not)."""
        return sorted(
            json.dumps(json.loads(line), sort_keys=True)
            for name in self.fs.glob(f"{self.bucket}/{path}/*.jsonl")
            for line in self.fs.cat_file(name).decode().splitlines()
        )


COUNTS = 3
"""The keyed job's count peers when every member is up."""


def keyed_job(events: str, out: str) -> dict[str, Any]:
    """A keyed stream through a windowed count into the exactly-once sink, checkpointed every
    half second, locally recovering, the count's seats with standbys. It takes five of the
    seven virtual peers (COUNTS), so the first host's member (three of them) leaving or failing
    shrinks it, and its return grows it back: at a pause, standing still at a commit."""
    return {
        "workflow": [["read", "count"], ["count", "write"]],
        "catalog": [
            {"name": "read", "kind": "input", "plugin": "peer.plugins.jsonl:input",
             "params": {"path": events}, "n_peers": 1},
            {"name": "count", "kind": "function", "fn": "rollout_keyed:pace",
             "group_by_key": "user", "max_peers": COUNTS, "standby": True},
            {"name": "write", "kind": "output", "plugin": "peer.plugins.jsonl:exactly_once_output",
             "params": {"path": out}, "n_peers": 1},
        ],
        "windows": [{"id": "visits", "task": "count", "type": "fixed", "aggregation": "count",
                     "key": "ts", "range": 5000}],
        "triggers": [{"window": "visits", "on": "segment", "threshold": 20},
                     {"window": "visits", "on": "watermark"}],
        "barrier_period": 0.5,
        "local_recovery": True,
    }  # fmt: skip


def run_locally(job: dict[str, Any], base: Path, code: Path, *options: str) -> str:
    """``job`` run without failures on this machine (`onyx run`), its code importable."""
    (base / "job.json").write_text(json.dumps(job))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), str(REPO)])}
    result = subprocess.run(
        [sys.executable, "-m", "peer.cli", "run", str(base / "job.json"), *options],
        capture_output=True, text=True, timeout=900, cwd=base, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def submit(onyx: Onyx, rollout: Rollout, job: dict[str, Any], code: Path, name: str) -> str:
    """``job`` submitted from this machine with its code, which goes to the members' bucket."""
    path = rollout.directory / f"{name}.json"
    path.write_text(json.dumps(job))
    return onyx("job", "submit", str(path), "--code", str(code),
                "--checkpoints", onyx.checkpoints, timeout=120).strip()  # fmt: skip


def on_every_host(rig: Rig, command: str) -> None:
    for host in rig.hosts:
        rig.ssh(host, command, timeout=60)


@contextlib.contextmanager
def throttled(rig: Rig) -> Iterator[None]:
    """The shipped code slowed on every host (its throttle file there) until the way out."""
    on_every_host(rig, f"install -o onyx -m 0644 /dev/null {THROTTLE}")
    try:
        yield
    finally:
        on_every_host(rig, f"rm -f {THROTTLE}")


def allocated(store: api.ZooKeeperStore, job_id: str, tasks: set[str]) -> dict[str, Any]:
    """The replica once every task of the job has a peer."""
    return api.follow(
        store, lambda r: set(r.allocations.get(job_id, {})) >= tasks or job_id in r.finished, 120
    )


def committed(commits: Commits) -> Epoch | None:
    record, _ = commits.read()
    return record.committed if record else None


def commits_again(store: api.ZooKeeperStore, commits: Commits, job_id: str, what: str) -> Epoch:
    """The job's first commit after now on its current allocation: it came through ``what``
    and moved on. Fails if the job ended first (its throttle keeps it running)."""
    before = committed(commits)

    def moved_on() -> Epoch | None:
        replica = api.replica(store)
        assert job_id in replica.jobs, f"job {job_id} ended during {what}"
        epoch = committed(commits)
        version = replica.allocation_versions.get(job_id)
        return epoch if epoch and epoch != before and epoch.version == version else None

    return wait_until(moved_on, bool, 180, f"job {job_id} to commit after {what}", every=0.5)


def working_hosts(rig: Rig, replica: Any, job_id: str, task: str) -> list[Host]:
    """The hosts whose members run ``task`` of the job."""
    peers = replica.allocations[job_id][task]
    groups = {replica.group_of(p) for p in peers}
    return [h for h in rig.hosts if group_on(replica, h) in groups]


@contextlib.contextmanager
def follower_cut_off(onyx: Onyx, rig: Rig) -> Iterator[tuple[Host, list[Host], api.ZooKeeperStore]]:
    """A host whose ZooKeeper server follows, the others, and the log read through theirs."""
    cut, others = follower_host(rig)
    store = store_of(onyx, others)
    try:
        yield cut, others, store
    finally:
        store.close()


def cut_briefly(onyx: Onyx, rig: Rig, job_id: str) -> None:
    """A host cut off until the others log its member unreachable, then back: it is reachable
    again, nobody downs it, the job keeps its allocation."""
    with follower_cut_off(onyx, rig) as (cut, others, store):
        _cut_briefly(rig, store, cut, others, job_id)


def _cut_briefly(
    rig: Rig, store: api.ZooKeeperStore, cut: Host, others: list[Host], job_id: str
) -> None:
    before = api.replica(store)
    member, version = group_on(before, cut), before.allocation_versions[job_id]
    unreachable, start = f"member {member} is unreachable", time.time()
    with link_cut(cut):
        said = wait_until(lambda: logged(rig, others, start, unreachable), bool, 60,
                          f"the others to log {unreachable!r}", every=0.2)  # fmt: skip
    back = f"member {member} is reachable again"
    wait_until(lambda: logged(rig, others, start, back), lambda b: set(b) >= set(said), 60,
               f"{sorted(said)} to log {back!r}", every=0.5)  # fmt: skip
    healed = api.replica(store)
    assert member in healed.groups
    assert member not in healed.left
    assert healed.allocation_versions[job_id] == version, "the job was reallocated"
    assert not logged(rig, rig.hosts, start, "downs member"), "a group downed another"


def kill_a_member(rig: Rig, store: api.ZooKeeperStore, job_id: str) -> None:
    """kill -9 of the member (and its workers) of a host that counts: systemd starts it again,
    and its fresh group joins once the old one is gone."""
    before = api.replica(store)
    host = working_hosts(rig, before, job_id, "count")[0]
    member = group_on(before, host)
    rig.ssh(host, "systemctl kill --signal=SIGKILL onyx-peer.service")
    after = api.follow(
        store, lambda r: member not in r.groups and group_on(r, host) is not None, 120
    )
    assert member in after.left


SEAWEEDFS = [f"onyx-seaweedfs-{part}.service" for part in ("master", "volume", "filer", "s3")]


def kill_the_store_on(rig: Rig, host: Host) -> None:
    """kill -9 of every SeaweedFS process of ``host``; systemd starts each again."""

    def restarts() -> list[int]:
        show = rig.ssh(host, f"systemctl show -p NRestarts --value {' '.join(SEAWEEDFS)}")
        return [int(n) for n in show.stdout.split()]

    before = restarts()
    rig.ssh(host, f"systemctl kill --signal=SIGKILL {' '.join(SEAWEEDFS)}")
    wait_until(restarts, lambda now: all(a > b for a, b in zip(now, before, strict=True)), 60,
               f"systemd to restart the object store on {host.name}")  # fmt: skip

    def states() -> list[str]:
        return rig.ssh(
            host, f"systemctl is-active {' '.join(SEAWEEDFS)}", check=False
        ).stdout.split()

    wait_until(states, lambda now: now == ["active"] * len(SEAWEEDFS), 60,
               f"the object store on {host.name} active again")  # fmt: skip


def cut_past_auto_down(onyx: Onyx, rig: Rig) -> None:
    """A host cut off until its member is removed (the leader downs it once it has been
    unreachable for the auto-down time, or ZooKeeper expires its session and a pulse watch
    downs it, whichever comes first), then back: its group rejoins under a fresh id, and the
    other side downed nobody."""
    with follower_cut_off(onyx, rig) as (cut, others, store):
        _cut_past_auto_down(rig, store, cut, others)


def _cut_past_auto_down(rig: Rig, store: api.ZooKeeperStore, cut: Host, others: list[Host]) -> None:
    before = api.replica(store)
    member, start = group_on(before, cut), time.time()
    unreachable = f"member {member} is unreachable"
    with link_cut(cut):
        said = wait_until(lambda: logged(rig, others, start, unreachable), bool, 60,
                          f"the others to log {unreachable!r}", every=0.2)  # fmt: skip
        downed = api.follow(store, lambda r: member not in r.groups, 60)
    assert member in downed.left

    def causes() -> dict[str, dict[str, float]]:
        """Who logged removing it: the leader (unreachable past the auto-down time), a group
        whose pulse watch saw its session end, or the cut group itself once it is back and
        finds its session expired (it may take some seconds to say so)."""
        return {
            "downed": logged(rig, others, start, f"downs member {member}, unreachable too long"),
            "pulse gone": logged(rig, others, start, f"downs member {member}: its pulse is gone"),
            "expired": logged(rig, [cut], start, f"group {member}: ZooKeeper session expired"),
        }

    why = "a down by the leader or by a pulse watch, or the session's expiry"
    seen = wait_until(causes, lambda found: any(found.values()), 60, why)
    downs = seen["downed"]
    assert not downs or min(downs.values()) >= min(said.values())
    print(f"{cut.name} cut: unreachable {said}; removed {seen}")
    after = api.follow(store, lambda r: all(group_on(r, h) for h in rig.hosts), 120)
    assert group_on(after, cut) != member
    assert not set(after.left) & set(before.groups) - {member}, "the cut side downed others"


def rolling_restart(rollout: Rollout, store: api.ZooKeeperStore, job_id: str) -> None:
    """deploy/rolling_restart.yml: each host's member leaves (a graceful hand-over) and its
    successor joins before the next host's member leaves, in the inventory's order, each back
    with all its virtual peers. The job, shrunk while the first host's member was away, grows
    back at a pause; no peer restores it with scope global (it never rolls back), and some hand
    over (scope handover)."""
    rig = rollout.rig
    before, start = api.replica(store), time.time()
    with rollout.phase("rolling_restart.yml"):
        rollout.playbook("rolling-restart", "rolling_restart.yml", "-e",
                         "onyx_rolling_restart_delay=1", timeout=900)  # fmt: skip
    wait_until(lambda: api.replica(store), lambda r: set(r.groups) <= set(r.sites), 60,
               "every member to name its host")  # fmt: skip
    changes, after = ring_changes(store, before)
    hosts, total = [h.address for h in rig.hosts], len(rig.hosts)
    assert changes == [c for h in hosts for c in (({h}, set(), total - 1), (set(), {h}, total))]
    assert set(after.groups).isdisjoint(before.groups), "a member was not restarted"
    vpeers = {h.name: 3 if h == rig.hosts[0] else 2 for h in rig.hosts}  # as write_inventory
    held = {h.name: len(after.group_peers.get(group_on(after, h) or "", ())) for h in rig.hosts}
    assert held == vpeers, "a member came back without all its virtual peers"
    wait_until(lambda: api.replica(store).allocations.get(job_id, {}).get("count", ()),
               lambda count: len(count) == COUNTS, 120, "the job to grow back")  # fmt: skip
    assert logged(rig, rig.hosts, start, f"job {job_id}: standing still at epoch"), "no growth"
    restored = [line for h in rig.hosts for _, line in journal(rig, h, start, f"of job {job_id}")]
    restored = [line for line in restored if "restored task" in line]
    assert not [line for line in restored if "scope global" in line], restored
    assert [line for line in restored if "scope handover" in line], restored


def code_removed(rig: Rig, onyx: Onyx, job_ids: list[str]) -> None:
    """The jobs' shipped code gone from the bucket and from every host's cache."""
    cache = "/var/lib/onyx/.onyx/code"
    find = f"find {cache} -mindepth 1 -maxdepth 1 -not -name '.*' 2>/dev/null || true"

    def leftovers() -> list[str]:
        prefixes = [f"checkpoints/{onyx.tenancy}/{j}/code/" for j in job_ids]
        stored = [k for prefix in prefixes for k in stored_keys(rig, rig.hosts[0], prefix)]
        return stored + [p for h in rig.hosts for p in rig.ssh(h, find).stdout.split()]

    wait_until(leftovers, lambda left: not left, 60, "the code gone from storage and the caches")


def test_a_keyed_job_keeps_exactly_once_through_every_fault(rollout: Rollout) -> None:
    rig, onyx = rollout.rig, Onyx(rollout.rig)
    bucket, run = Store.of(onyx), f"rollout/keyed-{uuid.uuid4().hex[:8]}"
    base = rollout.directory / "keyed"
    code = base / "code"
    shutil.rmtree(base, ignore_errors=True)
    (code / "rollout_keyed").mkdir(parents=True)
    (code / "rollout_keyed/__init__.py").write_text(SHIPPED)
    with (base / "events.jsonl").open("w") as f:
        for i in range(EVENTS):
            f.write(json.dumps({"user": f"u{(i * 7) % USERS}", "ts": i}) + "\n")
    with rollout.phase("keyed job: failure-free run here"):
        local = keyed_job(str(base / "events.jsonl"), str(base / "out"))
        run_locally(local, base, code, "--vpeers", "6")
        reference = sorted(
            json.dumps(json.loads(line), sort_keys=True)
            for f in (base / "out").glob("*.jsonl")
            for line in f.read_text().splitlines()
        )
    assert len(reference) > EVENTS // 20
    bucket.fs.put(str(base / "events.jsonl"), f"{bucket.bucket}/{run}/events.jsonl")
    job = keyed_job(bucket.url(f"{run}/events.jsonl"), bucket.url(f"{run}/out"))
    store = api.connect(onyx.zookeeper, onyx.tenancy, connect_timeout=30, auth=CREDENTIALS)
    try:
        with throttled(rig):
            with rollout.phase("keyed job: brief cut, kill -9, store killed, cut past auto-down"):
                first = submit(onyx, rollout, job, code, "keyed-first")
                replica = allocated(store, first, {"read", "count", "write"})
                held = {replica.group_of(p) for ps in replica.allocations[first].values()
                        for p in ps}  # fmt: skip
                assert len(hosts_of(replica.sites, held)) >= 2, (
                    f"job {first} runs on one host: {replica.allocations[first]}"
                )
                commits = Commits(store, first)
                commits_again(store, commits, first, "its start")
                cut_briefly(onyx, rig, first)
                commits_again(store, commits, first, "a brief cut")
                kill_a_member(rig, store, first)
                commits_again(store, commits, first, "a member's kill -9")
                writer = working_hosts(rig, api.replica(store), first, "write")[0]
                kill_the_store_on(rig, writer)
                commits_again(store, commits, first, f"the object store killed on {writer.name}")
                cut_past_auto_down(onyx, rig)
                commits_again(store, commits, first, "a cut past the auto-down time")
            with rollout.phase("keyed job: stop with a savepoint, resume, rolling restart"):
                onyx("job", "stop", first, "--savepoint", "stopped", "--timeout", "120",
                     timeout=180)  # fmt: skip
                resumed = dict(job, resume_from={"job": first, "savepoint": "stopped"})
                second = submit(onyx, rollout, resumed, code, "keyed-second")
                allocated(store, second, {"read", "count", "write"})
                commits_again(store, Commits(store, second), second, "its resume")
                rolling_restart(rollout, store, second)
        with rollout.phase("keyed job: to its end"):
            final = api.wait(store, second, 600)
            assert final.state == "completed", final
    finally:
        store.close()
    assert bucket.published(f"{run}/out") == reference
    code_removed(rig, onyx, [first, second])


# -- the clickstream pipeline across the hosts ----------------------------------------------------

CLICKS, VISITORS = 15_000, 200


def clickstream(views: str, pages: str, sessions: str) -> dict[str, Any]:
    """The README's main job reading ``views`` and ``pages`` and writing ``sessions``, with its
    cleaning step on Spark (pipeline.clean, the same rows as the Arrow step the example runs):
    the Spark source and that step on the members that run Spark work."""
    job = yaml.load((REPO / "examples/clickstream/job.yaml").read_text(), Loader=YamlLoader)
    tasks = {task["name"]: task for task in job["catalog"]}
    tasks["views"]["params"]["path"] = views
    tasks["clean"].update(engine="spark", fn="examples.clickstream.pipeline:clean", n_peers=1)
    tasks["clean"]["params"]["pages"] = pages
    tasks["sessions"]["params"]["path"] = sessions
    for name in ("views", "clean"):
        tasks[name]["required_tags"] = [SPARK_TAG]
    return job


def session_rows(dataset: ds.Dataset) -> list[dict[str, Any]]:
    """A sessions table's rows, sorted: which epoch wrote a row differs between runs."""
    rows = dataset.to_table().to_pylist()
    return sorted(rows, key=lambda row: (row["user_id"], row["start"]))


def spark_applications(rig: Rig) -> list[dict[str, Any]]:
    """The applications the Spark master (the first host) runs or ran."""
    answer = rig.ssh(rig.hosts[0], f"curl --silent --fail http://{rig.hosts[0].address}:8080/json/")
    state = json.loads(answer.stdout)
    return [*state.get("activeapps", []), *state.get("completedapps", [])]


def test_the_clickstream_pipeline_runs_across_the_hosts_on_the_spark_cluster(
    rollout: Rollout,
) -> None:
    rig, onyx = rollout.rig, Onyx(rollout.rig)
    bucket, run = Store.of(onyx), f"rollout/clickstream-{uuid.uuid4().hex[:8]}"
    base = rollout.directory / "clickstream"
    shutil.rmtree(base, ignore_errors=True)
    code = base / "code"
    (code / "examples/clickstream").mkdir(parents=True)
    for name in ("examples/__init__.py", "examples/clickstream/__init__.py",
                 "examples/clickstream/pipeline.py"):  # fmt: skip
        shutil.copy(REPO / name, code / name)
    with rollout.phase("clickstream: onyx run here"):
        generate.write(base, CLICKS, VISITORS, files=8, seed=11)
        local = clickstream(str(base / "events"), str(base / "pages.csv"), str(base / "sessions"))
        run_locally(local, base, code, "--spark-master", "local[2]")
        reference = session_rows(ds.dataset(base / "sessions", partitioning="hive"))
    assert len(reference) > VISITORS
    bucket.fs.put(str(base / "events"), f"{bucket.bucket}/{run}/events", recursive=True)
    bucket.fs.put(str(base / "pages.csv"), f"{bucket.bucket}/{run}/pages.csv")
    job = clickstream(bucket.url(f"{run}/events"), bucket.url(f"{run}/pages.csv"),
                      bucket.url(f"{run}/sessions"))  # fmt: skip
    apps = len(spark_applications(rig))
    with rollout.phase("clickstream: across the hosts"):
        job_id = submit(onyx, rollout, job, code, "clickstream")
        assert "completed" in onyx("job", "wait", job_id, "--timeout", "600", timeout=660)
    assert len(spark_applications(rig)) > apps, "no Spark application ran on the Spark cluster"
    table = ds.dataset(f"{bucket.bucket}/{run}/sessions", filesystem=bucket.fs,
                       partitioning="hive")  # fmt: skip
    assert session_rows(table) == reference
