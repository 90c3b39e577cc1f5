"""A task runner's part in local recovery: causal logging, and taking a seat over.

A job that recovers locally (``local_recovery`` or ``standby``) has each of its runners chosen,
once, with these parts (``causal_parts``):

- an input keeps an in-flight log of what it sent (peer.runtime.logged_emit);
- a function keeps one too, and logs its determinants: its takes from the inbox
  (peer.runtime.logged_intake), the barriers it passed, and every read of the clock or of
  randomness, its own (timer checks, the time windows are given) and its fn's through
  peer.context, all through its Recorder; they go downstream ahead of its messages;
- a function or an output holds the determinants its upstream seats sent it, up to the job's
  ``causal_depth``, and drops them, like the in-flight log, when their epoch commits.

A runner that took a seat over (its peer is among the placement's ``recovering``) restores the
seat's last committed snapshot alone, then recalls: it asks every downstream peer what it holds
of the seat's determinants and how many messages it had from the seat, and waits for every
answer. The longest log held is the seat's history since the snapshot; the replay follows it
(peer.causal.recorder), the emitter records but does not send what each downstream has already,
and every upstream peer is asked to send again what it sent the seat since the snapshot's
barrier. Once the log is replayed the runner carries on live and says so in the log
(task-recovered).

A job without local recovery gets none of this: the plain clock, and the parts it always had.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from peer.causal.determinants import BARRIER, END, TICK, Deltas, DeterminantLog, Holdings, event
from peer.causal.inflight import InFlightLog, LogLost
from peer.causal.recorder import Recorder, ReplayDiverged
from peer.job.spec import Job, Task
from peer.runtime.intake import InboxIntake
from peer.runtime.logged_emit import LoggedEmitter
from peer.runtime.logged_intake import HoldingIntake, LoggedIntake


class LocalRecoveryError(RuntimeError):
    """What the downstream peers answered cannot be replayed from this seat's snapshot."""


RECOVERY_ERRORS = (ReplayDiverged, LogLost, LocalRecoveryError)
"""What ends a local recovery: the job rolls back to its last commit instead."""


STALL = 30.0
"""Seconds a recall or a replay may go without progress before the job rolls back instead:
an answer that never comes, or a logged take whose messages never arrive."""


class Watchdog:
    """Ends a local recovery that has stopped moving (LocalRecoveryError)."""

    def __init__(self, limit: float = STALL) -> None:
        self.limit = limit
        self.mark: int | None = None
        self.since = 0.0

    def check(self, progress: int, what: str) -> None:
        now = time.monotonic()
        if progress != self.mark:
            self.mark, self.since = progress, now
        elif now - self.since > self.limit:
            raise LocalRecoveryError(f"{what} made no progress for {self.limit:g} s")


class PlainClock:
    """The clock of a task that logs nothing: the wall clock, read afresh each time."""

    replaying = False

    def now(self) -> float:
        return time.time()

    def due(self, at: float) -> float | None:
        """The time to fire timers with, when any is due by ``at``; None otherwise."""
        now = time.time()
        return now if now >= at else None

    def barrier(self, epoch: int) -> None:
        """A barrier passed: nothing to log."""

    def may_end(self, finished: Callable[[], bool]) -> bool:
        """Whether to end the input now: when it is ``finished``."""
        return finished()

    def active(self) -> AbstractContextManager[Any]:
        return nullcontext()


