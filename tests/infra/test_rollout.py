"""The whole cluster rolled out to the rig's three test hosts with deploy/site.yml (the session's
``rollout`` fixture, tests/infra/conftest.py): each host runs one peer member with its worker
processes and a SeaweedFS object store node, and the one host that ran the per-core peer groups
of an earlier release (onyx-peer@<i>) no longer does. The testinfra node tests (tests/infra/nodes)
pass on every host, a second rollout (to hosts holding every role) changes nothing, losing the
ZooKeeper quorum raises its alerts in Prometheus and the firing one reaches Alertmanager, the
zookeeper role turns a ZooKeeper server's exporter off and on again, and the object store and
Grafana roles refuse what they cannot do safely. The jobs the cluster runs are
test_rollout_jobs.py's.

Grafana is NOT rolled out: the hosts reach only this machine, and this machine cannot download a
Grafana release (it reaches only PyPI, Debian and npm), so the inventory's `grafana` group is empty
and grafana.yml's play matches no host.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.infra.cluster import Onyx, Rollout, hosts_of, wait_until, write_inventory
from tests.infra.rig import Rig

pytestmark = [pytest.mark.rollout, pytest.mark.timeout(3600)]

RECAP = re.compile(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def test_node_tests_pass_on_every_host(rollout: Rollout) -> None:
    command = [
        sys.executable, "-m", "pytest", "tests/infra/nodes", "-p", "no:cacheprovider",
        "--hosts=ansible://all", f"--ansible-inventory={rollout.inventory}",
        "--connection=ansible", "-o", "addopts=", "-n", str(len(rollout.rig.hosts)),
    ]  # fmt: skip
    with rollout.phase("node tests"):
        output = rollout.run("node-tests", command, timeout=900)
    print(output.strip().splitlines()[-1])


def test_a_second_rollout_changes_nothing(rollout: Rollout) -> None:
    """site.yml again, on the first host (every role but the Spark worker's, a member with
    Spark) and the last (a Spark worker, a member without): each role and each kind of member
    once, not the middle host's repeat of them, to keep the rollout's time."""
    hosts = [rollout.rig.hosts[0].name, rollout.rig.hosts[-1].name]
    with rollout.phase("site.yml (second run)"):
        output = rollout.playbook("site-second-run", "site.yml", "--limit", ",".join(hosts))
    recap = {host: tuple(map(int, counts)) for host, *counts in RECAP.findall(output)}
    assert set(recap) == set(hosts), output[-3000:]
    changed = _changed_tasks(output)
    assert all(counts == (0, 0, 0) for counts in recap.values()), (
        f"changed, unreachable, failed per host: {recap}; changed tasks: {changed}"
    )


def _changed_tasks(output: str) -> list[str]:
    """'TASK [...]: host' for every task that reported a change."""
    task, changed = "", []
    for line in output.splitlines():
        if line.startswith(("TASK [", "RUNNING HANDLER [")):
            task = line.split(" *")[0]
        elif match := re.match(r"changed: \[([^]]+)\]", line):
            changed.append(f"{task}: {match.group(1)}")
    return changed


def _prometheus(rig: Rig, path: str) -> Any:
    """The data of an answer of the Prometheus on the first host (the inventory's prometheus)."""
    url = f"http://{rig.hosts[0].address}:9090{path}"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]


def _zookeeper_alerts(rig: Rig) -> dict[str, set[tuple[str, str]]]:
    """The active ZooKeeper alerts: their names, each with its (instance, state) pairs."""
    found: dict[str, set[tuple[str, str]]] = {}
    for alert in _prometheus(rig, "/api/v1/alerts")["alerts"]:
        labels = alert["labels"]
        if labels["alertname"].startswith("ZooKeeper"):
            pair = (labels.get("instance", ""), alert["state"])
            found.setdefault(labels["alertname"], set()).add(pair)
    return found


def _alertmanager_alerts(rig: Rig) -> dict[str, set[tuple[str, str]]]:
    """The alerts Alertmanager (on the first host) holds: their names, each with its (instance,
    state) pairs."""
    url = f"http://{rig.hosts[0].address}:9093/api/v2/alerts"
    with urllib.request.urlopen(url, timeout=10) as response:
        alerts = json.load(response)
    found: dict[str, set[tuple[str, str]]] = {}
    for alert in alerts:
        pair = (alert["labels"].get("instance", ""), alert["status"]["state"])
        found.setdefault(alert["labels"]["alertname"], set()).add(pair)
    return found


