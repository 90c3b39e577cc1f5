"""The whole cluster rolled out to the rig's three test hosts with deploy/site.yml: each host runs
one peer member with its worker processes and a SeaweedFS object store node, whose bucket holds
the members' checkpoints and shipped code, and the one host that ran the per-core peer groups of
an earlier release (onyx-peer@<i>) no longer does; the testinfra node tests (tests/infra/nodes)
pass on every host, deploy/rolling_restart.yml replaces every host's member one host at a time, a
job then runs across the three hosts, commits checkpoints to the object store and writes exactly
its input, a host whose link is cut
briefly is unreachable but keeps its work while one cut past the auto-down time is downed and
rejoins under a fresh id, a second rollout changes nothing, losing the ZooKeeper quorum raises its
alerts in Prometheus and the firing one reaches Alertmanager, and the zookeeper role turns a
ZooKeeper server's exporter off and on again. The tenancy is protected by a digest ACL: every
client here passes its credentials, a job's code shipped with it runs on the hosts, and a client
without the credentials is refused.

Grafana is NOT rolled out: the hosts reach only this machine, and this machine cannot download a
Grafana release (it reaches only PyPI, Debian and npm), so the inventory's `grafana` group is empty
and grafana.yml's play matches no host.

The inventory sits next to a copy of deploy/inventories/example/group_vars (the computed onyx_*
settings). What the test hosts need differently is set as host variables, since those group_vars
take precedence over an inventory file's group variables. Logs of the playbooks and the node tests
go to the rig's log directory (kept in /var/cache/onyx-test-hosts/last-run-logs after teardown).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from peer import api
from peer.log import subscriber
from peer.log.apply import apply_entry
from peer.log.replica import Replica, ring_cycle
from tests.infra.rig import REPO, Host, Rig

pytestmark = [pytest.mark.rollout, pytest.mark.timeout(3600)]

DEPLOY = REPO / "deploy"
GROUP_VARS = DEPLOY / "inventories/example/group_vars"
BIN = Path(sys.executable).parent
COUNT = 20_000  # segments of the job; batch_size 1, a checkpoint every half second: about 20 s here
CREDENTIALS = "onyx-rollout:rollout-secret"  # the tenancy's ZooKeeper digest credentials
S3_CREDENTIALS = ("onyx-rollout-key", "rollout-s3-secret")  # the object store's keys
RECAP = re.compile(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


@dataclasses.dataclass
class Rollout:
    rig: Rig
    directory: Path
    inventory: Path
    env: dict[str, str]
    timings: dict[str, float] = dataclasses.field(default_factory=dict)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            self.timings[name] = round(time.monotonic() - start, 1)
            print(f"[rollout] {name}: {self.timings[name]} s", flush=True)

    def run(self, name: str, command: list[str], timeout: float, *, ok: bool = True) -> str:
        """Runs a command with its output streamed to a log file; fails with the log's tail unless
        it succeeds (or, with ``ok`` false, unless it fails)."""
        log = self.rig.logs_dir / f"{name}.log"
        with log.open("w") as out:
            result = subprocess.run(
                command, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=REPO,
                timeout=timeout, check=False,
            )  # fmt: skip
        text = log.read_text(errors="replace")
        if (result.returncode == 0) != ok:
            tail = "\n".join(text.splitlines()[-60:])
            kept = self.rig.cache / "last-run-logs" / log.name
            outcome = f"failed (exit {result.returncode})" if ok else "succeeded"
            pytest.fail(f"{name} {outcome}; log {kept}:\n{tail}")
        return text

    def playbook(
        self, name: str, playbook: str, *extra: str, inventory: Path | None = None,
        ok: bool = True, timeout: float = 1800,
    ) -> str:  # fmt: skip
        command = [str(BIN / "ansible-playbook"), "-i", str(inventory or self.inventory), *extra]
        return self.run(name, [*command, str(DEPLOY / playbook)], timeout=timeout, ok=ok)

    def site(self, name: str) -> str:
        return self.playbook(name, "site.yml")


def write_inventory(rig: Rig, directory: Path, grafana: Sequence[str] = ()) -> Path:
    names = [h.name for h in rig.hosts]
    first, *others = names
    user, _, password = CREDENTIALS.partition(":")
    access_key, secret_key = S3_CREDENTIALS
    test_host_vars = {
        "aeron_media_driver_apply_sysctl": False,  # the hosts share this machine's kernel
        "onyx_pip_extra_args": shlex.join(rig.pip_args),  # the rig's wheels, no index
        "onyx_zookeeper_digest_user": user,
        "onyx_zookeeper_digest_password": password,
        "onyx_s3_access_key": access_key,
        "onyx_s3_secret_key": secret_key,
    }
    worker_vars = {"spark_worker_cores": 1, "spark_worker_memory": "1g"}
    # peer_workers is left to its default, one per core (the hosts share this machine's cores);
    # peer_checkpoints and peer_spark_master to group_vars': the object store's bucket (every host
    # runs a SeaweedFS gateway) and the Spark master.
    peer_vars: dict[str, Any] = {}
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copytree(GROUP_VARS, directory / "group_vars", dirs_exist_ok=True)
    # The last host's member runs no Spark work: it gets the project without its spark extra. Each
    # host's member offers its name as a tag; the first host has a peer more, for the shipped
    # code's job pinned to it.
    peers = {
        n: dict(peer_vars, peer_spark_enabled=n != names[-1], peer_tags=[n],
                peer_vpeers=3 if n == first else 2)
        for n in names
    }  # fmt: skip
    groups: dict[str, Any] = {
        "test_hosts": {n: dict(test_host_vars) for n in names},
        "zookeeper": {n: {"zookeeper_id": i} for i, n in enumerate(names, 1)},
        "peers": peers,
        "spark_master": [first],
        "spark_workers": {n: dict(worker_vars) for n in others},
        "seaweedfs": names,
        "prometheus": [first],
        "alertmanager": [first],
        "grafana": list(grafana),  # none but in the refusal test: see the module docstring
        "node_exporter": names,
    }
    return rig.write_inventory(directory / "hosts.yml", groups=groups)


@pytest.fixture(scope="module")
def rollout(rig: Rig, request: pytest.FixtureRequest) -> Iterator[Rollout]:
    """The cluster rolled out once (site.yml) for the tests of this module."""
    directory = rig.run_dir / "rollout"
    env = rig.ansible_env()
    env.update(
        ANSIBLE_CONFIG=str(DEPLOY / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    result = Rollout(rig, directory, write_inventory(rig, directory), env)
    _run_groups_of_an_earlier_release(rig, rig.hosts[-1])
    with result.phase("site.yml (first run)"):
        result.site("site-first-run")
    yield result
    # A peer member whose whole ZooKeeper ensemble is gone blocks in ZooKeeper calls and ignores
    # SIGTERM until systemd kills it (TimeoutStopSec, 50 s): that is what powering every host off
    # at once would do. Stop the members first, while ZooKeeper still answers.
    for host in rig.hosts:
        rig.ssh(host, "systemctl stop onyx-peer.service", check=False, timeout=90)
    timings = {**{f"rig {k}": v for k, v in rig.timings.items()}, **result.timings}
    summary = "rollout timings (s): " + ", ".join(f"{k} {v}" for k, v in timings.items())
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        print(f"\n{summary}", flush=True)


OLD_UNIT = """[Unit]
Description=a peer group of an earlier release (a stand-in)

