"""Onyx's Grafana dashboards, written as code with Grafana's foundation SDK.

The JSON under ``monitoring/grafana/dashboards/`` is generated from this module and committed, so
Grafana's file provisioning (``provisioning/dashboards/onyx.yml``) can load it as it is. After a
change here, regenerate it from the repository's root (``tests/monitoring`` fails until you do)::

    .venv/bin/python -m monitoring.grafana.dashboards

Two dashboards:

- ``onyx-cluster``: the ring, the log and the jobs, as the peer members report them;
- ``onyx-job``: one job: throughput, batch latency, checkpoints, backpressure, recovery and its
  peers.

The queries read the raw metrics ``peer/metrics.py`` serves (no recording rules), filtered by the
dashboards' variables: ``$datasource`` (a Prometheus data source; by default the one provisioned
with uid ``onyx-prometheus``), ``$onyx_job`` (an onyx job id: the peers' ``onyx_job`` label, so
``job`` stays the scrape job's, as on any Prometheus) and ``$instance`` (the scraped processes).
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common, dashboard, prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_model
from grafana_foundation_sdk.models import dashboard as model

COMMAND = ".venv/bin/python -m monitoring.grafana.dashboards"
"""How to regenerate the committed JSON, from the repository's root."""
DIRECTORY = Path(__file__).resolve().parent / "dashboards"
"""Where the generated JSON is committed, one file per dashboard."""

DATASOURCE_UID = "onyx-prometheus"
"""The uid of the Prometheus data source that provisioning/datasources/prometheus.yml creates:
the default of every dashboard's ``$datasource`` variable."""
DATASOURCE_NAME = "Onyx Prometheus"
DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
"""What every panel and query reads: the data source the ``$datasource`` variable picks."""

INSTANCE = 'instance=~"$instance"'
JOB_LABEL = "onyx_job"
"""The label of an onyx job's id (``job`` is Prometheus's: the scrape job)."""
JOBS = f'{JOB_LABEL}=~"${JOB_LABEL}"'
"""The cluster dashboard's job filter: All, or any of the jobs picked."""
JOB = f'{JOB_LABEL}="${JOB_LABEL}"'
"""The job dashboard's job filter: exactly one job."""
ZOOKEEPER = 'job="zookeeper"'
"""The zookeeper role's exporters (mntr's figures), one per ensemble member."""
RATE_WINDOW = "$__rate_interval"
QUANTILES = (0.5, 0.9, 0.99)
TASK_QUANTILES = (0.5, 0.99)
"""Fewer quantiles where each task has its own: a line per task per quantile adds up."""

Target = tuple[str, str]
"""A query: its PromQL expression and its legend."""
Section = tuple[str, Sequence[timeseries.Panel]]
"""A row of the dashboard: its title and its panels, laid out left to right."""


# PromQL


def selector(metric: str, matchers: Sequence[str]) -> str:
    return f"{metric}{{{', '.join(matchers)}}}"


def aggregate(agg: str, by: Sequence[str], inner: str) -> str:
    if not by:
        return f"{agg}({inner})"
    return f"{agg} by ({', '.join(by)}) ({inner})"


def gauge(metric: str, matchers: Sequence[str], agg: str = "", by: Sequence[str] = ()) -> str:
    """A gauge, each series as it is, or aggregated with ``agg`` (by ``by``)."""
    series = selector(metric, matchers)
    return aggregate(agg, by, series) if agg else series


def per_member(metric: str, matchers: Sequence[str], agg: str = "max") -> str:
    """A gauge of each member's own state, one series per instance (machine): a member's workers
    may report it too, under a ``worker`` label, and ``agg`` folds theirs into the member's."""
    return gauge(metric, matchers, agg, ["instance"])


def rate(metric: str, matchers: Sequence[str], agg: str = "sum", by: Sequence[str] = ()) -> str:
    """A counter's per-second rate, aggregated with ``agg`` (by ``by``)."""
    return aggregate(agg, by, f"rate({selector(metric, matchers)}[{RATE_WINDOW}])")


def legend(by: Sequence[str], suffix: str) -> str:
    return " ".join([*(f"{{{{{label}}}}}" for label in by), suffix])


