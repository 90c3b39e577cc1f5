"""testinfra checks of a rolled-out cluster, one module per role (deploy/site.yml).

Run against an inventory the cluster was deployed with, e.g.:

    python -m pytest tests/infra/nodes --hosts=ansible://all --ansible-inventory=INV \
        --connection=ansible -o addopts=

Without ``--hosts`` (the project's normal ``pytest`` run) the directory is not collected at all:
testinfra would otherwise run every check against this machine.

Every test module carries ``pytest.mark.role_group(GROUP, ...)``: its host-parametrized tests run
only on the hosts of those inventory groups (``group_names`` of the host) and are skipped on the
others (a test may narrow it with a marker of its own).
``test_inventory.py`` makes sure that every role's group has hosts, so no role goes untested.

The roles' settings are read the way Ansible sees them: the host's inventory variables (with the
inventory's group_vars, from ``host.ansible.get_variables()``) over the roles' defaults, under the
roles' fixed vars, templated with Ansible's own templating (``Node.var``).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import testinfra
import testinfra.host
import yaml

REPO = Path(__file__).resolve().parents[3]
ROLES = REPO / "roles"
EXAMPLE_GROUP_VARS = REPO / "deploy" / "inventories" / "example" / "group_vars"

# The inventory groups each role runs on (the plays of deploy/*.yml): every one must have hosts for
# the role's tests to run, except grafana's (test_inventory.py).
ROLE_GROUPS = {
    "node_exporter": ("all",),
    "zookeeper": ("zookeeper",),
    "spark": ("spark_master", "spark_workers"),
    "seaweedfs": ("seaweedfs",),
    "aeron_media_driver": ("peers",),
    "peer": ("peers",),
    "prometheus": ("prometheus",),
    "alertmanager": ("alertmanager",),
    "grafana": ("grafana",),
}

# The hardening of every onyx unit's [Service] (roles/common/files/hardening.conf and the restart
# policy), as `systemctl show` reports it.
HARDENING = {
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectControlGroups": "yes",
    "ProtectKernelLogs": "yes",
    "ProtectHostname": "yes",
    "RestrictRealtime": "yes",
    "RestrictSUIDSGID": "yes",
    "LockPersonality": "yes",
    "Restart": "on-failure",
}

# --- collection -----------------------------------------------------------------------------------


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave the whole directory out unless hosts to check were given (``--hosts``)."""
    if config.getoption("hosts", None) is None:
        return True
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "role_group(*names): run the host tests only on hosts of these inventory groups (the "
        "closest marker wins: a test's own over its module's)",
    )
    # testinfra's Ansible backend runs `ansible-inventory` from PATH: when pytest runs from a
    # virtualenv that is not activated, use the virtualenv's.
    bindir = Path(sys.executable).parent
    path = os.environ.get("PATH", "")
    if (bindir / "ansible-inventory").exists() and str(bindir) not in path.split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([str(bindir), path]) if path else str(bindir)


# --- waiting --------------------------------------------------------------------------------------


def poll[T](
    probe: Callable[[], T],
    until: Callable[[T], bool],
    timeout: float = 60.0,
    interval: float = 2.0,
) -> T:
    """Call ``probe`` until ``until(value)`` holds or ``timeout`` seconds have passed; return the
    last value either way, for the caller's assertion to show what was last seen."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if until(value) or time.monotonic() >= deadline:
            return value
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


# --- commands on a host ---------------------------------------------------------------------------

_HTTP_GET = """
import sys, urllib.error, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2])) as response:
        status, body = response.status, response.read()
except urllib.error.HTTPError as error:
    status, body = error.code, error.read()
except Exception as error:
    status, body = 0, repr(error).encode()
sys.stdout.write(str(status) + "\\n")
sys.stdout.write(body.decode("utf-8", "replace"))
"""

_FOUR_LETTER_WORD = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10) as connection:
        connection.sendall(sys.argv[3].encode())
        chunks = []
        while chunk := connection.recv(65536):
            chunks.append(chunk)
    sys.stdout.write(b"".join(chunks).decode("utf-8", "replace"))
except OSError as error:
    sys.stdout.write("error: " + repr(error))
"""