[Service]
ExecStart=/bin/sleep infinity

[Install]
WantedBy=multi-user.target
"""


def _run_groups_of_an_earlier_release(rig: Rig, host: Host) -> None:
    """Before the first rollout, ``host`` runs what an earlier release of the peer role left: its
    template unit onyx-peer@.service with two instances enabled and running, and their
    peer-<i>.toml. Stand-ins (a sleep, not a peer): the rollout must stop, disable and remove
    them whatever they run; the node tests check that nothing of them is left."""
    configs = " ".join(f"/etc/onyx/peer-{i}.toml" for i in range(2))
    rig.ssh(host, f"mkdir -p /etc/onyx && touch {configs} && cat > "
                  f"/etc/systemd/system/onyx-peer@.service <<'EOF'\n{OLD_UNIT}EOF\n"
                  "systemctl daemon-reload && systemctl enable --now onyx-peer@0 onyx-peer@1",
            timeout=60)  # fmt: skip
    active = rig.ssh(host, "systemctl is-active onyx-peer@0 onyx-peer@1", check=False).stdout
    assert active.split() == ["active", "active"], active


def test_node_tests_pass_on_every_host(rollout: Rollout) -> None:
    command = [
        sys.executable, "-m", "pytest", "tests/infra/nodes", "-p", "no:cacheprovider",
        "--hosts=ansible://all", f"--ansible-inventory={rollout.inventory}",
        "--connection=ansible", "-o", "addopts=", "-n", str(len(rollout.rig.hosts)),
    ]  # fmt: skip
    with rollout.phase("node tests"):
        output = rollout.run("node-tests", command, timeout=900)
    print(output.strip().splitlines()[-1])


class Onyx:
    """The onyx CLI of this checkout, against the rolled-out cluster."""

    def __init__(self, rig: Rig) -> None:
        self.tenancy = yaml.safe_load((GROUP_VARS / "all.yml").read_text())["onyx_tenancy"]
        self.zookeeper = ",".join(f"{h.address}:2181" for h in rig.hosts)
        self.cluster = ["--zookeeper", self.zookeeper, "--tenancy", self.tenancy,
                        "--zookeeper-auth", CREDENTIALS]  # fmt: skip

    def __call__(self, *args: str, timeout: float = 60) -> str:
        command = [sys.executable, "-m", "peer.cli", *args, *self.cluster]
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False
        )
        assert result.returncode == 0, f"onyx {shlex.join(args)}: {result.stdout}{result.stderr}"
        return result.stdout

    def replica(self) -> dict[str, Any]:
        return json.loads(self("replica", "--json"))


def _hosts(sites: Mapping[str, str], groups: set[str]) -> set[str]:
    """The hosts of these groups, from their sites ("?" for a group without one)."""
    return {sites.get(g, "?:").rsplit(":", 1)[0] for g in groups}


def _wait[T](
    probe: Callable[[], T], until: Callable[[T], bool], timeout: float, what: str,
    every: float = 2,
) -> T:  # fmt: skip
    """The first value of ``probe`` (asked every ``every`` seconds) that ``until`` accepts;
    fails with the last one seen."""
    deadline = time.monotonic() + timeout
    while not until(seen := probe()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}; last seen: {seen}"
        time.sleep(every)
    return seen


def _ring_changes(store: api.ZooKeeperStore, start: Replica) -> tuple[list[tuple], Replica]:
    """Every change of the ring's groups in the log after ``start`` as (hosts whose groups left,
    hosts whose groups joined, groups in the ring), found by applying the entries one by one as
    every peer group does. A group announces its host after it joins: joiners are named by the
    host the last replica gives them."""
    replica, changes = start, []
    while entries := subscriber.poll(store, replica.version):
        for entry in entries:
            after = apply_entry(replica, entry).new
            left, joined = set(replica.groups - after.groups), set(after.groups - replica.groups)
            if left or joined:
                changes.append((_hosts(replica.sites, left), joined, len(after.groups)))
            replica = after
    return [(left, _hosts(replica.sites, joined), n) for left, joined, n in changes], replica


def test_a_rolling_restart_replaces_the_members_one_host_at_a_time(rollout: Rollout) -> None:
    rig, onyx = rollout.rig, Onyx(rollout.rig)
    hosts = [h.address for h in rig.hosts]
    store = api.connect(onyx.zookeeper, onyx.tenancy, connect_timeout=30, auth=CREDENTIALS)
    try:
        before = api.replica(store)
        assert _hosts(before.sites, set(before.groups)) == set(hosts), before.sites
        with rollout.phase("rolling_restart.yml"):
            rollout.playbook(
                "rolling-restart", "rolling_restart.yml", "-e", "onyx_rolling_restart_delay=1",
                timeout=900,
            )  # fmt: skip
        # The playbook waits for the ring to hold every member, each host's with all its virtual
        # peers; each member names its host with the entry that follows its join.
        _wait(lambda: api.replica(store), lambda r: set(r.groups) <= set(r.sites), 60,
              "every member to name its host")  # fmt: skip
        changes, after = _ring_changes(store, before)
    finally:
        store.close()
    # Each host's member left (a graceful leave: the ring never held it beside its successor)
    # and its successor joined before the next host's member left; hosts in the inventory's
    # order.
    total = len(hosts)
    expected = [c for h in hosts for c in (({h}, set(), total - 1), (set(), {h}, total))]
    assert changes == expected
    assert set(after.groups).isdisjoint(before.groups), "a member was not restarted"
    assert ring_cycle(after) is not None, f"the ring is not one cycle: {dict(after.pairs)}"
    vpeers = {h.name: 3 if h == rig.hosts[0] else 2 for h in rig.hosts}  # as write_inventory
    held = {h.name: len(after.group_peers.get(_group_on(after, h) or "", ())) for h in rig.hosts}
    assert held == vpeers, "a member came back without all its virtual peers"


def _copy_job(out: str, count: int, barrier_period: float | None = None) -> dict[str, Any]:
    """A job that copies ``count`` numbers, one segment a batch, into jsonl files under ``out``
    on the hosts of its output peers, two peers a task; with a ``barrier_period``, it
    checkpoints to the members' storage (the object store's bucket) that often."""
    return {
        "workflow": [["numbers", "copy"], ["copy", "write"]],
        "catalog": [
            {"name": "numbers", "kind": "input", "plugin": "peer.plugins.memory:input",
             "params": {"count": count}, "n_peers": 2, "batch_size": 1},
            {"name": "copy", "kind": "function", "fn": "copy:copy", "n_peers": 2, "batch_size": 1},
            {"name": "write", "kind": "output", "plugin": "peer.plugins.jsonl:output",
             "params": {"path": f"{out}/{{slot}}.jsonl"}, "n_peers": 2, "batch_size": 1},
        ],
        "barrier_period": barrier_period,
    }  # fmt: skip


def _run_across_hosts(
    rollout: Rollout, onyx: Onyx, count: int, barrier_period: float | None = None
) -> tuple[str, str]:
    """Submits a copy job of ``count`` numbers once the ring holds a group of every host and
    returns (its id, its output directory on the hosts) once its peers are on all three."""
    addresses = {h.address for h in rollout.rig.hosts}
    out = f"/var/lib/onyx/rollout-{uuid.uuid4().hex[:8]}"  # the groups' state dir: onyx may write
    job_file = rollout.directory / f"job-{count}.json"
    job_file.write_text(json.dumps(_copy_job(out, count, barrier_period)))
    deadline = time.monotonic() + 120
    while _hosts((replica := onyx.replica())["sites"], set(replica["groups"])) != addresses:
        assert time.monotonic() < deadline, f"the ring never held every host's group: {replica}"
        time.sleep(1)
    job_id = onyx("job", "submit", str(job_file)).strip()
    deadline = time.monotonic() + 120
    while len(allocation := (replica := onyx.replica())["allocations"].get(job_id, {})) < 3:
        assert job_id not in replica["finished"], (
            f"job {job_id} ended before an allocation was seen (raise its count): {replica}"
        )
        assert time.monotonic() < deadline, f"job {job_id} was never allocated: {replica}"
        time.sleep(0.2)
    group_of = {p: g for g, ps in replica["group_peers"].items() for p in ps}
    assert {t: len(ps) for t, ps in allocation.items()} == {"numbers": 2, "copy": 2, "write": 2}
    held = {group_of[p] for ps in allocation.values() for p in ps}
    assert _hosts(replica["sites"], held) == addresses, (
        f"allocation {allocation}, replica {replica}"
    )
    return job_id, out


def _written(rig: Rig, out: str) -> list[int]:
    """The numbers a copy job wrote under ``out``, on every host."""
    return [
        json.loads(line)["n"]
        for host in rig.hosts
        for line in rig.ssh(host, f"cat {out}/*.jsonl 2>/dev/null || true").stdout.splitlines()
    ]


def _committed_epoch(onyx: Onyx, job_id: str) -> dict[str, int] | None:
    """The job's last committed epoch, from its commit record (None before its first)."""
    listed = json.loads(onyx("job", "list", "--json"))
    return next((j["committed_epoch"] for j in listed if j["id"] == job_id), None)


