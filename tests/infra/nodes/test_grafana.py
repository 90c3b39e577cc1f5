"""roles/grafana: Grafana from its release archive, provisioned with the repository's data sources
and dashboards. Runs only where the inventory's group grafana has hosts (test hosts without internet
have no Grafana archive, so their inventory leaves the group empty)."""

from __future__ import annotations

import pytest

from tests.infra.nodes.conftest import (
    REPO,
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

pytestmark = pytest.mark.role_group("grafana")


def test_installed_and_configured(node: Node):
    assert node.host.file(node.var("__grafana_binary")).is_file
    assert_system_user(node.host, "grafana", "grafana")
    config_dir = node.var("grafana_config_dir")
    ini = node.host.file(f"{config_dir}/grafana.ini")
    assert ini.is_file
    assert ini.mode == 0o640
    provisioning = REPO / "monitoring" / "grafana" / "provisioning"
    for kind in ("datasources", "dashboards"):
        for source in provisioning.glob(f"{kind}/*.yml"):
            assert node.host.file(f"{config_dir}/provisioning/{kind}/{source.name}").is_file
    datasources = "".join(
        file_text(node.host, f"{config_dir}/provisioning/datasources/{p.name}")
        for p in provisioning.glob("datasources/*.yml")
    )
    assert node.var("grafana_prometheus_url") in datasources
    for dashboard in (REPO / "monitoring" / "grafana" / "dashboards").glob("*.json"):
        assert node.host.file(f"{node.var('grafana_dashboards_dir')}/{dashboard.name}").is_file


def test_service_runs_hardened(node: Node):
    unit = node.var("__grafana_service")
    assert node.host.file(f"{node.var('__grafana_unit_dir')}/{unit}").is_file
    assert_service_up(node.host, unit)
    assert_hardened(
        node.host, unit, "grafana", "grafana", read_write=[node.var("grafana_data_dir")]
    )


def test_healthy(node: Node):
    address, port = node.var("grafana_http_addr"), node.var("grafana_http_port")
    assert_listens_on(node.host, address, port)
    url = f"http://{url_host(address)}:{port}/api/health"
    response = poll(lambda: http_get(node.host, url), lambda r: r.status == 200)
    assert response.status == 200, response.body
    assert response.json()["database"] == "ok"
