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
from peer.messaging.messages import Recalled
from peer.runtime.intake import InboxIntake
from peer.runtime.logged_emit import LoggedEmitter, Wiring
from peer.runtime.logged_intake import HoldingIntake, LoggedIntake
from peer.runtime.snapshot import SeatState
from peer.runtime.task_windows import Windows


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

    def restart(self) -> None:
        """Work other than the progress watched goes on: the wait for it starts afresh."""
        self.since = time.monotonic()


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
        self.answers: dict[int, Recalled] = {}
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

    def restore(self, saved: SeatState, epoch: int) -> None:
        """A replacement starts where the seat's snapshot of ``epoch`` left the log and the
        channels: that epoch is committed, so the in-flight log starts after its barrier."""
        self.log = self.recorder.log = DeterminantLog(saved.offset)
        self.inflight.restore(saved.sent)
        self.inflight.committed(epoch)

    # -- taking a seat over ------------------------------------------------------------------

    def recall(self, downstream: frozenset[int]) -> None:
        self.asked, self.answers = downstream, {}

    def answered(self, seat: int, answer: Recalled) -> None:
        if seat in self.asked:
            self.answers[seat] = answer

    def recalled(self) -> bool:
        return self.asked <= set(self.answers)

    def replay(self) -> dict[int, int]:
        """Start the replay from the longest log any downstream holds; what each downstream
        seat already has (to suppress), after telling the deltas where each one stands."""
        start = self.log.end
        events: list[Any] = []
        for seat in sorted(self.answers):
            answer = self.answers[seat]
            offset, held = answer.offset, answer.events
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
        self.had = {seat: answer.received for seat, answer in sorted(self.answers.items())}
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


class NotHolding:
    """An input's intake side of local recovery: it has no upstream seats to hold for."""

    def hold(self, source: int, deltas: list[Any]) -> None:
        """No upstream sends determinants to an input."""

    def recalled(self, seat: int) -> None:
        return None

    def rewire(self, seats: Mapping[int, int]) -> None:
        """No upstream seats to follow."""

    def received(self) -> dict[int, int]:
        return {}

    def restore_received(self, counts: Mapping[int, int]) -> None:
        """Nothing received to restore."""

    def watermarks(self) -> dict[int, float]:
        return {}

    def restore_watermarks(self, marks: Mapping[int, float]) -> None:
        """No watermarks come from upstream."""


class NotLogged:
    """An output's emitter side of local recovery: it sends nothing downstream to log."""

    turn = property(lambda self: 0, lambda self, value: None)

    def replay_from(self, peer: str, epoch: int) -> None:
        """No downstream asks an output to send again."""

    def rewire(self, wiring: Wiring) -> None:
        """No downstream channels to follow."""

    def suppress(self, counts: Mapping[int, int]) -> None:
        """Nothing sent to suppress."""


class LocalRecovery:
    """A runner's part in local recovery, made once with its causal parts: what its intake
    holds for its upstream seats (``holding``: a HoldingIntake, or NotHolding for an input),
    what its emitter logs for its downstream ones (``logged``: a LoggedEmitter, or NotLogged for
    an output), and its causal state, which its snapshots keep."""

    on = True

    def __init__(self, causal: CausalTask, holding: HoldingIntake | NotHolding,
                 logged: LoggedEmitter | NotLogged) -> None:  # fmt: skip
        self.causal, self.holding, self.logged = causal, holding, logged

    def hold(self, source: int, deltas: list[Any]) -> None:
        self.holding.hold(source, deltas)

    def replay_from(self, peer: str, epoch: int) -> None:
        self.logged.replay_from(peer, epoch)

    def answer(self, seat: int, reply: Callable[[Recalled], None]) -> None:
        """A Recall from ``seat``'s new peer, answered through ``reply`` when this runner holds
        for its upstream seats."""
        answer = self.holding.recalled(seat)
        if answer is not None:
            reply(answer)

    def answered(self, seat: int, answer: Recalled) -> None:
        self.causal.answered(seat, answer)

    def rewire(self, upstream_seats: Mapping[int, int], wiring: Wiring) -> None:
        self.holding.rewire(upstream_seats)
        self.logged.rewire(wiring)

    def committed(self, epoch: int) -> None:
        self.causal.committed(epoch)

    def kept(self, windows: Windows, watermark: float | None) -> SeatState:
        """What a barrier's snapshot keeps of the seat for its replacement, the barrier logged:
        where its log stands, what each channel has carried each way, the router's turn, when
        the windows' timers are next due, and the watermarks taken and ``watermark`` passed on."""
        causal, holding = self.causal, self.holding
        return SeatState(causal.log.end, causal.inflight.counts(), dict(holding.received()),
                         self.logged.turn, windows.timers(), watermark,
                         holding.watermarks())  # fmt: skip

    # -- taking a seat over ------------------------------------------------------------------

    def take_over(self, saved: SeatState, epoch: int) -> None:
        """Start where the seat's own snapshot of ``epoch`` left it (the runner takes the
        timers and the watermark passed on)."""
        self.causal.restore(saved, epoch)
        self.holding.restore_received(saved.received)
        self.holding.restore_watermarks(saved.watermarks)
        self.logged.turn = saved.turn

    def recall(self, downstream: frozenset[int]) -> None:
        self.causal.recall(downstream)

    def recalled(self) -> bool:
        return self.causal.recalled()

    def answers(self) -> int:
        """How many downstream seats have answered the recall: its progress, for a watchdog."""
        return len(self.causal.answers)

    def replayed_to(self) -> int:
        """Where the replay stands in the log: its progress, for a watchdog."""
        return self.causal.log.end

    def replay(self) -> None:
        """Replay what the longest log held says, sending on only what downstream lacks."""
        self.logged.suppress(self.causal.replay())

    def check_replayed(self) -> None:
        self.causal.check_replayed()


class NoLocalRecovery:
    """The part of a runner whose job does not recover locally: nothing is held, logged or
    recalled, and its snapshots keep no causal state."""

    on = False

    def hold(self, source: int, deltas: list[Any]) -> None:
        """No determinants are kept."""

    def replay_from(self, peer: str, epoch: int) -> None:
        """Nothing was logged to send again."""

    def answer(self, seat: int, reply: Callable[[Recalled], None]) -> None:
        """Nothing is held to answer with."""

    def answered(self, seat: int, answer: Recalled) -> None:
        """No recall was sent."""

    def rewire(self, upstream_seats: Mapping[int, int], wiring: Wiring) -> None:
        """No seat moves under it."""

    def committed(self, epoch: int) -> None:
        """No log to trim."""

    def kept(self, windows: Windows, watermark: float | None) -> None:
        """A snapshot keeps no causal state."""


NO_LOCAL_RECOVERY = NoLocalRecovery()


@dataclass
class CausalParts:
    """What a runner of a job that recovers locally is made of, chosen once for its task."""

    local: LocalRecovery
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
    holding: HoldingIntake | NotHolding = NotHolding()
    if isinstance(intake, InboxIntake):
        if logging:
            intake = holding = LoggedIntake(
                intake, causal.holdings, upstream_seats, causal.recorder
            )
        else:
            intake = holding = HoldingIntake(intake, causal.holdings, upstream_seats)
    logged: LoggedEmitter | NotLogged = NotLogged()
    if task.kind != "output":
        emitter = logged = make_emitter(causal.inflight, causal.deltas if logging else _none)
    return CausalParts(LocalRecovery(causal, holding, logged), intake, emitter, clock)


def _none(seat: int) -> list[Any]:
    return []
