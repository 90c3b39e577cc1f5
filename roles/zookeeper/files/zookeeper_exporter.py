#!/usr/bin/python3
"""Prometheus metrics of one ZooKeeper server, read from its `mntr` four-letter word at each scrape.

The distributions' zookeeper packages lack ZooKeeper's own Prometheus metrics provider (its jars
are not packaged), yet the alerts must know, member by member, whether the server serves: `mntr`
says so (a member without a quorum answers that it is "not currently serving requests") and carries
the server's own figures. The script needs only the distribution's python3 and
python3-prometheus-client, so a ZooKeeper host needs nothing of the project installed.

    zookeeper_exporter.py --server 127.0.0.1:2181 --listen 127.0.0.1:9141
"""

from __future__ import annotations

import argparse
import logging
import re
import socket
import sys
import threading
from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric

PREFIX = "zookeeper_"
# mntr's keys that are not numbers: each becomes a metric of its own below.
STATE, VERSION = "zk_server_state", "zk_version"
# Names the metrics above take: a numeric key that would become one of them is left out.
RESERVED = frozenset({"up", "server_state", "build", "build_info"})
_UNSAFE = re.compile(r"[^a-zA-Z0-9_]")
log = logging.getLogger("zookeeper_exporter")


def parse_mntr(answer: str) -> dict[str, str]:
    """mntr's `zk_<key>\\t<value>` lines. Anything else (the answer of a member that does not serve,
    or of a server whose whitelist lacks mntr) gives no pairs: the member does not serve."""
    pairs: dict[str, str] = {}
    for line in answer.splitlines():
        key, tab, value = line.partition("\t")
        if tab and key.startswith("zk_"):
            pairs.setdefault(key, value.strip())
    return pairs


def families(pairs: Mapping[str, str]) -> Iterator[Metric]:
    """The metrics one mntr answer gives: zookeeper_up, the server's state and version, and a
    gauge per numeric key (`zk_znode_count` becomes `zookeeper_znode_count`)."""
    yield _gauge(
        "up", "1 if the server answered mntr and serves requests, else 0.", int(bool(pairs))
    )
    if STATE in pairs:
        state = GaugeMetricFamily(
            PREFIX + "server_state", "The server's state in the ensemble (1 for the current one).",
            labels=["state"],
        )  # fmt: skip
        state.add_metric([pairs[STATE]], 1)
        yield state
    if VERSION in pairs:
        yield InfoMetricFamily(
            PREFIX + "build", "The server's version.", {"version": pairs[VERSION]}
        )
    named: set[str] = set()
    for key, value in sorted(pairs.items()):
        name = _UNSAFE.sub("_", key.removeprefix("zk_"))
        number = _number(value)
        if key in (STATE, VERSION) or number is None or name in named or name in RESERVED:
            continue
        named.add(name)
        yield _gauge(name, f"mntr's {key}.", number)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, documentation, value=value)


def _number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def ask(host: str, port: int, word: str, timeout: float) -> str:
    """A four-letter word's answer: the server writes it and closes the connection."""
    with socket.create_connection((host, port), timeout=timeout) as connection:
        connection.sendall(word.encode())
        chunks = []
        while chunk := connection.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


class MntrCollector:
    """Asks the server at scrape time, so that a scrape shows the server as it is then."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self._last_problem: str | None = None

    def collect(self) -> Iterator[Metric]:
        try:
            answer = ask(self.host, self.port, "mntr", self.timeout)
        except OSError as error:
            answer = f"ZooKeeper at {self.host}:{self.port} is unreachable: {error}"
        pairs = parse_mntr(answer)
        self._report(None if pairs else answer.strip() or "an empty answer to mntr")
        yield from families(pairs)

    def _report(self, problem: str | None) -> None:
        """Logs when the server stops or starts serving, not at every scrape."""
        if problem != self._last_problem:
            if problem:
                log.warning("%s:%s does not serve: %s", self.host, self.port, problem)
            else:
                log.info("%s:%s serves", self.host, self.port)
            self._last_problem = problem


def address(text: str) -> tuple[str, int]:
    """HOST:PORT for argparse."""
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--server",
        type=address,
        default=("127.0.0.1", 2181),
        help="the ZooKeeper server's client address (default 127.0.0.1:2181)",
    )
    parser.add_argument(
        "--listen",
        type=address,
        default=("127.0.0.1", 9141),
        help="where /metrics is served (default 127.0.0.1:9141)",
    )
    parser.add_argument("--timeout", type=float, default=5.0,
                        help="seconds to wait for the server's answer (default 5)")  # fmt: skip
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MntrCollector(*options.server, options.timeout))
    host, port = options.listen
    try:
        start_http_server(port, host, registry)
    except OSError as error:
        sys.exit(f"cannot serve metrics on {host}:{port}: {error}")
    log.info("serving %s:%s's mntr on http://%s:%s/metrics", *options.server, host, port)
    threading.Event().wait()


if __name__ == "__main__":
    main()
