"""Which task's code a worker process is running right now, kept in memory its member shares, so
that the member can tell, once the worker has died, whether a job's code killed it.

A task's code can end its process in ways no ``except`` catches: ``os._exit``, a crash in an
extension, an abort. Such a death is the job's doing, and a worker restarted for it dies again
as soon as the job's task comes back; a worker killed from outside while no job's code ran is
nobody's. So a runner of a worker calls into its task's code inside its mark (a ``with``
block), which sets one 64-bit word to the job's short id and the task's index in the job's
catalog while the code runs, and back to 0 as it leaves. An aligned word is written whole, and
the member reads it only once the process has gone, so nothing is locked; and a word costs two
stores per batch, which the hot path can afford. The member names the job and the task from its
replica (``running``).

Only a worker marks: it ``install``s its words once as it starts, and each runner is given its
mark once, when it is made (``mark_for``); everywhere else that mark does nothing. The first word
is the group thread's, where runners call their code; a Spark task's fn runs in the group's
Spark pool, and each of that pool's threads marks in a word of its own (``elsewhere``), claimed
the first time it runs a job's code. A worker dead with one job's code marked died of it; with
several jobs' codes marked at once the death cannot be laid on one, and blames none
(``blamed``).
"""

from __future__ import annotations

import ctypes
import itertools
import threading
from typing import Any

from peer.log.replica import Replica

WORD = ctypes.c_uint64
"""The type of the words a worker and its member share."""
WORDS = 8
"""How many: the group thread's, and one for each thread of the Spark pool (of
peer.spark.session's WORKERS) that runs a job's code; threads past them do not mark."""
TASK_BITS = 16
"""The low bits of a mark (after its 1 is taken off) hold the task's index in the catalog."""


class _Process:
    word: Any = None
    """This process's word, once it is a worker's (``install``)."""


_PROCESS = _Process()


class Mark:
    """The mark of a runner that no member watches: entering and leaving do nothing."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None

    def elsewhere(self) -> Mark:
        """The same mark, for the runner's code that another thread runs (its Spark pool's)."""
        return self


NO_MARK = Mark()


class SharedMark(Mark):
    """The mark of a runner in a worker: its code's number in the shared word while it runs."""

    __slots__ = ("number", "word")

    def __init__(self, word: Any, number: int) -> None:
        self.word, self.number = word, number

    def __enter__(self) -> None:
        self.word[0] = self.number

    def __exit__(self, *_: object) -> None:
        self.word[0] = 0

    def elsewhere(self) -> Mark:
        return ThreadMark(self.word, self.number)


class ThreadMark(Mark):
    """A runner's mark entered from a pool's thread: in that thread's own word."""

    __slots__ = ("number", "word")

    def __init__(self, word: Any, number: int) -> None:
        self.word, self.number = word, number

    def __enter__(self) -> None:
        slot = _slot()
        if slot is not None:
            self.word[slot] = self.number

    def __exit__(self, *_: object) -> None:
        slot = _slot()
        if slot is not None:
            self.word[slot] = 0


_THREADS = threading.local()
_CLAIMED = itertools.count(1)
"""The next word a thread claims: ``next`` on a count is atomic, so no two threads claim one."""


def _slot() -> int | None:
    """This thread's word, claimed now if it has none; None when every word is claimed."""
    slot = getattr(_THREADS, "slot", None)
    if slot is None:
        slot = _THREADS.slot = next(_CLAIMED)
    return slot if slot < WORDS else None


def blamed(words: Any) -> int:
    """The mark a dead worker left: the one nonzero mark among its ``words``, 0 when there is
    none, or when several codes were marked at once (which of them ended it, nobody can tell)."""
    marks = {int(value) for value in words} - {0}
    return marks.pop() if len(marks) == 1 else 0


def number(job_short_id: int, task_index: int) -> int | None:
    """The word that says a job's task's code runs (never 0); None when it cannot say it."""
    if not 0 <= task_index < 1 << TASK_BITS or job_short_id < 0:
        return None
    value = (job_short_id << TASK_BITS | task_index) + 1
    return value if value < 1 << 64 else None


def install(word: Any) -> None:
    """Mark in ``word`` (an array of WORDS WORDs shared with the member) from now on: called
    once, as the worker starts, before any runner is made. Through a memoryview, whose stores
    cost half of a ctypes array's."""
    _PROCESS.word = memoryview(word).cast("B").cast("Q")


def mark_for(job_short_id: int, task_index: int) -> Mark:
    """The mark a runner enters around its task's code: the shared word's in a worker, else
    one that does nothing."""
    value = number(job_short_id, task_index)
    word = _PROCESS.word
    return NO_MARK if word is None or value is None else SharedMark(word, value)


def running(value: int, replica: Replica) -> tuple[str, str] | None:
    """The job and task whose code ran when the word read ``value``, by ``replica``; None when
    no task's code ran, or the replica no longer knows the job."""
    if value <= 0:
        return None
    job_short_id, task_index = (value - 1) >> TASK_BITS, (value - 1) & ((1 << TASK_BITS) - 1)
    job_id = next((j for j in replica.jobs if replica.short_ids.get(j) == job_short_id), None)
    if job_id is None or task_index >= len(replica.jobs[job_id].catalog):
        return None
    return job_id, replica.jobs[job_id].catalog[task_index].name