def test_a_job_runs_across_the_three_hosts(rollout: Rollout) -> None:
    """The job checkpoints every half second: its peers on the three hosts upload their snapshots
    to the object store, each through its host's gateway, and the coordinator commits epochs."""
    onyx = Onyx(rollout.rig)
    with rollout.phase("job"):
        job_id, out = _run_across_hosts(rollout, onyx, COUNT, barrier_period=0.5)
        committed = _wait(lambda: _committed_epoch(onyx, job_id), bool, 120,
                          f"job {job_id} to commit an epoch", every=0.5)  # fmt: skip
        assert "completed" in onyx("job", "wait", job_id, "--timeout", "600", timeout=660)
    written = _written(rollout.rig, out)
    print(f"job {job_id}: {len(written)} segments written on the hosts; committed {committed}")
    assert set(written) == set(range(COUNT))


# -- a partition: one host's link cut --------------------------------------------------------------
#
# The peer members run with the peer role's membership settings (heartbeats every 0.25 s,
# auto-down after 5 s unreachable, ZooKeeper sessions of 20 s). Every host runs a ZooKeeper
# server, so the host cut is one whose server follows: the other two keep the quorum and its
# leader. This machine talks to the ZooKeeper servers of the hosts left connected: the cut one
# answers nothing, or old news.
#
# A cut past the auto-down time races the leader's down (detection, a few seconds, then the
# auto-down time) against the ZooKeeper leader expiring the cut member's session. The down comes
# about 8 s after the cut (16 s seen on a machine loaded with other work, load average 8 on 2
# cores): with sessions of 10 s, what the role had, a cut that took 11 s to be downed lost the
# race; the peer role's default is now 20 s, inside ZooKeeper's 2 to 20 ticks of 2 s. The cut
# server's follower drops out of the ensemble after syncLimit * tickTime (10 s); a cut that
# outlasts it has the follower sync again after the cut, which the tests wait for.

