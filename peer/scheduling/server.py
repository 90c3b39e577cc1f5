"""A scheduling server: members send it the scheduling subset of their replica at a log
position and get the allocation back (``onyx scheduler serve``).

It holds no state a member depends on: every answer is ``schedule`` of the request, so a member
that gets none in time computes the same one itself, and any number of servers can run side by
side, come and go, sharing nothing. What it keeps is an ``AnswerCache`` per (position, digest):
the thousand members that apply the same entry send the same request, and one computation
answers them all, even when they ask at once (the first computes, the others wait for it).

- ``POST /allocation`` with ``{"position": int, "request": <SchedulingRequest JSON>}`` answers
  ``{"position", "digest", "allocation"}``; a bad request gets 400 and one message naming the
  field at fault, a body over the limit 413 naming its size, and nothing a client sends can
  crash the server or show it a stack trace.
- ``GET /metrics``: requests by outcome (computed, cached, refused) and seconds computing.
- ``GET /healthz``: 200 while it serves.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from peer.metrics import LATENCY, build_info
from peer.processes import until_stopped
from peer.scheduling.answers import AnswerCache
from peer.scheduling.demand import Allocation
from peer.scheduling.request import (
    SchedulingRequest,
    allocation_to_json,
    digest_of,
    schedule,
)

log = logging.getLogger(__name__)

PATH = "/allocation"
MAX_BODY = 64 * 1024 * 1024
"""Bytes a request may have: 10,000 peers with their previous allocation take a few MB."""
CACHE_ANSWERS = 1024
"""Answers a server keeps: positions move forward, so a few hundred cover every member's lag."""
OUTCOMES = ("computed", "cached", "refused")


class ServerError(Exception):
    """The server cannot start: its address is taken, or not this machine's."""


class Refused(ValueError):
    """A request the server will not answer; ``status`` is the HTTP status that says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ServerReply:
    status: int
    doc: dict[str, Any]


class Scheduler:
    """What answers a request's body, HTTP aside: parse and check it, then the cached answer
    or ``schedule``'s, each (position, digest) computed once however many ask at once."""

    def __init__(self, registry: CollectorRegistry, capacity: int = CACHE_ANSWERS) -> None:
        self.cache = AnswerCache(capacity)
        self.pending: dict[tuple[int, str], Future[Allocation]] = {}
        self.lock = threading.Lock()
        self.requests = Counter(
            "onyx_scheduler_requests",
            "Scheduling requests by outcome: computed, answered from the cache, refused",
            ["outcome"],
            registry=registry,
        )
        for outcome in OUTCOMES:
            self.requests.labels(outcome)
        self.seconds = Histogram(
            "onyx_scheduler_compute_seconds",
            "Time to compute one allocation",
            buckets=LATENCY,
            registry=registry,
        )

    def answer(self, body: bytes) -> ServerReply:
        """The reply to one request's body: 200 and the answer, or 400 naming what is wrong.
        A request in its canonical form (as members send it) whose answer is kept is answered
        without being read further: its text is that of the request the answer was for."""
        try:
            position, doc = envelope(body)
            kept = self._kept(position, doc)
            if kept is not None:
                digest, allocation, outcome = *kept, "cached"
            else:
                request = read_request(doc)
                digest = request.digest()
                allocation, outcome = self.allocation(position, digest, request)
        except Refused as e:
            self.requests.labels("refused").inc()
            return ServerReply(e.status, {"error": str(e)})
        self.requests.labels(outcome).inc()
        return ServerReply(
            200,
            {"position": position, "digest": digest, "allocation": allocation_to_json(allocation)},
        )

    def _kept(self, position: int, doc: Any) -> tuple[str, Allocation] | None:
        try:
            digest = digest_of(doc)
        except (ValueError, RecursionError):
            return None
        with self.lock:
            kept = self.cache.get(position, digest)
        return None if kept is None else (digest, kept)

    def allocation(
        self, position: int, digest: str, request: SchedulingRequest
    ) -> tuple[Allocation, str]:
        """The answer and how it came: ``cached`` when kept or being computed by another
        request's thread, ``computed`` when this one computed it."""
        key = (position, digest)
        with self.lock:
            kept = self.cache.get(position, digest)
            if kept is not None:
                return kept, "cached"
            waiting = self.pending.get(key)
            if waiting is None:
                mine: Future[Allocation] = Future()
                self.pending[key] = mine
        if waiting is not None:
            return waiting.result(), "cached"
        try:
            started = time.perf_counter()
            allocation = schedule(request)
            self.seconds.observe(time.perf_counter() - started)
        except Exception as e:
            with self.lock:
                del self.pending[key]
            mine.set_exception(e)
            raise
        with self.lock:
            del self.pending[key]
            self.cache = self.cache.put(position, digest, allocation)
        mine.set_result(allocation)
        return allocation, "computed"


