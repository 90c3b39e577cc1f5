"""The Grafana dashboards: the committed JSON is what monitoring/grafana/dashboards.py generates,
and every panel reads the dashboard's $datasource, filtered by its variables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitoring.grafana import dashboards
from tests.support import REPO

GRAFANA = REPO / "monitoring" / "grafana"
COMMITTED = GRAFANA / "dashboards"
NAMES = ("onyx-cluster.json", "onyx-job.json")
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def committed(name: str) -> dict[str, Any]:
    return json.loads((COMMITTED / name).read_text(encoding="utf-8"))


def variables(board: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {variable["name"]: variable for variable in board["templating"]["list"]}


def queries(board: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every (panel, target) pair of a dashboard."""
    return [
        (panel, target) for panel in dashboards.panels(board) for target in panel.get("targets", [])
    ]


@pytest.fixture(scope="module", params=NAMES)
def board(request: pytest.FixtureRequest) -> dict[str, Any]:
    return committed(request.param)


def test_committed_json_is_generated(tmp_path: Path):
    written = dashboards.write(tmp_path)
    assert sorted(path.name for path in written) == sorted(NAMES)
    stale = [
        path.name
        for path in written
        if not (COMMITTED / path.name).exists()
        or (COMMITTED / path.name).read_text(encoding="utf-8") != path.read_text(encoding="utf-8")
    ]
    assert not stale, (
        f"{', '.join(stale)} under monitoring/grafana/dashboards/ differ from what "
        f"monitoring/grafana/dashboards.py generates: run `{dashboards.COMMAND}` from the "
        "repository's root and commit the result"
    )
    assert sorted(path.name for path in COMMITTED.glob("*.json")) == sorted(NAMES)


def test_generation_is_deterministic():
    first = {name: dashboards.render(board) for name, board in dashboards.dashboards().items()}
    second = {name: dashboards.render(board) for name, board in dashboards.dashboards().items()}
    assert first == second
    for text in first.values():
        assert text.endswith("}\n")
        assert text.startswith('{\n  "')


def test_variables(board):
    found = variables(board)
    assert list(found) == ["datasource", "onyx_job", "instance"]
    datasource = found["datasource"]
    assert datasource["type"] == "datasource"
    assert datasource["query"] == "prometheus"
    assert datasource["current"]["value"] == dashboards.DATASOURCE_UID
    job, instance = found["onyx_job"], found["instance"]
    assert job["type"] == instance["type"] == "query"
    assert job["query"] == "label_values(onyx_job_allocation_version, onyx_job)"
    assert instance["query"] == "label_values(onyx_build_info, instance)"
    assert instance["multi"]
    assert instance["includeAll"]
    for variable in (job, instance):
        assert variable["datasource"] == DATASOURCE


def test_job_variable_is_one_job_on_the_job_dashboard():
    job = variables(committed("onyx-job.json"))["onyx_job"]
    assert not job.get("multi")
    assert not job.get("includeAll")
    job = variables(committed("onyx-cluster.json"))["onyx_job"]
    assert job["multi"]
    assert job["includeAll"]


def test_every_panel_reads_the_datasource_variable(board):
    panels = [panel for panel in dashboards.panels(board) if panel["type"] != "row"]
    assert panels
    for panel in panels:
        assert panel.get("datasource") == DATASOURCE, panel["title"]
        assert panel.get("targets"), panel["title"]
        assert panel["fieldConfig"]["defaults"].get("unit"), panel["title"]
    for panel, target in queries(board):
        assert target.get("datasource") == DATASOURCE, panel["title"]
        assert target.get("expr", "").strip(), f"{panel['title']} {target.get('refId')}"


def test_queries_are_filtered_by_the_variables(board):
    """By the peer groups picked ($instance), except the ZooKeeper ensemble's panels: those show
    the members' exporters, whatever groups are picked."""
    for panel, target in queries(board):
        expr = target["expr"]
        if dashboards.ZOOKEEPER in expr:
            assert "$instance" not in expr, (panel["title"], expr)
            continue
        assert '{instance=~"$instance"' in expr or ', instance=~"$instance"}' in expr, (
            panel["title"],
            expr,
        )
        assert "onyx_job=~" not in expr or board["uid"] == "onyx-cluster", (panel["title"], expr)
    job_filtered = [t["expr"] for _, t in queries(board) if 'onyx_job="$onyx_job"' in t["expr"]
                    or 'onyx_job=~"$onyx_job"' in t["expr"]]  # fmt: skip
    assert job_filtered


def test_ids_are_unique_and_panels_fit_the_grid(board):
    ids = [panel["id"] for panel in dashboards.panels(board)]
    assert len(ids) == len(set(ids))
    assert ids == sorted(ids)
    for panel in dashboards.panels(board):
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]


def test_expressions_are_every_target():
    boards = [committed(name) for name in NAMES]
    assert dashboards.expressions() == dashboards.expressions(boards)
    assert len(dashboards.expressions()) == sum(len(queries(board)) for board in boards)
    assert all(expr.count("(") == expr.count(")") for expr in dashboards.expressions())


def test_provisioning_refers_to_the_dashboards_datasource():
    provisioned = yaml.safe_load(
        (GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text(encoding="utf-8")
    )
    (source,) = provisioned["datasources"]
    assert source["type"] == "prometheus"
    assert source["uid"] == dashboards.DATASOURCE_UID
    assert source["name"] == dashboards.DATASOURCE_NAME
    assert source["url"] == "http://localhost:9090"
    providers = yaml.safe_load(
        (GRAFANA / "provisioning" / "dashboards" / "onyx.yml").read_text(encoding="utf-8")
    )
    (provider,) = providers["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"]