@dataclass(frozen=True)
class Http:
    status: int
    body: str

    def json(self) -> Any:
        return json.loads(self.body)

    def metric_lines(self, prefix: str) -> list[str]:
        return [line for line in self.body.splitlines() if line.startswith(prefix)]


def url_host(address: str) -> str:
    """An address as the host part of a URL (IPv6 in brackets)."""
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def http_get(host: testinfra.host.Host, url: str, timeout: float = 10.0) -> Http:
    """GET ``url`` with the host's python3 (status 0 if nothing answered); follows redirects."""
    result = host.run("python3 -c %s %s %s", _HTTP_GET, url, str(timeout))
    assert result.rc == 0, f"python3 on {host_name(host)} failed: {result.stderr}"
    status, _, body = result.stdout.partition("\n")
    return Http(int(status), body)


def four_letter_word(host: testinfra.host.Host, address: str, port: int, word: str) -> str:
    """ZooKeeper's answer to a four letter word, asked from ``host`` ("error: ..." on failure)."""
    result = host.run("python3 -c %s %s %s %s", _FOUR_LETTER_WORD, address, str(port), word)
    assert result.rc == 0, f"python3 on {host_name(host)} failed: {result.stderr}"
    return result.stdout


def host_name(host: testinfra.host.Host) -> str:
    return str(getattr(host.backend, "host", None) or host.backend.get_pytest_id())


def listening_addresses(host: testinfra.host.Host, port: int, protocol: str = "tcp") -> set[str]:
    """The local addresses sockets listen on at ``port`` ('*' for every address; IPv4-mapped IPv6
    addresses as plain IPv4, as a JVM's dual-stack sockets show them)."""
    flag = "--tcp" if protocol == "tcp" else "--udp"
    output = host.check_output("ss --numeric --listening --no-header %s", flag)
    addresses = set()
    for line in output.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        address, _, local_port = fields[3].rpartition(":")
        if local_port != str(port):
            continue
        address = address.strip("[]").split("%", 1)[0]
        address = address.removeprefix("::ffff:")
        addresses.add("*" if address in ("*", "0.0.0.0", "::") else address)
    return addresses


def assert_listens_on(host: testinfra.host.Host, address: str, port: int) -> None:
    """Something listens on ``address:port``, bound to that address (not to every address)."""
    seen = listening_addresses(host, port)
    assert address in seen, f"nothing listens on {address}:{port} (port {port} bound on {seen})"
    assert "*" not in seen, f"port {port} is bound to every address, not only {address}"


def unit_properties(host: testinfra.host.Host, unit: str, names: Iterable[str]) -> dict[str, str]:
    """Properties of a loaded unit as systemd applies them (unit file plus drop-ins)."""
    args = " ".join(f"-p {shlex.quote(n)}" for n in names)
    output = host.check_output(f"systemctl show {args} -- %s", unit)
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


def assert_hardened(
    host: testinfra.host.Host,
    unit: str,
    user: str,
    group: str,
    *,
    private_devices: bool = True,
    read_write: Iterable[str] = (),
) -> None:
    """The unit runs as its own user and group with the conventions' hardening in effect, and its
    main process really runs as that user."""
    expected = {
        **HARDENING,
        "User": user,
        "Group": group,
        "PrivateDevices": "yes" if private_devices else "no",
    }
    properties = unit_properties(host, unit, [*expected, "ReadWritePaths", "MainPID"])
    assert {k: properties.get(k) for k in expected} == expected
    writable = set(properties.get("ReadWritePaths", "").split())
    assert set(read_write) <= writable, f"{unit}: ReadWritePaths={sorted(writable)}"
    pid = properties.get("MainPID", "0")
    assert pid != "0", f"{unit} has no main process"
    uid = host.check_output("awk '/^Uid:/ {print $3}' /proc/%s/status", pid)
    assert uid == str(host.user(user).uid), f"{unit}'s main process {pid} runs as uid {uid}"


