"""A NATS connection for a plugin: nats-py is asyncio, and no plugin method may wait, so each
plugin owns an event loop on a daemon thread of its own, where the client and its tasks live.
The plugin's methods hand work to it (``submit``: a concurrent future) and data across in
thread-safe queues; only a start (``connect``, ``call``) and the slot's own lane wait on it, each
a bounded time.

Why a loop per plugin rather than one per process: a plugin's loop lives and dies with it, so a
closed task leaves nothing running, and a worker process forked after another plugin started its
loop needs no care (a forked child has no copy of the parent's threads).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from peer.job.spec import Task
from peer.plugins import Recovery, out_of_reach, where
from peer.plugins.nats.settings import NatsClient, login, servers

log = logging.getLogger(__name__)

CLOSE_WAIT = 2.0
"""Seconds a close gives the client to say goodbye and the loop to stop."""
RECONNECT_WAIT = 0.5
"""Seconds between attempts to reach a server that went away: the client tries for ever (a
server restarting comes back), and what waits on it says when it has waited too long."""


class NatsUnreachable(Exception):
    """The servers did not answer in time; the message says what was tried and why."""


class Connection:
    """A NATS client on a loop of its own; ``connect`` (again, after a failure) replaces it."""

    def __init__(self, task: Task, client: NatsClient, name: str) -> None:
        self.task, self.client = task, client
        self.servers = servers(client.url)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=f"nats-{name}",
                                       daemon=True)  # fmt: skip
        """Started by the first ``connect``: a plugin made and closed unstarted (to check a
        job) starts nothing."""
        self.nc: NATS | None = None
        self._js: JetStreamContext | None = None
        self.said: str | None = None
        """The client's last complaint, logged once however often it repeats."""
        self.closing = False
        """Whether the client is being closed: its disconnection then is no news."""

    @property
    def js(self) -> JetStreamContext:
        """The client's one JetStream context: its acknowledgements of asynchronous publishes
        come to its own inbox."""
        if self._js is None:
            raise RuntimeError("used before connect()")
        return self._js

    @property
    def url(self) -> str:
        return ",".join(self.servers)

    def connect(self, recovery: Recovery) -> None:
        """A new client, once a server answers; raised as ``out_of_reach`` says when none
        does within the timeout."""
        if not self.thread.is_alive():
            self.thread.start()
        try:
            self.call(self._connect(), self.client.timeout + CLOSE_WAIT)
        except NatsUnreachable as e:
            raise out_of_reach(self.task, recovery, f"cannot reach NATS at {self.url}: "
                                                    f"{e}") from None  # fmt: skip

    def submit[T](self, work: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(work, self.loop)

    def call[T](self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """The result of ``work`` on the loop, waited for from another thread; a wait longer
        than ``timeout`` (the client's, by default) is NatsUnreachable."""
        wait = self.client.timeout if timeout is None else timeout
        future = self.submit(work)
        try:
            return future.result(wait)
        except FutureTimeout:
            future.cancel()
            raise NatsUnreachable(f"no answer within {wait:g} s") from None

    def wait[T](self, work: Coroutine[Any, Any, T]) -> T:
        """The result of ``work`` on the loop, for work that bounds its own waits."""
        return self.submit(work).result()

    @property
    def max_payload(self) -> int:
        """The most bytes the server takes in one message (headers included)."""
        return self.nc.max_payload if self.nc is not None else 0

    def close(self) -> None:
        """The client closed, the loop stopped; a bounded wait, never more."""
        if self.loop.is_closed():
            return
        if not self.thread.is_alive():
            self.loop.close()
            return
        with contextlib.suppress(Exception):
            self.submit(self._shut()).result(CLOSE_WAIT * 2)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(CLOSE_WAIT)
        if not self.thread.is_alive():
            self.loop.close()

    # -- on the loop ----------------------------------------------------------------------------

    async def _connect(self) -> None:
        await self._close_client()
        nc = NATS()
        self.said, self.closing = None, False
        try:
            await asyncio.wait_for(nc.connect(**self._options()), self.client.timeout)
        except (TimeoutError, OSError, nats.errors.Error) as e:
            self.closing = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.close(), CLOSE_WAIT)
            why = self.said or reason(e) or f"no answer within {self.client.timeout:g} s"
            raise NatsUnreachable(why) from None
        self.nc, self._js = nc, nc.jetstream(timeout=self.client.timeout)

    def _options(self) -> dict[str, Any]:
        """The client's options: it reconnects for ever, and says what went wrong in a line."""
        return {"servers": self.servers, "name": f"onyx {self.task.name}",
                "connect_timeout": min(self.client.timeout, 5.0), "allow_reconnect": True,
                "max_reconnect_attempts": -1, "reconnect_time_wait": RECONNECT_WAIT,
                "error_cb": self._error, "disconnected_cb": self._disconnected,
                "reconnected_cb": self._reconnected, **login(self.task, self.client)}  # fmt: skip

    async def _shut(self) -> None:
        """Every task of the loop but this one cancelled, then the client closed."""
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._close_client()

    async def _close_client(self) -> None:
        nc, self.nc, self._js = self.nc, None, None
        self.closing = True
        if nc is not None and not nc.is_closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.close(), CLOSE_WAIT)

    async def _error(self, e: Exception) -> None:
        """Logged once a line, never with a traceback: the client retries on its own."""
        said = reason(e) or type(e).__name__
        if said != self.said:
            self.said = said
            log.warning("%s: NATS at %s: %s", where(self.task), self.url, said)

    async def _disconnected(self) -> None:
        if self.closing:
            return
        log.warning("%s: disconnected from NATS at %s", where(self.task), self.url)

    async def _reconnected(self) -> None:
        self.said = None
        log.info("%s: connected to NATS again", where(self.task))


def reason(e: BaseException) -> str:
    """What a client's failure says, without the library's prefix."""
    if isinstance(e, nats.js.errors.APIError) and e.description:
        return e.description
    return str(e).removeprefix("nats: ")
