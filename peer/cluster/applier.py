"""How a member turns the entries it reads into transitions: the group asks its applier.

``Sequential`` is the classic apply: every entry, allocation included, on the group's thread.
``Background`` runs the multi-versioned pipeline (peer.log.pipeline): allocations are computed
on one thread of its own, with the planner the group would use, while the entries that do not
read them go on; an entry that reads a lagging key waits until the allocation lands. Both give
the same transitions in the same order, and the same replica at every position.

A group reads the log after ``position`` (the last entry it handed over, applied or waiting),
acts on ``transitions``, and hands its data plane ``complete``: the last replica with nothing
lagging, so the data plane never sees jobs whose allocation has not landed yet.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Protocol

from peer.log.apply import apply_entry
from peer.log.entry import Entry, Transition
from peer.log.pipeline import PendingAllocation, Pipeline
from peer.log.replica import Replica
from peer.scheduling.request import Planner, plan_here

log = logging.getLogger(__name__)


class Applier(Protocol):
    @property
    def position(self) -> int:
        """The position of the last entry handed over."""

    @property
    def complete(self) -> Replica:
        """The last replica with nothing lagging."""

    @property
    def since(self) -> tuple[Entry, ...]:
        """The entries handed out as transitions after ``complete``, in order: applied to it
        one by one with ``apply_entry`` they give the replica of the last transition, every
        key current (what a member hands a worker that starts over, peer.cluster.member)."""

    def transitions(self, entries: Iterable[Entry]) -> Iterator[Transition]:
        """The transitions that follow from the allocations landed since the last call and
        from ``entries``, in log order, lazily."""

    def close(self) -> None:
        """Stop whatever runs in the background."""


class Sequential:
    """The classic apply: one entry after another, each with its allocation."""

    def __init__(self, replica: Replica, planner: Planner = plan_here) -> None:
        self.replica, self.planner = replica, planner

    @property
    def position(self) -> int:
        return self.replica.version

    @property
    def complete(self) -> Replica:
        return self.replica

    @property
    def since(self) -> tuple[Entry, ...]:
        return ()

    def transitions(self, entries: Iterable[Entry]) -> Iterator[Transition]:
        for entry in entries:
            t = apply_entry(self.replica, entry, self.planner)
            self.replica = t.new
            yield t

    def close(self) -> None:
        return None


class Background:
    """The pipeline, its owed allocations computed on one thread; ``wakeup`` is set when one
    lands, so the group's loop comes back for what it lets through."""

    def __init__(
        self, replica: Replica, wakeup: threading.Event, planner: Planner = plan_here
    ) -> None:
        self.machine = Pipeline.start(replica)
        self.wakeup, self.planner = wakeup, planner
        self.offered = replica.version
        self.computing: int | None = None
        self.asked: queue.SimpleQueue[PendingAllocation | None] = queue.SimpleQueue()
        self.answers: queue.SimpleQueue[tuple[int, Replica | Exception]] = queue.SimpleQueue()
        self.worker = threading.Thread(target=self._work, name="allocations", daemon=True)
        self.worker.start()
        log.info("allocations computed in the background from log position %d", self.offered)

    @property
    def position(self) -> int:
        return self.offered

    @property
    def complete(self) -> Replica:
        return self.machine.complete

    @property
    def since(self) -> tuple[Entry, ...]:
        return tuple(self.machine.since)

    def transitions(self, entries: Iterable[Entry]) -> Iterator[Transition]:
        while not self.answers.empty():
            position, result = self.answers.get()
            self.computing = None
            if isinstance(result, Exception):
                log.warning("allocation at log position %d raised: %s", position, result)
            self.machine, progress = self.machine.land(position, result)
            self._ask()
            yield from progress.transitions
        for entry in entries:
            self.offered = entry.position
            self.machine, progress = self.machine.offer(entry)
            self._ask()
            yield from progress.transitions

    def _ask(self) -> None:
        pending = self.machine.ready()
        if pending is not None and self.computing is None:
            self.computing = pending.position
            self.asked.put(pending)

    def _work(self) -> None:
        while (pending := self.asked.get()) is not None:
            self.answers.put((pending.position, pending.outcome(self.planner)))
            self.wakeup.set()

    def close(self) -> None:
        self.asked.put(None)
