"""A member's /metrics with its workers' metrics in it: every series a worker process counts
(its task runners, its transport, its coordinators' epochs, its process) under the same name,
with the label ``worker="<slot>"``.

Each worker keeps its metrics in its own process's registry, as a single-process group does.
prometheus_client's multiprocess mode would share them through files, but it sums counters
across processes (no slot label), cannot carry a custom collector's state (the epochs a
worker's coordinators know), and would change how every process of the project counts. So the
member asks instead: each scrape of the member sends every worker a ``Scrape`` over its pipe
(through the worker's outbox, which never blocks the member), the worker's reader thread
answers at once with its ``Samples``, and the scrape waits for the answers at most
``SCRAPE_TIMEOUT`` s. A worker that has not answered by then is shown by the counters and
histograms of its last answer, if any (they only ever grow, so an old value is merely late),
with ``onyx_worker_metrics_fresh{worker}`` 0 and ``onyx_worker_metrics_age_seconds`` saying how
old it is; its gauges are left out, as an old one would lie (seconds since a commit, frozen). A
hung worker slows a scrape by ``SCRAPE_TIMEOUT`` at most and never hangs it.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from peer import metrics
from peer.cluster.group import epoch_figures
from peer.cluster.ipc import Family, Samples, Scrape

log = logging.getLogger(__name__)

WORKER = "worker"
"""The label naming the worker (its slot, 0 to N-1) a series of a member's comes from."""
SCRAPE_TIMEOUT = 2.0
"""The longest a scrape of the member waits for its workers' answers."""

RESTARTS = Counter(
    "onyx_worker_restarts",
    "Worker processes this member started again, by why: the worker died, it stopped reading "
    "what the member sent it and was killed (unresponsive), or it did not say it was ready "
    "within the start timeout and was killed (not_ready)",
    [WORKER, "reason"],
)


def families(registry: CollectorRegistry, extra: Iterable[Metric] = ()) -> tuple[Family, ...]:
    """Every metric of ``registry`` and ``extra``, as plain values for the pipe."""
    return tuple(
        Family(m.name, m.documentation, m.type, m.unit,
               tuple((s.name, tuple(sorted(s.labels.items())), float(s.value))
                     for s in m.samples))
        for m in itertools.chain(registry.collect(), extra)
    )  # fmt: skip


def worker_state(coordinators: Mapping[Any, Any], transport: Any) -> Iterator[Metric]:
    """What a worker knows beyond its counters, as its member's GroupCollector shows its own:
    the epochs of the coordinators it runs and the publications its transport holds."""
    yield from metrics.epoch_gauges(epoch_figures(coordinators))
    publications = getattr(transport, "publications", None)
    if publications is not None:
        yield GaugeMetricFamily("onyx_aeron_publications", "Aeron publications this group "
                                "holds open", value=float(publications()))  # fmt: skip


@dataclass(frozen=True)
class LastSamples:
    """A worker's last Samples and when they came (time.monotonic())."""

    samples: Samples
    at: float


class WorkerScrapes:
    """The member's side: asks each worker for its samples and keeps the last answer of each.
    ``ask(slot, message)`` puts a message in the worker's outbox (False if it has none)."""

    def __init__(self, count: int, ask: Callable[[int, Any], bool],
                 timeout: float = SCRAPE_TIMEOUT) -> None:  # fmt: skip
        self.count, self.ask, self.timeout = count, ask, timeout
        self.requests = itertools.count(1)
        self.answers: dict[int, LastSamples] = {}
        self.arrived = threading.Condition()

    def answered(self, slot: int, samples: Samples) -> None:
        """A worker's answer (from the thread reading its pipe)."""
        with self.arrived:
            last = self.answers.get(slot)
            if last is None or samples.request >= last.samples.request:
                self.answers[slot] = LastSamples(samples, time.monotonic())
            self.arrived.notify_all()

    def scrape(self) -> tuple[dict[int, LastSamples], set[int]]:
        """Each worker's latest answer, and which of them answered this scrape."""
        with self.arrived:
            request = next(self.requests)
        asked = [slot for slot in range(self.count) if self.ask(slot, Scrape(request))]

        def fresh() -> set[int]:
            return {s for s in asked if s in self.answers
                    and self.answers[s].samples.request >= request}  # fmt: skip

        with self.arrived:
            self.arrived.wait_for(lambda: len(fresh()) == len(asked), self.timeout)
            return dict(self.answers), fresh()


class MemberRegistry(CollectorRegistry):
    """What a member serves on /metrics: ``own`` (its process's metrics) and what is registered
    here (its GroupCollector), merged family by family with its workers' series."""

    def __init__(self, scrapes: WorkerScrapes, own: CollectorRegistry = REGISTRY) -> None:
        super().__init__()
        self.scrapes, self.own = scrapes, own

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for family in itertools.chain(self.own.collect(), super().collect()):
            merged.setdefault(family.name, family)
            if merged[family.name] is not family:
                merged[family.name].samples.extend(family.samples)
        answers, fresh = self.scrapes.scrape()
        now = time.monotonic()
        for slot, answer in sorted(answers.items()):
            for theirs in answer.samples.families:
                if slot in fresh or theirs.type != "gauge":
                    _merge(merged, theirs, str(slot))
        yield from merged.values()
        yield from _status(answers, fresh, now, self.scrapes.count)


def _merge(merged: dict[str, Metric], family: Family, slot: str) -> None:
    """One worker's family into ``merged``, each sample labelled with the worker's slot. A
    family that does not read, or clashes with the member's own in type, is left out."""
    try:
        into = merged.get(family.name)
        if into is None:
            into = merged[family.name] = Metric(
                family.name, family.documentation, family.type, family.unit
            )
        if into.type != family.type:
            raise ValueError(f"it is a {family.type} here, a {into.type} in the member")
        for name, labels, value in family.samples:
            into.add_sample(str(name), {**dict(labels), WORKER: slot}, float(value))
    except Exception as e:
        log.warning("worker %s: its metric %.100r is left out: %s", slot, family.name, e)


def _status(
    answers: dict[int, LastSamples], fresh: set[int], now: float, count: int
) -> Iterator[Metric]:
    shown = GaugeMetricFamily(
        "onyx_worker_metrics_fresh",
        "1 when the worker answered this scrape; 0 when its series are its last answer's, or "
        "missing (it has not answered yet)",
        labels=[WORKER],
    )
    age = GaugeMetricFamily(
        "onyx_worker_metrics_age_seconds",
        "How old the worker's series shown are: 0-ish when fresh",
        labels=[WORKER],
    )
    for slot in range(count):
        shown.add_metric([str(slot)], float(slot in fresh))
        if slot in answers:
            age.add_metric([str(slot)], max(now - answers[slot].at, 0.0))
    yield from (shown, age)
