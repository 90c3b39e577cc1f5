"""roles/seaweedfs: the object store. Every host of the group runs a master, a volume server, a
filer and an S3 gateway as hardened units of the seaweedfs user, on the inventory's ports; the
masters have one leader and every volume server registered with it; the gateway answers the
inventory's credentials and refuses others; the members' bucket exists; a written object lands on
as many hosts as the replication asks for, and every filer lists it; the credential file is the
service user's alone."""

from __future__ import annotations

import json
import re
import shlex
import uuid
from typing import Any

import pytest

from tests.infra.nodes.conftest import (
    Cluster,
    Node,
    assert_hardened,
    assert_service_up,
    assert_system_user,
    file_text,
    http_get,
    listening_addresses,
    poll,
)

pytestmark = pytest.mark.role_group("seaweedfs")

COMPONENTS = ("master", "volume", "filer", "s3")
GRPC_OFFSET = 10000


def unit(component: str) -> str:
    return f"onyx-seaweedfs-{component}.service"


def address(node: Node) -> str:
    return str(node.var("seaweedfs_address"))


def port(node: Node, component: str) -> int:
    return int(node.var(f"seaweedfs_{component}_port"))


def s3_request(
    node: Node, method: str, path: str, key: str, secret: str, *, data: str | None = None
) -> tuple[int, str]:
    """An S3 request to the node's gateway signed (AWS signature v4) by curl with these
    credentials, given on curl's standard input: the HTTP status and the body."""
    url = f"http://{address(node)}:{port(node, 's3')}/{path}"
    upload = f"--data-binary {shlex.quote(data)}" if data is not None else ""
    config = shlex.quote(f'user = "{key}:{secret}"')
    command = (
        f"printf '%s\\n' {config} | curl --silent --max-time 20 --config - "
        f"--aws-sigv4 aws:amz:us-east-1:s3 --request {method} {upload} "
        f"--write-out '\\n%{{http_code}}' {shlex.quote(url)}"
    )
    result = node.host.run(command)
    body, _, status = result.stdout.rpartition("\n")
    return int(status or 0), body


def credentials(node: Node) -> tuple[str, str]:
    return str(node.var("seaweedfs_s3_access_key")), str(node.var("seaweedfs_s3_secret_key"))


def master_json(node: Node, path: str) -> dict[str, Any]:
    response = http_get(node.host, f"http://{address(node)}:{port(node, 'master')}{path}")
    return response.json() if response.status == 200 else {"status": response.status}


def test_installed(node: Node):
    for package in [*node.var("seaweedfs_apt_packages"), *node.var("__seaweedfs_module_packages")]:
        assert node.host.package(package).is_installed, package
    assert_system_user(node.host, node.var("__seaweedfs_user"), node.var("__seaweedfs_group"))
    version = node.host.check_output("%s version", node.var("__seaweedfs_weed"))
    assert f" {node.var('seaweedfs_version')} " in version.splitlines()[0], version


@pytest.mark.parametrize("component", COMPONENTS)
def test_component_runs_hardened_on_its_ports(node: Node, component: str):
    name = unit(component)
    assert_service_up(node.host, name)
    data_dir = node.var("seaweedfs_data_dir")
    writable = [f"{data_dir}/{component}"] if component != "s3" else []
    assert_hardened(
        node.host, name, node.var("__seaweedfs_user"), node.var("__seaweedfs_group"),
        read_write=writable,
    )  # fmt: skip
    http = port(node, component)
    metrics = int(node.var(f"seaweedfs_{component}_metrics_port"))
    for number in (http, http + GRPC_OFFSET, metrics):
        seen = listening_addresses(node.host, number)
        assert address(node) in seen, f"{name}: nothing listens on {address(node)}:{number}"
        # SeaweedFS also listens on the loopback for local clients, never on every address.
        assert seen <= {address(node), "127.0.0.1"}, f"{name}: port {number} bound on {seen}"
    response = poll(
        lambda: http_get(node.host, f"http://{address(node)}:{metrics}/metrics"),
        lambda r: r.status == 200,
    )
    assert response.status == 200, response.body[:500]
    assert response.metric_lines("SeaweedFS_build_info"), response.body[:500]
    # Telemetry is off, and nothing but the units' own ports is open: not the Iceberg, Lance or
    # admin ports SeaweedFS opens by default.
    command = node.host.check_output("tr '\\0' ' ' < /proc/%s/cmdline", main_pid(node, component))
    if component == "master":
        assert "-telemetry=false" in command
    for other in (8181, 9101, 23646):
        assert not listening_addresses(node.host, other), f"port {other} is open"


def main_pid(node: Node, component: str) -> str:
    return node.host.check_output("systemctl show -p MainPID --value %s", unit(component))


