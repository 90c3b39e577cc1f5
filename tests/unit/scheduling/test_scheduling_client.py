"""The client planner: it takes a real server's answer, checked against the request, and
computes the allocation itself when no server gives a valid one in time (none listening, a
wrong answer, an error, no answer at all), never raising for a server's fault and logging each
server once as it starts failing and once as it answers again."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given, settings
from prometheus_client import REGISTRY, CollectorRegistry

from peer.scheduling import PeerInfo, SchedulingRequest, schedule
from peer.scheduling.client import SchedulingClient
from peer.scheduling.request import allocation_to_json
from peer.scheduling.server import Scheduler, start
from tests.support import free_port
from tests.unit.scheduling.conftest import job
from tests.unit.scheduling.test_scheduling_request import requests

REQUEST = SchedulingRequest(
    "balanced",
    (job("j", "a", "b"),),
    frozenset(),
    tuple(PeerInfo(f"p{i}", "g", frozenset()) for i in range(4)),
)


def answers(source: str) -> float:
    return REGISTRY.get_sample_value("onyx_scheduling_answers_total", {"source": source}) or 0.0


def computed(registry: CollectorRegistry) -> float:
    return registry.get_sample_value("onyx_scheduler_requests_total", {"outcome": "computed"})


@pytest.fixture
def servers() -> Iterator[Callable[[], tuple[str, CollectorRegistry]]]:
    """Real scheduling servers on free ports, each with its own metrics."""
    running = []

    def one() -> tuple[str, CollectorRegistry]:
        registry = CollectorRegistry()
        server = start("127.0.0.1", 0, registry=registry)
        running.append(server)
        return f"127.0.0.1:{server.server_address[1]}", registry

    yield one
    for server in running:
        server.shutdown()
        server.server_close()


@pytest.fixture
def odd_server() -> Iterator[Callable[[Callable[[dict], tuple[int, bytes]]], str]]:
    """A server that answers every POST as the test says: how servers go wrong. One that
    should not answer at all waits until the test is over."""
    running, over = [], threading.Event()

    def serving(reply: Callable[[dict], tuple[int, bytes]]) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                doc = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, text = reply(doc)
                if status == 0:
                    over.wait()
                    return
                self.send_response(status)
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        running.append(server)
        return f"127.0.0.1:{server.server_address[1]}"

    yield serving
    over.set()
    for server in running:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def servers_once() -> Iterator[str]:
    server = start("127.0.0.1", 0, registry=CollectorRegistry())
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@settings(max_examples=60, deadline=None)
@given(requests())
def test_a_server_answer_is_schedule_of_the_request(servers_once, request):
    client = SchedulingClient((servers_once,), timeout=10)
    before = answers("server")
    answer = client.plan(request, 5)
    assert allocation_to_json(answer) == allocation_to_json(schedule(request))
    assert answers("server") == before + 1


def test_the_position_chooses_the_server_asked_first(servers):
    (first, first_metrics), (second, second_metrics) = servers(), servers()
    client = SchedulingClient((first, second), timeout=10)
    for position in (10, 12, 11):
        assert client.plan(REQUEST, position) == schedule(REQUEST)
    assert (computed(first_metrics), computed(second_metrics)) == (2, 1)


def test_an_unreachable_server_is_passed_over_for_the_next(servers, caplog):
    dead = f"127.0.0.1:{free_port()}"
    live, metrics = servers()
    client = SchedulingClient((dead, live), timeout=10)
    with caplog.at_level(logging.WARNING, "peer.scheduling.client"):
        assert client.plan(REQUEST, 0) == schedule(REQUEST)
        assert client.plan(REQUEST, 2) == schedule(REQUEST)
    assert computed(metrics) == 2
    assert [r.getMessage() for r in caplog.records] == [
        f"scheduling server {dead} failed (ConnectionRefusedError: [Errno 111] Connection "
        "refused): allocations are computed here until it answers again"
    ]


def test_with_no_server_listening_the_allocation_is_computed_here(caplog):
    dead = f"127.0.0.1:{free_port()}"
    client = SchedulingClient((dead,), timeout=5)
    before = answers("local")
    with caplog.at_level(logging.WARNING, "peer.scheduling.client"):
        for position in range(3):
            assert client.plan(REQUEST, position) == schedule(REQUEST)
    assert answers("local") == before + 3
    assert len(caplog.records) == 1
    assert dead in caplog.records[0].getMessage()


def wrong_peer(doc: dict) -> tuple[int, bytes]:
    answer = {"j": {"a": ["p0", "intruder"], "b": ["p1"]}}
    return 200, json.dumps({"position": doc["position"], "digest": REQUEST.digest(),
                            "allocation": answer}).encode()  # fmt: skip


def other_digest(doc: dict) -> tuple[int, bytes]:
    answer = allocation_to_json(schedule(REQUEST))
    return 200, json.dumps({"position": doc["position"], "digest": "0" * 64,
                            "allocation": answer}).encode()  # fmt: skip


def other_position(doc: dict) -> tuple[int, bytes]:
    answer = allocation_to_json(schedule(REQUEST))
    return 200, json.dumps({"position": doc["position"] + 1, "digest": REQUEST.digest(),
                            "allocation": answer}).encode()  # fmt: skip


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (wrong_peer, "a wrong answer: allocation: peer 'intruder'"),
        (other_digest, "it answered another request"),
        (other_position, "it answered for position 8, not 7"),
        (lambda doc: (500, b'{"error": "boom"}'), "HTTP 500: boom"),
        (lambda doc: (200, b"<html>"), "HTTP 200 with a body that is not JSON"),
        (lambda doc: (0, b""), "TimeoutError"),
    ],
    ids=["wrong-peer", "other-digest", "other-position", "error", "not-json", "silent"],
)
def test_a_server_that_answers_wrongly_or_not_at_all_is_not_believed(odd_server, caplog, reply,
                                                                     why):  # fmt: skip
    server = odd_server(reply)
    client = SchedulingClient((server,), timeout=0.5)
    before = answers("local")
    with caplog.at_level(logging.WARNING, "peer.scheduling.client"):
        answer = client.plan(REQUEST, 7)
    assert allocation_to_json(answer) == allocation_to_json(schedule(REQUEST))
    assert answers("local") == before + 1
    [record] = caplog.records
    assert server in record.getMessage()
    assert why in record.getMessage(), record.getMessage()


def test_a_server_is_logged_as_it_starts_failing_and_as_it_answers_again(odd_server, caplog):
    broken = threading.Event()
    broken.set()

    def reply(doc: dict) -> tuple[int, bytes]:
        if broken.is_set():
            return 503, b'{"error": "starting"}'
        answered = Scheduler(CollectorRegistry()).answer(json.dumps(doc).encode())
        return answered.status, json.dumps(answered.doc).encode()

    server = odd_server(reply)
    client = SchedulingClient((server,), timeout=5)
    with caplog.at_level(logging.WARNING, "peer.scheduling.client"):
        for position in range(2):
            assert client.plan(REQUEST, position) == schedule(REQUEST)
        broken.clear()
        for position in range(2, 4):
            assert client.plan(REQUEST, position) == schedule(REQUEST)
    assert [r.getMessage() for r in caplog.records] == [
        f"scheduling server {server} failed (HTTP 503: starting): allocations are computed "
        "here until it answers again",
        f"scheduling server {server} answers again (it had failed: HTTP 503: starting)",
    ]


def test_a_client_needs_servers_and_a_timeout():
    with pytest.raises(ValueError, match="servers"):
        SchedulingClient((), 0.5)
    with pytest.raises(ValueError, match="timeout"):
        SchedulingClient(("h:1",), 0)
