"""The test-host rig: three real hosts that answer SSH, run systemd, install Debian packages and
wheels from the rig's repositories, reach each other, reboot, and leave nothing behind."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.rig import PREFIX, Rig, RigError

pytestmark = [pytest.mark.rollout, pytest.mark.timeout(1800)]

ANSIBLE = Path(sys.executable).parent / "ansible"


def test_hosts_answer_ssh_and_run_systemd(rig: Rig) -> None:
    print(f"rig timings (s): {rig.timings}; cached: {rig.cache_hits}")
    assert [h.name for h in rig.hosts] == [f"{PREFIX}-1", f"{PREFIX}-2", f"{PREFIX}-3"]
    assert rig.system_states == {h.name: "running" for h in rig.hosts}
    machine_ids = set()
    for host in rig.hosts:
        out = rig.ssh(host, "hostname; systemctl is-system-running; cat /etc/machine-id").stdout
        name, state, machine_id = out.split()
        assert (name, state) == (host.name, "running")
        machine_ids.add(machine_id)
        release = rig.ssh(host, ". /etc/os-release; echo $VERSION_CODENAME").stdout.strip()
        assert release == "trixie"
    assert len(machine_ids) == len(rig.hosts)


def test_ansible_reaches_every_host_with_host_key_checking(rig: Rig) -> None:
    result = subprocess.run(
        [str(ANSIBLE), "all", "-i", str(rig.inventory_path), "-m", "ansible.builtin.ping", "-o"],
        capture_output=True, text=True, env=rig.ansible_env(), timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    for host in rig.hosts:
        assert f"{host.name} | SUCCESS" in result.stdout
    known = rig.known_hosts_path.read_text()
    assert all(f"{h.name},{h.address} ssh-ed25519 " in known for h in rig.hosts)


def test_hosts_install_debian_packages_from_the_rig_repository(rig: Rig) -> None:
    for host in rig.hosts:
        sources = rig.ssh(host, "cat /etc/apt/sources.list.d/*; ls /etc/apt/sources.list || :")
        assert sources.stdout.strip() == f"deb [trusted=yes] {rig.apt_url} ./"
        update = rig.ssh(host, "apt-get update 2>&1")
        assert rig.apt_url.rstrip("/") in update.stdout
        assert "Err:" not in update.stdout, update.stdout
    host = rig.hosts[0]
    rig.ssh(host, "DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv")
    assert rig.ssh(host, "dpkg-query -W -f '${Status}' python3-venv").stdout == (
        "install ok installed"
    )


def test_hosts_install_wheels_from_the_rig_wheel_directory(rig: Rig) -> None:
    host = rig.hosts[0]
    rig.ssh(host, "apt-get update -q && apt-get install -y -q python3-venv")
    pip_args = shlex.join(rig.pip_args)
    rig.ssh(host, "rm -rf /tmp/rig-venv && python3 -m venv /tmp/rig-venv")
    rig.ssh(host, f"/tmp/rig-venv/bin/pip install -q {pip_args} pyrsistent")
    version = rig.ssh(
        host, "/tmp/rig-venv/bin/python -c 'import pyrsistent, sys; print(sys.version)'"
    )
    assert version.stdout.startswith("3.13")
    # The project and all its runtime requirements, Spark's extra included, resolve from the
    # directory for Python 3.13.
    report = rig.ssh(
        host, f"/tmp/rig-venv/bin/pip install --dry-run -q --report - {pip_args} 'onyx-peer[spark]'"
    )
    names = {item["metadata"]["name"].lower() for item in json.loads(report.stdout)["install"]}
    assert {"onyx-peer", "pyspark", "pyaeron", "pyarrow", "msgpack", "kazoo"} <= names
    # Any file of the machine's (a release archive a role downloads) can be served to the hosts.
    url = rig.serve(rig.known_hosts_path)
    fetch = f"import urllib.request as u; print(u.urlopen({url!r}).read().decode(), end='')"
    fetched = rig.ssh(host, f"python3 -c {shlex.quote(fetch)}")
    assert fetched.stdout == rig.known_hosts_path.read_text()
    assert rig.project_wheel is not None
    assert rig.project_wheel.name.startswith("onyx_peer-")


def test_hosts_reach_each_other_over_the_bridge_and_nothing_else(rig: Rig) -> None:
    check = (
        "import socket, sys\n"
        "for address in sys.argv[1:]:\n"
        "    socket.create_connection((address, 22), timeout=3).close()\n"
    )
    for host in rig.hosts:
        others = [h for h in rig.hosts if h != host]
        addresses = " ".join(h.address for h in others)
        rig.ssh(host, f"python3 -c {shlex.quote(check)} {addresses}")
        for other in others:
            rig.ssh(host, f"ping -c 1 -W 2 {other.name}")
        assert rig.ssh(host, "ip -4 route show default").stdout.strip() == ""


def test_a_rebooted_host_comes_back(rig: Rig) -> None:
    host = rig.hosts[-1]
    rig.ssh(host, "touch /var/tmp/survives-reboot")
    rig.reboot(host)
    assert rig.ssh(host, "systemctl is-system-running").stdout.strip() == "running"
    rig.ssh(host, "test -e /var/tmp/survives-reboot")


def test_teardown_leaves_nothing_behind(rig: Rig) -> None:
    rig.down()
    print(f"teardown took {rig.timings['teardown']} s")
    assert rig.leftovers() == []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert PREFIX not in netns.stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    assert PREFIX not in links.stdout
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(rig.cache) not in mounts
    assert not rig.run_dir.exists()
    # Later tests of the session get fresh hosts.
    rig.up()
    assert rig.system_states == {h.name: "running" for h in rig.hosts}


def test_a_machine_that_cannot_make_hosts_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    with pytest.raises(RigError, match=r"need root .* uid 1000"):
        Rig(count=1).up()
    monkeypatch.undo()
    real_which = shutil.which
    monkeypatch.setattr(
        "shutil.which", lambda tool: None if tool == "debootstrap" else real_which(tool)
    )
    with pytest.raises(RigError, match=r"Debian packages debootstrap \(apt-get install"):
        Rig(count=1).preflight()
