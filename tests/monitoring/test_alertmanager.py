"""The Alertmanager configuration: monitoring/alertmanager.yml passes `amtool check-config`, the
alertmanager role renders the same routing from its defaults (and a receiver an operator overrides)
into a file amtool accepts, and a real Alertmanager run on that file receives the alerts, routes
them to the default receiver and lets ZooKeeperQuorumLost inhibit ZooKeeperServerDown."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import REPO, free_port, wait_for

EXAMPLE = REPO / "monitoring" / "alertmanager.yml"
ROLE = REPO / "roles" / "alertmanager"
BIN = Path(sys.executable).parent
WEBHOOK = "https://alerts.example.org/onyx"


def tool(name: str, package: str) -> str:
    """A tool's path; fails the test (never skips it) when it is missing."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: run ./install.sh (it installs Debian's {package})")
    return path


def check_config(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("amtool", "prometheus-alertmanager"), "check-config", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def render(tmp_path: Path, *extra: str) -> dict[str, Any]:
    """The role's alertmanager.yml as its template renders it from the role's defaults and vars
    (and ``extra`` -e arguments), on this machine."""
    out = tmp_path / "alertmanager.yml"
    playbook = tmp_path / "render.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Render the role's configuration",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars_files": [str(ROLE / "defaults/main.yml"), str(ROLE / "vars/main.yml")],
                    "tasks": [
                        {
                            "name": "Render",
                            "ansible.builtin.template": {
                                "src": str(ROLE / "templates/alertmanager.yml.j2"),
                                "dest": str(out),
                                "mode": "0644",
                            },
                        }
                    ],
                }
            ]
        )
    )
    env = {**os.environ, "HOME": str(tmp_path), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
           "ANSIBLE_NOCOLOR": "1"}  # fmt: skip
    result = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}",
         "-e", f"alertmanager_monitoring_dir={REPO / 'monitoring'}", *extra, str(playbook)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    checked = check_config(out)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return yaml.safe_load(out.read_text())


def test_the_example_passes_amtool():
    result = check_config(EXAMPLE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_role_renders_the_examples_routing(tmp_path):
    example = yaml.safe_load(EXAMPLE.read_text())
    rendered = render(tmp_path)
    assert rendered == {**{k: example[k] for k in ("route", "receivers", "inhibit_rules")},
                        "global": {}}  # fmt: skip


def test_an_operator_overrides_the_default_receiver(tmp_path):
    receivers = [{"name": "onyx-default", "webhook_configs": [{"url": WEBHOOK}]}]
    rendered = render(tmp_path, "-e", json.dumps({"alertmanager_receivers": receivers}))
    assert rendered["receivers"] == receivers
    assert rendered["route"]["receiver"] == "onyx-default"


def test_amtool_refuses_a_route_to_an_unknown_receiver(tmp_path):
    """What the role's `validate:` relies on: such a file never replaces the installed one."""
    broken = yaml.safe_load(EXAMPLE.read_text())
    broken["route"]["receiver"] = "nobody"
    path = tmp_path / "broken.yml"
    path.write_text(yaml.safe_dump(broken))
    result = check_config(path)
    assert result.returncode != 0
    assert 'undefined receiver "nobody"' in result.stdout + result.stderr


class Alertmanager:
    """A real Alertmanager on a free port, with the example configuration."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        binary = tool("prometheus-alertmanager", "prometheus-alertmanager")
        self.log = (directory / "alertmanager.log").open("wb")
        self.process = subprocess.Popen(
            [binary, f"--config.file={EXAMPLE}", f"--storage.path={directory / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address="],
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def api(self, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/api/v2/{path}", data=data,
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read()
        return json.loads(text) if text else None

    def ready(self) -> bool:
        assert self.process.poll() is None, "Alertmanager exited"
        try:
            return self.api("status")["cluster"]["status"] == "disabled"
        except OSError:
            return False

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        self.log.close()


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[Alertmanager]:
    server = Alertmanager(tmp_path)
    try:
        wait_for(server.ready, 30, "Alertmanager to answer")
        yield server
    finally:
        server.stop()


def alert(name: str, severity: str, instance: str) -> dict[str, Any]:
    labels = {"alertname": name, "severity": severity, "job": "zookeeper", "instance": instance}
    return {"labels": labels, "annotations": {"summary": name}}


@pytest.mark.integration
def test_a_real_alertmanager_routes_and_inhibits_the_alerts(alertmanager):
    alertmanager.api(
        "alerts",
        [
            alert("ZooKeeperQuorumLost", "critical", "zk-a:9141"),
            alert("ZooKeeperServerDown", "warning", "zk-b:9141"),
            alert("OnyxLogLagging", "warning", "host-a:9401"),
        ],
    )

    def states() -> dict[str, tuple[str, list[str], list[str]]] | None:
        found = {
            a["labels"]["alertname"]: (
                a["status"]["state"],
                sorted(r["name"] for r in a["receivers"]),
                a["status"]["inhibitedBy"],
            )
            for a in alertmanager.api("alerts")
        }
        return found if len(found) == 3 else None

    found = wait_for(states, 30, "Alertmanager to hold the three alerts")
    assert found["ZooKeeperQuorumLost"][:2] == ("active", ["onyx-default"])
    assert found["OnyxLogLagging"][:2] == ("active", ["onyx-default"])
    state, receivers, inhibited_by = found["ZooKeeperServerDown"]
    assert (state, receivers) == ("suppressed", ["onyx-default"])
    assert len(inhibited_by) == 1