def file_text(host: testinfra.host.Host, path: str) -> str:
    """The text of a file that must exist."""
    file = host.file(path)
    assert file.is_file, f"{path} is missing on {host_name(host)}"
    return file.content_string


def assert_service_up(host: testinfra.host.Host, unit: str) -> None:
    service = host.service(unit)
    assert service.is_running, f"{unit} is not running on {host_name(host)}"
    assert service.is_enabled, f"{unit} is not enabled on {host_name(host)}"


def assert_system_user(host: testinfra.host.Host, name: str, group: str) -> None:
    user = host.user(name)
    assert user.exists, f"no user {name}"
    assert user.group == group
    assert user.shell in ("/usr/sbin/nologin", "/sbin/nologin")
    assert user.uid < 1000, f"{name} is not a system user (uid {user.uid})"


# --- the inventory --------------------------------------------------------------------------------


def _trusted(value: Any) -> Any:
    """Mark every string as a template Ansible may render (ansible-core 2.19+ renders no other)."""
    # Ansible is imported only when hosts are checked: not in every run of the project's tests.
    from ansible.template import trust_as_template  # noqa: PLC0415

    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, Mapping):
        return {k: _trusted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    return value


def _role_files(kind: str) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for path in sorted(ROLES.glob(f"*/{kind}/main.yml")):
        merged.update(yaml.safe_load(path.read_text()) or {})
    return merged


class Node:
    """One inventory host: its testinfra host, its groups and its variables."""

    def __init__(self, cluster: Cluster, name: str, host: testinfra.host.Host):
        self.cluster = cluster
        self.name = name
        self.host = host

    @property
    def groups(self) -> list[str]:
        """The host's groups (``group_names``)."""
        return list(self.cluster.inventory_vars[self.name]["group_names"])

    @property
    def address(self) -> str:
        return str(self.var("ansible_host"))

    @functools.cached_property
    def facts(self) -> dict[str, int]:
        """The few facts the roles' defaults use (read only when a variable needs them)."""
        cpus = self.host.check_output("grep -c ^processor /proc/cpuinfo")
        mem_kb = self.host.check_output("awk '/^MemTotal:/ {print $2}' /proc/meminfo")
        return {"processor_vcpus": int(cpus), "memtotal_mb": int(mem_kb) // 1024}

    @functools.cached_property
    def _templar(self) -> Any:
        from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415
        from ansible.template import Templar  # noqa: PLC0415

        variables = {
            **self.cluster.role_defaults,
            **self.cluster.inventory_vars[self.name],
            **self.cluster.role_vars,
        }
        variables.update(
            inventory_hostname=self.name,
            groups=self.cluster.groups,
            hostvars=self.cluster.inventory_vars,
            playbook_dir=str(REPO / "deploy"),
        )
        return Templar(loader=DataLoader(), variables=_trusted(variables))

    @functools.cache  # noqa: B019 (nodes live as long as the session)
    def var(self, name: str) -> Any:
        """The variable as the roles saw it on this host: inventory over role defaults, role vars
        over both, templated."""
        templar = self._templar
        if name not in templar.available_variables:
            raise KeyError(f"{self.name}: no variable {name} in the inventory or the roles")
        value = templar.available_variables[name]
        if "ansible_facts" in str(value) and "ansible_facts" not in templar.available_variables:
            templar.available_variables = {
                **templar.available_variables,
                "ansible_facts": self.facts,
            }
        return templar.template(value)

    def __repr__(self) -> str:
        return f"Node({self.name})"


class Cluster:
    """Every host of the inventory the suite runs against, for checks across hosts."""

    def __init__(self, config: pytest.Config):
        from ansible.plugins.loader import init_plugin_loader  # noqa: PLC0415
        from testinfra.utils.ansible_runner import AnsibleRunner  # noqa: PLC0415

        init_plugin_loader()  # the roles' vars use lookups (ansible.builtin.file, fileglob)
        option = config.option
        self.inventory_file = option.ansible_inventory
        kwargs = {
            "ansible_inventory": self.inventory_file,
            "ssh_config": option.ssh_config,
            "ssh_identity_file": option.ssh_identity_file,
            "force_ansible": option.force_ansible,
        }
        hosts = {
            name: testinfra.get_host(f"ansible://{name}", **kwargs)
            for name in AnsibleRunner.get_runner(self.inventory_file).get_hosts("all")
        }
        variables = {name: dict(host.ansible.get_variables()) for name, host in hosts.items()}
        # testinfra lists a host once per child group it is in: Ansible's groups hold it once.
        self.groups: dict[str, list[str]] = {
            group: list(dict.fromkeys(members))
            for group, members in next(iter(variables.values()), {}).get("groups", {}).items()
        }
        for host_vars in variables.values():
            host_vars["groups"] = self.groups
        self.groups.setdefault("all", list(hosts))
        if not any("onyx_zookeeper_connect" in v for v in variables.values()):
            # The inventory was written without the deployment's group_vars next to it: the rollout
            # then passed deploy/inventories/example/group_vars some other way. Apply them the same
            # way (under the inventory's own variables).
            for name, host_vars in variables.items():
                for path in sorted(EXAMPLE_GROUP_VARS.glob("*.yml")):
                    group = path.stem
                    if group == "all" or name in self.groups.get(group, []):
                        for key, value in (yaml.safe_load(path.read_text()) or {}).items():
                            host_vars.setdefault(key, value)
        self.inventory_vars = variables
        self.role_defaults = _role_files("defaults")
        self.role_vars = _role_files("vars")
        self.nodes = {name: Node(self, name, host) for name, host in hosts.items()}

    def group(self, name: str) -> list[Node]:
        return [self.nodes[n] for n in self.groups.get(name, [])]

    def node(self, host: testinfra.host.Host) -> Node:
        name = getattr(host.backend, "host", None)
        if name not in self.nodes:
            pytest.fail(
                f"{host.backend.get_pytest_id()} is not a host of the Ansible inventory: run the "
                "suite with --connection=ansible --hosts=ansible://all --ansible-inventory=INV"
            )
        return self.nodes[name]


def _require_hosts(config: pytest.Config) -> None:
    if config.getoption("hosts", None) is None:
        pytest.fail(
            "tests/infra/nodes check deployed hosts, not this machine: run them with "
            "--hosts=ansible://all --ansible-inventory=INV --connection=ansible",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Cluster:
    _require_hosts(request.config)
    return Cluster(request.config)


@pytest.fixture(scope="module")
def node(cluster: Cluster, host: testinfra.host.Host) -> Node:
    """The inventory host behind testinfra's ``host``."""
    return cluster.node(host)


@pytest.fixture(autouse=True)
def _only_on_role_group(request: pytest.FixtureRequest) -> None:
    """Runs a host test marked ``role_group(GROUP, ...)`` only on the hosts of those groups (and
    none at all when a file of this directory was named without ``--hosts``)."""
    _require_hosts(request.config)
    marker = request.node.get_closest_marker("role_group")
    if marker is None or "host" not in request.fixturenames:
        return
    wanted = set(marker.args)
    node: Node = request.getfixturevalue("node")
    if "all" not in wanted and not wanted & set(node.groups):
        pytest.skip(f"{node.name} is in none of the inventory groups {', '.join(sorted(wanted))}")


def metric_value(lines: Iterable[str], name: str) -> float | None:
    """The value of an unlabelled sample ``name`` in Prometheus text lines."""
    pattern = re.compile(rf"^{re.escape(name)}(?:\{{\}})?\s+(\S+)")
    for line in lines:
        match = pattern.match(line)
        if match:
            return float(match.group(1))
    return None
