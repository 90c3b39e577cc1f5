"""roles/node_exporter: the distribution's node_exporter on every host, as its own user, on the
host's address only."""

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
    poll,
    url_host,
)

pytestmark = pytest.mark.role_group("all")

UNIT = "prometheus-node-exporter.service"


def test_installed_and_configured(node: Node):
    assert node.host.package("prometheus-node-exporter").is_installed
    assert_system_user(node.host, node.var("node_exporter_user"), node.var("node_exporter_group"))
    arguments = file_text(node.host, "/etc/default/prometheus-node-exporter")
    listen = f"{node.var('node_exporter_listen_address')}:{node.var('node_exporter_port')}"
    assert f"--web.listen-address={listen}" in arguments
    dropin = f"/etc/systemd/system/{UNIT}.d/onyx-hardening.conf"
    assert node.host.file(dropin).is_file


def test_service_runs_hardened(node: Node):
    assert_service_up(node.host, UNIT)
    assert_hardened(
        node.host, UNIT, node.var("node_exporter_user"), node.var("node_exporter_group")
    )


def test_metrics_on_the_host_address_only(node: Node):
    address, port = node.var("node_exporter_listen_address"), node.var("node_exporter_port")
    # The package's own default listens on every address; the role restarts it on this one.
    assert_listens_on(node.host, address, port)
    url = f"http://{url_host(address)}:{port}/metrics"
    response = poll(lambda: http_get(node.host, url), lambda r: r.status == 200, timeout=30)
    assert response.status == 200, response.body
    assert response.metric_lines("node_"), response.body[:2000]
