"""The Alertmanager configuration: monitoring/alertmanager.yml passes `amtool check-config`; the
alertmanager role, its tasks run here, checks its inputs (a route to a receiver not defined is
refused), renders the same routing from its defaults (and a receiver an operator overrides) into a
file amtool accepts, and its flags and hardened drop-in; and a real Alertmanager run on the example
receives alerts, routes them to the default receiver and lets ZooKeeperQuorumLost inhibit
ZooKeeperServerDown."""

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


def run_role(tmp_path: Path, tasks: list[dict[str, Any]], *extra: str) -> str:
    """Runs ``tasks`` on this machine with the role's defaults and vars (and ``extra`` -e
    arguments), as the role's own tasks see them; the playbook's output, or the test fails."""
    playbook = tmp_path / "role.yml"
    play = {
        "name": "Run the alertmanager role's tasks here",
        "hosts": "localhost",
        "gather_facts": False,
        "vars_files": [str(ROLE / "defaults/main.yml"), str(ROLE / "vars/main.yml")],
        "tasks": tasks,
    }
    playbook.write_text(yaml.safe_dump([play]))
    env = {**os.environ, "HOME": str(tmp_path), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
           "ANSIBLE_NOCOLOR": "1"}  # fmt: skip
    result = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"role_path={ROLE}",
         "-e", f"alertmanager_monitoring_dir={REPO / 'monitoring'}", *extra, str(playbook)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    return (
        result.stdout + result.stderr
        if result.returncode == 0
        else pytest.fail(f"the role's tasks failed:\n{result.stdout}{result.stderr}")
    )


def preflight() -> list[dict[str, Any]]:
    """The role's preflight checks of its inputs (all but the platform check, which needs a
    Debian 13 or Ubuntu 24.04 host's facts)."""
    tasks = yaml.safe_load((ROLE / "tasks/preflight.yml").read_text())
    assert tasks[0]["ansible.builtin.include_role"]["tasks_from"] == "platform.yml"
    return tasks[1:]


def template(name: str, out: Path) -> dict[str, Any]:
    return {"name": f"Render {name}", "ansible.builtin.template": {
        "src": str(ROLE / "templates" / name), "dest": str(out), "mode": "0644"}}  # fmt: skip


def render(tmp_path: Path, *extra: str) -> dict[str, Any]:
    """The role's alertmanager.yml as it renders it here, after its preflight; amtool accepts it."""
    out = tmp_path / "alertmanager.yml"
    run_role(tmp_path, [*preflight(), template("alertmanager.yml.j2", out)], *extra)
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


def test_preflight_refuses_a_route_to_a_receiver_not_defined(tmp_path):
    route = {"receiver": "onyx-default", "routes": [{"receiver": "pager"}]}
    with pytest.raises(pytest.fail.Exception) as failed:
        run_role(tmp_path, preflight(), "-e", json.dumps({"alertmanager_route": route}))
    said = " ".join(str(failed.value).split())
    assert (
        "every receiver it routes to (route.receiver and its routes' receivers: onyx-default, "
        "pager) must be one of alertmanager_receivers" in said
    )


def test_the_flags_and_the_hardened_drop_in(tmp_path):
    flags, dropin = tmp_path / "flags", tmp_path / "hardening.conf"
    tasks = [template("prometheus-alertmanager.default.j2", flags),
             template("hardening.conf.j2", dropin)]  # fmt: skip
    run_role(tmp_path, tasks, "-e", "ansible_host=10.0.0.7")
    args = flags.read_text()
    for flag in ("--config.file=/etc/alertmanager/alertmanager.yml",
                 "--storage.path=/var/lib/alertmanager", "--web.listen-address=10.0.0.7:9093",
                 '--cluster.listen-address="'):  # fmt: skip
        assert flag in args, args
    run_role(tmp_path, tasks[:1], "-e", "ansible_host=10.0.0.7",
             "-e", json.dumps({"alertmanager_cluster_peers": ["10.0.0.8:9094"]}))  # fmt: skip
    args = flags.read_text()
    assert "--cluster.listen-address=10.0.0.7:9094 --cluster.peer=10.0.0.8:9094" in args, args
    shared = (REPO / "roles/common/files/hardening.conf").read_text().strip()
    assert shared in dropin.read_text()
    assert "User=alertmanager" in dropin.read_text()


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
        # an alert is marked inhibited once Alertmanager's pipeline has passed it, not on receipt
        settled = len(found) == 3 and found["ZooKeeperServerDown"][0] != "active"
        return found if settled else None

    found = wait_for(states, 60, "Alertmanager to hold the three alerts, one inhibited")
    assert found["ZooKeeperQuorumLost"][:2] == ("active", ["onyx-default"])
    assert found["OnyxLogLagging"][:2] == ("active", ["onyx-default"])
    state, receivers, inhibited_by = found["ZooKeeperServerDown"]
    assert (state, receivers) == ("suppressed", ["onyx-default"])
    assert len(inhibited_by) == 1
