"""submit-job, kill-job and complete-job: the jobs the cluster runs.

Entries change only which jobs exist; who works on them follows from the replica
(peer.log.allocation), and each group's data plane reads its peers' tasks from the allocation
after every entry, so these kinds have no reactions and no side effects of their own.

A submitted job is checked for shape only: whether its code imports depends on the machine,
and every replica must take or refuse a job alike (submitters check imports before writing).
complete-job is written by each output peer once it has drained its inputs and synced its
output under the job's current allocation; the job completes when every output peer of that
allocation has said so. A stale complete-job, from before a reallocation, counts for nothing:
the new allocation's peers run the job again from its last checkpoint.

submit-job carries the job's ``hash`` (sha256 of its canonical document, computed by the
submitter) and the replica keeps it beyond the job's end, so a submitter can tell the same job
from another one under a known id; ``at`` is when it was submitted, by the submitter's clock.
kill-job carries why, if it says: an operator's kill, a task that failed; the replica keeps the
reason, cut to MAX_REASON_CHARS, with the job's outcome.
"""

from __future__ import annotations

import math
import re

from pyrsistent import pset

from peer.job.load import from_dict
from peer.job.spec import JobError
from peer.log.entry import Diff, Entry, EntryKind, InvalidEntry
from peer.log.replica import Replica
from peer.values.limits import cut

MAX_REASON_CHARS = 1000
"""How much of a kill's reason the replica keeps: enough for an error message and where it
happened, while every replica, and every origin, carries it for as long as the job is known."""

HASH = re.compile(r"^[0-9a-f]{64}$")
"""What a job's hash looks like: a sha256 hex digest, as ``Job.digest`` writes it."""


def _known(replica: Replica, job: str) -> bool:
    return job in replica.jobs or job in replica.finished


def _apply_submit(replica: Replica, entry: Entry) -> Replica:
    job_id, doc, digest = entry.args["id"], entry.args["job"], entry.args.get("hash")
    at = entry.args.get("at")
    if _known(replica, job_id):
        return replica
    if digest is not None and not HASH.match(digest):
        raise InvalidEntry(f"submit-job {job_id!r} refused: hash is not a sha256 hex digest")
    if at is not None and not 0 <= at < math.inf:
        raise InvalidEntry(f"submit-job {job_id!r} refused: at is not seconds since the epoch")
    try:
        job = from_dict({**doc, "id": job_id}, imports=False)
    except (JobError, TypeError) as e:
        raise InvalidEntry(f"submit-job {job_id!r} refused: {e}") from e
    return replica.evolve(
        hashes=replica.hashes.set(job_id, digest) if digest else replica.hashes,
        names=replica.names.set(job_id, job.name) if job.name else replica.names,
        submitted=replica.submitted.set(job_id, float(at)) if at is not None else replica.submitted,
        jobs=replica.jobs.set(job_id, job),
        job_order=replica.job_order.append(job_id),
        short_ids=replica.short_ids.set(job_id, replica.next_short_id),
        next_short_id=replica.next_short_id + 1,
    )


LOCAL_RECOVERY = frozenset({"standbys", "takeovers", "recovering"})
"""The keys of local recovery (peer.log.takeover), kept per job."""

FINISHED = frozenset(
    {"jobs", "job_order", "finished", "reasons", "allocations", "allocation_versions",
     "started", "done", "short_ids"}
) | LOCAL_RECOVERY  # fmt: skip
"""What ``finish`` reads and writes."""


def finish(replica: Replica, job_id: str, outcome: str, reason: str | None = None) -> Replica:
    """The job leaves the running set for good; its peers are freed by the next allocation."""
    return replica.evolve(
        jobs=replica.jobs.discard(job_id),
        job_order=replica.job_order.delete(replica.job_order.index(job_id)),
        finished=replica.finished.set(job_id, outcome),
        reasons=replica.reasons.set(job_id, reason) if reason else replica.reasons,
        allocations=replica.allocations.discard(job_id),
        allocation_versions=replica.allocation_versions.discard(job_id),
        started=replica.started.discard(job_id),
        done=replica.done.discard(job_id),
        standbys=replica.standbys.discard(job_id),
        takeovers=replica.takeovers.discard(job_id),
        recovering=replica.recovering.discard(job_id),
        short_ids=replica.short_ids.discard(job_id),
    )


def _apply_kill(replica: Replica, entry: Entry) -> Replica:
    job_id, reason = entry.args["id"], entry.args.get("reason")
    if job_id not in replica.jobs:
        return replica
    return finish(replica, job_id, "killed", cut(reason, MAX_REASON_CHARS) if reason else None)


def kill_job(job_id: str, reason: str | None = None) -> Entry:
    """A kill-job entry, its reason cut as the replica would keep it, so that however long an
    error message is, the entry stays small."""
    if not reason:
        return KILL_JOB.entry(id=job_id)
    return KILL_JOB.entry(id=job_id, reason=cut(reason, MAX_REASON_CHARS))


def _output_peers(replica: Replica, job_id: str) -> set[str]:
    job, tasks = replica.jobs[job_id], replica.allocations.get(job_id, {})
    return {p for name in job.output_tasks() for p in tasks.get(name, ())}


def _apply_complete(replica: Replica, entry: Entry) -> Replica:
    job_id, peer, version = entry.args["id"], entry.args["peer"], entry.args["version"]
    if job_id not in replica.jobs or replica.allocation_versions.get(job_id) != version:
        return replica
    outputs = _output_peers(replica, job_id)
    done = replica.done.get(job_id, pset())
    if peer not in outputs or peer in done:
        return replica
    done = done.add(peer)
    if done >= outputs:
        return finish(replica, job_id, "completed")
    return replica.evolve(done=replica.done.set(job_id, done))


def _diff_job(entry: Entry, old: Replica, new: Replica) -> Diff:
    return None if old is new else {"job": entry.args["id"]}


SUBMIT_JOB = EntryKind(
    name="submit-job",
    args={"id": str, "job": dict},
    apply=_apply_submit,
    diff=_diff_job,
    while_joining=False,
    optional={"hash": str, "at": float},
    reads=frozenset({"jobs", "finished", "hashes", "names", "submitted", "job_order"})
    | {"short_ids", "next_short_id"},
    writes=frozenset({"jobs", "hashes", "names", "submitted", "job_order"})
    | {"short_ids", "next_short_id"},
)
KILL_JOB = EntryKind(
    name="kill-job",
    args={"id": str},
    apply=_apply_kill,
    diff=_diff_job,
    while_joining=False,
    optional={"reason": str},
    reads=FINISHED,
    writes=FINISHED,
)
COMPLETE_JOB = EntryKind(
    name="complete-job",
    args={"id": str, "peer": str, "version": int},
    apply=_apply_complete,
    diff=_diff_job,
    while_joining=False,
    reads=FINISHED,
    writes=FINISHED,
)

KINDS = (SUBMIT_JOB, KILL_JOB, COMPLETE_JOB)
