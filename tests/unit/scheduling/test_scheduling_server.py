"""The scheduling server: what it answers is ``schedule`` of the request, through its request
handling and the JSON round trip; each (position, request) is computed once however many ask;
bad requests and oversized bodies are refused with the field at fault named, and nothing a
client sends makes it fail."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from peer.scheduling import PeerInfo, SchedulingRequest, schedule
from peer.scheduling.request import allocation_from_json, allocation_to_json
from peer.scheduling.server import Scheduler, start
from tests.unit.scheduling.conftest import job
from tests.unit.scheduling.test_scheduling_request import requests, wire

positions = st.integers(0, 2**40)


def body(position: object, request: object) -> bytes:
    return json.dumps({"position": position, "request": request}).encode()


def outcomes(registry: CollectorRegistry) -> dict[str, float]:
    return {
        outcome: registry.get_sample_value("onyx_scheduler_requests_total", {"outcome": outcome})
        for outcome in ("computed", "cached", "refused")
    }


@settings(max_examples=150, deadline=None)
@given(requests(), positions)
def test_the_answer_after_the_server_and_the_round_trip_is_schedule_of_the_request(
    request: SchedulingRequest, position: int
):
    """Asked twice: computed, then answered from the cache."""
    scheduler = Scheduler(CollectorRegistry())
    for _ in range(2):
        reply = scheduler.answer(body(position, wire(request.to_json())))
        assert reply.status == 200
        doc = wire(reply.doc)
        assert (doc["position"], doc["digest"]) == (position, request.digest())
        answer = allocation_from_json(doc["allocation"], request)
        assert allocation_to_json(answer) == allocation_to_json(schedule(request))
        assert answer == schedule(request)


@settings(max_examples=100, deadline=None)
@given(requests(), requests(), positions)
def test_a_kept_answer_goes_only_to_the_request_it_was_computed_for(first, second, position):
    """Another request at the same position, or the same one in another order, is read in
    full: its answer is its own."""
    scheduler = Scheduler(CollectorRegistry())
    scheduler.answer(body(position, first.to_json()))
    reordered = second.to_json()
    reordered["peers"].reverse()
    reply = scheduler.answer(body(position, reordered))
    assert reply.status == 200
    assert reply.doc["digest"] == second.digest()
    assert allocation_to_json(allocation_from_json(wire(reply.doc)["allocation"], second)) == (
        allocation_to_json(schedule(second))
    )


def test_the_same_request_at_the_same_position_is_computed_once():
    registry = CollectorRegistry()
    scheduler = Scheduler(registry)
    request = big_request()
    doc = request.to_json()
    first = scheduler.answer(body(7, doc))
    assert scheduler.answer(body(7, doc)) == first
    scheduler.answer(body(8, doc))
    assert outcomes(registry) == {"computed": 2, "cached": 1, "refused": 0}


def test_many_asking_at_once_cost_one_computation():
    """Parsed beforehand, so that the askers reach the cache together while one computes."""
    scheduler = Scheduler(CollectorRegistry())
    request = big_request()
    digest = request.digest()
    barrier = threading.Barrier(8)
    answers = []

    def ask() -> None:
        barrier.wait()
        answers.append(scheduler.allocation(3, digest, request))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcome for _, outcome in answers) == ["cached"] * 7 + ["computed"]
    assert all(allocation == schedule(request) for allocation, _ in answers)


def big_request() -> SchedulingRequest:
    """Enough peers that computing takes a while: askers at once overlap with it."""
    peers = tuple(PeerInfo(f"p{i:05d}", f"g{i // 10}", frozenset()) for i in range(3000))
    jobs = tuple(job(f"j{j}", *(f"t{t}" for t in range(5))) for j in range(4))
    return SchedulingRequest("balanced", jobs, frozenset(), peers)


SMALL = SchedulingRequest(
    "balanced",
    (job("j", "a", "b"),),
    frozenset(),
    tuple(PeerInfo(f"p{i}", "g", frozenset()) for i in range(3)),
).to_json()


def with_field(path: tuple[str | int, ...], value: object) -> dict:
    """SMALL with the field at ``path`` set to ``value``."""
    doc = json.loads(json.dumps(SMALL))
    where = doc
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    return doc


@pytest.fixture
def server() -> Iterator[tuple[str, int, CollectorRegistry]]:
    """A real server on a free port of this machine, with a small body limit."""
    registry = CollectorRegistry()
    running = start("127.0.0.1", 0, max_body=4096, registry=registry)
    yield "127.0.0.1", running.server_address[1], registry
    running.shutdown()
    running.server_close()


def post(server: tuple[str, int, CollectorRegistry], payload: bytes) -> tuple[int, dict]:
    host, port, _ = server
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        connection.request("POST", "/allocation", payload)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        (b"{not json", ["body", "not a JSON document"]),
        (b"\xff\xfe", ["body", "not a JSON document"]),
        (b"[1, 2]", ["body", "expected an object"]),
        (json.dumps({"position": 1, "request": SMALL, "x": 1}).encode(), ["body", "'x'"]),
        (json.dumps({"request": SMALL}).encode(), ["position", "None"]),
        (body(-1, SMALL), ["position", "-1"]),
        (body("3", SMALL), ["position", "'3'"]),
        (body(True, SMALL), ["position", "True"]),
        (json.dumps({"position": 1}).encode(), ["request", "missing"]),
        (body(1, "nope"), ["request", "Expected `object`"]),
        (body(1, with_field(("format",), 2)), ["request", "format 2"]),
        (body(1, with_field(("job_scheduler",), "fastest")), ["job_scheduler", "'fastest'"]),
        (body(1, with_field(("peers", 0, "id"), 5)), ["request", "$.peers[0].id"]),
        (body(1, with_field(("peers", 0, "colour"), "red")), ["colour", "$.peers[0]"]),
        (body(1, with_field(("jobs", 0, "tasks", 0, "min_peers"), "1")), ["$.jobs[0]"]),
        (body(1, with_field(("started",), ["nobody"])), ["started", "nobody"]),
        (body(1, with_field(("previous",), {"j": {"a": [1]}})), ["$.previous['j']['a']"]),
    ],
)
def test_a_bad_request_is_refused_with_the_field_at_fault_named(server, payload, words):
    status, doc = post(server, payload)
    assert status == 400
    assert all(word in doc["error"] for word in words), doc["error"]
    assert set(doc) == {"error"}
    assert "Traceback" not in doc["error"]
    assert outcomes(server[2])["refused"] == 1
    assert post(server, body(1, SMALL))[0] == 200


def test_a_body_over_the_limit_is_refused_naming_its_size(server):
    status, doc = post(server, b" " * 5000)
    assert status == 413
    assert doc["error"] == "body: 5000 bytes is over the limit of 4096 bytes"
    assert post(server, body(1, SMALL))[0] == 200


def test_a_post_without_a_length_is_refused_naming_the_header(server):
    host, port, _ = server
    with socket.create_connection((host, port), timeout=10) as connection:
        connection.sendall(b"POST /allocation HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = connection.makefile("rb").read()
    assert reply.startswith(b"HTTP/1.1 400 ")
    assert b"Content-Length" in reply.split(b"\r\n\r\n", 1)[1]


def test_it_serves_metrics_and_health(server):
    host, port, _ = server
    post(server, body(1, SMALL))
    post(server, body(1, SMALL))
    connection = http.client.HTTPConnection(host, port, timeout=10)
    connection.request("GET", "/healthz")
    assert json.loads(connection.getresponse().read()) == {"alive": True}
    connection.request("GET", "/metrics")
    text = connection.getresponse().read().decode()
    assert 'onyx_scheduler_requests_total{outcome="computed"} 1.0' in text
    assert 'onyx_scheduler_requests_total{outcome="cached"} 1.0' in text
    assert "onyx_scheduler_compute_seconds_count 1.0" in text
    connection.request("GET", "/nowhere")
    response = connection.getresponse()
    assert response.status == 404
    assert b"/metrics" in response.read()
    connection.close()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def spoiled(draw: st.DrawFn) -> bytes:
    """A valid request with one field, anywhere in it, replaced by any JSON value."""
    doc = {"position": 1, "request": json.loads(json.dumps(SMALL))}
    where, key = doc, "request"
    while isinstance(where[key], dict | list) and where[key] and draw(st.booleans()):
        where = where[key]
        key = draw(st.sampled_from(sorted(where) if isinstance(where, dict) else range(len(where))))
    where[key] = draw(json_values)
    return json.dumps(doc).encode()


@settings(max_examples=200, deadline=None)
@given(st.one_of(spoiled(), json_values.map(lambda v: json.dumps(v).encode()), st.binary()))
def test_no_body_makes_the_server_fail(payload):
    reply = Scheduler(CollectorRegistry()).answer(payload)
    assert reply.status in (200, 400), reply
    if reply.status == 400:
        assert isinstance(reply.doc["error"], str)