PARTITION_COUNT = 150_000  # segments of the job a brief cut falls inside of (about 12 s)


def _zookeeper_mode(address: str) -> str:
    """What a ZooKeeper member says it is (leader, follower, standalone), from its `srvr`
    answer; "not serving" without one."""
    try:
        with socket.create_connection((address, 2181), timeout=5) as connection:
            connection.sendall(b"srvr")
            answer = b"".join(iter(lambda: connection.recv(4096), b"")).decode()
    except OSError:
        return "not serving"
    modes = [line.split(":", 1)[1].strip() for line in answer.splitlines() if "Mode:" in line]
    return modes[0] if modes else "not serving"


def _follower_host(rig: Rig) -> tuple[Host, list[Host]]:
    """The last host whose ZooKeeper member follows (once every member serves), and the
    others."""
    modes = _wait(lambda: {h.name: _zookeeper_mode(h.address) for h in rig.hosts},
                  lambda m: "not serving" not in m.values() and "leader" in m.values(), 120,
                  "every ZooKeeper member to serve")  # fmt: skip
    cut = [h for h in rig.hosts if modes[h.name] == "follower"][-1]
    return cut, [h for h in rig.hosts if h != cut]


def _store_of(onyx: Onyx, hosts: Sequence[Host]) -> api.ZooKeeperStore:
    """The log, read through the ZooKeeper members of ``hosts`` only."""
    members = ",".join(f"{h.address}:2181" for h in hosts)
    return api.connect(members, onyx.tenancy, connect_timeout=30, auth=CREDENTIALS)


def _group_on(replica: Replica, host: Host) -> str | None:
    """The group in the ring whose segments go to ``host`` (each host runs one)."""
    groups = sorted(_groups_on(replica, host))
    assert len(groups) <= 1, f"{host.name} runs groups {groups}: one expected"
    return groups[0] if groups else None


def _groups_on(replica: Replica, host: Host) -> set[str]:
    return {g for g in replica.groups if replica.sites.get(g, "").rsplit(":", 1)[0] == host.address}


