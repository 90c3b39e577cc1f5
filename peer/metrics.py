"""What a peer group tells Prometheus: ring health, its place in the log, epoch progress and the
data plane, served on ``/metrics`` by ``onyx peer start --metrics-port``.

Names follow Prometheus conventions: the ``onyx_`` prefix, base units (seconds, bytes), ``_total``
on counters (the client adds it), and labels of low cardinality only (job ids, task names, entry
kinds; never segment values). A job's id is the label ``onyx_job``, which leaves Prometheus's own
``job`` label (the scrape job) alone. Two kinds of metric live here:

- events, counted where they happen (entries applied, batches, barriers, checkpoints, frames):
  module-level counters and histograms, one per process, which ``onyx run`` also reads in-process
  to show progress;
- state, read when Prometheus scrapes (``GroupCollector``, which peer.endpoints registers where
  it serves them) from a ``GroupSnapshot`` the group makes then (peer.cluster.group): the ring
  and the jobs from its replica, the log's tail from its store, the epochs from the coordinators
  it runs. Reading at scrape time means a gauge can never go stale when, say, a job's
  coordinator moves to another group: the group that lost it simply stops reporting it. The
  collector reads only the snapshot, never the group itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from peer import __version__

JOB = "onyx_job"
"""The label holding an onyx job's id. Not ``job``: Prometheus gives every series the ``job`` of
its scrape config, and would rename ours ``exported_job`` unless the scrape honoured our labels."""
JOB_TASK = (JOB, "task")
LATENCY = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SIZES = tuple(float(4**n) for n in range(4, 16))
"""256 bytes to 256 MiB, by fours."""


def build_info(registry: CollectorRegistry = REGISTRY) -> None:
    """``onyx_build_info{version}`` in ``registry``: every exporter of the project serves it."""
    Info("onyx_build", "The running version of the peer", registry=registry).info(
        {"version": __version__}
    )


def driver_registry() -> CollectorRegistry:
    """A registry of its own for a media driver's exporter, which serves no peer metrics."""
    registry = CollectorRegistry()
    build_info(registry)
    return registry


build_info()

ENTRIES_APPLIED = Counter(
    "onyx_log_entries_applied", "Log entries this group applied, by kind", ["kind"]
)
APPLY_SECONDS = Histogram(
    "onyx_log_apply_seconds",
    "Time to apply one log entry: the replica, reactions and side effects",
    buckets=LATENCY,
)
GC_RUNS = Counter("onyx_log_gc", "gc entries this group applied (each trims the log)")
JOINS_ABORTED = Counter("onyx_ring_joins_aborted", "abort-join-cluster entries this group applied")
DEATHS_DETECTED = Counter(
    "onyx_ring_deaths_detected", "Groups this group reported dead (their pulse was gone)"
)
ENTRIES_LEARNED = Counter(
    "onyx_log_entries_learned",
    "Log entries this group consumed, by how it learned them: gossip, zookeeper (read by "
    "position), written (its own), listing (the gap safety net) or origin (a jump past a trim)",
    ["source"],
)
READS_BY_POSITION = Counter(
    "onyx_log_reads_by_position",
    "Reads of one log entry at its position from ZooKeeper, by whether it was there",
    ["found"],
)
RUMORS_SENT = Counter("onyx_log_rumors_sent", "Copies of log entries this group gossiped")
RUMORS_RECEIVED = Counter(
    "onyx_log_rumors_received",
    "Copies of log entries other groups gossiped to this one, kept or (by a classic group) not",
)
RUMORS_DROPPED = Counter(
    "onyx_log_rumors_dropped", "Rumors this group dropped: they did not read, or found no site"
)

