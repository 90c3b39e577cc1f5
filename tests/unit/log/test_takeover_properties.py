"""Takeover under random failures of a job with local recovery, through the log: the job keeps
its allocation version exactly when every failure is one the logs cover and a replacement is
found, the seats move only by takeovers, and standbys stay free, apart and unshared."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from peer.job.spec import REPLAYABLE_ENGINES, Job
from peer.log.replica import Replica
from tests.unit.log.local_recovery import JOB, local_recovery_logs, replay_from
from tests.unit.log.test_allocation_properties import check


def covered(job: Job, old: Replica, failed: list[str]) -> bool:
    """Whether the logs cover these failures: function tasks that replay, within the depth,
    none next to another failed or recovering peer's task."""
    recovering = old.recovering.get(JOB, frozenset())
    tasks = {old.task_of(p)[1] for p in [*failed, *recovering]}
    kinds = [job.task(old.task_of(p)[1]) for p in failed]
    return (
        all(t.kind == "function" and t.engine in REPLAYABLE_ENGINES for t in kinds)
        and len(failed) + len(recovering) <= job.causal_depth
        and not any(a in tasks and b in tasks for a, b in job.workflow)
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(local_recovery_logs())
def test_failures_are_taken_over_exactly_when_the_logs_cover_them(case):
    start, log = case
    old = start
    for new in replay_from(start, log):
        check(old, new)
        if JOB in old.started and all(old.allocations[JOB].values()):
            job = old.jobs[JOB]
            active = set(new.peers)
            failed = sorted(
                p for ps in old.allocations[JOB].values() for p in ps if p not in active
            )
            kept = new.allocation_versions[JOB] == old.allocation_versions[JOB]
            standbys = old.standbys.get(JOB, {})
            ready = all(standbys.get(p) in active for p in failed)
            if not failed:
                assert kept, "a version moved with no failure"
            elif not covered(job, old, failed):
                assert not kept, "a failure the logs do not cover was taken over"
            elif ready:
                assert kept, "a covered failure with its standbys ready rolled back"
        old = new
