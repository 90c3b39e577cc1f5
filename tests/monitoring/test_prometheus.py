"""The Prometheus configuration under monitoring/: promtool accepts the config and the rules, the
rules' unit tests pass, every alert carries its runbook annotations and is tested both firing and
not firing, and every recording rule's value is tested."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import REPO

MONITORING = REPO / "monitoring"
CONFIG = MONITORING / "prometheus.yml"
RULES = MONITORING / "rules"
RULE_FILES = sorted(RULES.glob("*.yml"))
TEST_FILES = sorted((RULES / "tests").glob("*.yml"))
TARGETS = MONITORING / "targets"
SCRAPE_JOBS = {
    "onyx-peers",
    "onyx-media-drivers",
    "zookeeper",
    "zookeeper-provider",
    "spark-master",
    "spark-workers",
    "seaweedfs-master",
    "seaweedfs-volume",
    "seaweedfs-filer",
    "seaweedfs-s3",
    "node",
    "alertmanager",
    "prometheus",
}
SEVERITIES = {"critical", "warning"}
README = MONITORING / "README.md"
RUNBOOKS = "monitoring/README.md#"
"""Where every alert's runbook_url points: a section of monitoring/README.md."""


def relative(path: Path) -> str:
    return str(path.relative_to(REPO))


def promtool() -> str:
    """promtool's path; fails the test (never skips it) when it is missing."""
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool is not installed: run ./install.sh (it installs Debian's prometheus "
            "package, which ships /usr/bin/promtool)"
        )
    return path


def run(*args: str) -> None:
    result = subprocess.run(
        [promtool(), *args], capture_output=True, text=True, cwd=REPO, timeout=120, check=False
    )
    command = " ".join(["promtool", *args])
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}{result.stderr}"


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def rules() -> list[dict[str, Any]]:
    """Every rule of every rule file."""
    return [
        rule for path in RULE_FILES for group in load(path)["groups"] for rule in group["rules"]
    ]


def alerts() -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for rule in rules() if "alert" in rule}


def records() -> set[str]:
    return {rule["record"] for rule in rules() if "record" in rule}


def unit_tests() -> list[dict[str, Any]]:
    """Every test group of every promtool test file."""
    return [test for path in TEST_FILES for test in load(path)["tests"]]


def test_there_are_rules_and_tests() -> None:
    assert [path.name for path in RULE_FILES] == ["onyx-alerts.yml", "onyx-recording.yml"]
    assert TEST_FILES, "no promtool test files under monitoring/rules/tests"


def test_config_is_valid() -> None:
    run("check", "config", relative(CONFIG))


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda path: path.name)
def test_rules_are_valid(path: Path) -> None:
    run("check", "rules", relative(path))


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda path: path.name)
def test_rule_unit_tests_pass(path: Path) -> None:
    run("test", "rules", relative(path))


def test_scrape_jobs_read_their_target_files() -> None:
    """Each scrape job reads targets/<job>.yml, which the deployment roles write; the shipped
    examples are valid file_sd target groups."""
    config = load(CONFIG)
    assert config["rule_files"] == ["rules/*.yml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == SCRAPE_JOBS
    for name, job in jobs.items():
        assert job["file_sd_configs"] == [{"files": [f"targets/{name}.yml"]}], name
        groups = load(TARGETS / f"{name}.yml")
        assert groups, name
        for group in groups:
            assert set(group) <= {"targets", "labels"}, name
            assert all(isinstance(target, str) for target in group["targets"]), name
    assert jobs["spark-master"]["metrics_path"] == "/metrics/master/prometheus"
    assert jobs["spark-workers"]["metrics_path"] == "/metrics/prometheus"
    honoring = [name for name, job in jobs.items() if "honor_labels" in job]
    assert honoring == [], "the onyx job id is `onyx_job`: no scrape needs honor_labels"


def sections(markdown: str) -> dict[str, str]:
    """The text under each heading, by the anchor a Markdown renderer gives it (GitHub's: lower
    case, punctuation dropped, spaces as hyphens)."""
    found: dict[str, str] = {}
    anchor = ""
    for line in markdown.splitlines():
        if heading := re.match(r"#{1,6} (.+)", line):
            title = heading.group(1).strip().lower()
            anchor = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
            found[anchor] = ""
        elif anchor:
            found[anchor] += line + "\n"
    return found


def test_every_alert_has_its_annotations_and_a_runbook_section() -> None:
    assert alerts()
    runbooks = sections(README.read_text(encoding="utf-8"))
    for name, alert in alerts().items():
        annotations = alert.get("annotations", {})
        assert annotations.get("summary", "").strip(), f"{name} has no summary"
        assert annotations.get("description", "").strip(), f"{name} has no description"
        assert alert.get("labels", {}).get("severity") in SEVERITIES, name
        url = annotations.get("runbook_url", "")
        assert url.startswith(RUNBOOKS), f"{name}'s runbook_url {url!r} is not under {RUNBOOKS}"
        anchor = url.removeprefix(RUNBOOKS)
        assert anchor in runbooks, f"{name}: monitoring/README.md has no section #{anchor}"
        for part in ("What it means:", "What to check:", "What to do:"):
            assert part in runbooks[anchor], f"{name}'s runbook (#{anchor}) lacks {part!r}"


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    firing: set[str] = set()
    silent: set[str] = set()
    for test in unit_tests():
        for case in test.get("alert_rule_test", []):
            (firing if case.get("exp_alerts") else silent).add(case["alertname"])
    names = set(alerts())
    assert (firing | silent) <= names, f"tests of unknown alerts: {(firing | silent) - names}"
    assert names <= firing, f"alerts never tested firing: {sorted(names - firing)}"
    assert names <= silent, f"alerts never tested not firing: {sorted(names - silent)}"


def test_every_recording_rule_is_tested() -> None:
    tested = {
        case["expr"].strip()
        for test in unit_tests()
        for case in test.get("promql_expr_test", [])
        if case.get("exp_samples")
    }
    assert records()
    assert records() <= tested, f"recording rules without a test: {sorted(records() - tested)}"