def _journal(rig: Rig, host: Host, since: float, text: str) -> list[tuple[float, str]]:
    """The lines holding ``text`` that the groups of ``host`` logged at ``since`` (a Unix time)
    or later, with the journal's stamps, from the clock the hosts share with this machine."""
    grep = f"grep -F -- {shlex.quote(text)} || true"
    journal = f"journalctl -u onyx-peer.service --since @{int(since)} -o short-unix --no-pager"
    lines = rig.ssh(host, f"{journal} | {grep}", timeout=30).stdout.splitlines()
    stamped = [(float(stamp), line) for stamp, line in (x.split(maxsplit=1) for x in lines)]
    return [(stamp, line) for stamp, line in stamped if stamp >= since]


def _logged(rig: Rig, hosts: Sequence[Host], since: float, text: str) -> dict[str, float]:
    """When the groups of each of ``hosts`` first logged a line holding ``text`` since
    ``since``; hosts without one are left out."""
    found = {h.name: _journal(rig, h, since, text) for h in hosts}
    return {name: lines[0][0] for name, lines in found.items() if lines}


@contextlib.contextmanager
def _link_cut(host: Host) -> Iterator[None]:
    """``host`` cut off from every other host and from this machine: its veth on the bridge
    down, so whatever it sends or is sent is lost (its TCP connections stay open and resume
    afterwards). Restored on the way out, whatever happened."""
    subprocess.run(["ip", "link", "set", host.veth, "down"], check=True, timeout=30)
    try:
        yield
    finally:
        subprocess.run(["ip", "link", "set", host.veth, "up"], check=True, timeout=30)


def test_a_host_cut_off_for_less_than_the_auto_down_time_moves_nothing(rollout: Rollout) -> None:
    """With a job running on the three hosts, one host's link is cut until the others log its
    group unreachable (detection, well under the auto-down time and the ZooKeeper session), then
    restored: they log it reachable again, nobody downs it, the job keeps its allocation and
    writes exactly its input."""
    rig, onyx = rollout.rig, Onyx(rollout.rig)
    cut, others = _follower_host(rig)
    store = _store_of(onyx, others)
    try:
        with rollout.phase("partition healed before auto-down"):
            job_id, out = _run_across_hosts(rollout, onyx, PARTITION_COUNT)
            before = api.replica(store)
            member, version = _group_on(before, cut), before.allocation_versions[job_id]
            unreachable, start = f"member {member} is unreachable", time.time()
            with _link_cut(cut):
                said = _wait(lambda: _logged(rig, others, start, unreachable), bool, 60,
                             f"the others to log {unreachable!r}", every=0.2)  # fmt: skip
                print(f"{cut.name} cut for {time.time() - start:.1f} s; {said}")
            back = f"member {member} is reachable again"
            _wait(lambda: _logged(rig, others, start, back), lambda b: set(b) >= set(said), 60,
                  f"{sorted(said)} to log {back!r}", every=0.5)  # fmt: skip
            healed = api.replica(store)
            assert job_id in healed.jobs, (
                f"job {job_id} ended before the cut healed: raise its count"
            )
            assert member in healed.groups
            assert member not in healed.left
            assert healed.allocation_versions[job_id] == version, "the job was reallocated"
            assert not _logged(rig, rig.hosts, start, "downs member"), "a group downed another"
            assert "completed" in onyx("job", "wait", job_id, "--timeout", "600", timeout=660)
    finally:
        store.close()
    assert sorted(_written(rig, out)) == list(range(PARTITION_COUNT))


def test_a_host_cut_off_past_the_auto_down_time_is_downed_and_rejoins_fresh(
    rollout: Rollout,
) -> None:
    """One host's link is cut until the leader has downed its member: the others log it
    unreachable while it is still in the ring, the leader downs it for that (before ZooKeeper
    could: its session is 20 s) and it leaves the ring. Restored, the cut group reads
    of its own departure (or, if the cut outlasted its ZooKeeper session, of that) and joins
    again under a fresh id, and the groups on the other side are
    all still there: the cut side, alone, downed nobody."""
    rig, onyx = rollout.rig, Onyx(rollout.rig)
    cut, others = _follower_host(rig)
    store = _store_of(onyx, others)
    try:
        with rollout.phase("partition past auto-down"):
            before = _wait(lambda: api.replica(store),
                           lambda r: all(_group_on(r, h) for h in rig.hosts), 120,
                           "a group of every host in the ring")  # fmt: skip
            member, start = _group_on(before, cut), time.time()
            unreachable = f"member {member} is unreachable"
            with _link_cut(cut):
                said = _wait(lambda: _logged(rig, others, start, unreachable), bool, 60,
                             f"the others to log {unreachable!r}", every=0.2)  # fmt: skip
                assert member in api.replica(store).groups, "downed before it was unreachable"
                downed = api.follow(store, lambda r: member not in r.groups, 60)
                print(f"{cut.name} cut for {time.time() - start:.1f} s; unreachable: {said}")
            assert member in downed.left
            assert set(downed.groups) == set(before.groups) - {member}
            downs = _logged(rig, others, start, f"downs member {member}, unreachable too long")
            assert downs, "no leader downed it"
            assert min(downs.values()) >= min(said.values())
            after = _wait(lambda: api.replica(store),
                          lambda r: all(_group_on(r, h) for h in rig.hosts), 120,
                          f"a group of {cut.name} in the ring again")  # fmt: skip
        fresh = _group_on(after, cut)
        assert fresh != member
        changes, _ = _ring_changes(store, before)
        said_there = [line for _, line in _journal(rig, cut, start, "downs member")]
        assert not set(after.left) & set(before.groups) - {member}, (
            f"the cut side downed the others; {cut.name} logged {said_there}; ring changes "
            f"(hosts left, hosts joined, groups): {changes}"
        )
        assert set(after.groups) == set(before.groups) - {member} | {fresh}
        removed = f"group {member} was removed from the cluster while alive"
        expired = f"group {member}: ZooKeeper session expired"  # the cut outlasted the session
        assert _logged(rig, [cut], start, removed) or _logged(rig, [cut], start, expired), (
            f"{cut.name} logged: {[line for _, line in _journal(rig, cut, start, member)]}"
        )
    finally:
        store.close()