def _serving(rig: Rig) -> dict[str, float]:
    """zookeeper_up per member's exporter, as Prometheus last scraped it."""
    result = _prometheus(rig, "/api/v1/query?query=zookeeper_up")["result"]
    return {r["metric"]["instance"]: float(r["value"][1]) for r in result}


def test_losing_the_zookeeper_quorum_raises_its_alerts(rollout: Rollout) -> None:
    """Two of the three members stopped: the survivor no longer serves, its exporter says so,
    and Prometheus raises ZooKeeperQuorumLost and ZooKeeperServerDown for every member (pending
    until their `for`); once ZooKeeperQuorumLost fires, Prometheus sends it to Alertmanager, which
    holds it as active, routed to the default receiver; once the members are back, the alerts
    clear and the ring is whole."""
    rig, onyx = rollout.rig, Onyx(rollout.rig)
    exporters = {f"{h.address}:9141" for h in rig.hosts}
    stopped = rig.hosts[1:]
    with rollout.phase("zookeeper quorum lost and back"):
        try:
            for host in stopped:
                rig.ssh(host, "systemctl stop onyx-zookeeper.service")
            alerts = wait_until(
                lambda: _zookeeper_alerts(rig),
                lambda a: (
                    "ZooKeeperQuorumLost" in a
                    and {i for i, _ in a.get("ZooKeeperServerDown", ())} == exporters
                ),
                180,
                "the ZooKeeper alerts",
            )
            assert alerts["ZooKeeperServerDown"] == {(e, "pending") for e in exporters}
            assert _serving(rig) == dict.fromkeys(exporters, 0.0)
            # ZooKeeperQuorumLost fires after its `for` (1m) and goes to Alertmanager at once.
            held = wait_until(lambda: _alertmanager_alerts(rig),
                         lambda a: "ZooKeeperQuorumLost" in a, 240,
                         "ZooKeeperQuorumLost to reach Alertmanager")  # fmt: skip
            assert {state for _, state in held["ZooKeeperQuorumLost"]} == {"active"}
            assert "ZooKeeperServerDown" not in held, "a pending alert reached Alertmanager"
        finally:
            for host in stopped:
                rig.ssh(host, "systemctl start onyx-zookeeper.service")
        wait_until(lambda: _serving(rig), lambda s: s == dict.fromkeys(exporters, 1.0), 180,
              "every member to serve again")  # fmt: skip
        wait_until(lambda: _zookeeper_alerts(rig), lambda a: not a, 120, "the alerts to clear")
        # The groups' ZooKeeper sessions may have expired meanwhile: systemd restarts them.
        hosts = {h.address for h in rig.hosts}
        wait_until(onyx.replica, lambda r: hosts_of(r["sites"], set(r["groups"])) == hosts, 180,
              "a group of every host in the ring")  # fmt: skip


def test_the_zookeeper_exporter_turns_off_and_on_again(rollout: Rollout) -> None:
    rig = rollout.rig
    host = rig.hosts[-1]
    unit, script = "onyx-zookeeper-exporter.service", "/usr/local/lib/onyx/zookeeper_exporter.py"
    listening = f"ss -Hltn 'sport = :9141' | grep -c {host.address} || true"
    limit = ["--limit", host.name]
    with rollout.phase("zookeeper exporter off and on"):
        off = ["-e", "zookeeper_exporter_enabled=false", *limit]
        rollout.playbook("zookeeper-exporter-off", "zookeeper.yml", *off)
        state = rig.ssh(host, f"systemctl is-active {unit}; test -e {script}; echo $?", check=False)
        assert state.stdout.split() == ["inactive", "1"], state.stdout + state.stderr
        assert rig.ssh(host, listening).stdout.strip() == "0"
        rollout.playbook("zookeeper-exporter-on", "zookeeper.yml", *limit)
        state = rig.ssh(host, f"systemctl is-active {unit} && systemctl is-enabled {unit}")
        assert state.stdout.split() == ["active", "enabled"]
        wait_until(lambda: _serving(rig).get(f"{host.address}:9141"), lambda up: up == 1.0, 120,
              "Prometheus to see the exporter serve again")  # fmt: skip


