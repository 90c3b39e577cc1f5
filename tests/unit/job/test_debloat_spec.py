"""The job's debloat_target: a default that stays out of the document, null for fixed credit
windows, and every bad value refused naming the job and the field."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from peer.job.load import from_dict, load
from peer.job.spec import DEFAULT_DEBLOAT_TARGET, JobError
from tests.unit.job import wordcount

Doc = dict[str, Any]


def loaded(change: Callable[[Doc], Any]) -> Any:
    doc = wordcount.document()
    change(doc)
    return from_dict(doc)


def test_the_default_target_stays_out_of_the_document():
    job = loaded(lambda d: None)
    assert job.debloat_target == DEFAULT_DEBLOAT_TARGET
    assert "debloat_target" not in job.to_dict()


@pytest.mark.parametrize("target", [None, 0.5, 2])
def test_a_target_or_null_round_trips(target):
    job = loaded(lambda d: d.update(debloat_target=target))
    assert job.debloat_target == target
    assert job.to_dict()["debloat_target"] == target
    assert load(job.to_dict()) == job


@pytest.mark.parametrize("bad", [0, -0.1, "fast", True, float("inf"), [1]])
def test_a_bad_target_is_refused_naming_the_field(bad):
    with pytest.raises(JobError) as caught:
        loaded(lambda d: d.update(debloat_target=bad))
    assert str(caught.value) == (
        f"job 'wc': debloat_target must be a number of seconds > 0 or null, got {bad!r}"
    )
