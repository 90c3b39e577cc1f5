"""rollback-job: a job whose local recovery cannot go on rolls back as a whole.

Local recovery (peer.runtime.causal) replaces a failed peer alone, from logs its neighbours
keep. When what it needs is gone (an upstream dropped its in-flight log over its budget) or the
replay went another way than the logged one (a fn read the clock behind its context's back), a
peer of the job writes this entry. It gives the job a new allocation version at the entry's
position, with the same peers: every runner of the job starts again under it and restores from
the last commit, as after any reallocation, which stays correct. Only the version it names
counts, so a second peer's report of the same trouble, or a late one, changes nothing.

A job's coordinator writes it too, when epochs stop committing (peer.runtime.coordinator): more
abandoned in a row than the job tolerates. The replica keeps the reason of a job's latest
rollback for its status.
"""

from __future__ import annotations

from peer.log.entry import Diff, Entry, EntryKind, InvalidEntry
from peer.log.replica import Replica
from peer.values.limits import cut

MAX_REASON_CHARS = 1000
"""How much of the reason the entry is written with: it is for the operator's log."""


def _apply(replica: Replica, entry: Entry) -> Replica:
    job, version = entry.args["job"], entry.args["version"]
    if isinstance(version, bool):
        raise InvalidEntry(f"rollback-job: argument 'version' must be an int, got {version!r}")
    if replica.allocation_versions.get(job) != version or job not in replica.allocations:
        return replica
    return replica.evolve(
        allocation_versions=replica.allocation_versions.set(job, entry.position),
        takeovers=replica.takeovers.discard(job),
        recovering=replica.recovering.discard(job),
        done=replica.done.discard(job),
        rollbacks=replica.rollbacks.set(job, entry.args["reason"]),
    )


def _diff(entry: Entry, old: Replica, new: Replica) -> Diff:
    if old is new:
        return None
    return {"job": entry.args["job"], "reason": entry.args["reason"]}


ROLLBACK_JOB = EntryKind(
    name="rollback-job",
    args={"job": str, "version": int, "reason": str},
    apply=_apply,
    diff=_diff,
    while_joining=False,
    reads=frozenset(
        {"allocations", "allocation_versions", "takeovers", "recovering", "done", "rollbacks"}
    ),
    writes=frozenset({"allocation_versions", "takeovers", "recovering", "done", "rollbacks"}),
)


def rollback_job(job: str, version: int, reason: str) -> Entry:
    """The entry a peer writes when the job under ``version`` cannot go on without rolling
    back: its local recovery cannot, or its epochs no longer commit."""
    return ROLLBACK_JOB.entry(job=job, version=version, reason=cut(reason, MAX_REASON_CHARS))


KINDS = (ROLLBACK_JOB,)
