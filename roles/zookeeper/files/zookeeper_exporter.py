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
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.samples import Sample

PREFIX = "zookeeper_"
# mntr's keys that are not numbers: each becomes a metric of its own below.
STATE, VERSION = "zk_server_state", "zk_version"
# Names the metrics above take: a numeric key that would become one of them is left out.
RESERVED = frozenset({"up", "server_state", "build", "build_info"})
# mntr's cumulative counts (ZooKeeper's ServerMetrics counters and ServerStats' counts), without
# the zk_ prefix: each becomes a counter, `zk_packets_sent` becoming `zookeeper_packets_sent_total`.
# Every other number (sizes, queues, connections, latencies since the last reset) is a gauge.
COUNTERS = frozenset({
    "add_dead_watcher_stall_time", "auth_failed_count", "bytes_received_count",
    "cnxn_closed_without_zk_server_running", "commit_count", "connection_drop_count",
    "connection_rejected", "connection_request_count", "connection_revalidate_count",
    "dead_watchers_cleared", "dead_watchers_queued", "diff_count", "digest_mismatches_count",
    "ensemble_auth_fail", "ensemble_auth_skip", "ensemble_auth_success",
    "fsync_threshold_exceed_count", "insecure_admin_count", "large_requests_rejected",
    "learner_commit_received_count", "learner_proposal_received_count", "looking_count",
    "non_mtls_local_conn_count", "non_mtls_remote_conn_count", "outstanding_changes_queued",
    "outstanding_changes_removed", "packets_received", "packets_sent",
    "prep_processor_request_queued", "proposal_count", "quit_leading_due_to_disloyal_voter",
    "request_commit_queued", "request_throttle_wait_count",
    "requests_not_forwarded_to_commit_processor", "response_bytes", "response_packet_cache_hits",
    "response_packet_cache_misses", "response_packet_get_children_cache_hits",
    "response_packet_get_children_cache_misses", "revalidate_count",
    "sessionless_connections_expired", "skip_learner_request_to_next_processor_count",
    "snap_count", "stale_replies", "stale_requests", "stale_requests_dropped",
    "stale_sessions_expired", "sync_processor_request_queued", "throttled_ops",
    "tls_handshake_exceeded", "unsuccessful_handshake", "watch_bytes",
})  # fmt: skip
# A ZooKeeper summary X is mntr's zk_{avg,min,max,cnt,sum}_X (and zk_p50_X ... for the detailed
# ones): its cnt and sum are cumulative, so X becomes a Prometheus summary (`zookeeper_X_count`,
# `zookeeper_X_sum`, and `zookeeper_X{quantile}` from the p-values); avg, min and max since the
# last reset stay gauges (`zookeeper_max_X`).
SUMMARY_PART = re.compile(r"(cnt|sum|p50|p95|p99|p999)_(.+)")
QUANTILES = {"p50": "0.5", "p95": "0.95", "p99": "0.99", "p999": "0.999"}
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
    """The metrics one mntr answer gives: zookeeper_up, the server's state and version, a counter
    per cumulative count, a summary per ZooKeeper summary and a gauge per other numeric key
    (`zk_znode_count` becomes `zookeeper_znode_count`). A metric whose names another already
    took is left out, so every name is served once."""
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
    numbers: dict[str, tuple[str, float]] = {}
    for key, value in sorted(pairs.items()):
        number = _number(value)
        if key not in (STATE, VERSION) and number is not None:
            numbers.setdefault(_UNSAFE.sub("_", key.removeprefix("zk_")), (key, number))
    bases = _summary_bases(numbers)
    taken = {PREFIX + name for name in RESERVED} | {PREFIX + "build_info"}
    for metric in [*_summaries(numbers, bases), *_counts(numbers, bases)]:
        names = {metric.name} | {sample.name for sample in metric.samples}
        if not names & taken:
            taken |= names
            yield metric


Numbers = Mapping[str, tuple[str, float]]
"""mntr's numeric keys by metric name (without the prefix): (the key, its value)."""


def _summary_bases(numbers: Numbers) -> set[str]:
    """The names X of ZooKeeper's summaries: both cnt_X and sum_X are there."""
    return {n[4:] for n in numbers if n.startswith("cnt_")} & {
        n[4:] for n in numbers if n.startswith("sum_")
    }


def _summaries(numbers: Numbers, bases: set[str]) -> Iterator[Metric]:
    parts: dict[str, dict[str, float]] = {}
    for name, (_, number) in numbers.items():
        if (match := SUMMARY_PART.fullmatch(name)) and match.group(2) in bases:
            parts.setdefault(match.group(2), {})[match.group(1)] = number
    for base, found in sorted(parts.items()):
        summary = SummaryMetricFamily(
            PREFIX + base, f"mntr's zk_cnt_{base}, zk_sum_{base} and their quantiles.",
            count_value=found["cnt"], sum_value=found["sum"],
        )  # fmt: skip
        for part, quantile in QUANTILES.items():
            if part in found:
                summary.samples.append(Sample(PREFIX + base, {"quantile": quantile}, found[part]))
        yield summary


def _counts(numbers: Numbers, bases: set[str]) -> Iterator[Metric]:
    """A counter or a gauge per numeric key that is no part of a summary."""
    for name, (key, number) in sorted(numbers.items()):
        match = SUMMARY_PART.fullmatch(name)
        if match and match.group(2) in bases:
            continue
        if name in COUNTERS:
            yield CounterMetricFamily(PREFIX + name, f"mntr's {key}.", value=number)
        else:
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