def quantiles(
    histogram: str,
    matchers: Sequence[str],
    by: Sequence[str] = (),
    qs: Sequence[float] = QUANTILES,
) -> list[Target]:
    """Quantiles of a histogram (its base name) over the rate window, one series per ``by``."""
    buckets = rate(f"{histogram}_bucket", matchers, by=(*by, "le"))
    return [(f"histogram_quantile({q}, {buckets})", legend(by, f"p{q * 100:g}")) for q in qs]


def mean(histogram: str, matchers: Sequence[str], by: Sequence[str] = ()) -> Target:
    """A histogram's exact mean over the rate window: the rate of its sum over that of its count."""
    total, count = (rate(f"{histogram}_{part}", matchers, by=by) for part in ("sum", "count"))
    return f"{total} / {count}", legend(by, "mean")


# Panels and dashboards


def panel(
    title: str,
    unit: str,
    targets: Sequence[Target],
    description: str,
    *,
    span: int = 8,
    height: int = 8,
    max_value: float | None = None,
) -> timeseries.Panel:
    """A time series panel on ``$datasource``, one query per target (refIds A, B, ...)."""
    built = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .min(0)
        .span(span)
        .height(height)
        .fill_opacity(10)
        .show_points(common_model.VisibilityMode.NEVER)
        .legend(
            common.VizLegendOptions()
            .show_legend(True)
            .display_mode(common_model.LegendDisplayMode.LIST)
            .placement(common_model.LegendPlacement.BOTTOM)
        )
        .tooltip(
            common.VizTooltipOptions()
            .mode(common_model.TooltipDisplayMode.MULTI)
            .sort(common_model.SortOrder.DESCENDING)
        )
    )
    if max_value is not None:
        built.max(max_value)
    for index, (expr, legend_format) in enumerate(targets):
        built.with_target(
            prometheus.Dataquery()
            .ref_id(chr(ord("A") + index))
            .datasource(DATASOURCE)
            .expr(expr)
            .legend_format(legend_format)
            .range()
        )
    return built


def datasource_variable() -> dashboard.DatasourceVariable:
    return (
        dashboard.DatasourceVariable("datasource")
        .label("Data source")
        .type("prometheus")
        .current(model.VariableOption(text=DATASOURCE_NAME, value=DATASOURCE_UID))
    )


def query_variable(
    name: str, label: str, query: str, *, multi: bool, include_all: bool
) -> dashboard.QueryVariable:
    """A variable whose values Prometheus lists, refreshed with the time range; with All, All is
    the default and means any value (``.*``), including ones that appear after loading."""
    variable = (
        dashboard.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
        .multi(multi)
        .include_all(include_all)
    )
    if include_all:
        everything = ["All"], ["$__all"]
        text, value = everything if multi else (everything[0][0], everything[1][0])
        variable.all_value(".*").current(model.VariableOption(text=text, value=value))
    return variable


def job_variable(*, multi: bool) -> dashboard.QueryVariable:
    return query_variable(
        JOB_LABEL,
        "Job",
        f"label_values(onyx_job_allocation_version, {JOB_LABEL})",
        multi=multi,
        include_all=multi,
    )


def instance_variable() -> dashboard.QueryVariable:
    return query_variable(
        "instance",
        "Instance",
        "label_values(onyx_build_info, instance)",
        multi=True,
        include_all=True,
    )


def assemble(
    title: str,
    uid: str,
    description: str,
    variables: Sequence[Any],
    sections: Sequence[Section],
) -> dict[str, Any]:
    """The dashboard as plain JSON data: its rows in order, each followed by its panels, with ids
    numbered from 1 in that order so that they stay the same from one generation to the next."""
    builder = (
        dashboard.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["onyx"])
        .editable()
        .timezone("browser")
        .time("now-1h", "now")
        .refresh("30s")
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .annotation(
            dashboard.AnnotationQuery()
            .name("Annotations & Alerts")
            .datasource(model.DataSourceRef(type_val="grafana", uid="-- Grafana --"))
            .built_in(1)
            .enable(True)
            .hide(True)
            .icon_color("rgba(0, 211, 255, 1)")
            .type("dashboard")
        )
        .link(
            dashboard.DashboardLink("Onyx")
            .type(model.DashboardLinkType.DASHBOARDS)
            .tags(["onyx"])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
        .variables(list(variables))
    )
    ids = itertools.count(1)
    for row_title, panels in sections:
        # An expanded row's panels follow it at the top level: Grafana ignores panels nested in a
        # row unless the row is collapsed.
        builder.with_row(dashboard.Row(row_title).id(next(ids)))
        for each in panels:
            builder.with_panel(each.id(next(ids)))
    return json.loads(json.dumps(builder.build(), cls=JSONEncoder))


