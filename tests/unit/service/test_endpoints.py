"""The endpoints' answers on each state of a group, through the WSGI application itself: every
path, method and failure answers with a status and JSON, never an exception."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from types import SimpleNamespace
from wsgiref.util import setup_testing_defaults

import pytest
from prometheus_client import CollectorRegistry, Gauge
from pyrsistent import pmap, pset

from peer.endpoints import Endpoints, serve
from peer.log.replica import Replica
from peer.log.stores.memory import MemoryLog
from peer.metrics import MetricsError

REPLICA = Replica(version=5, groups=pset(["g1"]), finished=pmap({"old": "completed"}))


def group(replica: Replica = REPLICA):
    return SimpleNamespace(id="g1", replica=replica, lost=threading.Event(), ended=None,
                           leave_position=None, switchboard=SimpleNamespace(up=True),
                           workers_not_ready=tuple, store=MemoryLog().session())  # fmt: skip


def get(app: Endpoints, path: str, method: str = "GET") -> tuple[str, dict, bytes]:
    environ = {"PATH_INFO": path, "REQUEST_METHOD": method}
    setup_testing_defaults(environ)
    answer = {}

    def start_response(status, headers):
        answer["status"], answer["headers"] = status, dict(headers)

    body = b"".join(app(environ, start_response))
    return answer["status"], answer["headers"], body


def test_a_group_between_incarnations_is_alive_but_not_ready_and_has_no_replica():
    app = Endpoints(lambda: None, CollectorRegistry())
    assert get(app, "/healthz")[0] == "200 OK"
    status, headers, body = get(app, "/readyz")
    assert status == "503 Service Unavailable"
    assert headers["Content-Type"] == "application/json"
    assert body.count(b"\n") == 1
    assert json.loads(body) == {"ready": False, "state": "starting",
                                "reason": "the group is starting (or rejoining)"}  # fmt: skip
    for path in ("/replica", "/jobs", "/jobs/old"):
        status, _, body = get(app, path)
        assert status.startswith("503"), path
        assert "no replica yet" in json.loads(body)["error"]


def test_a_joined_group_is_ready_and_shows_its_replica_and_jobs():
    app = Endpoints(group, CollectorRegistry())
    status, _, body = get(app, "/readyz")
    assert status == "200 OK"
    assert json.loads(body)["ready"] is True
    status, _, body = get(app, "/replica")
    assert json.loads(body) == REPLICA.to_json()
    assert body.decode() == json.dumps(REPLICA.to_json(), indent=2) + "\n"
    old = {"id": "old", "state": "completed", "needs": 0, "allocation": {}, "peers": 0,
           "allocation_version": None, "reason": None, "name": None, "submitted": None,
           "standbys": {}, "takeovers": {}, "recovering": [], "rolled_back": None,
           "held_back": False, "committed_epoch": None}  # fmt: skip
    assert json.loads(get(app, "/jobs")[2]) == {"version": 5, "jobs": [old]}
    assert json.loads(get(app, "/jobs/old")[2]) == old


def test_unknown_jobs_and_paths_are_404_and_other_methods_405():
    app = Endpoints(group, CollectorRegistry())
    status, _, body = get(app, "/jobs/nope")
    assert status == "404 Not Found"
    assert json.loads(body) == {"error": "job 'nope': no such job in this tenancy"}
    for path in ("/", "/metricsx", "/jobs/", "/replica/x"):
        assert get(app, path)[0] == "404 Not Found", path
    assert "/readyz" in json.loads(get(app, "/nope")[2])["error"]
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, headers, body = get(app, "/jobs", method)
        assert status == "405 Method Not Allowed"
        assert headers["Allow"] == "GET, HEAD"
        assert "read-only" in json.loads(body)["error"]


def test_head_answers_without_a_body():
    app = Endpoints(group, CollectorRegistry())
    for path in ("/readyz", "/replica", "/metrics", "/nope"):
        body = get(app, path, "HEAD")[2]
        assert body == b"", path
    assert get(app, "/readyz", "HEAD")[0] == "200 OK"


def test_metrics_come_from_the_registry():
    registry = CollectorRegistry()
    Gauge("onyx_test_value", "a value", registry=registry).set(3)
    status, _, body = get(Endpoints(lambda: None, registry), "/metrics")
    assert status == "200 OK"
    assert b"onyx_test_value 3.0" in body


def test_a_failure_reading_the_group_answers_500_naming_it():
    broken = SimpleNamespace(id="g1", replica=None)
    status, _, body = get(Endpoints(lambda: broken, CollectorRegistry()), "/jobs")
    assert status == "500 Internal Server Error"
    assert json.loads(body)["error"].startswith("/jobs: AttributeError")


def test_served_on_a_port_and_a_taken_port_is_one_clear_error():
    registry = CollectorRegistry()
    server = serve(0, "127.0.0.1", lambda: None, registry)
    port = server.server_address[1]
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/readyz", method="HEAD")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 503
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as reply:
            assert json.loads(reply.read()) == {"alive": True}
        with pytest.raises(MetricsError, match=f"cannot serve metrics on 127.0.0.1:{port}: "):
            serve(port, "127.0.0.1", lambda: None, CollectorRegistry())
    finally:
        server.shutdown()
        server.server_close()
