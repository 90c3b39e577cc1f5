"""Helpers the tests share: waiting on conditions, a real ZooKeeper server, a real S3 server,
peer processes."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import msgpack
import s3fs
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from peer.messaging.messages import Ack
from peer.runtime.snapshot import EARLIER, TaskSnapshot

ZOOKEEPER_CLASSPATH = "/usr/share/java/zookeeper.jar:/etc/zookeeper/conf"
REPO = Path(__file__).resolve().parent.parent
ZOOKEEPER_EXPORTER = REPO / "roles/zookeeper/files/zookeeper_exporter.py"


@functools.cache
def zookeeper_exporter() -> ModuleType:
    """The zookeeper role's exporter script as a module (it is a file the role copies, not part
    of the package)."""
    spec = importlib.util.spec_from_file_location("zookeeper_exporter", ZOOKEEPER_EXPORTER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wait_for[T](condition: Callable[[], T], timeout: float, what: str, interval: float = 0.1) -> T:
    """The first truthy value of ``condition``; fails naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def reported(message: Any) -> tuple[str, int]:
    """A runner's report to its coordinator, as tests record it: ("ack", epoch) or
    ("drained", 0)."""
    return ("ack", message.epoch) if isinstance(message, Ack) else ("drained", 0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_udp_ports(count: int) -> int:
    """The first of ``count`` consecutive UDP ports that are free now."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count - 1 <= 65535 and all(_udp_free(base + i) for i in range(count)):
            return base


def _udp_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def four_letter_word(port: int, word: str) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(word.encode())
            return s.recv(1024).decode()
    except OSError:
        return ""


class ZooKeeperServer:
    """Debian's ZooKeeper, run standalone from its jars on a free port in a scratch dir."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="zk-"))
        (self.dir / "data").mkdir()
        (self.dir / "zoo.cfg").write_text(
            f"tickTime=250\ndataDir={self.dir / 'data'}\nclientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,stat,mntr\nminSessionTimeout=500\n"
            "maxSessionTimeout=60000\n"
            # A test server's log need not outlive this machine, only its process (a kill -9
            # keeps what was written): no fsync per write, no 64 MB log file made up front.
            "forceSync=no\npreAllocSize=1024\n"
        )
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> ZooKeeperServer:
        log = (self.dir / "server.log").open("wb")
        self.process = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", ZOOKEEPER_CLASSPATH,
             "org.apache.zookeeper.server.ZooKeeperServerMain", str(self.dir / "zoo.cfg")],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_for(
            lambda: (
                four_letter_word(self.port, "ruok") == "imok" or self.process.poll() is not None
            ),
            60,
            "ZooKeeper to answer ruok",
        )
        if self.process.poll() is not None:
            raise RuntimeError(f"ZooKeeper exited: {(self.dir / 'server.log').read_text()}")
        # Answering ruok is not serving: a fresh server's first session loads much of its code,
        # which on a loaded machine has taken longer than a client's connect timeout.
        wait_for(self._opens_a_session, 60, "ZooKeeper to open a first session", interval=0.5)
        return self

    def _opens_a_session(self) -> bool:
        client = KazooClient(hosts=self.address, timeout=10.0)
        try:
            client.start(timeout=15)
            return True
        except KazooTimeoutError:
            return False
        finally:
            client.stop()
            client.close()

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


WEED = Path(sys.executable).parent / "weed"