def cluster() -> dict[str, Any]:
    """The cluster overview: the ring, the log and the jobs."""
    ring = [
        panel(
            "Members in the ring",
            "short",
            [
                (gauge("onyx_ring_groups", [INSTANCE], "max"), "members (largest view)"),
                (gauge("onyx_ring_groups", [INSTANCE], "min"), "members (smallest view)"),
                (
                    aggregate("sum", [], per_member("onyx_ring_member", [INSTANCE])),
                    "members reporting themselves joined",
                ),
            ],
            "Members (one per machine) joined to the ring as their replicas see it; the views "
            "differ only while some member has not yet applied the latest joins or leaves.",
        ),
        panel(
            "Watch pairs",
            "short",
            [(per_member("onyx_ring_watch_pairs", [INSTANCE]), "{{instance}}")],
            "Watch pairs (watcher to watched) in each member's view of the ring.",
        ),
        panel(
            "Watch targets alive",
            "short",
            [(per_member("onyx_ring_watch_target_alive", [INSTANCE], "min"), "{{instance}}")],
            "1 unless the member this member watches lost its pulse and the ring is not yet "
            "repaired: a 0 that stays means a death nobody has reported.",
            max_value=1,
        ),
        panel(
            "Joins in flight",
            "short",
            [(gauge("onyx_ring_joins_in_flight", [INSTANCE], "max"), "joins in flight")],
            "Joins prepared or accepted but not yet finished.",
        ),
        panel(
            "Members by status",
            "short",
            [(gauge("onyx_members", [INSTANCE], "max", ["status"]), "{{status}}")],
            "Members (one per machine) the log has in each lifecycle status: joining, up, leaving "
            "and exiting (a graceful leave under way), down and removed (gone for good).",
        ),
        panel(
            "Members unreachable",
            "short",
            [(per_member("onyx_members_unreachable", [INSTANCE]), "{{instance}}")],
            "Members each member holds unreachable now: heartbeats unanswered, not yet down. "
            "Nothing moves while a member is unreachable; the leader downs it after the "
            "auto-down time.",
        ),
        panel(
            "Aborted joins and deaths detected",
            "ops",
            [
                (rate("onyx_ring_joins_aborted_total", [INSTANCE], "max"), "aborted joins"),
                (rate("onyx_ring_deaths_detected_total", [INSTANCE], "sum"), "deaths detected"),
            ],
            "Every member applies each abort-join entry (hence max); each death is counted by the "
            "member that reported it (hence sum).",
        ),
        panel(
            "Virtual peers per member",
            "short",
            [(per_member("onyx_group_virtual_peers", [INSTANCE]), "{{instance}}")],
            "Active virtual peers of each member: all of its machine's, in its workers.",
        ),
    ]
    log = [
        panel(
            "Log tail and each member's position",
            "short",
            [
                (gauge("onyx_log_tail_position", [INSTANCE], "max"), "tail"),
                (per_member("onyx_log_position", [INSTANCE], "min"), "{{instance}}"),
            ],
            "The newest entry in the log, and the last entry each member (the furthest behind of "
            "it and its workers) applied.",
        ),
        panel(
            "Log lag per member",
            "short",
            [(per_member("onyx_log_lag", [INSTANCE]), "{{instance}}")],
            "Entries in the log each member (the furthest behind of it and its workers) has not "
            "applied yet.",
        ),
        panel(
            "Log length",
            "short",
            [(gauge("onyx_log_length", [INSTANCE], "max"), "entries after the origin")],
            "Entries the log holds after the origin (the last gc): it drops at each gc.",
        ),
        panel(
            "Log apply time",
            "s",
            quantiles("onyx_log_apply_seconds", [INSTANCE]),
            "Time to apply one log entry (the replica, reactions and side effects), over the "
            "members picked.",
        ),
        panel(
            "Entries applied by kind",
            "ops",
            [(rate("onyx_log_entries_applied_total", [INSTANCE], "max", ["kind"]), "{{kind}}")],
            "Log entries applied per second, by kind; every member applies every entry, so this "
            "is the busiest member's rate.",
        ),
        panel(
            "gc runs",
            "ops",
            [(rate("onyx_log_gc_total", [INSTANCE], "max"), "gc entries applied")],
            "gc entries applied per second (each trims the log); every member applies each one.",
        ),
    ]
    job_matchers = [JOBS, INSTANCE]
    jobs = [
        panel(
            "Jobs running and waiting",
            "short",
            [(gauge("onyx_jobs", [INSTANCE], "max", ["state"]), "{{state}}")],
            "Jobs the cluster runs, and jobs waiting for enough peers to run.",
        ),
        panel(
            "Allocation versions",
            "short",
            [
                (
                    gauge("onyx_job_allocation_version", job_matchers, "max", [JOB_LABEL]),
                    "{{onyx_job}}",
                )
            ],
            "Each job's allocation version: the log position of its last reallocation.",
        ),
        panel(
            "Peers per job",
            "short",
            [(gauge("onyx_job_peers", job_matchers, "max", [JOB_LABEL]), "{{onyx_job}}")],
            "Virtual peers allocated to each job.",
        ),
        panel(
            "Epochs",
            "short",
            [
                (gauge("onyx_job_epoch", job_matchers, "max", [JOB_LABEL]), "{{onyx_job}} current"),
                (
                    gauge("onyx_job_committed_epoch", job_matchers, "max", [JOB_LABEL]),
                    "{{onyx_job}} committed",
                ),
            ],
            "Each job's current epoch and its last committed one (of the current allocation), "
            "reported by the member running its coordinator.",
            span=12,
        ),
        panel(
            "Seconds since commit",
            "s",
            [
                (
                    gauge("onyx_job_seconds_since_commit", job_matchers, "max", [JOB_LABEL]),
                    "{{onyx_job}}",
                )
            ],
            "Seconds since each job's coordinator last committed (or started): it should stay "
            "near the job's barrier period.",
            span=12,
        ),
        panel(
            "Restores per job",
            "ops",
            [
                (
                    rate("onyx_task_restores_total", job_matchers, by=[JOB_LABEL, "scope"]),
                    "{{onyx_job}} {{scope}}",
                )
            ],
            "Task peers restoring from their job's last commit per second: global when the whole "
            "job rolled back (every peer restores), local when a peer took a failed peer's seat "
            "over alone.",
            span=12,
        ),
        panel(
            "Local recoveries and in-flight log overflows per job",
            "ops",
            [
                (
                    rate("onyx_task_local_recoveries_total", job_matchers, by=[JOB_LABEL]),
                    "{{onyx_job}} seats replayed",
                ),
                (
                    rate("onyx_in_flight_log_overflows_total", job_matchers, by=[JOB_LABEL]),
                    "{{onyx_job}} in-flight log overflows",
                ),
            ],
            "Seats replayed to where their failed peer was, without a rollback; and in-flight "
            "logs dropped over the job's budget: until the next commit a failure downstream of "
            "such a task rolls the job back.",
            span=12,
        ),
    ]
    return assemble(
        "Onyx cluster",
        "onyx-cluster",
        "The onyx cluster: the ring of peer members, the log they share, the jobs they run, and "
        "the ZooKeeper ensemble the log lives in.",
        [datasource_variable(), job_variable(multi=True), instance_variable()],
        [("Ring", ring), ("Log", log), ("Jobs", jobs), ("ZooKeeper", zookeeper())],
    )


