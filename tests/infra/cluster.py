"""The cluster the rollout tests deploy to the rig's three test hosts (tests/infra/rig.py) and
what they use to look at it: the inventory (``write_inventory``), the playbook runner with its
timed phases (``Rollout``), the onyx CLI against the cluster (``Onyx``), the log's ring, the hosts'
journals, a host's link cut, and the members' bucket on the object store.

The inventory sits next to a copy of deploy/inventories/example/group_vars (the computed onyx_*
settings). What the test hosts need differently is set as host variables, since those group_vars
take precedence over an inventory file's group variables. Logs of the playbooks go to the rig's
log directory (kept in /var/cache/onyx-test-hosts/last-run-logs after teardown).
"""

from __future__ import annotations

import contextlib
import dataclasses
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
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from peer import api
from peer.log import subscriber
from peer.log.apply import apply_entry
from peer.log.replica import Replica
from tests.infra.rig import REPO, Host, Rig

DEPLOY = REPO / "deploy"
GROUP_VARS = DEPLOY / "inventories/example/group_vars"
BIN = Path(sys.executable).parent
CREDENTIALS = "onyx-rollout:rollout-secret"  # the tenancy's ZooKeeper digest credentials
S3_CREDENTIALS = ("onyx-rollout-key", "rollout-s3-secret")  # the object store's keys
SPARK_TAG = "spark"  # the tag of the members that run Spark work


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
            # stdin is not inherited: a process run earlier may have left the shared descriptor
            # non-blocking, and Ansible refuses to start on one.
            result = subprocess.run(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=self.env, cwd=REPO, timeout=timeout, check=False,
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
    # host's member offers its name as a tag, and those with Spark the tag "spark" (SPARK_TAG),
    # which a job's Spark tasks require. The first host has a peer more.
    peers = {
        n: dict(peer_vars, peer_spark_enabled=n != names[-1],
                peer_tags=[n] if n == names[-1] else [n, SPARK_TAG],
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


OLD_UNIT = """[Unit]
Description=a peer group of an earlier release (a stand-in)

[Service]
ExecStart=/bin/sleep infinity

[Install]
WantedBy=multi-user.target
"""


def run_groups_of_an_earlier_release(rig: Rig, host: Host) -> None:
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


class Onyx:
    """The onyx CLI of this checkout, against the rolled-out cluster."""

    def __init__(self, rig: Rig) -> None:
        settings = yaml.safe_load((GROUP_VARS / "all.yml").read_text())
        self.tenancy, self.bucket = settings["onyx_tenancy"], settings["onyx_s3_bucket"]
        self.zookeeper = ",".join(f"{h.address}:2181" for h in rig.hosts)
        self.cluster = ["--zookeeper", self.zookeeper, "--tenancy", self.tenancy,
                        "--zookeeper-auth", CREDENTIALS]  # fmt: skip
        self.checkpoints = f"s3://{self.bucket}/checkpoints"  # the members' (onyx_checkpoints)
        access_key, secret_key = S3_CREDENTIALS
        self.store_env = {  # the object store through the first host's gateway, as s3.env has it
            "AWS_ENDPOINT_URL": f"http://{rig.hosts[0].address}:8333",
            "AWS_ACCESS_KEY_ID": access_key,
            "AWS_SECRET_ACCESS_KEY": secret_key,
        }

    def __call__(self, *args: str, timeout: float = 60) -> str:
        command = [sys.executable, "-m", "peer.cli", *args, *self.cluster]
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False,
            env={**os.environ, **self.store_env},
        )  # fmt: skip
        assert result.returncode == 0, f"onyx {shlex.join(args)}: {result.stdout}{result.stderr}"
        return result.stdout

    def replica(self) -> dict[str, Any]:
        return json.loads(self("replica", "--json"))


def hosts_of(sites: Mapping[str, str], groups: set[str]) -> set[str]:
    """The hosts of these groups, from their sites ("?" for a group without one)."""
    return {sites.get(g, "?:").rsplit(":", 1)[0] for g in groups}


def wait_until[T](
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


def ring_changes(store: api.ZooKeeperStore, start: Replica) -> tuple[list[tuple], Replica]:
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
                changes.append((hosts_of(replica.sites, left), joined, len(after.groups)))
            replica = after
    return [(left, hosts_of(replica.sites, joined), n) for left, joined, n in changes], replica


def zookeeper_mode(address: str) -> str:
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


def follower_host(rig: Rig) -> tuple[Host, list[Host]]:
    """The last host whose ZooKeeper member follows (once every member serves), and the
    others."""
    modes = wait_until(lambda: {h.name: zookeeper_mode(h.address) for h in rig.hosts},
                       lambda m: "not serving" not in m.values() and "leader" in m.values(), 120,
                       "every ZooKeeper member to serve")  # fmt: skip
    cut = [h for h in rig.hosts if modes[h.name] == "follower"][-1]
    return cut, [h for h in rig.hosts if h != cut]


def store_of(onyx: Onyx, hosts: Sequence[Host]) -> api.ZooKeeperStore:
    """The log, read through the ZooKeeper members of ``hosts`` only."""
    members = ",".join(f"{h.address}:2181" for h in hosts)
    return api.connect(members, onyx.tenancy, connect_timeout=30, auth=CREDENTIALS)


def group_on(replica: Replica, host: Host) -> str | None:
    """The group in the ring whose segments go to ``host`` (each host runs one)."""
    groups = sorted(groups_on(replica, host))
    assert len(groups) <= 1, f"{host.name} runs groups {groups}: one expected"
    return groups[0] if groups else None


def groups_on(replica: Replica, host: Host) -> set[str]:
    return {g for g in replica.groups if replica.sites.get(g, "").rsplit(":", 1)[0] == host.address}


def journal(rig: Rig, host: Host, since: float, text: str) -> list[tuple[float, str]]:
    """The lines holding ``text`` that the groups of ``host`` logged at ``since`` (a Unix time)
    or later, with the journal's stamps, from the clock the hosts share with this machine."""
    grep = f"grep -F -- {shlex.quote(text)} || true"
    read = f"journalctl -u onyx-peer.service --since @{int(since)} -o short-unix --no-pager"
    lines = rig.ssh(host, f"{read} | {grep}", timeout=30).stdout.splitlines()
    stamped = [(float(stamp), line) for stamp, line in (x.split(maxsplit=1) for x in lines)]
    return [(stamp, line) for stamp, line in stamped if stamp >= since]


def logged(rig: Rig, hosts: Sequence[Host], since: float, text: str) -> dict[str, float]:
    """When the groups of each of ``hosts`` first logged a line holding ``text`` since
    ``since``; hosts without one are left out."""
    found = {h.name: journal(rig, h, since, text) for h in hosts}
    return {name: lines[0][0] for name, lines in found.items() if lines}


@contextlib.contextmanager
def link_cut(host: Host) -> Iterator[None]:
    """``host`` cut off from every other host and from this machine: its veth on the bridge
    down, so whatever it sends or is sent is lost (its TCP connections stay open and resume
    afterwards). Restored on the way out, whatever happened."""
    subprocess.run(["ip", "link", "set", host.veth, "down"], check=True, timeout=30)
    try:
        yield
    finally:
        subprocess.run(["ip", "link", "set", host.veth, "up"], check=True, timeout=30)


def stored_keys(rig: Rig, host: Host, prefix: str) -> list[str]:
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