def envelope(body: bytes) -> tuple[int, Any]:
    """The position and the request's document a body holds, or Refused (400) naming the
    field at fault."""
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise Refused(400, f"body: not a JSON document: {e}") from None
    except RecursionError:
        raise Refused(400, "body: nested too deeply to be a scheduling request") from None
    if not isinstance(doc, dict):
        raise Refused(400, f"body: expected an object, not {_kind(doc)}")
    unknown = sorted(set(doc) - {"position", "request"})
    if unknown:
        raise Refused(400, f"body: unknown fields {unknown}; expected position and request")
    position = doc.get("position")
    if isinstance(position, bool) or not isinstance(position, int) or position < 0:
        raise Refused(400, f"position: expected a log position (an integer >= 0), not {position!r}")
    if "request" not in doc:
        raise Refused(400, "request: missing")
    return position, doc["request"]


def read_request(doc: Any) -> SchedulingRequest:
    """The request a document describes, or Refused (400) naming the field at fault."""
    try:
        return SchedulingRequest.from_json(doc)
    except (ValueError, TypeError, RecursionError) as e:
        raise Refused(400, f"request: {e}") from None


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


class _Handler(BaseHTTPRequestHandler):
    """One HTTP request; every reply is one line of JSON but /metrics's."""

    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path == "/metrics":
            self._send(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
        elif self.path == "/healthz":
            self._json(200, {"alive": True})
        else:
            self._json(404, {"error": f"no endpoint {self.path}: GET /metrics, GET /healthz, "
                                      f"POST {PATH}"})  # fmt: skip

    def do_POST(self) -> None:
        if self.path != PATH:
            self._json(404, {"error": f"no endpoint {self.path}: POST {PATH}"})
            return
        try:
            body = self._body()
            reply = self.server.scheduler.answer(body)
        except Refused as e:
            self.server.scheduler.requests.labels("refused").inc()
            reply = ServerReply(e.status, {"error": str(e)})
        except Exception as e:
            log.exception("a scheduling request failed")
            reply = ServerReply(500, {"error": f"{type(e).__name__}: {e}"})
        if reply.status != 200:
            log.warning("refused a scheduling request from %s: %s", self.client_address[0],
                        reply.doc["error"])  # fmt: skip
        self._json(reply.status, reply.doc)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise Refused(400, "Transfer-Encoding: not supported; send Content-Length")
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            raise Refused(400, f"Content-Length: expected a number of bytes, not {length!r}")
        size, limit = int(length), self.server.max_body
        if size > limit:
            self.close_connection = True
            raise Refused(413, f"body: {size} bytes is over the limit of {limit} bytes")
        return self.rfile.read(size)

    def _json(self, status: int, doc: dict[str, Any]) -> None:
        self._send(status, json.dumps(doc).encode() + b"\n", "application/json")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not logged one by one: a thousand members ask per entry."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    """Every member may ask at once."""

    def __init__(
        self,
        where: tuple[Any, ...],
        scheduler: Scheduler,
        registry: CollectorRegistry,
        max_body: int,
    ) -> None:
        self.scheduler, self.registry, self.max_body = scheduler, registry, max_body
        super().__init__(where, _Handler)


def start(
    host: str,
    port: int,
    *,
    capacity: int = CACHE_ANSWERS,
    max_body: int = MAX_BODY,
    registry: CollectorRegistry | None = None,
) -> ThreadingHTTPServer:
    """A server answering on ``host:port`` from a daemon thread (port 0 picks a free one, read
    it off ``server_address``); ``shutdown`` and ``server_close`` stop it."""
    registry = registry or CollectorRegistry()
    build_info(registry)
    try:
        family, _, _, _, where = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        server_class = type("Server", (_Server,), {"address_family": family})
        server = server_class(where, Scheduler(registry, capacity), registry, max_body)
    except OSError as e:
        raise ServerError(f"cannot serve scheduling on {host}:{port}: {e.strerror}") from e
    threading.Thread(target=server.serve_forever, name="onyx-scheduler", daemon=True).start()
    return server


def serve(host: str, port: int, stop: threading.Event, **options: Any) -> None:
    """Serve until ``stop`` is set (SIGTERM, say), then stop taking requests and return."""
    server = start(host, port, **options)
    log.info("scheduling server listening on %s:%d", host, server.server_address[1])
    until_stopped(stop)
    server.shutdown()
    server.server_close()
    log.info("scheduling server on %s:%d stopped", host, server.server_address[1])
