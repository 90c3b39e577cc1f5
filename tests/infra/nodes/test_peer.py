"""roles/peer: the onyx peer groups of each node run as hardened onyx-peer@<i> instances, serve
their metrics, and have all joined one ring."""

from __future__ import annotations

import json
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


def instances(node: Node) -> list[int]:
    return list(range(int(node.var("peer_groups"))))


def metrics_port(node: Node, i: int) -> int:
    return int(node.var("peer_metrics_port_base")) + i


def onyx(node: Node) -> str:
    return f"{node.var('peer_venv')}/bin/onyx"


def config_file(node: Node, i: int) -> str:
    return f"{node.var('peer_config_dir')}/peer-{i}.toml"


def replica(node: Node) -> dict[str, Any] | str:
    """The cluster's replica as `onyx replica --json --config` on the node's first group's
    configuration prints it (the command's error output when it fails)."""
    result = node.host.run("%s replica --json --config %s", onyx(node), config_file(node, 0))
    if result.rc != 0:
        return f"exit {result.rc}: {result.stderr.strip()[-2000:]}"
    try:
        return json.loads(result.stdout)
    except ValueError:
        return f"not JSON: {result.stdout[:2000]}"


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
    for i in instances(node):
        path = config_file(node, i)
        file = node.host.file(path)
        assert (file.user, file.group, file.mode) == ("root", node.var("__peer_group"), 0o640)
        doc = tomllib.loads(file_text(node.host, path))
        assert doc["zookeeper"] == node.var("peer_zookeeper_connect")
        assert doc["tenancy"] == node.var("peer_tenancy")
        assert doc["checkpoints"] == node.var("peer_checkpoints")
        assert doc.get("zookeeper_auth", "") == node.var("peer_zookeeper_auth")
        group = doc["peer"]["start"]
        assert group["vpeers"] == int(node.var("peer_vpeers"))
        assert group["aeron_dir"] == node.var("peer_aeron_dir")
        assert group["bind"] == node.var("peer_bind")
        assert group["spark_master"] == node.var("peer_spark_master")
        assert group["spark_conf"] == list(node.var("peer_spark_conf"))
        assert group["metrics_port"] == metrics_port(node, i)
        assert group["metrics_address"] == node.var("peer_metrics_address")
        # The installed onyx reads every value from the file.
        shown = node.host.check_output(
            "%s config show --json peer start --config %s", onyx(node), path
        )
        options = json.loads(shown)["peer start"]
        assert options["vpeers"]["source"] == "file", options["vpeers"]
        assert options["metrics_port"]["value"] == metrics_port(node, i)
        if node.var("peer_zookeeper_auth"):
            user = node.var("peer_zookeeper_auth").partition(":")[0]
            assert options["zookeeper_auth"]["value"] == f"{user}:***", "a password shown"
    # No group above peer_groups is left configured, and nothing of earlier releases is left.
    config_dir = node.var("peer_config_dir")
    assert not node.host.file(config_file(node, len(instances(node)))).exists
    assert not node.host.file(f"{config_dir}/peer.env").exists
    assert not node.host.file(node.var("__peer_retired_command")).exists
    state_dir = node.host.file(node.var("peer_state_dir"))
    assert state_dir.is_directory
    assert state_dir.user == node.var("__peer_user")


def test_unit_file_is_hardened(node: Node):
    unit_file = file_text(node.host, f"/etc/systemd/system/{node.var('__peer_unit')}")
    lines = {line.strip() for line in unit_file.splitlines()}
    assert [d for d in UNIT_DIRECTIVES if d not in lines] == []
    configured = f"{node.var('peer_config_dir')}/peer-%i.toml"
    assert f"ExecStart={onyx(node)} peer start --config {configured}" in lines
    assert f"User={node.var('__peer_user')}" in lines
    assert f"Group={node.var('__peer_group')}" in lines
    assert f"TimeoutStartSec={node.var('__peer_start_timeout')}" in lines
    driver = node.var("peer_media_driver_service")
    if driver:
        assert f"Requires={driver}" in lines


def test_groups_run_hardened(node: Node):
    for i in instances(node):
        unit = f"onyx-peer@{i}.service"
        assert_service_up(node.host, unit)
        assert_hardened(
            node.host,
            unit,
            node.var("__peer_user"),
            node.var("__peer_group"),
            private_devices=False,
            read_write=node.var("__peer_write_paths"),
        )
    # An instance above peer_groups is neither running nor enabled.
    extra = f"onyx-peer@{len(instances(node))}.service"
    assert node.host.run("systemctl is-active %s", extra).stdout.strip() != "active"
    assert node.host.run("systemctl is-enabled %s", extra).stdout.strip() != "enabled"


def test_groups_are_ring_members(node: Node):
    address = node.var("peer_metrics_address")
    for i in instances(node):
        assert_listens_on(node.host, address, metrics_port(node, i))
        url = f"http://{url_host(address)}:{metrics_port(node, i)}/metrics"

        def member(url: str = url) -> float | None:
            return metric_value(http_get(node.host, url).body.splitlines(), "onyx_ring_member")

        assert poll(member, lambda v: v == 1.0) == 1.0, f"onyx_ring_member of group {i} ({url})"
        ready = http_get(node.host, url.removesuffix("/metrics") + "/readyz")
        assert ready.status == 200, f"/readyz of group {i}: {ready.status} {ready.body}"
        assert ready.json()["ready"] is True


def test_ring_holds_every_peer_group(node: Node, cluster: Cluster):
    total = int(node.var("onyx_peer_groups_total"))
    expected = sum(int(n.var("peer_groups")) for n in cluster.group("peers"))
    assert total == expected

    def complete(r: dict[str, Any] | str) -> bool:
        return isinstance(r, dict) and len(r["groups"]) == total

    current = poll(lambda: replica(node), complete)
    assert isinstance(current, dict), current
    assert len(current["groups"]) == total, current["groups"]
    # Each node's groups receive segments on that node's address.
    sites = Counter(current["sites"].get(g, "?").rpartition(":")[0] for g in current["groups"])
    assert sites == Counter(
        {n.var("peer_bind"): int(n.var("peer_groups")) for n in cluster.group("peers")}
    )