class ObjectStore:
    """SeaweedFS's S3 server (``weed mini``: master, volume, filer and S3 gateway in one
    process), as the distribution's object store role runs it, on free ports in a scratch dir,
    with one identity and one bucket. ``env`` is what a client needs: the standard AWS
    variables, which s3fs reads."""

    ACCESS_KEY, SECRET_KEY = "onyx-test", "onyx-test-secret"
    BUCKET = "onyx"

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="weed-"))
        self.port = free_port()
        # Every port the server opens (each component's gRPC one included), chosen once, so
        # that two servers on one machine never meet and a restart comes back where it was.
        self.ports = {f"-{name}": free_port() for name in (
            "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
            "filer.port.grpc", "s3.port.grpc", "admin.port", "admin.port.grpc")}  # fmt: skip
        (self.dir / "data").mkdir()
        credentials = {"accessKey": self.ACCESS_KEY, "secretKey": self.SECRET_KEY}
        actions = ["Admin", "Read", "Write", "List"]
        identity = {"name": "onyx", "credentials": [credentials], "actions": actions}
        (self.dir / "s3.json").write_text(json.dumps({"identities": [identity]}))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": self.SECRET_KEY,
        }

    def url(self, path: str) -> str:
        return f"s3://{self.BUCKET}/{path}"

    def start(self) -> ObjectStore:
        flags = [f"{flag}={port}" for flag, port in self.ports.items()]
        log = (self.dir / "server.log").open("ab")
        self.process = subprocess.Popen(
            [str(WEED), f"-logdir={self.dir}", "mini", f"-dir={self.dir / 'data'}", "-ip=127.0.0.1",
             "-ip.bind=127.0.0.1", f"-s3.port={self.port}", f"-s3.config={self.dir / 's3.json'}",
             "-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.autoCreateBucket=false",
             "-admin.ui=false", "-webdav=false",
             *flags],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.dir,
        )  # fmt: skip
        wait_for(lambda: self._answers() or self.process.poll() is not None, 60,
                 "the S3 server to answer")  # fmt: skip
        if self.process.poll() is not None:
            raise RuntimeError(f"weed exited: {(self.dir / 'server.log').read_text()[-2000:]}")
        return self

    def _answers(self) -> bool:
        """Whether the gateway answers, making the bucket if it is not there yet."""
        try:
            fs = self.filesystem()
            if not fs.exists(self.BUCKET):
                fs.mkdir(self.BUCKET)
            return True
        except Exception:
            return False

    def filesystem(self) -> Any:
        """An s3fs client of this server, not cached, so that it sees the store as it is."""
        return s3fs.S3FileSystem(
            key=self.ACCESS_KEY, secret=self.SECRET_KEY, skip_instance_cache=True,
            client_kwargs={"endpoint_url": self.endpoint},
            config_kwargs={"retries": {"max_attempts": 1}},
        )  # fmt: skip

    def kill(self) -> None:
        """kill -9, its data kept for ``start`` to serve again."""
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def pause(self) -> None:
        """SIGSTOP: the server holds its connections and answers nothing, as a hung host."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class PeerProcess:
    """One `onyx peer start` in its own OS process, its stderr kept in a file. It runs its peers
    in its own process (`--workers 0`) unless ``extra`` asks for workers: the last --workers on
    the command line wins."""

    def __init__(self, zookeeper: str, tenancy: str, log_dir: Path, *, vpeers: int = 2,
                 session_timeout: float = 4.0, extra: Sequence[str] = ()) -> None:  # fmt: skip
        self.log_path = log_dir / f"peer-{time.monotonic_ns()}.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "peer.cli", "peer", "start", "--zookeeper", zookeeper,
             "--tenancy", tenancy, "--vpeers", str(vpeers),
             "--session-timeout", str(session_timeout), "--join-back-off", "0.2",
             "--checkpoints", str(log_dir / "checkpoints"), "--workers", "0", *extra],
            stdout=subprocess.DEVNULL, stderr=self.log_path.open("wb"), cwd=REPO,
        )  # fmt: skip

    def output(self) -> str:
        return self.log_path.read_text()

    def runs(self, group: str) -> bool:
        """Whether this process started group ``group``: its log names other groups too (the
        members it monitors, aids or asks), so only the group's own start line tells."""
        return f"group {group} starting with" in self.output()

    def signal(self, sig: signal.Signals) -> None:
        os.kill(self.process.pid, sig)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def onyx(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it, from the repository's root."""
    return subprocess.run(
        [sys.executable, "-m", "peer.cli", *args],
        capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False,
    )  # fmt: skip


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("onyx: error: ")
    for word in words:
        assert word in lines[0], lines[0]


def header_first(snapshot: TaskSnapshot, parts: dict[int, bytes]) -> bytes:
    """A snapshot as the engine stored it before its header came last."""
    groups = sorted(parts)
    doc = {"plugin": snapshot.plugin, "windows": snapshot.windows, "fn": snapshot.fn,
           "ended": snapshot.ended, "parts": [[g, len(parts[g])] for g in groups]}  # fmt: skip
    if snapshot.chain:
        doc["chain"] = list(snapshot.chain)
    header = msgpack.packb(doc)
    return b"".join([EARLIER, struct.pack(">I", len(header)), header, *(parts[g] for g in groups)])
