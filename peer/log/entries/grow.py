"""grow-job: a job held back at its size grows, standing still at a commit.

A running job with checkpoints is not given more peers the moment the schedulers would (a
member came back, another job ended): its new allocation would restore from its last commit and
redo all that followed it. The allocation holds it back (peer.log.allocation, ``held_back``),
and its coordinator pauses it as for a hand-over (peer.runtime.coordinator). Once the pause's
epoch commits, the job stands exactly at that commit, and the coordinator writes this entry: it
lets the job grow in the allocation it triggers (``growing``), and the new allocation's peers
restore from the commit with nothing to redo. Only the version it names counts, so a repeat or
a late one changes nothing.
"""

from __future__ import annotations

from peer.log.entry import Diff, Entry, EntryKind, InvalidEntry
from peer.log.replica import Replica


def _apply(replica: Replica, entry: Entry) -> Replica:
    job, version = entry.args["job"], entry.args["version"]
    if isinstance(version, bool):
        raise InvalidEntry(f"grow-job: argument 'version' must be an int, got {version!r}")
    if job not in replica.held_back or replica.allocation_versions.get(job) != version:
        return replica
    return replica.evolve(growing=replica.growing.add(job))


def _diff(entry: Entry, old: Replica, new: Replica) -> Diff:
    return None if old is new else {"job": entry.args["job"], "version": entry.args["version"]}


GROW_JOB = EntryKind(
    name="grow-job",
    args={"job": str, "version": int},
    apply=_apply,
    diff=_diff,
    while_joining=False,
    reads=frozenset({"held_back", "allocation_versions", "growing"}),
    writes=frozenset({"growing"}),
)


def grow_job(job: str, version: int) -> Entry:
    """The entry a job's coordinator writes once the job, held back under ``version``, stands
    still at a commit."""
    return GROW_JOB.entry(job=job, version=version)


KINDS = (GROW_JOB,)
