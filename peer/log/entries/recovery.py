"""task-recovered: a peer that took over a seat (peer.log.takeover) has replayed its task up to
where the failed peer was, and runs it as any other peer does again.

Until then it counts against the job's ``causal_depth`` and the tasks next to it cannot be
taken over, since their recovery would need the determinants it is still rebuilding. The entry
counts only under the allocation version it names: a replacement that wrote it late, after the
job rolled back as a whole, changes nothing, as a stale complete-job does not. Like the job
entries, it has no reactions and no side effects: the data plane reads ``recovering`` from the
replica.
"""

from __future__ import annotations

from peer.log.entry import Diff, Entry, EntryKind, InvalidEntry
from peer.log.replica import Replica


def _apply(replica: Replica, entry: Entry) -> Replica:
    job, peer, version = entry.args["job"], entry.args["peer"], entry.args["version"]
    if isinstance(version, bool):
        raise InvalidEntry(f"task-recovered: argument 'version' must be an int, got {version!r}")
    if replica.allocation_versions.get(job) != version:
        return replica
    recovering = replica.recovering.get(job)
    if recovering is None or peer not in recovering:
        return replica
    left = recovering.remove(peer)
    return replica.evolve(
        recovering=replica.recovering.set(job, left) if left else replica.recovering.remove(job)
    )


def _diff(entry: Entry, old: Replica, new: Replica) -> Diff:
    return None if old is new else {"job": entry.args["job"], "peer": entry.args["peer"]}


TASK_RECOVERED = EntryKind(
    name="task-recovered",
    args={"job": str, "peer": str, "version": int},
    apply=_apply,
    diff=_diff,
    while_joining=False,
    reads=frozenset({"allocation_versions", "recovering"}),
    writes=frozenset({"recovering"}),
)


def task_recovered(job: str, peer: str, version: int) -> Entry:
    """The entry a replacement writes once its replay is done, under allocation ``version``."""
    return TASK_RECOVERED.entry(job=job, peer=peer, version=version)


KINDS = (TASK_RECOVERED,)