SHIPPED = "def tag(segment):\n    return {**segment, 'shipped': True}\n"


def test_code_shipped_with_a_job_runs_on_a_host_and_is_removed(rollout: Rollout) -> None:
    """A job whose fn is installed on no host ships with it. It is submitted on the first host
    with that host's configuration (the credentials, and its checkpoint storage: the object
    store's bucket, reached with the member's environment file) and pinned there by the host's
    tag; it runs, and its code leaves the store and the host's cache. A client without the
    credentials is refused."""
    rig, onyx = rollout.rig, Onyx(rollout.rig)
    host = rig.hosts[0]
    job_id = f"shipped-{uuid.uuid4().hex[:8]}"
    work = f"/var/lib/onyx/{job_id}"
    pinned = {"required_tags": [host.name], "n_peers": 1}
    job = {
        "workflow": [["numbers", "tag"], ["tag", "write"]],
        "catalog": [
            {"name": "numbers", "kind": "input", "plugin": "peer.plugins.memory:input",
             "params": {"count": 100}, **pinned},
            {"name": "tag", "kind": "function", "fn": "shipped_rollout:tag", **pinned},
            {"name": "write", "kind": "output", "plugin": "peer.plugins.jsonl:output",
             "params": {"path": f"{work}/out.jsonl"}, **pinned},
        ],
        "barrier_period": None,
    }  # fmt: skip
    rig.ssh(host, f"mkdir -p {work}/src/shipped_rollout && cat > {work}/src/shipped_rollout/"
                  f"__init__.py <<'EOF'\n{SHIPPED}EOF\ncat > {work}/job.json <<'EOF'\n"
                  f"{json.dumps(job)}\nEOF\nchown -R onyx: {work}")  # fmt: skip
    refused = subprocess.run(
        [sys.executable, "-m", "peer.cli", "replica", *onyx.cluster[:4]],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "refused tenancy" in refused.stderr

    with rollout.phase("shipped code"):
        submit = (f"cd {work} && set -a && . /etc/onyx/s3.env && set +a && runuser -u onyx -- "
                  f"/opt/onyx/venv/bin/onyx job submit job.json --id {job_id} --code src "
                  "--config /etc/onyx/peer.toml")  # fmt: skip
        rig.ssh(host, submit, timeout=120)
        deadline = time.monotonic() + 300
        while (status := json.loads(onyx("job", "status", job_id, "--json")))["state"] not in (
            "completed", "killed"
        ):  # fmt: skip
            if time.monotonic() > deadline:
                log = rig.ssh(host, "journalctl -u onyx-peer.service -n 80 --no-pager").stdout
                raise AssertionError(f"job {job_id} did not end: {status}\n{log}")
            time.sleep(2)
        assert status["state"] == "completed", status
        cache = "/var/lib/onyx/.onyx/code"
        stored = f"checkpoints/{onyx.tenancy}/{job_id}/code/"

        def leftovers() -> list[str]:
            find = f"find {cache} -mindepth 1 -maxdepth 1 -not -name '.*' 2>/dev/null || true"
            return rig.ssh(host, find).stdout.split() + _stored_keys(rig, host, stored)

        _wait(leftovers, lambda left: not left, 60, "the code gone from storage and the cache")
    written = [json.loads(line) for line in rig.ssh(host, f"cat {work}/out.jsonl").stdout.split()]
    assert sorted(s["n"] for s in written) == list(range(100))
    assert all(s["shipped"] for s in written)


def _stored_keys(rig: Rig, host: Host, prefix: str) -> list[str]:
    """The keys under ``prefix`` in the members' bucket, listed through the endpoint and with the
    credentials of ``host``'s member (its environment file)."""
    bucket = yaml.safe_load((GROUP_VARS / "all.yml").read_text())["onyx_s3_bucket"]
    query = f"list-type=2&prefix={urllib.parse.quote(prefix, safe='')}"
    listing = rig.ssh(
        host,
        '. /etc/onyx/s3.env && printf \'user = "%s:%s"\\n\' "$AWS_ACCESS_KEY_ID" '
        '"$AWS_SECRET_ACCESS_KEY" | curl --silent --fail --max-time 20 --config - '
        f'--aws-sigv4 aws:amz:us-east-1:s3 "$AWS_ENDPOINT_URL/{bucket}?{query}"',
        timeout=60,
    ).stdout
    return re.findall(r"<Key>([^<]+)</Key>", listing)


def test_a_second_rollout_changes_nothing(rollout: Rollout) -> None:
    with rollout.phase("site.yml (second run)"):
        output = rollout.site("site-second-run")
    recap = {host: tuple(map(int, counts)) for host, *counts in RECAP.findall(output)}
    assert set(recap) == {h.name for h in rollout.rig.hosts}, output[-3000:]
    changed = _changed_tasks(output)
    assert all(counts == (0, 0, 0) for counts in recap.values()), (
        f"changed, unreachable, failed per host: {recap}; changed tasks: {changed}"
    )


def _changed_tasks(output: str) -> list[str]:
    """'TASK [...]: host' for every task that reported a change."""
    task, changed = "", []
    for line in output.splitlines():
        if line.startswith(("TASK [", "RUNNING HANDLER [")):
            task = line.split(" *")[0]
        elif match := re.match(r"changed: \[([^]]+)\]", line):
            changed.append(f"{task}: {match.group(1)}")
    return changed


def _prometheus(rig: Rig, path: str) -> Any:
    """The data of an answer of the Prometheus on the first host (the inventory's prometheus)."""
    url = f"http://{rig.hosts[0].address}:9090{path}"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]