def zookeeper() -> list[timeseries.Panel]:
    """The ensemble as its members' exporters see it (their mntr)."""
    by_member = "{{instance}}"
    return [
        panel(
            "Members serving",
            "short",
            [
                (gauge("zookeeper_up", [ZOOKEEPER], "sum"), "serving"),
                (gauge("up", [ZOOKEEPER], "count"), "members"),
            ],
            "Members that answer and serve requests, out of all members: more than half must "
            "serve for the log to take entries.",
        ),
        panel(
            "Request latency",
            "ms",
            [
                (gauge("zookeeper_avg_latency", [ZOOKEEPER]), f"{by_member} mean"),
                (gauge("zookeeper_max_latency", [ZOOKEEPER]), f"{by_member} max"),
            ],
            "Each member's request latency since its counters were last reset (mntr's "
            "avg_latency and max_latency, in milliseconds).",
        ),
        panel(
            "Packets",
            "ops",
            [
                (
                    rate("zookeeper_packets_received_total", [ZOOKEEPER], by=["instance"]),
                    f"{by_member} received",
                ),
                (
                    rate("zookeeper_packets_sent_total", [ZOOKEEPER], by=["instance"]),
                    f"{by_member} sent",
                ),
            ],
            "Packets each member received from and sent to its clients per second (mntr's "
            "cumulative packets_received and packets_sent, as counters).",
        ),
        panel(
            "Mean fsync time",
            "ms",
            [
                (
                    f"{rate('zookeeper_fsynctime_sum', [ZOOKEEPER], by=['instance'])} / "
                    f"{rate('zookeeper_fsynctime_count', [ZOOKEEPER], by=['instance'])}",
                    by_member,
                )
            ],
            "Each member's mean time to fsync its transaction log over the rate window (mntr's "
            "fsynctime summary): writes to the log wait for it.",
        ),
        panel(
            "Outstanding requests",
            "short",
            [(gauge("zookeeper_outstanding_requests", [ZOOKEEPER]), by_member)],
            "Requests queued at each member: a queue that grows means the member cannot keep up.",
        ),
        panel(
            "Client connections",
            "short",
            [(gauge("zookeeper_num_alive_connections", [ZOOKEEPER]), by_member)],
            "Clients connected to each ZooKeeper server: every peer member (one per machine) and "
            "CLI call holds one, its workers none.",
        ),
        panel(
            "Znodes and watches",
            "short",
            [
                (gauge("zookeeper_znode_count", [ZOOKEEPER], "max"), "znodes"),
                (gauge("zookeeper_watch_count", [ZOOKEEPER], "sum"), "watches"),
            ],
            "Znodes in the tree (the log's entries among them: gc trims them) and watches set "
            "across the members.",
        ),
    ]


