"""The scheduling request as it crosses the network: its JSON form reads back to an equal value
that schedules alike, its digest is stable, and bad documents and bad answers are refused with
the field at fault named."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.scheduling import JOB_SCHEDULERS, TASK_SCHEDULERS, JobDemand, PeerInfo, TaskDemand
from peer.scheduling.request import (
    SchedulingRequest,
    allocation_from_json,
    allocation_to_json,
    schedule,
)

TAGS = ("ssd", "gpu")
percentages = st.none() | st.integers(0, 100) | st.floats(0, 100)


@st.composite
def demands(draw: st.DrawFn, id_: str) -> JobDemand:
    tasks = []
    for i in range(draw(st.integers(1, 3))):
        low = draw(st.integers(1, 2))
        tasks.append(
            TaskDemand(
                name=f"t{i}",
                min_peers=low,
                max_peers=draw(st.none() | st.integers(low, low + 2)),
                required_tags=frozenset(draw(st.lists(st.sampled_from(TAGS), max_size=1))),
                percentage=draw(percentages),
            )
        )
    return JobDemand(
        id_,
        tuple(tasks),
        task_scheduler=draw(st.sampled_from(TASK_SCHEDULERS)),
        percentage=draw(percentages),
    )


@st.composite
def requests(draw: st.DrawFn) -> SchedulingRequest:
    jobs = tuple(draw(demands(f"j{i}")) for i in range(draw(st.integers(0, 3))))
    peers = tuple(
        PeerInfo(
            f"p{i}",
            f"g{draw(st.integers(0, 2))}",
            frozenset(draw(st.lists(st.sampled_from(TAGS), max_size=2))),
        )
        for i in range(draw(st.integers(0, 12)))
    )
    request = SchedulingRequest(
        job_scheduler=draw(st.sampled_from(JOB_SCHEDULERS)),
        jobs=jobs,
        started=frozenset(draw(st.lists(st.sampled_from([j.id for j in jobs]))) if jobs else ()),
        peers=tuple(draw(st.permutations(peers))),
    )
    if draw(st.booleans()):
        previous = schedule(request)
        request = SchedulingRequest(
            request.job_scheduler,
            request.jobs,
            request.started,
            peers[: draw(st.integers(0, len(peers)))],
            tuple((j, tuple(ts.items())) for j, ts in previous.items()),
        )
    return request


def wire(doc):
    return json.loads(json.dumps(doc))


@settings(max_examples=150, deadline=None)
@given(requests())
def test_a_request_reads_back_equal_and_schedules_alike(request):
    back = SchedulingRequest.from_json(wire(request.to_json()))
    assert back == request
    assert back.digest() == request.digest()
    answer = schedule(request)
    assert schedule(back) == answer
    assert allocation_from_json(wire(allocation_to_json(answer)), back) == answer


def request_with(percentage: float | int, *, peers=("p1", "p0")) -> SchedulingRequest:
    job = JobDemand("j", (TaskDemand("t", percentage=percentage),), percentage=percentage)
    return SchedulingRequest(
        "percentage", (job,), frozenset(), tuple(PeerInfo(p, "g") for p in peers)
    )


def test_numbers_and_orders_equal_to_the_schedulers_digest_alike():
    assert request_with(50).digest() == request_with(50.0, peers=("p0", "p1")).digest()
    assert request_with(-0.0).digest() == request_with(0).digest()
    assert request_with(50).digest() != request_with(50.5).digest()


CANONICAL = (
    '{"format":1,"job_scheduler":"percentage","jobs":[{"id":"j","percentage":50.0,'
    '"task_scheduler":"balanced","tasks":[{"max_peers":null,"min_peers":1,"name":"t",'
    '"percentage":50.0,"required_tags":[]}]}],"peers":[{"group":"g","id":"p0","tags":[]},'
    '{"group":"g","id":"p1","tags":[]}],"previous":{},"started":[]}'
)


def test_the_digest_is_the_sha256_of_the_canonical_document():
    request = request_with(50)
    assert json.dumps(request.to_json(), sort_keys=True, separators=(",", ":")) == CANONICAL
    assert request.digest() == hashlib.sha256(CANONICAL.encode()).hexdigest()


def good() -> dict:
    request = request_with(50)
    return wire(request.to_json())


def spoiled(path: tuple, value) -> dict:
    doc = good()
    *parents, last = path
    target = doc
    for key in parents:
        target = target[key]
    target[last] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (("format",), 2, "format 2"),
        (("job_scheduler",), "fastest", "job_scheduler"),
        (("jobs", 0, "tasks", 0, "min_peers"), "2", "$.jobs[0].tasks[0].min_peers"),
        (("jobs", 0, "tasks", 0, "min_peers"), 0, "$.jobs[0].tasks[0]"),
        (("jobs", 0, "tasks", 0, "colour"), "red", "$.jobs[0].tasks[0]"),
        (("jobs", 0, "priority"), 1, "$.jobs[0]"),
        (("peers", 1, "tags"), "ssd", "$.peers[1].tags"),
        (("peers", 1, "id"), "p0", "peers: peer ids repeat"),
        (("started",), ["k"], "started"),
        (("previous",), {"j": {"t": [1]}}, "$.previous['j']['t']"),
        (("extra",), 1, "extra"),
    ],
)
def test_a_bad_document_is_refused_naming_the_field(path, value, named):
    with pytest.raises(ValueError, match="scheduling request") as refused:
        SchedulingRequest.from_json(spoiled(path, value))
    assert named in str(refused.value)


def test_a_document_missing_a_field_is_refused_naming_it():
    doc = good()
    del doc["jobs"][0]["tasks"][0]["name"]
    with pytest.raises(ValueError, match=r"`name` - at `\$.jobs\[0\].tasks\[0\]`"):
        SchedulingRequest.from_json(doc)


def test_an_answer_from_schedule_reads_back_equal():
    request = request_with(100)
    answer = schedule(request)
    assert (
        allocation_from_json(wire(allocation_to_json(answer)), request)
        == answer
        == {"j": {"t": ("p0", "p1")}}
    )


@pytest.mark.parametrize(
    ("doc", "named"),
    [
        ({}, "jobs []"),
        ({"j": {"t": ["p0"]}, "k": {"t": []}}, "jobs ['j', 'k']"),
        ({"j": {"u": ["p0"]}}, "job 'j' has tasks ['u']"),
        ({"j": {"t": ["p9"]}}, "peer 'p9'"),
        ({"j": {"t": ["p0", "p0"]}}, "peer 'p0'"),
        ({"j": {"t": "p0"}}, "$['j']['t']"),
    ],
)
def test_an_answer_that_schedule_could_not_give_is_refused(doc, named):
    with pytest.raises(ValueError, match="allocation") as refused:
        allocation_from_json(doc, request_with(100))
    assert named in str(refused.value)