def test_the_object_store_is_not_rolled_out_without_credentials(rollout: Rollout) -> None:
    """Without S3 credentials the seaweedfs role stops in its preflight, with one message naming
    the variables, before it changes anything: the running store keeps its identities."""
    rig, host = rollout.rig, rollout.rig.hosts[0]
    before = rig.ssh(host, "sha256sum /etc/seaweedfs/s3.json").stdout
    with rollout.phase("seaweedfs refusal"):
        for name, empty in (("access", "onyx_s3_access_key"), ("secret", "onyx_s3_secret_key")):
            output = rollout.playbook(
                f"seaweedfs-no-{name}-key", "seaweedfs.yml", "-e", json.dumps({empty: ""}),
                ok=False, timeout=600,
            )  # fmt: skip
            said = " ".join(output.split())
            assert "seaweedfs_s3_access_key and seaweedfs_s3_secret_key are required" in said, (
                output[-3000:]
            )
            assert "changed=0" in said
            assert "TASK [seaweedfs : Install" not in output, "it went past its preflight"
    assert rig.ssh(host, "sha256sum /etc/seaweedfs/s3.json").stdout == before
    active = rig.ssh(host, "systemctl is-active onyx-seaweedfs-s3.service").stdout.strip()
    assert active == "active"


def test_the_grafana_role_installs_nothing_it_cannot_verify(rollout: Rollout) -> None:
    """No Grafana release is reachable here (see the module docstring), but the role's refusals
    are: without a checksum preflight stops before anything is done, and an archive whose sha256
    differs from the pinned one is removed with nothing unpacked, configured or started."""
    rig, host = rollout.rig, rollout.rig.hosts[0]
    version = "11.6.7"
    archive = rollout.directory / f"grafana-{version}.linux-amd64.tar.gz"
    payload = rollout.directory / "not-grafana"
    payload.mkdir(exist_ok=True)
    (payload / "README").write_text("not a Grafana release\n")
    subprocess.run(["tar", "-czf", str(archive), "-C", str(rollout.directory), payload.name],
                   check=True)  # fmt: skip
    inventory = write_inventory(rig, rollout.directory / "grafana", grafana=[host.name])
    settings = {
        "grafana_version": version,
        "grafana_archive_url": rig.serve(archive),
        "grafana_admin_password": uuid.uuid4().hex,
    }
    wrong = hashlib.sha256(b"another archive").hexdigest()
    leftovers = (
        f"ls -d /opt/grafana/{version} /opt/grafana/grafana-{version}.tar.gz "
        "/etc/grafana/grafana.ini /etc/systemd/system/onyx-grafana.service 2>/dev/null || true"
    )
    with rollout.phase("grafana refusals"):
        url = settings["grafana_archive_url"]
        for name, checksum, expected in (
            ("grafana-no-checksum", "", ["grafana_archive_checksum is empty or not a sha256"]),
            ("grafana-wrong-checksum", wrong,
             [f"was not installed from {url}: The checksum for", f"did not match {wrong}"]),
        ):  # fmt: skip
            extra = json.dumps({**settings, "grafana_archive_checksum": checksum})
            output = rollout.playbook(
                name, "grafana.yml", "-e", extra, inventory=inventory, ok=False
            )
            said = " ".join(output.split())
            assert all(e in said for e in expected), output[-3000:]
            assert rig.ssh(host, leftovers).stdout.split() == [], f"{name} left files behind"


def test_ssh_goes_through_the_rigs_control_sockets(rollout: Rollout) -> None:
    """Ansible and the node tests keep their SSH control sockets in the rig's directory, which the
    rig closes (ssh -O exit on each) before it powers the hosts off."""
    sockets = [p for p in rollout.rig.control_dir.iterdir() if p.is_socket()]
    assert sockets, f"no control socket in {rollout.rig.control_dir}"
    default = Path("~/.ansible/cp").expanduser()
    since = time.time() - sum(rollout.timings.values()) - 60
    stray = [p for p in default.glob("*") if p.is_socket() and p.lstat().st_mtime > since]
    assert stray == [], f"control sockets outside the rig's directory: {stray}"
