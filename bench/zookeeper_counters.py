"""ZooKeeper's own counters, as the scale bench reads them, and the server it reads them from.

- Writes: every write transaction (a create, a delete, a session's creation or close) takes the
  next zxid, so the difference of two ``srvr`` "Zxid:" readings counts them. (mntr's
  ``zk_outstanding_changes_removed`` counts two per create, so it is not used.)
- Requests: mntr's ``zk_packets_received``, every packet a client sent: writes, reads, watch
  registrations and pings. Reads are requests less writes less the idle rate, measured over a
  quiet window of the same run (pings, and in the epidemic mode the one read per silence).
- Connections: mntr's ``zk_num_alive_connections`` (each kazoo client holds one session on one
  connection).

``four_letter_word`` reads the answer whole: mntr's runs past the 1,024 bytes the tests'
helper reads.
"""

from __future__ import annotations

import re
import socket
import subprocess
import time
from dataclasses import dataclass

from tests.support import ZOOKEEPER_CLASSPATH, ZooKeeperServer, wait_for

ZXID = re.compile(r"^Zxid:\s*0x([0-9a-fA-F]+)\s*$", re.MULTILINE)
JUTE_MAXBUFFER = 16 * 1024 * 1024
"""Bytes a ZooKeeper packet may hold, server and Java clients: a classic reader lists the log
directory, and a listing of 100,000 entries (about 1.7 MB) is over the default 1 MB."""


def four_letter_word(port: int, word: str, timeout: float = 5.0) -> str:
    """The server's whole answer to ``word``; "" when it cannot be reached."""
    chunks = []
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(word.encode())
            while chunk := s.recv(65536):
                chunks.append(chunk)
    except OSError:
        return ""
    return b"".join(chunks).decode(errors="replace")


def parse_zxid(srvr: str) -> int:
    """The zxid in a ``srvr`` answer; a ValueError quoting the answer when it has none."""
    found = ZXID.search(srvr)
    if found is None:
        raise ValueError(f"no Zxid line in the srvr answer: {srvr[:200]!r}")
    return int(found.group(1), 16)


def parse_mntr(mntr: str) -> dict[str, float]:
    """mntr's numeric figures by name (its few text ones, the version and state, left out)."""
    figures = {}
    for line in mntr.splitlines():
        name, sep, value = line.partition("\t")
        if not sep:
            continue
        try:
            figures[name.strip()] = float(value)
        except ValueError:
            continue
    return figures


@dataclass(frozen=True)
class Counters:
    """One reading of the server's counters, at ``at`` (time.monotonic)."""

    at: float
    zxid: int
    requests: int
    connections: int

    def minus(self, earlier: Counters) -> Counters:
        return Counters(
            self.at - earlier.at,
            self.zxid - earlier.zxid,
            self.requests - earlier.requests,
            self.connections - earlier.connections,
        )


def read_counters(port: int) -> Counters:
    """The counters now; a RuntimeError naming the server when it does not answer."""
    srvr, mntr = four_letter_word(port, "srvr"), four_letter_word(port, "mntr")
    figures = parse_mntr(mntr)
    if "zk_packets_received" not in figures:
        raise RuntimeError(f"ZooKeeper at 127.0.0.1:{port} gave no mntr figures: {mntr[:200]!r}")
    return Counters(
        at=time.monotonic(),
        zxid=parse_zxid(srvr),
        requests=int(figures["zk_packets_received"]),
        connections=int(figures["zk_num_alive_connections"]),
    )


class BenchZooKeeper(ZooKeeperServer):
    """The tests' standalone server with what a thousand members need: connections unlimited
    from one address (ZooKeeper's default is 60), sessions up to 60 s, every four-letter word,
    a larger heap and jute.maxbuffer (JUTE_MAXBUFFER)."""

    def __init__(self) -> None:
        super().__init__()
        (self.dir / "zoo.cfg").write_text(
            f"tickTime=2000\ndataDir={self.dir / 'data'}\nclientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
            "4lw.commands.whitelist=*\nminSessionTimeout=4000\nmaxSessionTimeout=60000\n"
            "maxClientCnxns=0\n"
        )

    def start(self) -> BenchZooKeeper:
        log = (self.dir / "server.log").open("wb")
        self.process = subprocess.Popen(
            ["java", "-Xmx1g", f"-Djute.maxbuffer={JUTE_MAXBUFFER}", "-cp", ZOOKEEPER_CLASSPATH,
             "org.apache.zookeeper.server.ZooKeeperServerMain", str(self.dir / "zoo.cfg")],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        process = self.process
        wait_for(
            lambda: four_letter_word(self.port, "ruok") == "imok" or process.poll() is not None,
            60,
            "ZooKeeper to answer ruok",
        )
        if self.process.poll() is not None:
            raise RuntimeError(f"ZooKeeper exited: {(self.dir / 'server.log').read_text()}")
        wait_for(lambda: "Zxid" in four_letter_word(self.port, "srvr"), 60, "ZooKeeper to serve")
        return self
