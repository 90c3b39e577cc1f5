"""roles/aeron_media_driver: one media driver per peer node, its Aeron directory on /dev/shm and its
counters served as Prometheus metrics."""

from __future__ import annotations

import pytest

from tests.infra.nodes.conftest import (
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


def unit(node: Node) -> str:
    return f"{node.var('aeron_media_driver_service_name')}.service"


def metrics_url(node: Node) -> str:
    address = url_host(node.var("aeron_media_driver_metrics_address"))
    return f"http://{address}:{node.var('aeron_media_driver_metrics_port')}/metrics"


def test_installed_and_configured(node: Node):
    onyx = node.host.file(node.var("aeron_media_driver_onyx_bin"))
    assert onyx.exists
    assert onyx.mode & 0o111
    assert_system_user(
        node.host, node.var("aeron_media_driver_user"), node.var("aeron_media_driver_group")
    )
    unit_file = file_text(node.host, f"/etc/systemd/system/{unit(node)}")
    assert (
        f"{node.var('aeron_media_driver_onyx_bin')} media-driver"
        f" --dir {node.var('aeron_media_driver_dir')}"
        f" --metrics-port {node.var('aeron_media_driver_metrics_port')}"
        f" --metrics-address {node.var('aeron_media_driver_metrics_address')}"
    ) in unit_file
    sysctls = file_text(node.host, "/etc/sysctl.d/60-aeron_media_driver.conf")
    assert f"net.core.rmem_max = {node.var('aeron_media_driver_rmem_max')}" in sysctls
    assert f"net.core.wmem_max = {node.var('aeron_media_driver_wmem_max')}" in sysctls


def test_service_runs_hardened(node: Node):
    assert_service_up(node.host, unit(node))
    # The peers reach the driver through /dev/shm: the host's /dev, and /dev/shm writable.
    assert_hardened(
        node.host,
        unit(node),
        node.var("aeron_media_driver_user"),
        node.var("aeron_media_driver_group"),
        private_devices=False,
        read_write=["/dev/shm"],
    )


def test_aeron_directory(node: Node):
    directory = node.host.file(node.var("aeron_media_driver_dir"))
    assert directory.is_directory
    assert directory.user == node.var("aeron_media_driver_user")
    cnc = node.host.file(f"{directory.path}/cnc.dat")
    assert cnc.is_file
    assert cnc.size > 0


def test_metrics(node: Node):
    assert_listens_on(
        node.host,
        node.var("aeron_media_driver_metrics_address"),
        node.var("aeron_media_driver_metrics_port"),
    )
    response = poll(
        lambda: http_get(node.host, metrics_url(node)),
        lambda r: r.status == 200 and bool(r.metric_lines("onyx_aeron_driver_")),
        timeout=30,
    )
    assert response.status == 200, response.body
    assert response.metric_lines("onyx_aeron_driver_"), response.body


def test_the_peer_member_and_its_workers_attach_to_the_driver(node: Node):
    clients_expected = 1 + int(node.var("peer_workers"))

    def clients() -> float | None:
        response = http_get(node.host, metrics_url(node))
        return metric_value(response.body.splitlines(), "onyx_aeron_driver_clients")

    attached = poll(clients, lambda n: n is not None and n >= clients_expected)
    assert attached is not None, "the driver's metrics have no onyx_aeron_driver_clients"
    assert attached >= clients_expected, (
        f"{attached} Aeron clients on the driver; the member and its workers are {clients_expected}"
    )
