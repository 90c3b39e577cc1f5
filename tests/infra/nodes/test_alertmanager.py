"""roles/alertmanager: the distribution's Alertmanager as its own user under the shared hardening,
its configuration the one the role rendered (amtool accepts it), on the host's address."""

from __future__ import annotations

import pytest
import yaml

from tests.infra.nodes.conftest import (
    Node,
    assert_hardened,
    assert_listens_on,
    assert_service_up,
    assert_system_user,
    file_text,
    http_get,
    poll,
)

pytestmark = pytest.mark.role_group("alertmanager")

UNIT = "prometheus-alertmanager.service"


def test_installed_and_configured(node: Node):
    assert node.host.package("prometheus-alertmanager").is_installed
    assert_system_user(node.host, node.var("alertmanager_user"), node.var("alertmanager_group"))
    config = f"{node.var('alertmanager_config_dir')}/alertmanager.yml"
    rendered = yaml.safe_load(file_text(node.host, config))
    assert rendered["route"]["receiver"] == node.var("alertmanager_route")["receiver"]
    assert rendered["receivers"] == node.var("alertmanager_receivers")
    node.host.check_output("amtool check-config %s", config)
    arguments = file_text(node.host, "/etc/default/prometheus-alertmanager")
    assert f"--config.file={config}" in arguments
    assert f"--web.listen-address={node.var('alertmanager_web_listen_address')}" in arguments
    assert node.host.file(f"/etc/systemd/system/{UNIT}.d/10-onyx-hardening.conf").is_file


def test_service_runs_hardened(node: Node):
    assert_service_up(node.host, UNIT)
    assert_hardened(
        node.host, UNIT, node.var("alertmanager_user"), node.var("alertmanager_group"),
        read_write=[node.var("alertmanager_storage_dir")],
    )  # fmt: skip


def test_ready_on_the_host_address(node: Node):
    listen = node.var("alertmanager_web_listen_address")
    address, port = listen.rsplit(":", 1)
    assert_listens_on(node.host, address, int(port))
    response = poll(lambda: http_get(node.host, f"http://{listen}/-/ready"),
                    lambda r: r.status == 200, timeout=30)  # fmt: skip
    assert response.status == 200, response.body