def job() -> dict[str, Any]:
    """One job: throughput, batch latency, checkpoints, backpressure, recovery and its peers."""
    matchers = [JOB, INSTANCE]
    task = ["task"]
    throughput = [
        panel(
            "Segments in per task",
            "ops",
            [(rate("onyx_task_segments_in_total", matchers, by=task), "{{task}}")],
            "Segments each task took in per second: polled by an input, received by the others.",
            span=12,
        ),
        panel(
            "Segments out per task",
            "ops",
            [(rate("onyx_task_segments_out_total", matchers, by=task), "{{task}}")],
            "Segments each task sent on (or wrote out, for an output) per second.",
            span=12,
        ),
        panel(
            "Batch latency per task",
            "s",
            quantiles("onyx_task_batch_seconds", matchers, task, TASK_QUANTILES),
            "Time from reading a batch to passing its results on (a Spark task: its time in "
            "Spark).",
            span=24,
        ),
    ]
    checkpoints = [
        panel(
            "Checkpoint duration",
            "s",
            quantiles("onyx_checkpoint_duration_seconds", matchers),
            "Time from an epoch's barrier to its commit, measured by the job's coordinator.",
        ),
        panel(
            "Snapshot size per task",
            "bytes",
            [
                mean("onyx_checkpoint_size_bytes", matchers, task),
                *quantiles("onyx_checkpoint_size_bytes", matchers, task, (0.99,)),
            ],
            "Size of one peer's snapshot of one epoch, by task.",
        ),
        panel(
            "Barrier alignment per task",
            "s",
            quantiles("onyx_barrier_alignment_seconds", matchers, task, TASK_QUANTILES),
            "Time from a barrier's first arrival at a peer to its arrival from every upstream "
            "peer: long alignments mean a slow or skewed upstream.",
        ),
        panel(
            "Epochs",
            "short",
            [
                (gauge("onyx_job_epoch", matchers, "max"), "current"),
                (gauge("onyx_job_committed_epoch", matchers, "max"), "committed"),
            ],
            "The epoch the job's coordinator is in, and the last one committed (of the current "
            "allocation).",
            span=12,
        ),
        panel(
            "Seconds since commit",
            "s",
            [
                (gauge("onyx_job_seconds_since_commit", matchers, "max"), "since commit"),
                (gauge("onyx_job_barrier_period_seconds", matchers, "max"), "barrier period"),
            ],
            "Seconds since the coordinator last committed (or started), against the job's "
            "barrier period.",
            span=12,
        ),
    ]
    running = aggregate("group", ["instance"], selector("onyx_task_segments_in_total", matchers))
    backpressure = [
        panel(
            "Backpressure events per task",
            "ops",
            [(rate("onyx_task_backpressure_events_total", matchers, by=task), "{{task}}")],
            "Times per second a task's peer stopped reading because downstream was congested or "
            "out of credit.",
            span=12,
        ),
        panel(
            "Aeron back-pressured offers per member",
            "ops",
            [
                (
                    f"{rate('onyx_aeron_offers_back_pressured_total', [INSTANCE], by=['instance'])}"
                    f" and on (instance) {running}",
                    "{{instance}}",
                )
            ],
            "Offers Aeron refused for now (back pressure, or a publication not yet connected), "
            "in the members (with their workers) that have run this job's tasks; each member's "
            "count covers all the jobs it runs.",
            span=12,
        ),
    ]
    recovery = [
        panel(
            "Restores per task",
            "ops",
            [
                (
                    rate("onyx_task_restores_total", matchers, by=[*task, "scope"]),
                    "{{task}} {{scope}}",
                )
            ],
            "The task's peers restoring from the job's last commit per second: global when the "
            "whole job rolled back, local when a peer took a failed peer's seat over alone.",
        ),
        panel(
            "Local recoveries per task",
            "ops",
            [(rate("onyx_task_local_recoveries_total", matchers, by=task), "{{task}}")],
            "Seats of the task a peer took over and replayed to where the failed peer was, "
            "without the job rolling back.",
        ),
        panel(
            "In-flight log overflows per task",
            "ops",
            [(rate("onyx_in_flight_log_overflows_total", matchers, by=task), "{{task}}")],
            "Times the task's peers dropped their in-flight log (what they sent since the last "
            "commit) over the job's in_flight_budget: until the next commit a failure downstream "
            "of them rolls the job back.",
        ),
    ]
    peers = [
        panel(
            "Peers allocated",
            "short",
            [
                (gauge("onyx_job_peers", matchers, "max"), "peers allocated"),
                (gauge("onyx_job_waiting", matchers, "max"), "waiting for peers"),
            ],
            "Virtual peers allocated to the job, and 1 while it waits for enough peers to run.",
            span=24,
        ),
    ]
    return assemble(
        "Onyx job",
        "onyx-job",
        "One onyx job: its throughput, batch latency, checkpoints, backpressure, recovery and "
        "peers.",
        [datasource_variable(), job_variable(multi=False), instance_variable()],
        [
            ("Throughput", throughput),
            ("Checkpoints", checkpoints),
            ("Backpressure", backpressure),
            ("Recovery", recovery),
            ("Peers", peers),
        ],
    )