SEGMENTS_IN = Counter(
    "onyx_task_segments_in",
    "Segments a task's peers in this group took in: polled by an input, received by others",
    JOB_TASK,
)
LATE_SEGMENTS = Counter(
    "onyx_window_late_segments",
    "Segments a window or a join (its id in the window label) took as late, their event time "
    "behind its task's watermark: dropped, or sent to its side output",
    (*JOB_TASK, "window"),
)
WATERMARK = Gauge(
    "onyx_task_watermark",
    "The watermark a task's peer in this group passed last: the event time below which its "
    "input is complete, in the job's units of event time (milliseconds for Nexmark)",
    JOB_TASK,
)
KAFKA_LAG = Gauge(
    "onyx_kafka_consumer_lag",
    "Records a Kafka input's partition holds past the input's next offset (its end, as the "
    "input last fetched it, less where it reads)",
    ("task", "topic", "partition"),
)
SEGMENTS_OUT = Counter(
    "onyx_task_segments_out",
    "Segments a task's peers in this group sent on, or wrote out for an output",
    JOB_TASK,
)
BATCH_SECONDS = Histogram(
    "onyx_task_batch_seconds",
    "Time from reading a batch to passing its results on (a Spark task: its time in Spark)",
    JOB_TASK,
    buckets=LATENCY,
)
BACKPRESSURE = Counter(
    "onyx_task_backpressure_events",
    "Times a task's peer stopped reading because downstream was congested or out of credit",
    JOB_TASK,
)
ALIGNMENT_SECONDS = Histogram(
    "onyx_barrier_alignment_seconds",
    "Time from a barrier's first arrival at a peer to its arrival from every upstream peer",
    JOB_TASK,
    buckets=LATENCY,
)
QUEUED_AT_BARRIER = Histogram(
    "onyx_barrier_queued_batches",
    "Batches a barrier found queued ahead of it from its sender as it reached a peer: what it "
    "waits behind there (credit bounds it; a debloated receiver keeps it to its target)",
    JOB_TASK,
    buckets=(0, 1, 2, 4, 8, 16, 32, 64, 128),
)
CHECKPOINT_SECONDS = Histogram(
    "onyx_checkpoint_duration_seconds",
    "Time from an epoch's barrier to its commit, measured by the job's coordinator",
    [JOB],
    buckets=LATENCY,
)
ABANDONED_EPOCHS = Counter(
    "onyx_checkpoint_abandoned_epochs",
    "Epochs the job's coordinator gave up on: not committed within the job's checkpoint_timeout "
    "of their barrier (more in a row than the job tolerates roll it back)",
    [JOB],
)
SNAPSHOT_BYTES = Histogram(
    "onyx_checkpoint_size_bytes",
    "Size of one peer's snapshot of one epoch",
    JOB_TASK,
    buckets=SIZES,
)
STORAGE_FAILURES = Counter(
    "onyx_checkpoint_storage_failures",
    "Operations on checkpoint storage or an exactly-once sink's object store that failed (each "
    "try counts; an object store's are retried): upload, read, publish or delete",
    ["operation"],
)
STATE_DISK_FAILURES = Counter(
    "onyx_state_disk_failures",
    "Operations of the disk state backend (an embedded RocksDB under --state-dir) that failed, "
    "each failing its job: open, read, write or close (a full disk, above all)",
    ["operation"],
)
RESTORES = Counter(
    "onyx_task_restores",
    "Times a task's peer restored its state from a committed snapshot: scope global when its "
    "whole job rolled back, local when the peer took a failed peer's seat over alone, handover "
    "when the job moved at a commit it stood still at (a member's graceful leave): nothing is "
    "done again",
    [*JOB_TASK, "scope"],
)
RESTORE_SCOPES = ("global", "local", "handover")
RESTORE_READ_BYTES = Counter(
    "onyx_restore_read_bytes",
    "Bytes a task's peers read from checkpoint storage to restore its snapshots: of keyed "
    "state, only the key groups each slot owns now",
    JOB_TASK,
)
LOCAL_RECOVERIES = Counter(
    "onyx_task_local_recoveries",
    "Seats a task's peer took over and replayed to where the failed peer was, without the job "
    "rolling back",
    JOB_TASK,
)
IN_FLIGHT_OVERFLOWS = Counter(
    "onyx_in_flight_log_overflows",
    "Times a task's peer dropped its in-flight log, over its budget: until the next commit a "
    "failure downstream of it rolls the job back",
    JOB_TASK,
)

FRAMES_SENT = Counter("onyx_aeron_frames_sent", "Frames Aeron took from this group")
BYTES_SENT = Counter("onyx_aeron_sent_bytes", "Bytes of the frames Aeron took from this group")
BACK_PRESSURED = Counter(
    "onyx_aeron_offers_back_pressured",
    "Offers Aeron refused for now: back pressure, or a publication not yet connected",
)
FRAMES_RECEIVED = Counter("onyx_aeron_frames_received", "Frames this group's subscription read")
BYTES_RECEIVED = Counter("onyx_aeron_received_bytes", "Bytes this group's subscription read")


@dataclass(frozen=True)
class TaskMeters:
    """One task's series, labelled once when its runner starts rather than on every batch."""

    segments_in: Counter
    segments_out: Counter
    watermark: Gauge
    batch_seconds: Histogram
    backpressure: Counter
    alignment_seconds: Histogram
    queued_at_barrier: Histogram
    snapshot_bytes: Histogram
    local_recoveries: Counter
    in_flight_overflows: Counter
    restores: dict[str, Counter]
    """By scope (RESTORE_SCOPES): each made at the start, so that it is shown at 0."""


