"""roles/peer: each node runs one onyx peer member, the hardened onyx-peer.service, with its
worker processes; it alone holds a ZooKeeper session, serves the node's metrics, and has joined
the one ring with all the node's virtual peers; it keeps its checkpoints in the object store and
runs its Spark work on the Spark master when the inventory has them. Nothing of the per-core
onyx-peer@<i> groups of earlier releases is left."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from collections import Counter
from typing import Any

import pytest
from packaging.version import Version

from tests.infra.nodes.conftest import (
    Cluster,
    Node,
    assert_hardened,
    assert_listens_on,
    assert_service_up,
    assert_system_user,
    file_text,
    http_get,
    metric_value,
    poll,
    url_host,
)

pytestmark = pytest.mark.role_group("peers")

# What the template unit says in [Service] (deploy conventions, and the peer role's extras).
UNIT_DIRECTIVES = [
    "Type=notify",
    "NotifyAccess=main",
    "NoNewPrivileges=yes",
    "ProtectSystem=strict",
    "ProtectHome=yes",
    "PrivateTmp=yes",
    "PrivateDevices=no",
    "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes",
    "ProtectControlGroups=yes",
    "RestrictSUIDSGID=yes",
    "LockPersonality=yes",
    "CapabilityBoundingSet=",
    "RestrictNamespaces=yes",
    "RestrictRealtime=yes",
    "SystemCallArchitectures=native",
    "ProtectKernelLogs=yes",
    "ProtectHostname=yes",
    "Restart=on-failure",
    "RestartSec=2",
    "KillMode=mixed",
]


def onyx(node: Node) -> str:
    return f"{node.var('peer_venv')}/bin/onyx"


def config_file(node: Node) -> str:
    return f"{node.var('peer_config_dir')}/peer.toml"


def replica(node: Node) -> dict[str, Any] | str:
    """The cluster's replica as `onyx replica --json --config` on the node's member's
    configuration prints it (the command's error output when it fails)."""
    result = node.host.run("%s replica --json --config %s", onyx(node), config_file(node))
    if result.rc != 0:
        return f"exit {result.rc}: {result.stderr.strip()[-2000:]}"
    try:
        return json.loads(result.stdout)
    except ValueError:
        return f"not JSON: {result.stdout[:2000]}"


def main_pid(node: Node) -> int:
    return int(
        node.host.check_output("systemctl show -p MainPID --value %s", node.var("__peer_unit"))
    )


def children(node: Node, parent: int) -> dict[int, str]:
    """The processes ``parent`` started, each with its command line."""
    statuses = node.host.run(
        f"grep -lE '^PPid:[[:space:]]+{parent}$' /proc/[0-9]*/status 2>/dev/null || true"
    ).stdout.split()
    found = {}
    for status in statuses:
        pid = int(status.split("/")[2])
        line = node.host.run("tr '\\0' ' ' < /proc/%s/cmdline", str(pid)).stdout.strip()
        if line:
            found[pid] = line
    return found


def zookeeper_clients(node: Node) -> set[int]:
    """The processes holding a TCP connection to a ZooKeeper server's client port."""
    lines = node.host.check_output("ss -Htnp state established '( dport = :2181 )'")
    return {int(pid) for pid in re.findall(r"pid=([0-9]+)", lines)}


def test_installed(node: Node):
    for package in [*node.var("peer_apt_packages"), *node.var("__peer_module_packages")]:
        assert node.host.package(package).is_installed, package
    assert_system_user(node.host, node.var("__peer_user"), node.var("__peer_group"))
    version = node.host.check_output("%s --version", onyx(node))
    assert Version(version.split()[-1]) == Version(node.var("peer_version")), version
    # pyspark (the spark extra) only where the node runs Spark work.
    python = f"{node.var('peer_venv')}/bin/python"
    spark = node.host.run("%s -c %s", python, "import pyspark").rc == 0
    assert spark == bool(node.var("peer_spark_enabled")), f"pyspark installed: {spark}"


def test_configuration(node: Node):
    path = config_file(node)
    file = node.host.file(path)
    assert (file.user, file.group, file.mode) == ("root", node.var("__peer_group"), 0o640)
    doc = tomllib.loads(file_text(node.host, path))
    assert doc["zookeeper"] == node.var("peer_zookeeper_connect")
    assert doc["tenancy"] == node.var("peer_tenancy")
    assert doc["checkpoints"] == node.var("peer_checkpoints")
    assert doc.get("zookeeper_auth", "") == node.var("peer_zookeeper_auth")
    member = doc["peer"]["start"]
    assert member["vpeers"] == int(node.var("peer_vpeers"))
    assert member["workers"] == int(node.var("peer_workers"))
    assert member["aeron_dir"] == node.var("peer_aeron_dir")
    assert member["bind"] == node.var("peer_bind")
    assert member["spark_master"] == node.var("peer_spark_master")
    assert member["spark_conf"] == list(node.var("peer_spark_conf"))
    assert member["metrics_port"] == int(node.var("peer_metrics_port"))
    assert member["metrics_address"] == node.var("peer_metrics_address")
    # The installed onyx reads every value from the file.
    shown = node.host.check_output("%s config show --json peer start --config %s", onyx(node), path)
    options = json.loads(shown)["peer start"]
    assert options["vpeers"]["source"] == "file", options["vpeers"]
    assert options["workers"]["value"] == int(node.var("peer_workers"))
    assert options["metrics_port"]["value"] == int(node.var("peer_metrics_port"))
    if node.var("peer_zookeeper_auth"):
        user = node.var("peer_zookeeper_auth").partition(":")[0]
        assert options["zookeeper_auth"]["value"] == f"{user}:***", "a password shown"
    # Nothing of earlier releases is left: the groups' files, environment files, the wrapper.
    config_dir = node.var("peer_config_dir")
    left = node.host.run("ls %s", config_dir).stdout.split()
    assert [name for name in left if re.fullmatch(r"peer-[0-9]+\.toml|peer.*\.env", name)] == []
    assert not node.host.file(f"/etc/systemd/system/{node.var('__peer_retired_unit')}").exists
    assert not node.host.file(node.var("__peer_retired_command")).exists
    state_dir = node.host.file(node.var("peer_state_dir"))
    assert state_dir.is_directory
    assert state_dir.user == node.var("__peer_user")


def test_unit_file_is_hardened(node: Node):
    unit_file = file_text(node.host, f"/etc/systemd/system/{node.var('__peer_unit')}")
    lines = {line.strip() for line in unit_file.splitlines()}
    assert [d for d in UNIT_DIRECTIVES if d not in lines] == []
    assert f"ExecStart={onyx(node)} peer start --config {config_file(node)}" in lines
    assert f"User={node.var('__peer_user')}" in lines
    assert f"Group={node.var('__peer_group')}" in lines
    assert f"TimeoutStartSec={node.var('__peer_start_timeout')}" in lines
    driver = node.var("peer_media_driver_service")
    if driver:
        assert f"Requires={driver}" in lines


def test_the_member_runs_hardened_and_no_group_of_earlier_releases(node: Node):
    unit = node.var("__peer_unit")
    assert_service_up(node.host, unit)
    assert_hardened(
        node.host,
        unit,
        node.var("__peer_user"),
        node.var("__peer_group"),
        private_devices=False,
        read_write=node.var("__peer_write_paths"),
    )
    loaded = node.host.run("systemctl list-units --all --plain --no-legend 'onyx-peer@*'").stdout
    assert loaded.strip() == "", f"units of the per-core groups are still loaded: {loaded}"
    enabled = node.host.run("ls /etc/systemd/system/multi-user.target.wants").stdout.split()
    assert [name for name in enabled if name.startswith("onyx-peer@")] == []


def test_one_process_holds_the_zookeeper_session_and_the_workers_run_beside_it(node: Node):
    """The member's main process is the node's only onyx process with a ZooKeeper connection;
    its workers (peer_workers of them) are its children and hold none."""
    main = main_pid(node)
    started = children(node, main)
    workers = {pid for pid, line in started.items() if "spawn_main" in line}
    assert len(workers) == int(node.var("peer_workers")), f"member {main} started {started}"
    clients = zookeeper_clients(node) & {main, *started}
    assert clients == {main}, f"ZooKeeper clients {clients}; member {main} started {started}"


def test_the_member_is_in_the_ring(node: Node):
    address, port = node.var("peer_metrics_address"), int(node.var("peer_metrics_port"))
    assert_listens_on(node.host, address, port)
    url = f"http://{url_host(address)}:{port}/metrics"

    def member() -> float | None:
        return metric_value(http_get(node.host, url).body.splitlines(), "onyx_ring_member")

    assert poll(member, lambda v: v == 1.0) == 1.0, f"onyx_ring_member ({url})"
    ready = http_get(node.host, url.removesuffix("/metrics") + "/readyz")
    assert ready.status == 200, f"/readyz: {ready.status} {ready.body}"
    assert ready.json()["ready"] is True


def test_the_ring_holds_one_member_per_node_with_all_its_virtual_peers(
    node: Node, cluster: Cluster
):
    nodes = cluster.group("peers")
    total = int(node.var("onyx_peer_members_total"))
    assert total == len(nodes)

    def complete(r: dict[str, Any] | str) -> bool:
        return isinstance(r, dict) and len(r["groups"]) == total

    current = poll(lambda: replica(node), complete)
    assert isinstance(current, dict), current
    assert len(current["groups"]) == total, current["groups"]
    # Each node's member is at that node's address, with the node's virtual peers.
    sites = Counter(current["sites"].get(g, "?").rpartition(":")[0] for g in current["groups"])
    assert sites == Counter({n.var("peer_bind"): 1 for n in nodes})
    peers = {
        current["sites"][g].rpartition(":")[0]: len(current["group_peers"].get(g, []))
        for g in current["groups"]
    }
    assert peers == {n.var("peer_bind"): int(n.var("peer_vpeers")) for n in nodes}


def test_the_member_uses_the_object_store_and_the_spark_cluster(node: Node, cluster: Cluster):
    """With a seaweedfs group, the member keeps its checkpoints in the store's bucket and has the
    endpoint (its host's own gateway, else the first store host's) and the credentials in its
    environment, and its workers too, from a file only root and the service user read; without
    one there is no such file. With a spark_master group it runs its Spark work there."""
    doc = tomllib.loads(file_text(node.host, config_file(node)))
    env_file = node.var("__peer_s3_env_file")
    stores = cluster.group("seaweedfs")
    if stores:
        bucket = node.var("seaweedfs_bucket")
        assert doc["checkpoints"] == f"s3://{bucket}/checkpoints"
        store = next((s for s in stores if s.name == node.name), stores[0])
        endpoint = f"http://{store.var('seaweedfs_address')}:{store.var('seaweedfs_s3_port')}"
        expected = {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": store.var("seaweedfs_s3_access_key"),
            "AWS_SECRET_ACCESS_KEY": store.var("seaweedfs_s3_secret_key"),
        }
        file = node.host.file(env_file)
        user, group = node.var("__peer_user"), node.var("__peer_group")
        assert (file.user, file.group, file.mode) == (user, group, 0o600)
        lines = [line for line in file_text(node.host, env_file).splitlines() if "=" in line]
        assert dict(line.split("=", 1) for line in lines if not line.startswith("#")) == expected
        unit = node.var("__peer_unit")
        files = node.host.check_output("systemctl show -p EnvironmentFiles --value %s", unit)
        assert files.split()[0] == env_file, files
        # The member and every worker run with them.
        main = main_pid(node)
        for pid in [main, *children(node, main)]:
            environ = node.host.run("tr '\\0' '\\n' < /proc/%s/environ", str(pid)).stdout
            found = dict(line.split("=", 1) for line in environ.splitlines() if "=" in line)
            assert {k: found.get(k) for k in expected} == expected, f"process {pid}"
        # The endpoint answers the member's credentials for its bucket.
        config = shlex.quote(f'user = "{expected["AWS_ACCESS_KEY_ID"]}:'
                             f'{expected["AWS_SECRET_ACCESS_KEY"]}"')  # fmt: skip
        status = node.host.check_output(
            f"printf '%s\\n' {config} | curl --silent --output /dev/null --max-time 20 "
            f"--write-out '%{{http_code}}' --config - --aws-sigv4 aws:amz:us-east-1:s3 --head "
            f"{shlex.quote(endpoint + '/' + bucket)}"
        )
        assert status == "200", f"{endpoint}/{bucket}: HTTP {status}"
    else:
        assert not node.host.file(env_file).exists
        assert not str(doc["checkpoints"]).startswith("s3://")
    masters = cluster.group("spark_master")
    if masters:
        master = masters[0]
        expected_master = f"spark://{master.address}:{master.var('spark_master_port')}"
    else:
        expected_master = "local[*]"
    assert doc["peer"]["start"]["spark_master"] == expected_master
