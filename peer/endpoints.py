"""What a peer group serves over HTTP on its metrics port, read-only: ``/metrics`` for
Prometheus, ``/healthz`` and ``/readyz`` for supervisors and load balancers, and its replica and
jobs as JSON for operators.

- ``/healthz``: 200 while the process serves (alive).
- ``/readyz``: 200 once the group has joined the ring with its data plane up, 503 otherwise;
  either way one line of JSON with the reason (see peer.cluster.readiness).
- ``/replica``: the group's replica, as ``onyx replica --json`` prints it.
- ``/jobs``: every job's status; ``/jobs/ID`` one job's (404 for an id the replica lacks).

One server answers them all, each request on a thread of its own, so a slow scrape never holds
up a readiness probe. Everything is read off the group's current incarnation when the request
comes; a group between incarnations has no replica to show, and answers 503 with its
readiness. No request can raise into the server: whatever fails answers 500 naming the error.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import REGISTRY, CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from peer import api
from peer.cluster.group import Incarnation
from peer.cluster.readiness import readiness
from peer.log.replica import Replica
from peer.log.store import LogStore, StoreError
from peer.metrics import GroupCollector, MetricsError
from peer.runtime.checkpoints import CheckpointError
from peer.values.epoch import Epoch

log = logging.getLogger(__name__)

Current = Callable[[], Incarnation | None]
"""The group's current incarnation, None between two."""
Reply = tuple[int, Any]
StartResponse = Callable[[str, list[tuple[str, str]]], object]

READ_ONLY = ("GET", "HEAD")
PATHS = ("/metrics", "/healthz", "/readyz", "/replica", "/jobs", "/jobs/ID")
REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error",
           503: "Service Unavailable"}  # fmt: skip


class Endpoints:
    """The WSGI application: ``/metrics`` from ``registry``, the rest as JSON from ``current``."""

    def __init__(self, current: Current, registry: CollectorRegistry = REGISTRY) -> None:
        self.current = current
        self.metrics = make_wsgi_app(registry)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
        if method not in READ_ONLY:
            error = f"method {method} is not allowed: every endpoint is read-only (GET, HEAD)"
            text = json.dumps({"error": error})
            return _send(start_response, method, 405, text, [("Allow", "GET, HEAD")])
        if path == "/metrics":
            body = self.metrics({**environ, "REQUEST_METHOD": "GET"}, start_response)
            return [] if method == "HEAD" else body
        try:
            status, doc = self.answer(path)
        except Exception as e:
            log.exception("%s failed", path)
            status, doc = 500, {"error": f"{path}: {type(e).__name__}: {e}"}
        indent = 2 if path == "/replica" and status == 200 else None
        return _send(start_response, method, status, json.dumps(doc, indent=indent))

    def answer(self, path: str) -> Reply:
        """The status and JSON document that answer a GET of ``path``."""
        group = self.current()
        if path == "/healthz":
            return 200, {"alive": True}
        if path == "/readyz":
            found = readiness(group)
            return (200 if found.ready else 503), found.to_json()
        if path not in ("/replica", "/jobs") and not path.startswith("/jobs/"):
            return 404, {"error": f"no endpoint {path}: this server has {', '.join(PATHS)}"}
        if group is None:
            return 503, {"error": readiness(None).reason + ": it has no replica yet"}
        replica = group.replica  # one value for the whole answer: the group moves on meanwhile
        if path == "/replica":
            return 200, replica.to_json()
        if path == "/jobs":
            ids = sorted({*replica.jobs, *replica.finished})
            jobs = [job_json(replica, group.store, job_id) for job_id in ids]
            return 200, {"version": replica.version, "jobs": jobs}
        return _one_job(replica, group.store, path.removeprefix("/jobs/"))


def _one_job(replica: Replica, store: LogStore, job_id: str) -> Reply:
    if job_id not in replica.jobs and job_id not in replica.finished:
        return 404, {"error": f"job {job_id!r}: no such job in this tenancy"}
    return 200, job_json(replica, store, job_id)


def job_json(replica: Replica, store: LogStore, job_id: str) -> dict[str, Any]:
    """One job's status as the replica says, and its last committed epoch from its commit
    record (null before the first, or while the store cannot answer)."""
    return api.status(replica, job_id).to_json(_committed(store, job_id))


def _committed(store: LogStore, job_id: str) -> Epoch | None:
    try:
        return api.last_committed(store, job_id)
    except (StoreError, CheckpointError) as e:
        log.warning("job %s: its commit record cannot be read: %s", job_id, e)
        return None


def _send(
    start_response: StartResponse,
    method: str,
    status: int,
    text: str,
    headers: list[tuple[str, str]] | None = None,
) -> list[bytes]:
    """``text``, a JSON document, as a line of its own: one line for everything but the
    replica, which reads as ``onyx replica --json`` prints it."""
    body = text.encode() + b"\n"
    start_response(
        f"{status} {REASONS[status]}",
        [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
         *(headers or [])],
    )  # fmt: skip
    return [] if method == "HEAD" else [body]


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not logged: probes and scrapes come every few seconds."""


def serve(
    port: int, address: str, current: Current, registry: CollectorRegistry = REGISTRY
) -> ThreadingWSGIServer:
    """Serve every endpoint on ``address:port`` from a daemon thread, the group's state gauges
    registered in ``registry`` (see peer.metrics.GroupCollector)."""
    try:
        family, _, _, _, where = socket.getaddrinfo(
            address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]

        class Server(ThreadingWSGIServer):
            address_family = family

        host = where[0]
        if not isinstance(host, str):  # only an IPv4 or IPv6 address serves HTTP: both are str
            raise MetricsError(f"cannot serve metrics on {address}:{port}: not an IP address")
        server = make_server(host, port, Endpoints(current, registry), Server, _Quiet)
    except OSError as e:
        raise MetricsError(f"cannot serve metrics on {address}:{port}: {e.strerror}") from e
    registry.register(GroupCollector(lambda: None if (i := current()) is None else i.figures()))
    threading.Thread(target=server.serve_forever, name="onyx-endpoints", daemon=True).start()
    return server