def task_meters(job: str, task: str) -> TaskMeters:
    return TaskMeters(
        segments_in=SEGMENTS_IN.labels(job, task),
        segments_out=SEGMENTS_OUT.labels(job, task),
        watermark=WATERMARK.labels(job, task),
        batch_seconds=BATCH_SECONDS.labels(job, task),
        backpressure=BACKPRESSURE.labels(job, task),
        alignment_seconds=ALIGNMENT_SECONDS.labels(job, task),
        queued_at_barrier=QUEUED_AT_BARRIER.labels(job, task),
        snapshot_bytes=SNAPSHOT_BYTES.labels(job, task),
        local_recoveries=LOCAL_RECOVERIES.labels(job, task),
        in_flight_overflows=IN_FLIGHT_OVERFLOWS.labels(job, task),
        restores={scope: RESTORES.labels(job, task, scope) for scope in RESTORE_SCOPES},
    )


def segments_in(job: str, task: str) -> float:
    """How many segments ``task`` of ``job`` has taken in, in this process."""
    value = REGISTRY.get_sample_value("onyx_task_segments_in_total", {JOB: job, "task": task})
    return value or 0.0


def watermark_of(job: str, task: str) -> float | None:
    """The watermark ``task`` of ``job`` passed last in this process, None before one: read
    from its own gauge, not by collecting the registry, so that it is cheap to sample often."""
    wanted = {JOB: job, "task": task}
    for metric in WATERMARK.collect():
        for sample in metric.samples:
            if sample.labels == wanted:
                return sample.value
    return None


Gauges = Iterator[GaugeMetricFamily]


class MetricsError(RuntimeError):
    """The metrics cannot be served; the message names the address."""


@dataclass(frozen=True)
class RingFigures:
    member: bool
    """Whether the group is joined to the ring."""
    groups: int
    watch_pairs: int
    watch_target_alive: bool
    """False once the group it watches has lost its pulse, until the ring is closed without it."""
    joins_in_flight: int
    virtual_peers: int
    """This group's peers that are active in the replica."""


@dataclass(frozen=True)
class MemberFigures:
    statuses: tuple[tuple[str, int], ...]
    """How many members the log has in each lifecycle status, every status listed."""
    unreachable: int | None
    """Members this group's membership holds unreachable now; None without a membership."""


@dataclass(frozen=True)
class LogFigures:
    position: int
    """Of the last entry the group applied."""
    origin: int
    """Of the origin replica: the last gc read, or -1 before any."""
    tail: int | None
    """Of the newest entry in the log; None while the store cannot answer."""


@dataclass(frozen=True)
class JobFigures:
    id: str
    peers: int
    """Virtual peers allocated to it; 0 while it waits."""
    allocation_version: int | None
    barrier_period: float | None


@dataclass(frozen=True)
class EpochFigures:
    """What the coordinator of a job this group runs knows."""

    job: str
    epoch: int
    committed: int
    """The last committed epoch of the current allocation; 0 before its first."""
    last_commit: float
    """When it last committed (or started), in seconds since the epoch."""


@dataclass(frozen=True)
class GroupSnapshot:
    """What the group's gauges show, taken at one scrape."""

    ring: RingFigures
    members: MemberFigures
    log: LogFigures
    jobs: tuple[JobFigures, ...]
    """Every job of the cluster, by id."""
    epochs: tuple[EpochFigures, ...]
    """The jobs whose coordinators this group runs, by id."""
    publications: int | None
    """Aeron publications the group holds open; None without Aeron."""


class GroupCollector(Collector):
    """The group's state as gauges, read when scraped from ``snapshot()``; None while the group
    is between incarnations."""

    def __init__(self, snapshot: Callable[[], GroupSnapshot | None]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Gauges:
        snapshot = self._snapshot()
        if snapshot is None:
            return
        yield from _ring(snapshot.ring)
        yield from _members(snapshot.members)
        yield from _log(snapshot.log)
        yield from _jobs(snapshot.jobs)
        yield from epoch_gauges(snapshot.epochs)
        if snapshot.publications is not None:
            yield _gauge("onyx_aeron_publications", "Aeron publications this group holds open",
                         float(snapshot.publications))  # fmt: skip


def _gauge(
    name: str, doc: str, value: float | None = None, labels: tuple[str, ...] = ()
) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value, labels=labels or None)


