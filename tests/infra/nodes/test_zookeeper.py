"""roles/zookeeper: the ensemble runs as onyx-zookeeper on every member and serves as one quorum."""

from __future__ import annotations

import json
import re

import pytest

from tests.infra.nodes.conftest import (
    Cluster,
    Node,
    assert_hardened,
    assert_listens_on,
    assert_service_up,
    assert_system_user,
    file_text,
    four_letter_word,
    http_get,
    listening_addresses,
    metric_value,
    poll,
)

pytestmark = pytest.mark.role_group("zookeeper")

# Written through one member with the peers' kazoo, read back through every member: an ephemeral
# znode, so that nothing stays behind even when the script dies half way.
_WRITE_AND_READ = """
import json, sys, uuid
from kazoo.client import KazooClient
writer, readers = sys.argv[1], sys.argv[2].split(",")
path, value = "/onyx-testinfra-" + uuid.uuid4().hex, uuid.uuid4().hex.encode()
seen = {}
client = KazooClient(hosts=writer, timeout=10)
client.start(timeout=30)
try:
    client.create(path, value, ephemeral=True)
    for reader in readers:
        other = KazooClient(hosts=reader, timeout=10)
        try:
            other.start(timeout=30)
            other.sync(path)
            data, _ = other.get(path)
            seen[reader] = "read" if data == value else "read %r, wrote %r" % (data, value)
        except Exception as error:
            seen[reader] = repr(error)
        finally:
            other.stop()
            other.close()
    client.delete(path)
finally:
    client.stop()
    client.close()
print(json.dumps(seen))
"""


def client_address(node: Node) -> str:
    return f"{node.var('zookeeper_listen_address')}:{node.var('zookeeper_client_port')}"


def srvr_mode(node: Node, asker: Node | None = None) -> str:
    """This member's Mode (leader, follower, standalone) from `srvr`, asked from ``asker``."""
    answer = four_letter_word(
        (asker or node).host,
        node.var("zookeeper_listen_address"),
        node.var("zookeeper_client_port"),
        "srvr",
    )
    match = re.search(r"^Mode: (\S+)", answer, re.MULTILINE)
    return match.group(1) if match else answer.strip() or "no answer"


def test_packages_and_user(node: Node):
    for package in node.var("zookeeper_packages"):
        assert node.host.package(package).is_installed, package
    assert_system_user(
        node.host, node.var("zookeeper_system_user"), node.var("zookeeper_system_group")
    )


def test_configuration(node: Node, cluster: Cluster):
    conf_dir = node.var("zookeeper_conf_dir")
    settings = dict(
        line.split("=", 1)
        for line in file_text(node.host, f"{conf_dir}/zoo.cfg").splitlines()
        if "=" in line and not line.startswith("#")
    )
    expected = {
        "clientPort": str(node.var("zookeeper_client_port")),
        "clientPortAddress": node.var("zookeeper_listen_address"),
        "dataDir": node.var("zookeeper_data_dir"),
        "admin.enableServer": "false",
        "4lw.commands.whitelist": node.var("zookeeper_4lw_commands_whitelist"),
    }
    assert {k: settings.get(k) for k in expected} == expected
    quorum, election = node.var("zookeeper_quorum_port"), node.var("zookeeper_election_port")
    ensemble = {
        f"server.{int(m.var('zookeeper_id'))}": f"{m.address}:{quorum}:{election}"
        for m in cluster.group(node.var("zookeeper_group"))
    }
    assert {k: v for k, v in settings.items() if k.startswith("server.")} == ensemble
    assert node.host.file(f"{conf_dir}/log4j.properties").is_file

    data_dir = node.host.file(node.var("zookeeper_data_dir"))
    assert data_dir.is_directory
    assert data_dir.user == node.var("zookeeper_system_user")
    myid = file_text(node.host, f"{data_dir.path}/myid").strip()
    assert myid == str(int(node.var("zookeeper_id")))
    assert node.host.file(node.var("zookeeper_log_dir")).is_directory


