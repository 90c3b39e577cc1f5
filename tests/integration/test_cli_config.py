"""`onyx` configured from a file and the environment, its log lines, and the bad inputs of its
command line that once ended in a traceback or a hang: real processes, a real ZooKeeper."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO, assert_one_line_error, onyx, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def start(
    processes: list[subprocess.Popen[bytes]],
    args: list[str],
    stderr: Path,
    env: dict[str, str],
) -> subprocess.Popen[bytes]:
    """`onyx ARGS` in its own process with ``env`` added to the environment."""
    with stderr.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "peer.cli", *args],
            stdout=subprocess.DEVNULL, stderr=log, cwd=REPO, env={**os.environ, **env},
        )  # fmt: skip
    processes.append(process)
    return process


def replica_json(config_file: Path) -> dict | None:
    result = onyx("replica", "--json", "--config", str(config_file))
    return json.loads(result.stdout) if result.returncode == 0 else None


def journal_stream(path: Path) -> str:
    found = path.stat()
    return f"{found.st_dev}:{found.st_ino}"


def test_groups_configured_by_a_file_and_by_the_environment_join_and_leave(
    zookeeper, tenancy, tmp_path, processes
):
    config_file = tmp_path / "peer.toml"
    config_file.write_text(
        f'zookeeper = "{zookeeper.address}"\ntenancy = "{tenancy}"\n'
        f"[peer.start]\nvpeers = 3\nworkers = 0\nsession_timeout = 4\njoin_back_off = 0.2\n"
        f'checkpoints = "{tmp_path / "checkpoints"}"\nlog_format = "json"\n'
    )
    from_file = start(processes, ["peer", "start", "--config", str(config_file)],
                      tmp_path / "file.log", {})  # fmt: skip
    # The second group has only the environment, and writes to a stream journald would own.
    journal = tmp_path / "env.log"
    journal.touch()
    environment = {
        "ONYX_ZOOKEEPER": zookeeper.address,
        "ONYX_TENANCY": tenancy,
        "ONYX_VPEERS": "2",
        "ONYX_WORKERS": "0",
        "ONYX_SESSION_TIMEOUT": "4",
        "ONYX_CHECKPOINTS": str(tmp_path / "checkpoints"),
        "JOURNAL_STREAM": journal_stream(journal),
    }
    from_env = start(processes, ["peer", "start"], journal, environment)

    def both_joined() -> dict | None:
        doc = replica_json(config_file)
        return doc if doc and len(doc["groups"]) == 2 and len(doc["peers"]) == 5 else None

    wait_for(both_joined, 60, "both groups in the ring with 3 + 2 virtual peers", interval=0.5)
    for process in (from_file, from_env):
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0

    lines = [json.loads(line) for line in (tmp_path / "file.log").read_text().splitlines()]
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines), lines
    assert any("joined the ring" in line["message"] for line in lines), lines
    text = journal.read_text().splitlines()
    assert text, "no log lines from the group configured by the environment"
    assert all(line.startswith(("INFO ", "WARNING ")) for line in text), text

    # Every group has left: the ring is shown empty, not a traceback.
    result = onyx("replica", "--config", str(config_file))
    assert result.returncode == 0, result.stderr
    assert "0 groups in the ring" in result.stdout
    assert "ring: empty" in result.stdout


def test_config_show_says_where_each_value_came_from(tmp_path):
    config_file = tmp_path / "onyx.toml"
    config_file.write_text('tenancy = "prod"\n[peer.start]\nvpeers = 4\n')
    env = {**os.environ, "ONYX_BIND": "10.0.0.5"}
    args = ["config", "show", "peer", "start", "--config", str(config_file), "--port", "7000"]
    result = subprocess.run(
        [sys.executable, "-m", "peer.cli", *args],
        capture_output=True, text=True, cwd=REPO, env=env, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[2:]}
    assert rows["vpeers"].split()[1:3] == ["4", "file"]
    assert f"{config_file}: peer.start.vpeers" in rows["vpeers"]
    assert rows["bind"].split()[1:] == ["10.0.0.5", "env", "(ONYX_BIND)"]
    assert rows["port"].split()[1:] == ["7000", "command", "line", "(--port)"]
    assert rows["session_timeout"].split()[1:] == ["10.0", "default"]
    assert "(required, not set)" in rows["zookeeper"]

    shown = onyx("config", "show", "--json", "peer", "start", "--config", str(config_file))
    assert shown.returncode == 0, shown.stderr
    options = json.loads(shown.stdout)["peer start"]
    assert options["tenancy"] == {
        "value": "prod",
        "source": "file",
        "from": f"{config_file}: tenancy",
    }
    assert options["vpeers"]["value"] == 4
    assert options["zookeeper"]["source"] == "unset"


def test_config_show_of_every_command():
    result = onyx("config", "show", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert {"peer start", "media-driver", "job wait", "replica", "run"} <= set(doc)
    assert doc["run"]["log_level"] == {"value": "warning", "source": "default", "from": ""}


@pytest.mark.parametrize(
    ("toml", "code", "words"),
    [
        ("vpeer = 2\n", 2, ["unknown key 'vpeer'", "did you mean 'vpeers'"]),
        ("[peer.start]\nvpeers = 0\n", 2, ["peer.start.vpeers", "at least 1"]),
        ("tenancy = 'a/b'\n", 2, ["tenancy", "'a/b'"]),
        ("bind = [1]\n", 2, ["bind", "not a string or a number"]),
        (
            '[peer.start]\nseed_nodes = ["h:1", "h:99999"]\n',
            2,
            ["peer.start.seed_nodes", "'h:99999'", "not a port"],
        ),
    ],
)
def test_a_bad_config_file(tmp_path, toml, code, words):
    config_file = tmp_path / "bad.toml"
    config_file.write_text(toml)
    result = onyx("peer", "start", "--zookeeper", "h:1", "--config", str(config_file))
    assert_one_line_error(result, code, str(config_file), *words)


def test_a_bad_environment_value_names_its_variable():
    result = subprocess.run(
        [sys.executable, "-m", "peer.cli", "replica", "--tenancy", "t"],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=60,
        env={**os.environ, "ONYX_ZOOKEEPER": "h:1", "ONYX_CONNECT_TIMEOUT": "inf"},
    )  # fmt: skip
    assert_one_line_error(result, 2, "ONYX_CONNECT_TIMEOUT", "'inf'")


def test_a_segment_port_in_use(zookeeper, tenancy):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        result = onyx("peer", "start", "--zookeeper", zookeeper.address, "--tenancy", tenancy,
                      "--port", str(port))  # fmt: skip
    assert_one_line_error(result, 1, f"127.0.0.1:{port}", "Address already in use")


def test_a_bind_address_this_machine_lacks(zookeeper, tenancy):
    # 192.0.2.0/24 is TEST-NET-1: documentation only, on no machine's interfaces.
    result = onyx("peer", "start", "--zookeeper", zookeeper.address, "--tenancy", tenancy,
                  "--bind", "192.0.2.1")  # fmt: skip
    assert_one_line_error(result, 1, "192.0.2.1", "--bind", "Cannot assign requested address")


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A server that accepts TCP connections and never says a word."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield f"127.0.0.1:{server.getsockname()[1]}"


@pytest.mark.parametrize("command", [["replica"], ["peer", "start", "--session-timeout", "120"]])
def test_a_server_that_never_answers_is_given_up_on_after_the_connect_timeout(
    silent_server, command
):
    """Before, giving up waited for the connection attempt in flight, which lasts the session
    timeout: 120 s here, past the deadline this command is given."""
    result = onyx(*command, "--zookeeper", silent_server, "--tenancy", "t",
                  "--connect-timeout", "1", timeout=60)  # fmt: skip
    assert_one_line_error(result, 1, "cannot reach ZooKeeper", silent_server, "within 1 s")


def test_checkpoints_where_nothing_can_be_written_are_refused_at_start(
    zookeeper, tenancy, tmp_path
):
    (tmp_path / "a-file").write_text("")
    url = str(tmp_path / "a-file" / "checkpoints")
    result = onyx("peer", "start", "--zookeeper", zookeeper.address, "--tenancy", tenancy,
                  "--checkpoints", url)  # fmt: skip
    assert_one_line_error(result, 1, f"checkpoint storage {url} cannot be written",
                          "Not a directory")  # fmt: skip
    shown = onyx("replica", "--json", "--zookeeper", zookeeper.address, "--tenancy", tenancy)
    assert json.loads(shown.stdout)["groups"] == []


BOUNDED = """
import resource, runpy
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
runpy.run_module("peer.cli", run_name="__main__", alter_sys=True)
"""
"""`onyx` in at most 2 GiB of address space: a command that read a config file without end would
fail here instead of filling the machine's memory."""