class LoggedClock:
    """A logging task's clock: every read that shapes its state is a determinant, and while it
    replays, every such read gives the logged value back, where the log has it."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    @property
    def replaying(self) -> bool:
        return self.recorder.replaying

    def now(self) -> float:
        return self.recorder.now()

    def due(self, at: float) -> float | None:
        """Live, the time of a timer check that found a timer due (logged as a tick); replaying,
        the logged tick when it comes next."""
        recorder = self.recorder
        if recorder.replaying:
            return recorder.tick() if recorder.next_is(TICK) else None
        if time.time() < at:
            return None
        return recorder.tick()

    def barrier(self, epoch: int) -> None:
        recorder = self.recorder
        if recorder.replaying:
            found = recorder.consume(BARRIER)
            if found[1] != epoch:
                raise ReplayDiverged(
                    f"the replay passed the barrier of epoch {epoch} where the log has {found[1]}"
                )
        else:
            recorder.record((BARRIER, epoch))

    def may_end(self, finished: Callable[[], bool]) -> bool:
        """Live, end once ``finished`` (and log it); replaying, where the log ended, whatever
        has come since (a barrier that came after the end, this time before it)."""
        recorder = self.recorder
        if not recorder.replaying:
            if not finished():
                return False
            recorder.record((END, 0))
            return True
        if not recorder.next_is(END):
            return False
        recorder.consume(END)
        return True

    def active(self) -> AbstractContextManager[Any]:
        return self.recorder.active()


class CausalTask:
    """One runner's causal state: its own determinant log and recorder, the determinants it
    holds of its upstream seats, what each downstream seat has been sent of them, and its
    in-flight log."""

    def __init__(self, seat: int, depth: int, budget: int) -> None:
        self.seat, self.depth = seat, depth
        self.log = DeterminantLog()
        self.recorder = Recorder(self.log)
        self.clock = LoggedClock(self.recorder)
        self.holdings = Holdings(depth)
        self.sent = Deltas(seat, depth)
        self.inflight = InFlightLog(budget)
        self.answers: dict[int, list[Any]] = {}
        """The downstream seats' answers to this runner's Recall, while it takes a seat over."""
        self.asked: frozenset[int] = frozenset()
        self.had: dict[int, int] = {}
        """What each downstream seat had of this seat's messages when the replay began."""

    def deltas(self, to: int) -> list[Any]:
        """The determinants downstream seat ``to`` has not been sent yet."""
        return self.sent.for_downstream(to, self.log, self.holdings)

    def committed(self, epoch: int) -> None:
        self.log.committed(epoch)
        self.holdings.committed(epoch)
        self.inflight.committed(epoch)

    def snapshot(self, received: Mapping[int, int], turn: int) -> dict[str, Any]:
        """What a barrier's snapshot keeps, after the barrier is logged: where the log stands,
        what each channel has carried each way, and the router's turn."""
        return {"offset": self.log.end, "sent": self.inflight.counts(),
                "received": dict(received), "turn": turn}  # fmt: skip

    def restore(self, saved: Mapping[str, Any], epoch: int) -> None:
        """A replacement starts where the seat's snapshot of ``epoch`` left the log and the
        channels: that epoch is committed, so the in-flight log starts after its barrier."""
        self.log = self.recorder.log = DeterminantLog(saved["offset"])
        self.inflight.restore(saved["sent"])
        self.inflight.committed(epoch)

    # -- taking a seat over ------------------------------------------------------------------

    def recall(self, downstream: frozenset[int]) -> None:
        self.asked, self.answers = downstream, {}

    def answered(self, seat: int, body: list[Any]) -> None:
        if seat in self.asked:
            if not isinstance(body, list) or len(body) != 3:
                raise ValueError(f"a Recalled body {body!r:.80} is not [received, offset, events]")
            self.answers[seat] = body

    def recalled(self) -> bool:
        return self.asked <= set(self.answers)

    def replay(self) -> dict[int, int]:
        """Start the replay from the longest log any downstream holds; what each downstream
        seat already has (to suppress), after telling the deltas where each one stands."""
        start = self.log.end
        events: list[Any] = []
        for seat in sorted(self.answers):
            _, offset, held = self.answers[seat]
            end = offset + len(held)
            if offset > start:
                raise LocalRecoveryError(
                    f"seat {seat} holds this seat's log from {offset} only, "
                    f"and its snapshot stands at {start}"
                )
            self.sent.seen(seat, self.seat, max(end, start))
            if end - start > len(events):
                events = [event(e) for e in held[start - offset :]]
        self.recorder.replay(events)
        self.had = {seat: answer[0] for seat, answer in sorted(self.answers.items())}
        return dict(self.had)

    def check_replayed(self) -> None:
        """The replay is over: it must have made again every message a downstream seat had,
        or what the seat had is not what this seat now holds; the job rolls back instead
        (LocalRecoveryError). A message made live in place of a missing one would be taken
        for it and never sent."""
        made = self.inflight.counts()
        for seat, had in sorted(self.had.items()):
            if made.get(seat, 0) < had:
                raise LocalRecoveryError(
                    f"its replay made {made.get(seat, 0)} messages for seat {seat}, "
                    f"which had {had} of them"
                )


@dataclass
class CausalParts:
    """What a runner of a job that recovers locally is made of, chosen once for its task."""

    causal: CausalTask
    intake: Any
    emitter: Any
    clock: PlainClock | LoggedClock


def causal_parts(
    job: Job,
    task: Task,
    seat: int,
    *,
    intake: Any,
    emitter: Any,
    upstream_seats: Mapping[int, int],
    make_emitter: Callable[[InFlightLog, Callable[[int], list[Any]]], LoggedEmitter],
) -> CausalParts:
    """The parts of a runner of ``task``: an input's emitter logs what it sends; a function's
    intake and clock log and its emitter carries the determinants; an output's intake holds
    its upstream's (``upstream_seats``: each upstream short id's seat)."""
    causal = CausalTask(seat, job.causal_depth, job.in_flight_budget)
    logging = task.replayable
    clock: PlainClock | LoggedClock = causal.clock if logging else PlainClock()
    if isinstance(intake, InboxIntake):
        if logging:
            intake = LoggedIntake(intake, causal.holdings, upstream_seats, causal.recorder)
        else:
            intake = HoldingIntake(intake, causal.holdings, upstream_seats)
    if task.kind != "output":
        emitter = make_emitter(causal.inflight, causal.deltas if logging else _none)
    return CausalParts(causal, intake, emitter, clock)


def _none(seat: int) -> list[Any]:
    return []
