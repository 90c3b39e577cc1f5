"""roles/prometheus: the distribution's Prometheus with the repository's configuration, rules and
the inventory's targets, scraping every one of them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.infra.nodes.conftest import (
    REPO,
    Node,
    assert_hardened,
    assert_listens_on,
    assert_service_up,
    file_text,
    http_get,
    poll,
)

pytestmark = pytest.mark.role_group("prometheus")

UNIT = "prometheus.service"


def api(node: Node, path: str) -> Any:
    response = http_get(node.host, f"http://{node.var('prometheus_web_listen_address')}{path}")
    assert response.status == 200, f"{path}: HTTP {response.status}: {response.body[:2000]}"
    body = response.json()
    assert body["status"] == "success", body
    return body["data"]


def expected_targets(node: Node) -> set[tuple[str, str]]:
    """(job, address) of every target the inventory gives Prometheus; jobs of empty groups (the
    zookeeper job while ZooKeeper's metrics provider is off) have none."""
    return {
        (job, address)
        for job, addresses in node.var("prometheus_targets").items()
        for address in addresses
    }


def active_targets(node: Node) -> list[dict[str, Any]]:
    return api(node, "/api/v1/targets?state=active")["activeTargets"]


def target_key(target: dict[str, Any]) -> tuple[str, str]:
    return target["scrapePool"], target["discoveredLabels"]["__address__"]


def test_installed_and_configured(node: Node):
    for package in node.var("prometheus_packages"):
        assert node.host.package(package).is_installed, package
    config_dir = node.var("prometheus_config_dir")
    assert node.host.file(f"{config_dir}/prometheus.yml").is_file
    rules = sorted(p.name for p in (REPO / "monitoring" / "rules").glob("*.yml"))
    for rule_file in rules:
        assert node.host.file(f"{config_dir}/rules/{rule_file}").is_file, rule_file
    for job in node.var("__prometheus_file_sd_jobs"):
        assert node.host.file(f"{config_dir}/targets/{job}.yml").is_file, job
    flags = file_text(node.host, node.var("__prometheus_environment_file"))
    assert f"--config.file={config_dir}/prometheus.yml" in flags
    assert f"--web.listen-address={node.var('prometheus_web_listen_address')}" in flags
    dropin = f"{node.var('__prometheus_dropin_dir')}/10-onyx-hardening.conf"
    assert node.host.file(dropin).is_file


def test_installed_config_is_valid(node: Node):
    config = f"{node.var('prometheus_config_dir')}/prometheus.yml"
    result = node.host.run("promtool check config %s", config)
    assert result.rc == 0, result.stdout + result.stderr


def test_service_runs_hardened(node: Node):
    assert_service_up(node.host, UNIT)
    assert_hardened(
        node.host,
        UNIT,
        "prometheus",
        "prometheus",
        read_write=[node.var("prometheus_storage_dir")],
    )
    address, _, port = node.var("prometheus_web_listen_address").rpartition(":")
    assert_listens_on(node.host, address.strip("[]"), int(port))
    ready = http_get(node.host, f"http://{node.var('prometheus_web_listen_address')}/-/ready")
    assert ready.status == 200, ready.body


def test_rules_are_loaded(node: Node):
    groups = api(node, "/api/v1/rules")["groups"]
    files = {g["file"].rsplit("/", 1)[-1] for g in groups}
    rules = {p.name for p in (REPO / "monitoring" / "rules").glob("*.yml")}
    assert files == rules


def test_every_target_is_scraped_and_up(node: Node):
    expected = expected_targets(node)
    assert expected, "the inventory gives Prometheus no targets"

    def settled(targets: list[dict[str, Any]]) -> bool:
        return {target_key(t) for t in targets} == expected and all(
            t["health"] == "up" for t in targets
        )

    # A new target waits for its first scrape (up to a scrape interval) before it reports health.
    targets = poll(lambda: active_targets(node), settled, timeout=60, interval=3)
    assert {target_key(t) for t in targets} == expected
    down = {
        f"{t['scrapePool']} {t['scrapeUrl']}": f"{t['health']}: {t['lastError']}"
        for t in targets
        if t["health"] != "up"
    }
    assert down == {}