def test_service_runs_hardened(node: Node):
    unit = f"{node.var('zookeeper_service_name')}.service"
    assert node.host.file(f"/etc/systemd/system/{unit}").is_file
    assert_service_up(node.host, unit)
    assert_hardened(
        node.host,
        unit,
        node.var("zookeeper_system_user"),
        node.var("zookeeper_system_group"),
        read_write=[node.var("zookeeper_data_dir"), node.var("zookeeper_log_dir")],
    )


def test_ports(node: Node, cluster: Cluster):
    address = node.var("zookeeper_listen_address")
    assert_listens_on(node.host, address, node.var("zookeeper_client_port"))
    if len(cluster.group(node.var("zookeeper_group"))) > 1:
        assert_listens_on(node.host, node.address, node.var("zookeeper_election_port"))
    if not node.var("zookeeper_metrics_provider_enabled"):
        # The distribution's package has no metrics provider: the role leaves it off.
        assert not listening_addresses(node.host, node.var("zookeeper_metrics_provider_port"))


def test_exporter_reports_the_member_serving_in_its_mode(node: Node):
    if not node.var("zookeeper_exporter_enabled"):
        pytest.skip("the exporter is turned off on this member")
    unit = f"{node.var('zookeeper_exporter_service_name')}.service"
    assert_service_up(node.host, unit)
    user, group = node.var("zookeeper_exporter_user"), node.var("zookeeper_exporter_group")
    assert_system_user(node.host, user, group)
    assert_hardened(node.host, unit, user, group)
    address, port = node.var("zookeeper_listen_address"), node.var("zookeeper_exporter_port")
    assert_listens_on(node.host, address, port)

    def scrape() -> list[str]:
        response = http_get(node.host, f"http://{address}:{port}/metrics")
        assert response.status == 200, response.body[:2000]
        return response.body.splitlines()

    lines = poll(scrape, lambda ls: metric_value(ls, "zookeeper_up") == 1)
    assert metric_value(lines, "zookeeper_up") == 1
    mode = srvr_mode(node)
    assert metric_value(lines, f'zookeeper_server_state{{state="{mode}"}}') == 1
    assert (metric_value(lines, "zookeeper_znode_count") or 0) >= 1


def test_member_serves_its_role_in_the_ensemble(node: Node, cluster: Cluster):
    whitelist = node.var("zookeeper_4lw_commands_whitelist").split(",")
    assert "srvr" in whitelist, "the infra tests ask members for their mode with srvr"
    if "ruok" in whitelist:
        answer = four_letter_word(
            node.host,
            node.var("zookeeper_listen_address"),
            node.var("zookeeper_client_port"),
            "ruok",
        )
        assert answer == "imok"
    single = len(cluster.group(node.var("zookeeper_group"))) == 1
    expected = {"standalone"} if single else {"leader", "follower"}
    mode = poll(lambda: srvr_mode(node), lambda m: m in expected)
    assert mode in expected


def test_write_through_this_member_is_read_on_every_member(node: Node, cluster: Cluster):
    members = cluster.group(node.var("zookeeper_group"))
    clients = [n for n in [node, *cluster.group("peers")] if "peers" in n.groups]
    if not clients:
        pytest.fail("no host of the group peers has the onyx virtualenv (kazoo) to write with")
    client = clients[0]
    python = f"{client.var('peer_venv')}/bin/python"
    readers = ",".join(client_address(m) for m in members)
    result = client.host.run(
        "%s -c %s %s %s", python, _WRITE_AND_READ, client_address(node), readers
    )
    assert result.rc == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == {client_address(m): "read" for m in members}


def test_ensemble_has_exactly_one_leader(cluster: Cluster):
    members = cluster.group("zookeeper")
    assert members, "the inventory's group zookeeper has no hosts"
    if len(members) == 1:
        assert srvr_mode(members[0]) == "standalone"
        return

    def modes() -> dict[str, str]:
        return {m.name: srvr_mode(m, asker=members[0]) for m in members}

    seen = poll(
        modes,
        lambda ms: sorted(ms.values()) == ["follower"] * (len(members) - 1) + ["leader"],
    )
    assert sorted(seen.values()) == ["follower"] * (len(members) - 1) + ["leader"], seen