def _zookeeper_alerts(rig: Rig) -> dict[str, set[tuple[str, str]]]:
    """The active ZooKeeper alerts: their names, each with its (instance, state) pairs."""
    found: dict[str, set[tuple[str, str]]] = {}
    for alert in _prometheus(rig, "/api/v1/alerts")["alerts"]:
        labels = alert["labels"]
        if labels["alertname"].startswith("ZooKeeper"):
            pair = (labels.get("instance", ""), alert["state"])
            found.setdefault(labels["alertname"], set()).add(pair)
    return found


def _alertmanager_alerts(rig: Rig) -> dict[str, set[tuple[str, str]]]:
    """The alerts Alertmanager (on the first host) holds: their names, each with its (instance,
    state) pairs."""
    url = f"http://{rig.hosts[0].address}:9093/api/v2/alerts"
    with urllib.request.urlopen(url, timeout=10) as response:
        alerts = json.load(response)
    found: dict[str, set[tuple[str, str]]] = {}
    for alert in alerts:
        pair = (alert["labels"].get("instance", ""), alert["status"]["state"])
        found.setdefault(alert["labels"]["alertname"], set()).add(pair)
    return found


def _serving(rig: Rig) -> dict[str, float]:
    """zookeeper_up per member's exporter, as Prometheus last scraped it."""
    result = _prometheus(rig, "/api/v1/query?query=zookeeper_up")["result"]
    return {r["metric"]["instance"]: float(r["value"][1]) for r in result}


def test_losing_the_zookeeper_quorum_raises_its_alerts(rollout: Rollout) -> None:
    """Two of the three members stopped: the survivor no longer serves, its exporter says so,
    and Prometheus raises ZooKeeperQuorumLost and ZooKeeperServerDown for every member (pending
    until their `for`); once ZooKeeperQuorumLost fires, Prometheus sends it to Alertmanager, which
    holds it as active, routed to the default receiver; once the members are back, the alerts
    clear and the ring is whole."""
    rig, onyx = rollout.rig, Onyx(rollout.rig)
    exporters = {f"{h.address}:9141" for h in rig.hosts}
    stopped = rig.hosts[1:]
    with rollout.phase("zookeeper quorum lost and back"):
        try:
            for host in stopped:
                rig.ssh(host, "systemctl stop onyx-zookeeper.service")
            alerts = _wait(
                lambda: _zookeeper_alerts(rig),
                lambda a: (
                    "ZooKeeperQuorumLost" in a
                    and {i for i, _ in a.get("ZooKeeperServerDown", ())} == exporters
                ),
                180,
                "the ZooKeeper alerts",
            )
            assert alerts["ZooKeeperServerDown"] == {(e, "pending") for e in exporters}
            assert _serving(rig) == dict.fromkeys(exporters, 0.0)
            # ZooKeeperQuorumLost fires after its `for` (1m) and goes to Alertmanager at once.
            held = _wait(lambda: _alertmanager_alerts(rig),
                         lambda a: "ZooKeeperQuorumLost" in a, 240,
                         "ZooKeeperQuorumLost to reach Alertmanager")  # fmt: skip
            assert {state for _, state in held["ZooKeeperQuorumLost"]} == {"active"}
            assert "ZooKeeperServerDown" not in held, "a pending alert reached Alertmanager"
        finally:
            for host in stopped:
                rig.ssh(host, "systemctl start onyx-zookeeper.service")
        _wait(lambda: _serving(rig), lambda s: s == dict.fromkeys(exporters, 1.0), 180,
              "every member to serve again")  # fmt: skip
        _wait(lambda: _zookeeper_alerts(rig), lambda a: not a, 120, "the alerts to clear")
        # The groups' ZooKeeper sessions may have expired meanwhile: systemd restarts them.
        hosts = {h.address for h in rig.hosts}
        _wait(onyx.replica, lambda r: _hosts(r["sites"], set(r["groups"])) == hosts, 180,
              "a group of every host in the ring")  # fmt: skip


