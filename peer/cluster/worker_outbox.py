"""What a member has yet to send one of its workers, sent by a thread of its own.

A pipe's send blocks once the pipe is full, and a worker that is alive but not reading (stopped,
or hung) never empties it: a member sending on its own thread would stall with it, and so would
every other worker's peers and the member's replica. So the member only puts messages here,
which never waits, and a sender thread per worker process waits on the pipe instead.

A worker whose messages make no progress for ``timeout`` seconds of the member's own running
time is ``stuck``: the member kills it and restarts it as it does one that died
(peer.cluster.member). Its running time, not the clock's: a member that was itself stopped
finds every message late once it runs again, through no fault of its workers, so each check
counts at most ``CHECK_GAP`` s of the time since the one before. ``LIMIT`` bounds the
messages waiting; a worker that lets more pile up is stuck as well.

Messages alone tell only while there are some, and a pipe's buffer takes a few even from a
worker that reads nothing: so the member also ``ask``s, now and then, for an answer, and a
worker whose answer does not come is stuck the same way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from multiprocessing.connection import Connection
from typing import Any

log = logging.getLogger(__name__)

LIMIT = 10_000
"""The most messages a worker may leave unread: a live worker's reader takes each at once, so
only one that has stopped reading comes near it."""
CHECK_GAP = 1.0
"""The most of the time between two checks that counts against a worker: the member checks
far more often (every poll interval) unless it was itself not running."""


class WorkerOutbox:
    """The messages for one worker process, sent in order over ``conn`` by a daemon thread."""

    def __init__(self, conn: Connection, name: str, timeout: float, limit: int = LIMIT) -> None:
        self.conn, self.name, self.timeout, self.limit = conn, name, timeout, limit
        self.waiting: deque[Any] = deque()
        self.ready = threading.Condition()
        self.in_flight = False
        self.sent = 0
        """Messages gone into the pipe: progress, as the checks see it."""
        self.closed = False
        self.overflowed = False
        self.waited = 0.0
        """How long, in the member's running time, messages have waited with no progress."""
        self.asked = self.answered = 0
        """Messages sent that want an answer, and answers come back."""
        self.checked: tuple[float, tuple[int, int]] | None = None
        """When the last check ran, and how many had been sent and answered then."""
        threading.Thread(target=self._run, name=f"{name}-sender", daemon=True).start()

    def put(self, message: Any) -> bool:
        """Queue ``message``; False (and nothing queued) once the pipe is broken or too many
        messages wait."""
        with self.ready:
            if self.closed or self.overflowed:
                return False
            if len(self.waiting) >= self.limit:
                self.overflowed = True
                log.warning("%s has left %d messages unread", self.name, len(self.waiting))
                return False
            self.waiting.append(message)
            self.ready.notify()
        return True

    def ask(self, message: Any) -> bool:
        """Queue ``message``, which wants an answer (``answer`` counts it come back)."""
        with self.ready:
            if not self.put(message):
                return False
            self.asked += 1
        return True

    def answer(self) -> None:
        """An answer to an ``ask`` has come back."""
        with self.ready:
            self.answered += 1

    @property
    def waiting_answer(self) -> bool:
        with self.ready:
            return self.answered < self.asked

    def stuck(self, now: float | None = None) -> bool:
        """Whether the worker has stopped reading: its messages overflowed, or made no progress
        for ``timeout`` s of the member's running time. Called from the member's thread."""
        now = time.monotonic() if now is None else now
        with self.ready:
            pending = bool(self.waiting) or self.in_flight or self.answered < self.asked
            sent, overflowed = (self.sent, self.answered), self.overflowed
        last, self.checked = self.checked, (now, sent)
        if not pending or last is None or last[1] != sent:
            self.waited = 0.0
        else:
            self.waited += min(max(now - last[0], 0.0), CHECK_GAP)
        return overflowed or self.waited >= self.timeout

    def close(self) -> None:
        """Send nothing more; the thread ends (at once unless blocked in a send, which ends as
        the worker's end of the pipe closes)."""
        with self.ready:
            self.closed = True
            self.waiting.clear()
            self.ready.notify()

    def _run(self) -> None:
        while True:
            with self.ready:
                self.ready.wait_for(lambda: self.waiting or self.closed)
                if self.closed:
                    return
                message = self.waiting.popleft()
                self.in_flight = True
            try:
                self.conn.send(message)
            except OSError as e:
                log.warning("%s cannot be reached: %s", self.name, e)
                self.close()
                return
            except Exception as e:
                log.warning("%s: a message that cannot be sent was dropped: %s", self.name, e)
            finally:
                with self.ready:
                    self.in_flight = False
                    self.sent += 1