def test_the_masters_have_a_leader_and_every_volume_server(node: Node, cluster: Cluster):
    stores = cluster.group("seaweedfs")
    expected = sorted(f"{address(n)}:{port(n, 'volume')}" for n in stores)

    def topology() -> dict[str, Any]:
        return master_json(node, "/dir/status")

    def volume_servers(status: dict[str, Any]) -> list[str]:
        centers = status.get("Topology", {}).get("DataCenters") or []
        racks = [r for c in centers for r in c.get("Racks") or []]
        return sorted(n["Url"] for r in racks for n in r.get("DataNodes") or [])

    status = poll(topology, lambda s: volume_servers(s) == expected)
    assert volume_servers(status) == expected, status
    racks = {
        r["Id"] for c in status["Topology"]["DataCenters"] for r in c.get("Racks") or []
    }  # fmt: skip
    assert racks == {str(n.var("seaweedfs_rack")) for n in stores}
    # A master names the leader and its Raft peers (the others) as ADDRESS:PORT.GRPCPORT.
    status = master_json(node, "/cluster/status")
    masters = {f"{address(n)}:{port(n, 'master')}" for n in stores}
    itself = f"{address(node)}:{port(node, 'master')}"
    peers = {re.sub(r"\.[0-9]+$", "", m) for m in status.get("Peers") or []}
    assert re.sub(r"\.[0-9]+$", "", status.get("Leader", "")) in masters, status
    assert peers | {itself} == masters, status


def test_the_gateway_takes_the_credentials_and_refuses_others(node: Node):
    key, secret = credentials(node)
    bucket = node.var("seaweedfs_bucket")
    status, body = s3_request(node, "HEAD", bucket, key, secret)
    assert status == 200, f"the bucket {bucket}: HTTP {status} {body}"
    status, body = s3_request(node, "GET", "", key, secret)
    assert status == 200, body
    assert f"<Name>{bucket}</Name>" in body, body
    status, body = s3_request(node, "GET", bucket, key, secret + "-wrong")
    assert status == 403, body
    assert "SignatureDoesNotMatch" in body, body
    status, body = s3_request(node, "GET", bucket, "unknown-" + key, secret)
    assert status == 403, body
    anonymous = http_get(node.host, f"http://{address(node)}:{port(node, 's3')}/{bucket}")
    assert anonymous.status == 403, anonymous.body


def test_an_object_is_on_as_many_hosts_as_the_replication_asks_and_every_filer_lists_it(
    node: Node, cluster: Cluster
):
    """Written through this host's gateway: the volume that holds it has its replication and
    copies on that many hosts (each host a rack), and every host's filer lists the object."""
    key, secret = credentials(node)
    bucket = node.var("seaweedfs_bucket")
    replication = str(node.var("seaweedfs_replication"))
    copies = 1 + sum(int(d) for d in replication)
    name = f"node-tests/{node.name}-{uuid.uuid4().hex[:8]}.txt"
    status, body = s3_request(node, "PUT", f"{bucket}/{name}", key, secret, data=name)
    assert status == 200, body
    try:
        status, body = s3_request(node, "GET", f"{bucket}/{name}", key, secret)
        assert (status, body) == (200, name)
        filer = f"http://{address(node)}:{port(node, 'filer')}"
        entry = http_get(node.host, f"{filer}/buckets/{bucket}/{name}?metadata=true")
        assert entry.status == 200, entry.body
        volume = int(entry.json()["chunks"][0]["fid"]["volume_id"])

        def holders() -> dict[str, Any]:
            found: dict[str, Any] = {}
            centers = master_json(node, "/vol/status").get("Volumes", {}).get("DataCenters", {})
            for racks in centers.values():
                for rack, servers in racks.items():
                    for volumes in servers.values():
                        for v in volumes:
                            if v["Id"] == volume:
                                found[rack] = v
            return found

        held = poll(holders, lambda h: len(h) == copies)
        assert len(held) == copies, f"volume {volume} is on racks {sorted(held)}"
        placement = {k: v for k, v in next(iter(held.values()))["ReplicaPlacement"].items() if v}
        digits = dict(zip(("dc", "rack", "node"), map(int, replication), strict=True))
        assert placement == {k: v for k, v in digits.items() if v}, placement
        assert {v["Collection"] for v in held.values()} == {bucket}
        for other in cluster.group("seaweedfs"):
            url = f"http://{address(other)}:{port(other, 'filer')}/buckets/{bucket}/{name}"
            seen = poll(lambda u=url: http_get(node.host, u), lambda r: r.status == 200)
            assert (seen.status, seen.body) == (200, name), f"{other.name}'s filer: {seen.status}"
    finally:
        s3_request(node, "DELETE", f"{bucket}/{name}", key, secret)


def test_the_credentials_are_the_service_users_alone(node: Node):
    path = node.var("__seaweedfs_s3_config")
    file = node.host.file(path)
    user = node.var("__seaweedfs_user")
    assert (file.user, file.group, file.mode) == (user, node.var("__seaweedfs_group"), 0o600)
    identities = json.loads(file_text(node.host, path))["identities"]
    key, _ = credentials(node)
    assert [c["accessKey"] for i in identities for c in i["credentials"]] == [key]
    assert node.host.file(node.var("seaweedfs_config_dir")).mode == 0o750
    _, secret = credentials(node)
    unit_text = file_text(node.host, f"/etc/systemd/system/{unit('s3')}")
    assert f"-config={path}" in unit_text
    assert secret not in unit_text, "the secret key is in the unit"