def test_the_zookeeper_exporter_turns_off_and_on_again(rollout: Rollout) -> None:
    rig = rollout.rig
    host = rig.hosts[-1]
    unit, script = "onyx-zookeeper-exporter.service", "/usr/local/lib/onyx/zookeeper_exporter.py"
    listening = f"ss -Hltn 'sport = :9141' | grep -c {host.address} || true"
    limit = ["--limit", host.name]
    with rollout.phase("zookeeper exporter off and on"):
        off = ["-e", "zookeeper_exporter_enabled=false", *limit]
        rollout.playbook("zookeeper-exporter-off", "zookeeper.yml", *off)
        state = rig.ssh(host, f"systemctl is-active {unit}; test -e {script}; echo $?", check=False)
        assert state.stdout.split() == ["inactive", "1"], state.stdout + state.stderr
        assert rig.ssh(host, listening).stdout.strip() == "0"
        rollout.playbook("zookeeper-exporter-on", "zookeeper.yml", *limit)
        state = rig.ssh(host, f"systemctl is-active {unit} && systemctl is-enabled {unit}")
        assert state.stdout.split() == ["active", "enabled"]
        _wait(lambda: _serving(rig).get(f"{host.address}:9141"), lambda up: up == 1.0, 120,
              "Prometheus to see the exporter serve again")  # fmt: skip


def test_the_object_store_is_not_rolled_out_without_credentials(rollout: Rollout) -> None:
    """Without S3 credentials the seaweedfs role stops in its preflight, with one message naming
    the variables, before it changes anything: the running store keeps its identities."""
    rig, host = rollout.rig, rollout.rig.hosts[0]
    before = rig.ssh(host, "sha256sum /etc/seaweedfs/s3.json").stdout
    with rollout.phase("seaweedfs refusal"):
        for name, empty in (("access", "onyx_s3_access_key"), ("secret", "onyx_s3_secret_key")):
            output = rollout.playbook(
                f"seaweedfs-no-{name}-key", "seaweedfs.yml", "-e", json.dumps({empty: ""}),
                ok=False, timeout=600,
            )  # fmt: skip
            said = " ".join(output.split())
            assert "seaweedfs_s3_access_key and seaweedfs_s3_secret_key are required" in said, (
                output[-3000:]
            )
            assert "changed=0" in said
            assert "TASK [seaweedfs : Install" not in output, "it went past its preflight"
    assert rig.ssh(host, "sha256sum /etc/seaweedfs/s3.json").stdout == before
    active = rig.ssh(host, "systemctl is-active onyx-seaweedfs-s3.service").stdout.strip()
    assert active == "active"


def test_the_grafana_role_installs_nothing_it_cannot_verify(rollout: Rollout) -> None:
    """No Grafana release is reachable here (see the module docstring), but the role's refusals
    are: without a checksum preflight stops before anything is done, and an archive whose sha256
    differs from the pinned one is removed with nothing unpacked, configured or started."""
    rig, host = rollout.rig, rollout.rig.hosts[0]
    version = "11.6.7"
    archive = rollout.directory / f"grafana-{version}.linux-amd64.tar.gz"
    payload = rollout.directory / "not-grafana"
    payload.mkdir(exist_ok=True)
    (payload / "README").write_text("not a Grafana release\n")
    subprocess.run(["tar", "-czf", str(archive), "-C", str(rollout.directory), payload.name],
                   check=True)  # fmt: skip
    inventory = write_inventory(rig, rollout.directory / "grafana", grafana=[host.name])
    settings = {
        "grafana_version": version,
        "grafana_archive_url": rig.serve(archive),
        "grafana_admin_password": uuid.uuid4().hex,
    }
    wrong = hashlib.sha256(b"another archive").hexdigest()
    leftovers = (
        f"ls -d /opt/grafana/{version} /opt/grafana/grafana-{version}.tar.gz "
        "/etc/grafana/grafana.ini /etc/systemd/system/onyx-grafana.service 2>/dev/null || true"
    )
    with rollout.phase("grafana refusals"):
        url = settings["grafana_archive_url"]
        for name, checksum, expected in (
            ("grafana-no-checksum", "", ["grafana_archive_checksum is empty or not a sha256"]),
            ("grafana-wrong-checksum", wrong,
             [f"was not installed from {url}: The checksum for", f"did not match {wrong}"]),
        ):  # fmt: skip
            extra = json.dumps({**settings, "grafana_archive_checksum": checksum})
            output = rollout.playbook(
                name, "grafana.yml", "-e", extra, inventory=inventory, ok=False
            )
            said = " ".join(output.split())
            assert all(e in said for e in expected), output[-3000:]
            assert rig.ssh(host, leftovers).stdout.split() == [], f"{name} left files behind"


def test_ssh_goes_through_the_rigs_control_sockets(rollout: Rollout) -> None:
    """Ansible and the node tests keep their SSH control sockets in the rig's directory, which the
    rig closes (ssh -O exit on each) before it powers the hosts off."""
    sockets = [p for p in rollout.rig.control_dir.iterdir() if p.is_socket()]
    assert sockets, f"no control socket in {rollout.rig.control_dir}"
    default = Path("~/.ansible/cp").expanduser()
    since = time.time() - sum(rollout.timings.values()) - 60
    stray = [p for p in default.glob("*") if p.is_socket() and p.lstat().st_mtime > since]
    assert stray == [], f"control sockets outside the rig's directory: {stray}"
