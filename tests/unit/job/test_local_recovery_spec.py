"""The job's local-recovery settings: defaults that stay out of the document, which tasks keep
a standby, and every bad value refused naming the job, the task and the field."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from peer.job.load import from_dict, load
from peer.job.spec import DEFAULT_IN_FLIGHT_BUDGET, MIB, JobError
from tests.unit.job import wordcount

Doc = dict[str, Any]


def task(doc: Doc, name: str) -> Doc:
    return next(t for t in doc["catalog"] if t["name"] == name)


def loaded(change: Callable[[Doc], Any]) -> Any:
    doc = wordcount.document()
    change(doc)
    return from_dict(doc)


def refusal(change: Callable[[Doc], Any]) -> str:
    with pytest.raises(JobError) as caught:
        loaded(change)
    return str(caught.value)


def test_defaults_leave_local_recovery_off_and_out_of_the_document():
    job = loaded(lambda d: None)
    assert (job.local_recovery, job.standby, job.causal_depth) == (False, False, 1)
    assert job.in_flight_budget == DEFAULT_IN_FLIGHT_BUDGET == 64 * MIB
    assert not job.local_recovery_on
    assert not any(job.has_standby(t.name) for t in job.catalog)
    doc = job.to_dict()
    for key in ("local_recovery", "standby", "causal_depth", "in_flight_budget"):
        assert key not in doc
    assert all("standby" not in t for t in doc["catalog"])


def test_settings_round_trip():
    def change(d: Doc) -> None:
        d.update(local_recovery=True, causal_depth=2, in_flight_budget=2 * MIB)
        task(d, "count")["standby"] = True

    job = loaded(change)
    doc = job.to_dict()
    assert (doc["local_recovery"], doc["causal_depth"], doc["in_flight_budget"]) == (
        True, 2, 2 * MIB,
    )  # fmt: skip
    assert task(doc, "count")["standby"] is True
    assert load(doc) == job


def test_a_task_has_standby_by_its_own_flag_else_the_jobs():
    def change(d: Doc) -> None:
        d["standby"] = True
        task(d, "split")["standby"] = False

    job = loaded(change)
    assert [job.has_standby(n) for n in ("read", "split", "count", "write")] == [
        False, False, True, False,
    ], "only function tasks that can be taken over keep a standby"  # fmt: skip
    assert job.local_recovery_on
    assert not job.local_recovery


def test_one_task_with_standby_turns_local_recovery_on():
    job = loaded(lambda d: task(d, "count").update(standby=True))
    assert job.local_recovery_on
    assert [job.has_standby(n) for n in ("read", "split", "count")] == [False, False, True]


def test_a_job_standby_every_task_declines_leaves_local_recovery_off():
    def change(d: Doc) -> None:
        d["standby"] = True
        for t in d["catalog"]:
            t["standby"] = False

    assert not loaded(change).local_recovery_on


def without_checkpoints(d: Doc) -> None:
    d["barrier_period"] = None
    task(d, "read").pop("n_peers")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(local_recovery="yes"),
         "job 'wc': local_recovery must be true or false, got 'yes'"),
        (lambda d: d.update(standby=1),
         "job 'wc': standby must be true or false, got 1"),
        (lambda d: task(d, "split").update(standby="on"),
         "job 'wc': task 'split': standby must be true, false or null, got 'on'"),
        (lambda d: d.update(causal_depth=0),
         "job 'wc': causal_depth must be an int >= 1, got 0"),
        (lambda d: d.update(causal_depth=True),
         "job 'wc': causal_depth must be an int >= 1, got True"),
        (lambda d: d.update(in_flight_budget=MIB - 1),
         "job 'wc': in_flight_budget must be an int of bytes >= 1048576 (1 MiB), got 1048575"),
        (lambda d: d.update(in_flight_budget=float(2 * MIB)),
         "job 'wc': in_flight_budget must be an int of bytes >= 1048576 (1 MiB), "
         "got 2097152.0"),
        (lambda d: (without_checkpoints(d), d.update(local_recovery=True)),
         "job 'wc': local_recovery needs checkpoints: set barrier_period (it is null)"),
        (lambda d: (without_checkpoints(d), d.update(standby=True)),
         "job 'wc': standby needs checkpoints: set barrier_period (it is null)"),
        (lambda d: (without_checkpoints(d), task(d, "count").update(standby=True)),
         "job 'wc': task 'count': standby needs checkpoints: set the job's barrier_period"),
    ],
)  # fmt: skip
def test_bad_settings_are_refused_naming_the_field(change, message):
    assert refusal(change) == message


def test_without_checkpoints_local_recovery_may_stay_off():
    assert loaded(without_checkpoints).barrier_period is None


def test_a_standby_on_a_task_that_cannot_be_taken_over_is_refused():
    with pytest.raises(JobError, match=r"task 'write'.*standby is for function tasks"):
        loaded(lambda d: task(d, "write").update(standby=True))
