"""A member's /metrics with its workers' series: each under its own name once, labelled with
the worker's slot; a worker that does not answer is shown by its last counters (its gauges
left out, or nothing before its first answer) with a gauge saying so, never holding up the
scrape; a family that does not read is left out alone."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from peer.cluster.ipc import Family, Samples, Scrape
from peer.cluster.worker_metrics import MemberRegistry, WorkerScrapes, families


def counted(segments: float) -> tuple[Family, ...]:
    """A worker's families: its task runner counted ``segments``."""
    registry = CollectorRegistry()
    meter = Counter("onyx_task_segments_in", "Segments", ["onyx_job", "task"], registry=registry)
    meter.labels("j", "split").inc(segments)
    since = Gauge("onyx_job_seconds_since_commit", "Since", ["onyx_job"], registry=registry)
    since.labels("j").set(segments)
    return families(registry)


class Fake:
    """Workers answering from the test: ``silent`` ones say nothing."""

    def __init__(self, count: int, silent: set[int]) -> None:
        self.silent = silent
        self.scrapes = WorkerScrapes(count, self.ask, timeout=0.2)
        self.segments = {slot: 10.0 * (slot + 1) for slot in range(count)}

    def ask(self, slot: int, scrape: Scrape) -> bool:
        if slot not in self.silent:
            self.scrapes.answered(slot, Samples(scrape.request, counted(self.segments[slot])))
        return True


def served(registry: CollectorRegistry) -> dict[str, dict[frozenset, float]]:
    text = generate_latest(registry).decode()
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(names) == len(set(names)), f"a family is served twice: {sorted(names)}"
    found: dict[str, dict[frozenset, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
    return found


def own() -> CollectorRegistry:
    """The member's own registry: the same counter, never counted in the member itself."""
    registry = CollectorRegistry()
    Counter("onyx_task_segments_in", "Segments", ["onyx_job", "task"], registry=registry)
    Counter("onyx_aeron_frames_sent", "Frames", registry=registry).inc(3)
    return registry


def series(worker: str) -> frozenset:
    return frozenset({"onyx_job": "j", "task": "split", "worker": worker}.items())


def test_each_workers_series_is_served_under_its_name_with_its_slot():
    workers = Fake(2, silent=set())
    found = served(MemberRegistry(workers.scrapes, own()))
    assert found["onyx_task_segments_in_total"] == {series("0"): 10.0, series("1"): 20.0}
    assert found["onyx_aeron_frames_sent_total"] == {frozenset(): 3.0}
    assert found["onyx_worker_metrics_fresh"] == {
        frozenset({("worker", "0")}): 1.0, frozenset({("worker", "1")}): 1.0
    }  # fmt: skip


def test_a_silent_worker_is_shown_by_its_last_counters_and_said_to_be_stale():
    workers = Fake(2, silent={1})
    first = served(MemberRegistry(workers.scrapes, own()))
    assert first["onyx_task_segments_in_total"] == {series("0"): 10.0}
    assert first["onyx_worker_metrics_fresh"][frozenset({("worker", "1")})] == 0.0
    assert frozenset({("worker", "1")}) not in first["onyx_worker_metrics_age_seconds"]
    workers.silent = set()
    served(MemberRegistry(workers.scrapes, own()))
    workers.silent, workers.segments[1] = {1}, 99.0
    stale = served(MemberRegistry(workers.scrapes, own()))
    assert stale["onyx_task_segments_in_total"][series("1")] == 20.0
    assert stale["onyx_job_seconds_since_commit"] == {
        frozenset({("onyx_job", "j"), ("worker", "0")}): 10.0
    }  # fmt: skip
    assert stale["onyx_worker_metrics_fresh"][frozenset({("worker", "1")})] == 0.0
    assert stale["onyx_worker_metrics_age_seconds"][frozenset({("worker", "1")})] >= 0.0


def test_a_family_that_does_not_read_is_left_out_alone(caplog):
    scrapes = WorkerScrapes(1, lambda slot, scrape: True)
    bad = Family("onyx_weird", "?", "no-such-type", "", (("onyx_weird", (), 1.0),))
    clash = Family(
        "onyx_aeron_frames_sent", "?", "gauge", "", (("onyx_aeron_frames_sent", (), 1.0),)
    )
    scrapes.answered(0, Samples(1, (bad, clash, *counted(5.0))))
    found = served(MemberRegistry(scrapes, own()))
    assert found["onyx_task_segments_in_total"] == {series("0"): 5.0}
    assert not [name for name in found if name.startswith("onyx_weird")]
    assert found["onyx_aeron_frames_sent_total"] == {frozenset(): 3.0}
    assert "worker 0: its metric 'onyx_weird' is left out" in caplog.text
    assert "worker 0: its metric 'onyx_aeron_frames_sent' is left out" in caplog.text
