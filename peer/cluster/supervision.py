"""How a member restarts its workers, and when a job is to blame for their deaths: the decisions
of peer.cluster.member that rest on numbers alone.

A worker that fails to start, killed for not saying it is ready in time or dead before it has
run for a while, is started again later each time (``BackOff``): one that cannot start, or that
a job's code kills as soon as it runs, would otherwise be restarted in a loop that costs the
machine a process start every few seconds for nothing. The first death after a good run restarts
it at once, as before.

A worker that dies while its runners mark a job's code (peer.code_marks) died of that
code; after ``limit`` such deaths within ``window`` seconds, wherever the job's tasks ran among
the member's workers and however often they were restarted, the job is killed (``CodeDeaths``).
"""

from __future__ import annotations

import signal
from collections import deque
from dataclasses import dataclass, field

LONGEST_DOUBLING = 32
"""Doublings past which a back-off stops growing anyway (it is capped long before)."""


@dataclass(frozen=True)
class BackOff:
    """How long a worker waits before its next start, by its failed starts in a row."""

    first: float = 2.0
    """The wait after the second failed start in a row (the first restarts at once)."""
    cap: float = 60.0
    """The longest wait: a worker that cannot start is still tried once a minute."""
    steady: float = 30.0
    """How long a worker must have been ready for before its death no longer counts as a failed
    start: it ran, and was not merely starting."""

    def failures(self, before: int, ready_for: float | None) -> int:
        """Failed starts in a row once a worker has died, ``before`` them until now: a worker
        ready for ``steady`` s or more starts the count afresh, one never ready (None) or ready
        for less adds to it."""
        if ready_for is not None and ready_for >= self.steady:
            return 1
        return before + 1

    def delay(self, failures: int) -> float:
        """Seconds before the next start after ``failures`` failed starts in a row: none after
        one, ``first`` after two, doubling from there up to ``cap``."""
        if failures <= 1:
            return 0.0
        return min(self.cap, self.first * 2 ** min(failures - 2, LONGEST_DOUBLING))


@dataclass
class CodeDeaths:
    """The deaths of workers that each job's code caused, per job, across the member's workers
    and their restarts."""

    limit: int = 3
    window: float = 600.0
    seen: dict[str, deque[float]] = field(default_factory=dict)

    def died(self, job: str, now: float) -> int:
        """A worker died of ``job``'s code at ``now``: how many did within the window, this one
        included."""
        times = self.seen.setdefault(job, deque())
        times.append(now)
        while times[0] <= now - self.window:
            times.popleft()
        return len(times)

    def to_blame(self, job: str, now: float) -> bool:
        """Whether this death of a worker of ``job``'s code is one too many: the job is then
        killed, and its count starts afresh."""
        if self.died(job, now) < self.limit:
            return False
        del self.seen[job]
        return True


SENT_FROM_OUTSIDE = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
"""Signals that end a process from outside it (an operator, the kernel's OOM killer, a
supervisor): a worker they end did not die of the code it was running, whatever its mark says.
An exit code, or a crash signal (SIGSEGV, SIGABRT, ...), is the code's own doing."""


def the_codes_doing(exitcode: int | None) -> bool:
    """Whether a worker that ended so may have died of the code it was running."""
    return exitcode is not None and (exitcode >= 0 or -exitcode not in SENT_FROM_OUTSIDE)


def how_it_ended(exitcode: int | None) -> str:
    """A process's end, as ``multiprocessing`` tells it (a negative code is the signal that
    killed it), in words."""
    if exitcode is None:
        return "its exit code unknown"
    if exitcode >= 0:
        return f"exit code {exitcode}"
    try:
        return f"killed by {signal.Signals(-exitcode).name}"
    except ValueError:
        return f"killed by signal {-exitcode}"
