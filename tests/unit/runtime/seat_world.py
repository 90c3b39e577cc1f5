"""A function's seat and its neighbours, played by the test: two upstream inputs whose in-flight
logs the test keeps, one downstream output that holds the seat's determinants and counts what it
had, and the job's coordinator. The seat's first peer runs; then a replacement takes the seat
over and replays, asking the test's neighbours what a real peer would ask them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from peer.causal.determinants import Holdings
from peer.job.spec import Job, Task, Trigger, Window
from peer.messaging.messages import (
    Barrier,
    Batch,
    Determinants,
    Recall,
    Recalled,
    Recover,
    ReplayFrom,
    RestorePoint,
)
from peer.runtime.checkpoints import CheckpointStorage
from peer.runtime.placement import place
from peer.runtime.routing import Router, routes
from peer.runtime.task import TaskContext, TaskRunner
from tests.support import reported, wait_for

FNS = "tests.unit.runtime.causal_fns"
SOURCES = {"a0": 1, "b0": 2}
"""The upstream peers and their short ids."""
SHORT_IDS = {"j": 100, **SOURCES, "f0": 3, "o0": 4, "s0": 5}


def job(period: float = 0.0005, *, on_watermarks: bool = False) -> Job:
    """The seat's job: its windows fire on a timer, or, ``on_watermarks``, fixed windows of
    the fn's count close as the inputs' watermarks pass them."""
    windows, triggers = (
        (Window("w", "f", "global", "collect"),),
        (Trigger("w", "timer", period=period),),
    )
    if on_watermarks:
        windows = (Window("c", "f", "fixed", "count", key="seen", range=5),)
        triggers = (Trigger("c", "watermark"),)
    return Job(
        workflow=(("a", "f"), ("b", "f"), ("f", "out")),
        catalog=(
            Task("a", "input", plugin="peer.plugins.memory:input"),
            Task("b", "input", plugin="peer.plugins.memory:input"),
            Task("f", "function", fn=f"{FNS}:Ordered", batch_size=3),
            Task("out", "output", plugin="peer.plugins.null:output"),
        ),
        windows=windows,
        triggers=triggers,
        local_recovery=True,
        id="j",
    )


@dataclass
class Downstream:
    """The output peer: what it received from each peer in the seat, and the determinants that
    came ahead."""

    holdings: Holdings = field(default_factory=lambda: Holdings(1))
    received: dict[str, list[Any]] = field(default_factory=lambda: {"f0": [], "s0": []})
    """In-line messages, in order, by sender."""
    recalls: list[str] = field(default_factory=list)

    def take(self, frm: str, item: Any) -> None:
        if isinstance(item, Determinants):
            self.holdings.receive(item.deltas)
        elif isinstance(item, Recall):
            self.recalls.append(frm)
        else:
            self.received[frm].append(item)


@dataclass
class Upstream:
    """The inputs: what each sent the seat, barriers included, in order (their in-flight logs
    as far as the seat is concerned)."""

    sent: dict[str, list[Any]] = field(default_factory=lambda: {p: [] for p in SOURCES})
    replays: list[tuple[str, int]] = field(default_factory=list)

    def after(self, source: str, epoch: int) -> list[Any]:
        """What ``source`` sent after its barrier of ``epoch`` (0: everything)."""
        items = self.sent[source]
        if epoch == 0:
            return list(items)
        cut = next(i for i, m in enumerate(items) if isinstance(m, Barrier) and m.epoch == epoch)
        return items[cut + 1 :]


@dataclass
class SeatWorld:
    storage: CheckpointStorage = field(
        default_factory=lambda: CheckpointStorage("memory://seat-tests", uuid.uuid4().hex)
    )
    down: Downstream = field(default_factory=Downstream)
    up: Upstream = field(default_factory=Upstream)
    reports: list[tuple[str, str, int]] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    rollbacks: list[str] = field(default_factory=list)

    def runner(self, peer: str, the_job: Job) -> TaskRunner:
        """``f0`` in its seat, or ``s0`` having taken it over."""
        allocation = {"a": ("a0",), "b": ("b0",), "f": (peer,), "out": ("o0",)}
        takeovers = {"s0": "f0"} if peer == "s0" else {}
        placement = place(the_job, 7, allocation, SHORT_IDS, {}, takeovers=takeovers,
                          recovering=frozenset(takeovers))  # fmt: skip
        storage = self.storage

        def send(to: str, item: Any) -> None:
            if to == "o0":
                self.down.take(peer, item)
            elif isinstance(item, ReplayFrom):
                self.up.replays.append((to, item.epoch))

        runner = TaskRunner(
            TaskContext(
                placement=placement, peer=peer, router=Router(routes(placement, "f")),
                send=send,
                report=lambda m: self.reports.append((peer, *reported(m))),
                grant=lambda source, batches, rows: None, congested=lambda: False,
                complete=lambda: None, storage=storage,
                fetch=lambda job_id, epoch, slot, groups: storage.restore(
                    job_id, epoch, "f", slot, groups
                ),
                recovered=lambda: self.recovered.append(peer),
                rollback=self.rollbacks.append,
            )
        )  # fmt: skip
        runner.credit("o0", 1 << 30)  # the output takes whatever comes
        return runner

    def deliver(self, r: TaskRunner, source: str, item: Any) -> None:
        self.up.sent[source].append(item)
        r.deliver(SOURCES[source], item)

    def batch(self, r: TaskRunner, source: str, values: list[int]) -> None:
        self.deliver(r, source, Batch([{"v": v, "from": source} for v in values]))

    def replay_to(self, r: TaskRunner, received: int, held: tuple[int, list[Any]]) -> None:
        """Answer the replacement as its neighbours would: the downstream has ``received``
        messages from the seat and ``held`` (offset, events) of its determinants; each upstream
        sends its in-flight log again from the barrier asked for."""
        r.recalled("o0", Recalled(received, held[0], [list(e) for e in held[1]]))
        for source, epoch in self.up.replays:
            for item in self.up.after(source, epoch):
                r.deliver(SOURCES[source], item)

    def close(self) -> None:
        self.storage.close()


def step_until(r: TaskRunner, done, what: str) -> None:
    def stepped() -> bool:
        r.step()
        return done()

    wait_for(stepped, 10, what, interval=0)


def committed_epoch(world: SeatWorld, r: TaskRunner, epoch: int) -> None:
    """The seat snapshots ``epoch`` and acks; the coordinator commits it and says so."""
    step_until(r, lambda: (r.ctx.peer, "ack", epoch) in world.reports, f"the ack of {epoch}")
    r.committed(epoch)
    world.down.holdings.committed(epoch)


def recover_body(epoch: int | None) -> Recover:
    """What the coordinator tells a peer of the seat's job: restore from ``epoch`` (None: from
    the beginning)."""
    if epoch is None:
        return Recover(None)
    return Recover(RestorePoint("j", 7, epoch, {"a": 1, "b": 1, "f": 1, "out": 1}))