def bounded_onyx(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BOUNDED, *args],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=60,
        env={**os.environ, **env},
    )  # fmt: skip


def test_a_device_as_config_file_is_refused_before_it_is_read():
    result = bounded_onyx(["replica"], {"ONYX_CONFIG": "/dev/zero"})
    assert_one_line_error(result, 2, "config file /dev/zero is not a regular file",
                          "a character device")  # fmt: skip


def test_a_fifo_as_config_file_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "peer.toml"
    os.mkfifo(fifo)
    result = bounded_onyx(["peer", "start", "--config", str(fifo)], {})
    assert_one_line_error(result, 2, f"config file {fifo} is not a regular file (a FIFO)")


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"ONYX_VPEERS": "99999999999999999999"},
         ["ONYX_VPEERS: '99999999999999999999' is not a whole number", "at most 10000"]),
        ({"ONYX_SESSION_TIMEOUT": "-4"}, ["ONYX_SESSION_TIMEOUT: '-4' is not a positive"]),
        ({"ONYX_JOIN_BACK_OFF": "nan"}, ["ONYX_JOIN_BACK_OFF: 'nan' is not a positive"]),
    ],
)  # fmt: skip
def test_a_number_out_of_range_from_the_environment_is_refused_before_anything_starts(env, words):
    """Nothing listens at the ZooKeeper address: the value is refused before it is needed."""
    cluster = {"ONYX_ZOOKEEPER": "127.0.0.1:1", "ONYX_TENANCY": "t", "ONYX_WORKERS": "0"}
    result = bounded_onyx(["peer", "start"], {**cluster, **env})
    assert_one_line_error(result, 2, *words)
