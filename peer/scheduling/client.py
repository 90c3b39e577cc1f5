"""A member's planner that asks scheduling servers for its allocations (peer.scheduling.server)
and computes them itself when none answers in time.

The servers are asked in an order fixed by the log position, so every member applying the same
entry asks the same server first and its cache serves them all; a server that fails (refuses the
connection, stops answering, answers wrongly) is passed over for the next while time is left.
Whatever happens, ``plan`` returns ``schedule`` of the request, computed here or checked to be
an answer to it there, and never raises for a server's fault: replicas agree either way.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter, Histogram

from peer.metrics import LATENCY
from peer.scheduling.demand import Allocation
from peer.scheduling.request import (
    SchedulingRequest,
    allocation_from_json,
    canonical_text,
    schedule,
)
from peer.scheduling.server import PATH

log = logging.getLogger(__name__)

ANSWERS = Counter(
    "onyx_scheduling_answers",
    "Allocations this member got, by source: a scheduling server, or computed here",
    ["source"],
)
SECONDS = Histogram(
    "onyx_scheduling_seconds",
    "Time to get one allocation, by source (local includes asking the servers that failed)",
    ["source"],
    buckets=LATENCY,
)
for _source in ("server", "local"):
    ANSWERS.labels(_source)


@dataclass(frozen=True)
class Asked:
    """One allocation asked for: the request, its position and digest."""

    request: SchedulingRequest
    position: int
    digest: str


class ServerFault(Exception):
    """What went wrong with one server's answer, in words for the log."""


class SchedulingClient:
    """Asks ``servers`` (``HOST:PORT``) for allocations, giving each call at most ``timeout``
    seconds in all before computing the allocation here."""

    def __init__(self, servers: tuple[str, ...], timeout: float) -> None:
        if not servers:
            raise ValueError("servers: a scheduling client needs at least one server")
        if not timeout > 0:
            raise ValueError(f"timeout: expected seconds > 0, not {timeout!r}")
        self.servers, self.timeout = servers, timeout
        self.failing: dict[str, str] = {}
        """Servers whose last ask failed, and why: each is logged when it starts failing and
        when it answers again, not at every ask."""
        self.lock = threading.Lock()

    def plan(self, request: SchedulingRequest, position: int) -> Allocation:
        """The allocation ``request`` asks for at ``position``: a server's answer, checked
        against the request, or ``schedule(request)`` computed here."""
        started = time.perf_counter()
        deadline = time.monotonic() + self.timeout
        text = canonical_text(request.to_json())
        body = b'{"position":%d,"request":%s}' % (position, text)
        asked = Asked(request, position, hashlib.sha256(text).hexdigest())
        first = position % len(self.servers)
        for server in self.servers[first:] + self.servers[:first]:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                allocation = self._ask(server, body, left, asked)
            except ServerFault as e:
                self._failed(server, str(e))
                continue
            self._answered(server)
            return self._count("server", started, allocation)
        return self._count("local", started, schedule(request))

    def _ask(self, server: str, body: bytes, timeout: float, asked: Asked) -> Allocation:
        host, _, port = server.rpartition(":")
        connection = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=timeout)
        try:
            connection.request(
                "POST", PATH, body, {"Content-Type": "application/json", "Connection": "close"}
            )
            response = connection.getresponse()
            text = response.read()
        except (OSError, http.client.HTTPException) as e:
            raise ServerFault(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__) from e
        finally:
            connection.close()
        return _answer(response.status, text, asked)

    def _failed(self, server: str, why: str) -> None:
        with self.lock:
            known = server in self.failing
            self.failing[server] = why
        if not known:
            log.warning(
                "scheduling server %s failed (%s): allocations are computed here until it "
                "answers again",
                server,
                why,
            )

    def _answered(self, server: str) -> None:
        with self.lock:
            why = self.failing.pop(server, None)
        if why is not None:
            log.warning("scheduling server %s answers again (it had failed: %s)", server, why)

    @staticmethod
    def _count(source: str, started: float, allocation: Allocation) -> Allocation:
        ANSWERS.labels(source).inc()
        SECONDS.labels(source).observe(time.perf_counter() - started)
        return allocation


def _answer(status: int, text: bytes, asked: Asked) -> Allocation:
    """The allocation a server's reply holds, checked to answer what was asked, or
    ServerFault."""
    try:
        doc: Any = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise ServerFault(f"HTTP {status} with a body that is not JSON") from None
    if status != 200:
        error = doc.get("error") if isinstance(doc, dict) else None
        raise ServerFault(f"HTTP {status}: {error or 'no error given'}")
    if not isinstance(doc, dict) or doc.get("digest") != asked.digest:
        raise ServerFault("it answered another request (its digest is not this request's)")
    if doc.get("position") != asked.position:
        raise ServerFault(f"it answered for position {doc.get('position')!r}, not {asked.position}")
    try:
        return allocation_from_json(doc.get("allocation"), asked.request)
    except ValueError as e:
        raise ServerFault(f"a wrong answer: {e}") from None
