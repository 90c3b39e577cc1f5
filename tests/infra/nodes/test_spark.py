"""roles/spark: a Spark standalone master and its workers from pyspark, run as hardened units, with
every worker registered and the PrometheusServlet serving metrics."""

from __future__ import annotations

from typing import Any

import pytest

from tests.infra.nodes.conftest import (
    Cluster,
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

pytestmark = pytest.mark.role_group("spark_master", "spark_workers")

MASTER_UNIT = "onyx-spark-master.service"
WORKER_UNIT = "onyx-spark-worker.service"


def web_url(node: Node, port_var: str, path: str) -> str:
    return f"http://{url_host(node.var('spark_host'))}:{node.var(port_var)}{path}"


def master_state(node: Node) -> dict[str, Any]:
    response = http_get(node.host, web_url(node, "spark_master_webui_port", "/json/"))
    return response.json() if response.status == 200 else {"status": f"HTTP {response.status}"}


def alive_workers(state: dict[str, Any]) -> list[str]:
    return sorted(w["host"] for w in state.get("workers", []) if w.get("state") == "ALIVE")


def test_installed_and_configured(node: Node):
    for package in [*node.var("spark_apt_packages"), *node.var("__spark_module_packages")]:
        assert node.host.package(package).is_installed, package
    assert_system_user(node.host, node.var("__spark_user"), node.var("__spark_group"))
    python = f"{node.var('spark_venv')}/bin/python"
    version = node.host.check_output(
        "%s -c %s", python, "import pyspark; print(pyspark.__version__)"
    )
    assert version == node.var("spark_pyspark_version")
    conf_dir = node.var("spark_conf_dir")
    metrics = file_text(node.host, f"{conf_dir}/metrics.properties")
    assert "org.apache.spark.metrics.sink.PrometheusServlet" in metrics
    defaults = file_text(node.host, f"{conf_dir}/spark-defaults.conf")
    assert f"spark.metrics.conf {conf_dir}/metrics.properties" in defaults
    data_dir = node.host.file(node.var("spark_data_dir"))
    assert data_dir.is_directory
    assert data_dir.user == node.var("__spark_user")


@pytest.mark.role_group("spark_master")
def test_master_runs_hardened(node: Node):
    assert node.host.file(f"/etc/systemd/system/{MASTER_UNIT}").is_file
    assert_service_up(node.host, MASTER_UNIT)
    assert_hardened(
        node.host,
        MASTER_UNIT,
        node.var("__spark_user"),
        node.var("__spark_group"),
        read_write=[node.var("spark_data_dir")],
    )
    assert_listens_on(node.host, node.var("spark_host"), node.var("spark_master_port"))
    assert_listens_on(node.host, node.var("spark_host"), node.var("spark_master_webui_port"))


@pytest.mark.role_group("spark_master")
def test_master_has_every_worker_alive(node: Node, cluster: Cluster):
    expected = sorted(w.var("spark_host") for w in cluster.group("spark_workers"))
    state = poll(
        lambda: master_state(node),
        lambda s: s.get("status") == "ALIVE" and alive_workers(s) == expected,
    )
    assert state.get("status") == "ALIVE", state
    assert alive_workers(state) == expected, state.get("workers")
    assert state.get("url") == node.var("spark_master_url")


@pytest.mark.role_group("spark_master")
def test_master_serves_prometheus_metrics(node: Node):
    url = web_url(node, "spark_master_webui_port", "/metrics/master/prometheus")
    response = poll(lambda: http_get(node.host, url), lambda r: r.status == 200)
    assert response.status == 200, response.body
    assert response.metric_lines("metrics_master_aliveWorkers"), response.body[:2000]


@pytest.mark.role_group("spark_workers")
def test_worker_runs_hardened(node: Node):
    assert node.host.file(f"/etc/systemd/system/{WORKER_UNIT}").is_file
    assert_service_up(node.host, WORKER_UNIT)
    assert_hardened(
        node.host,
        WORKER_UNIT,
        node.var("__spark_user"),
        node.var("__spark_group"),
        read_write=[node.var("spark_data_dir")],
    )
    assert_listens_on(node.host, node.var("spark_host"), node.var("spark_worker_webui_port"))


@pytest.mark.role_group("spark_workers")
def test_worker_is_registered_with_the_master_and_serves_metrics(node: Node):
    state = http_get(node.host, web_url(node, "spark_worker_webui_port", "/json/"))
    assert state.status == 200, state.body
    assert state.json()["masterurl"] == node.var("spark_master_url")
    url = web_url(node, "spark_worker_webui_port", "/metrics/prometheus")
    response = poll(lambda: http_get(node.host, url), lambda r: r.status == 200)
    assert response.status == 200, response.body
    assert response.metric_lines("metrics_worker_"), response.body[:2000]