def _ring(ring: RingFigures) -> Gauges:
    yield _gauge("onyx_ring_member", "1 while this group is joined to the ring",
                 float(ring.member))  # fmt: skip
    yield _gauge("onyx_ring_groups", "Groups joined to the ring", float(ring.groups))
    yield _gauge("onyx_ring_watch_pairs", "Watch pairs (watcher to watched) in the ring",
                 float(ring.watch_pairs))  # fmt: skip
    yield _gauge("onyx_ring_watch_target_alive",
                 "1 unless the group this group watches has lost its pulse and is not yet "
                 "replaced in the ring", float(ring.watch_target_alive))  # fmt: skip
    yield _gauge("onyx_ring_joins_in_flight", "Joins prepared or accepted but not yet finished",
                 float(ring.joins_in_flight))  # fmt: skip
    yield _gauge("onyx_group_virtual_peers", "Active virtual peers of this group",
                 float(ring.virtual_peers))  # fmt: skip


def _members(members: MemberFigures) -> Gauges:
    statuses = _gauge("onyx_members", "Members (peer groups) the log has, by lifecycle status",
                      labels=("status",))  # fmt: skip
    for status, count in members.statuses:
        statuses.add_metric([status], float(count))
    yield statuses
    if members.unreachable is not None:
        yield _gauge("onyx_members_unreachable",
                     "Members held unreachable now, as gossip has it here (not yet down)",
                     float(members.unreachable))  # fmt: skip


def _log(figures: LogFigures) -> Gauges:
    """While the store cannot answer (ZooKeeper unreachable) the gauges that need the tail are
    left out rather than failing the whole scrape."""
    position = figures.position
    yield _gauge("onyx_log_position", "Position of the last entry this group applied",
                 float(position))  # fmt: skip
    yield _gauge("onyx_log_origin_position",
                 "Position of the origin replica: the last gc read, or -1 before any",
                 float(figures.origin))  # fmt: skip
    if figures.tail is None:
        return
    tail = max(figures.tail, position)
    yield _gauge("onyx_log_tail_position", "Position of the newest entry in the log", float(tail))
    yield _gauge("onyx_log_lag", "Entries in the log this group has not applied yet",
                 float(tail - position))  # fmt: skip
    yield _gauge("onyx_log_length", "Entries the log holds after the origin",
                 float(tail - figures.origin))  # fmt: skip


def _jobs(jobs: tuple[JobFigures, ...]) -> Gauges:
    waiting = _gauge("onyx_job_waiting", "1 while a job has too few peers to run", labels=(JOB,))
    version = _gauge("onyx_job_allocation_version", "The job's allocation version (the log "
                     "position of its last reallocation)", labels=(JOB,))  # fmt: skip
    period = _gauge("onyx_job_barrier_period_seconds", "How often the job checkpoints",
                    labels=(JOB,))  # fmt: skip
    peers = _gauge("onyx_job_peers", "Virtual peers allocated to the job", labels=(JOB,))
    counts = {"running": 0, "waiting": 0}
    for job in jobs:
        counts["running" if job.peers else "waiting"] += 1
        waiting.add_metric([job.id], float(not job.peers))
        peers.add_metric([job.id], float(job.peers))
        if job.allocation_version is not None:
            version.add_metric([job.id], float(job.allocation_version))
        if job.barrier_period is not None:
            period.add_metric([job.id], float(job.barrier_period))
    states = _gauge("onyx_jobs", "Jobs the cluster runs or waits to run", labels=("state",))
    for name, count in counts.items():
        states.add_metric([name], float(count))
    yield from (states, waiting, version, period, peers)


def epoch_gauges(epochs: tuple[EpochFigures, ...]) -> Gauges:
    """What this group's coordinators know; the other jobs are other groups' to report."""
    epoch = _gauge("onyx_job_epoch", "The epoch the job's coordinator is in", labels=(JOB,))
    committed = _gauge("onyx_job_committed_epoch", "The job's last committed epoch (of the "
                       "current allocation; 0 before its first)", labels=(JOB,))  # fmt: skip
    at = _gauge(
        "onyx_job_last_commit_timestamp_seconds",
        "When the job's coordinator last committed (or started)",
        labels=(JOB,),
    )
    since = _gauge("onyx_job_seconds_since_commit",
                   "Seconds since the job's coordinator last committed (or started)",
                   labels=(JOB,))  # fmt: skip
    now = time.time()
    for figures in epochs:
        epoch.add_metric([figures.job], float(figures.epoch))
        committed.add_metric([figures.job], float(figures.committed))
        at.add_metric([figures.job], figures.last_commit)
        since.add_metric([figures.job], max(now - figures.last_commit, 0.0))
    yield from (epoch, committed, at, since)
