"""`onyx job status` of a running job that recovers locally names, beside each peer, the seat
it took over (and whether it is still replaying it) and its standby."""

from __future__ import annotations

from peer.api import JobStatus
from peer.cli import describe_job


def test_a_running_job_names_its_takeovers_and_standbys():
    status = JobStatus(
        "j1", "running", allocation={"read": ["aaaaaaaa1"], "count": ["bbbbbbbb1", "cccccccc1"]},
        allocation_version=42, standbys={"bbbbbbbb1": "dddddddd1"},
        takeovers={"cccccccc1": "eeeeeeee1"}, recovering=["cccccccc1"],
    )  # fmt: skip
    assert describe_job(status).splitlines() == [
        "job j1: running (allocation version 42)",
        "  read: aaaaaaaa",
        "  count: bbbbbbbb (standby dddddddd), cccccccc (took over from eeeeeeee, replaying)",
    ]


def test_a_job_without_local_recovery_reads_as_before():
    status = JobStatus("j1", "running", allocation={"read": ["aaaaaaaa1"]}, allocation_version=3)
    assert describe_job(status) == "job j1: running (allocation version 3)\n  read: aaaaaaaa"


def test_a_job_held_back_says_it_grows_at_a_commit():
    status = JobStatus(
        "j1", "running", allocation={"read": ["aaaaaaaa1"]}, allocation_version=9, held_back=True
    )
    assert describe_job(status).splitlines() == [
        "job j1: running (allocation version 9)",
        "  held back at its size: it grows once it stands still at a commit",
        "  read: aaaaaaaa",
    ]


def test_a_job_that_rolled_back_says_why():
    status = JobStatus(
        "j1", "running", allocation={"read": ["aaaaaaaa1"]}, allocation_version=9,
        rolled_back="job 'j1': 2 epochs in a row abandoned",
    )  # fmt: skip
    assert describe_job(status).splitlines() == [
        "job j1: running (allocation version 9)",
        "  last rolled back: job 'j1': 2 epochs in a row abandoned",
        "  read: aaaaaaaa",
    ]