# Output


def dashboards() -> dict[str, dict[str, Any]]:
    """Every dashboard, by the name of the file it is committed as."""
    return {"onyx-cluster.json": cluster(), "onyx-job.json": job()}


def render(board: dict[str, Any]) -> str:
    """A dashboard as committed: sorted keys, 2-space indent, a trailing newline."""
    return json.dumps(board, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def write(directory: Path = DIRECTORY) -> list[Path]:
    """Write every dashboard into ``directory``; the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, board in dashboards().items():
        path = directory / name
        path.write_text(render(board), encoding="utf-8")
        written.append(path)
    return written


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """A dashboard's panels, rows and those nested in collapsed rows included."""
    found = []
    for each in board.get("panels", []):
        found.append(each)
        found.extend(each.get("panels", []))
    return found


def expressions(boards: Sequence[dict[str, Any]] | None = None) -> list[str]:
    """Every PromQL expression the dashboards' panels query (of ``boards``, or of the dashboards
    this module generates), in order. The variables' queries are Grafana's ``label_values()``,
    not PromQL: see ``variable_queries``."""
    chosen = list(dashboards().values()) if boards is None else boards
    return [
        target["expr"]
        for board in chosen
        for each in panels(board)
        for target in each.get("targets", [])
    ]


def variable_queries(boards: Sequence[dict[str, Any]] | None = None) -> list[str]:
    """The queries of the dashboards' query variables, such as
    ``label_values(onyx_build_info, instance)``."""
    chosen = list(dashboards().values()) if boards is None else boards
    return [
        variable["query"]
        for board in chosen
        for variable in board.get("templating", {}).get("list", [])
        if variable.get("type") == "query"
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m monitoring.grafana.dashboards",
        description="Generate onyx's Grafana dashboards as JSON.",
    )
    parser.add_argument(
        "directory",
        nargs="?",
        type=Path,
        default=DIRECTORY,
        help=f"where to write them (default: {DIRECTORY})",
    )
    args = parser.parse_args(argv)
    for path in write(args.directory):
        print(path)


if __name__ == "__main__":
    main()
