"""The public API: what a client (the CLI, a test, an operator's script) does to a cluster
without joining it."""

from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

from peer.job.chains import chained
from peer.job.code import CodeArchive, imports_from, unpack
from peer.job.demand import job_demand
from peer.job.load import load
from peer.job.spec import Job, JobError
from peer.job.validate import validate
from peer.log import subscriber
from peer.log.apply import apply_entry
from peer.log.entries.gc import GC
from peer.log.entries.group_leave import GROUP_LEAVE
from peer.log.entries.jobs import SUBMIT_JOB, kill_job
from peer.log.entries.leave import LEAVE
from peer.log.entry import Entry, Transition
from peer.log.replica import Replica
from peer.log.store import LogStore, StoreError, store_origin_and_trim
from peer.log.stores.zookeeper import ZooKeeperStore
from peer.membership.gossip import Status
from peer.membership.members import MemberError, lifecycle, resolve
from peer.runtime.checkpoints import CheckpointStorage, Commits, Savepoint, chain_start
from peer.values.epoch import Epoch
from peer.values.limits import MAX_ENTRY_BYTES


def connect(
    zookeeper: str,
    tenancy: str,
    *,
    create: bool = False,
    session_timeout: float = 10.0,
    connect_timeout: float = 10.0,
    auth: str | None = None,
    watch_log: bool = True,
) -> ZooKeeperStore:
    """A session on ``tenancy``; without ``watch_log`` it never watches the log directory."""
    return ZooKeeperStore(
        zookeeper,
        tenancy,
        create=create,
        session_timeout=session_timeout,
        connect_timeout=connect_timeout,
        auth=auth,
        watch_log=watch_log,
    )


def replica(store: LogStore) -> Replica:
    """The cluster's state as of the log's current tail."""
    return subscriber.catch_up(store)


@dataclass(frozen=True)
class GcResult:
    position: int
    deleted: int


class _GcCaller:
    """The Effects of a client that called gc: the gc entry's side effect stores the origin.
    It is handed only its own gc entry, whose one side effect for its caller is that; a client
    is no peer group, so a group's other effects would be a mistake, refused as one."""

    def __init__(self, store: LogStore) -> None:
        self.store, self.deleted = store, 0

    def store_origin(self, replica: Replica) -> None:
        self.deleted = store_origin_and_trim(self.store, replica)

    def append(self, entry: Entry) -> None:
        _not_a_group(f"append {entry.fn}")

    def back_off(self) -> None:
        _not_a_group("back off")

    def report_if_dead(self, group: str) -> None:
        _not_a_group(f"report group {group} if dead")

    def restart_group(self) -> None:
        _not_a_group("restart")

    def hand_over(self) -> None:
        _not_a_group("hand its work over")

    def end_group(self) -> None:
        _not_a_group("end")

    def restart_virtual_peer(self, peer: str) -> None:
        _not_a_group(f"restart virtual peer {peer}")


def _not_a_group(effect: str) -> NoReturn:
    raise TypeError(f"the caller of gc is a client, not a peer group: it cannot {effect}")


def gc(store: LogStore, caller: str, timeout: float = 30.0) -> GcResult:
    """Append gc, play the log up to it, then store the origin and trim what precedes it."""
    position = store.append(GC.entry(id=caller))
    effects = _GcCaller(store)
    try:
        follow(
            store,
            lambda r: r.version >= position,
            timeout,
            lambda t: t.side_effects(caller, effects) if t.entry.position == position else None,
        )
    except TimeoutError as e:
        raise StoreError(f"gc entry at position {position} was not read back: {e}") from e
    return GcResult(position, effects.deleted)


# -- jobs -----------------------------------------------------------------------------------------


OPERATOR_KILL = "an operator killed it"
"""The reason a kill gives when its caller gives none."""


def submit(
    store: LogStore,
    job: Job | Mapping[str, Any] | os.PathLike[str],
    job_id: str | None = None,
    *,
    code: CodeArchive | None = None,
    storage: CheckpointStorage | None = None,
) -> str:
    """Check the job here, imports included, then append submit-job; the id is the job's own,
    ``job_id``, or a fresh one. The entry carries the job's hash. With ``code`` the job's paths
    import from that archive, which is uploaded to ``storage`` (the cluster's checkpoint storage)
    for the peers that run the job, once the job is known to fit and the log to take it.

    Submitting the same job again under an id the cluster knows changes nothing and returns the
    id; another job under a known id is refused, checked before writing and again once the entry
    is read back (two submitters may race for one id: the log's order decides, and the loser
    is told the same way)."""
    job = chained(_checked(job) if code is None else _checked_with(job, code))
    chosen = job_id or job.id or uuid.uuid4().hex
    digest = job.digest()
    current = replica(store)
    if _already(current, chosen, digest):
        return chosen
    _check_resume(store, chosen, job)
    doc = {k: v for k, v in job.to_dict().items() if k != "id"}
    entry = SUBMIT_JOB.entry(id=chosen, job=doc, hash=digest, at=time.time())
    size = len(entry.encode())
    if size > MAX_ENTRY_BYTES:
        raise JobError(
            f"job {chosen!r}: its submit-job entry is {size:,} bytes, "
            f"{size - MAX_ENTRY_BYTES:,} bytes over the limit of {MAX_ENTRY_BYTES:,} of a log entry"
        )
    if code is not None:
        if storage is None:
            raise JobError(f"job {chosen!r}: shipping code needs the cluster's checkpoint storage")
        storage.put_code(chosen, code.sha256, code.data)
    position = store.append(entry)
    if not _already(subscriber.catch_up(store, current), chosen, digest):
        raise JobError(
            f"job {chosen!r}: the log refused its submit-job entry at position {position} "
            "(the groups' logs say why)"
        )
    return chosen


def _checked(job: Job | Mapping[str, Any] | os.PathLike[str]) -> Job:
    return validate(job) if isinstance(job, Job) else load(job)


def _checked_with(job: Job | Mapping[str, Any] | os.PathLike[str], code: CodeArchive) -> Job:
    """The job checked against its own code (unpacked here only for the check), naming it."""
    with tempfile.TemporaryDirectory(prefix="onyx-code-") as scratch:
        directory = unpack(code.data, code.reference(), Path(scratch))
        with imports_from(directory):
            checked = _checked(job)
    return replace(checked, code=code.reference())


def _check_resume(store: LogStore, job_id: str, job: Job) -> None:
    """What ``resume_from`` names must be there to restore from when the job is submitted, and
    must split each grouped task's work as the job does (its coordinator checks again when it
    restores): a savepoint that exists, and key groups or splits (max_parallelism) unchanged."""
    source = job.resume_source()
    if source is None:
        return
    record, _ = Commits(store, source[0]).read()
    if source[1] is None:
        taken = record.groups if record is not None else {}
    elif record is None or source[1] not in record.savepoints:
        raise JobError(
            f"job {job_id!r}: resume_from names savepoint {source[1]!r} of job "
            f"{source[0]!r}, which does not exist"
        )
    else:
        taken = record.savepoints[source[1]].groups
    for task in job.catalog:
        groups = job.key_groups(task.name)
        if task.name in taken and taken[task.name] != groups:
            parts = "key groups" if job.keyed(task.name) else "splits"
            raise JobError(
                f"job {job_id!r}, task {task.name!r}: max_parallelism is {groups} and the state "
                f"it resumes from (job {source[0]!r}) has {taken[task.name]} {parts}; a task "
                "keeps its max_parallelism for the life of its state"
            )


def _already(current: Replica, job_id: str, digest: str) -> bool:
    """Whether the cluster knows ``job_id`` as this very job; JobError if as another one. A job
    submitted before jobs carried hashes counts as the same."""
    if job_id not in current.jobs and job_id not in current.finished:
        return False
    known = current.hashes.get(job_id)
    if known is not None and known != digest:
        raise JobError(
            f"job {job_id!r}: this id belongs to a job with other content (sha256 {known[:12]}, "
            f"this one {digest[:12]}); choose another id"
        )
    return True


def kill(store: LogStore, job_id: str, reason: str = OPERATOR_KILL) -> None:
    """Append kill-job with ``reason``, which the replica keeps and status shows."""
    store.append(kill_job(job_id, reason))


def down(store: LogStore, member: str) -> str:
    """Down ``member`` (its id or a unique prefix), as an operator decides it: its peers leave
    the cluster and their work moves to the other members, from their jobs' last checkpoints.
    Returns the member's whole id; a name that fits no joining or up member, or more than one,
    raises MemberError."""
    group = resolve(replica(store), member)
    store.append(GROUP_LEAVE.entry(id=group))
    return group


def leave(store: LogStore, member: str, timeout: float | None = None) -> str:
    """Ask ``member`` (its id or a unique prefix) to leave gracefully: it keeps its work until
    its jobs commit the epochs they are in, then exits, its work moves to the others from those
    checkpoints, and the membership leader removes it. With ``timeout``, wait that long for the
    removal (TimeoutError past it; MemberError if it was downed instead). Returns its whole
    id; a name that fits no joining or up member, or more than one, raises MemberError."""
    current = replica(store)
    group = resolve(current, member)
    status = lifecycle(current)[group]
    if status is not Status.UP:
        raise MemberError(
            f"member {member!r}: {group} is {status.value}; only an up member can leave"
        )
    store.append(LEAVE.entry(id=group))
    if timeout is not None:
        gone = follow(store, lambda r: group in r.left, timeout)
        if group not in gone.removed:
            raise MemberError(f"member {group} was downed before it could leave gracefully")
    return group


@dataclass(frozen=True)
class JobStatus:
    """``state`` is running, waiting (for ``needs`` peers), completed, killed or unknown;
    ``reason`` says why a job ended, where that was said (a kill's reason); ``name`` is the
    job's own, if it has one; ``submitted`` when it was submitted (seconds since the epoch, by
    the submitter's clock)."""

    id: str
    state: str
    needs: int = 0
    allocation: dict[str, list[str]] = field(default_factory=dict)
    allocation_version: int | None = None
    reason: str | None = None
    name: str | None = None
    submitted: float | None = None
    standbys: dict[str, str] = field(default_factory=dict)
    """Local recovery: each running peer's standby, on another member."""
    takeovers: dict[str, str] = field(default_factory=dict)
    """Local recovery: each peer that took a failed peer's seat over, and the seat's first
    peer, under this allocation version."""
    recovering: list[str] = field(default_factory=list)
    """Those still replaying their seat."""
    rolled_back: str | None = None
    """Why a running job last rolled back as a whole, if it has."""
    held_back: bool = False
    """The schedulers would give the running job more peers: it grows at its next pause."""

    @property
    def finished(self) -> bool:
        return self.state in ("completed", "killed")

    @property
    def peers(self) -> int:
        return sum(len(peers) for peers in self.allocation.values())

    def to_json(self, committed: Epoch | None = None) -> dict[str, Any]:
        """The status as the CLI's ``--json`` and the ``/jobs`` endpoints give it, with the
        job's last committed epoch (from its commit record) when the caller read one."""
        epoch = None if committed is None else {
            "allocation_version": committed.version, "epoch": committed.number
        }  # fmt: skip
        return {**asdict(self), "peers": self.peers, "committed_epoch": epoch}


def last_committed(store: LogStore, job_id: str) -> Epoch | None:
    """The job's last committed epoch, from its commit record."""
    record, _ = Commits(store, job_id).read()
    return None if record is None else record.committed


def jobs(current: Replica) -> list[JobStatus]:
    """Every job the replica knows: running and waiting ones in submission order (the
    schedulers' priority), then finished ones by id."""
    ids = [*current.job_order, *sorted(current.finished)]
    return [status(current, job_id) for job_id in ids]


def status(current: Replica, job_id: str) -> JobStatus:
    name, at = current.names.get(job_id), current.submitted.get(job_id)
    if job_id in current.finished:
        outcome, reason = current.finished[job_id], current.reasons.get(job_id)
        return JobStatus(job_id, outcome, reason=reason, name=name, submitted=at)
    job = current.jobs.get(job_id)
    if job is None:
        return JobStatus(job_id, "unknown")
    tasks = current.allocations.get(job_id, {})
    allocation = {t: list(tasks.get(t, ())) for t in job.sorted_tasks()}
    version = current.allocation_versions.get(job_id)
    if any(allocation.values()):
        return JobStatus(
            job_id, "running", 0, allocation, version, name=name, submitted=at,
            standbys=dict(current.standbys.get(job_id, {})),
            takeovers=dict(current.takeovers.get(job_id, {})),
            recovering=sorted(current.recovering.get(job_id, ())),
            rolled_back=current.rollbacks.get(job_id),
            held_back=job_id in current.held_back,
        )  # fmt: skip
    needs = job_demand(job, started=job_id in current.started).minimum
    return JobStatus(job_id, "waiting", needs, allocation, version, name=name, submitted=at)


def follow(
    store: LogStore,
    until: Callable[[Replica], bool],
    timeout: float | None,
    each: Callable[[Transition], object] | None = None,
) -> Replica:
    """Play the log as it grows, handing every transition to ``each``, until ``until`` holds
    for the replica as of the log's tail (never for a past state read on the way there);
    TimeoutError after ``timeout`` seconds (None: no limit)."""
    wakeup = threading.Event()
    store.on_append(wakeup.set)
    current = subscriber.boot(store)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        wakeup.clear()
        for entry in subscriber.poll(store, current.version):
            transition = apply_entry(current, entry)
            current = transition.new
            if each is not None:
                each(transition)
        if until(current):
            return current
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:g} s at log position {current.version}")
        wakeup.wait(0.5)


def wait(
    store: LogStore, job_id: str, timeout: float | None, stop: threading.Event | None = None
) -> JobStatus:
    """The job's status once it has completed or been killed, or once ``stop`` is set."""
    stopped = stop.is_set if stop is not None else lambda: False
    final = follow(store, lambda r: status(r, job_id).finished or stopped(), timeout)
    return status(final, job_id)


# -- savepoints -----------------------------------------------------------------------------------


def savepoint(
    store: LogStore, job_id: str, name: str, timeout: float | None, stop: bool = False
) -> Savepoint:
    """Ask the job's coordinator to keep its next committed epoch as savepoint ``name`` (with
    ``stop``, to commit nothing after it), and wait for that commit. Savepoints stay until
    ``dispose_savepoint``."""
    current = replica(store)
    state = status(current, job_id)
    if state.state == "unknown" or state.finished:
        raise JobError(f"job {job_id!r}: no savepoint of a job that is {state.state}")
    if current.jobs[job_id].barrier_period is None:
        raise JobError(f"job {job_id!r}: takes no checkpoints (barrier_period: null)")
    commits = Commits(store, job_id)
    commits.request_savepoint(name, stop)

    def taken() -> Savepoint | None:
        record, _ = commits.read()
        return record.savepoints.get(name) if record else None

    final = follow(store, lambda r: taken() is not None or status(r, job_id).finished, timeout)
    kept = taken()
    if kept is None:
        raise JobError(
            f"job {job_id!r}: {status(final, job_id).state} before savepoint {name!r} committed"
        )
    return kept


def stop(store: LogStore, job_id: str, name: str, timeout: float | None) -> Savepoint:
    """Stop a running job with a final savepoint, as Flink's stop-with-savepoint: its next
    committed epoch becomes savepoint ``name``, the same compare-and-set fences its commit
    record so that nothing commits after it, and the job is killed.

    The fence is what makes the savepoint where the job's output ends: an exactly-once sink
    publishes an epoch only once it is committed, so none publishes past the savepoint, and a
    new job resuming from it into the same outputs neither repeats nor loses a row (its sinks
    publish what the savepoint committed and the stopped job had not published yet, and drop
    what it staged after). JobError for a job that is not running; TimeoutError, the stop taken
    back and the job running on, when the savepoint has not committed within ``timeout``."""
    state = status(replica(store), job_id).state
    if state == "unknown":
        raise JobError(f"job {job_id!r}: no such job in this tenancy")
    if state != "running":
        raise JobError(f"job {job_id!r}: cannot stop a job that is {state}")
    try:
        kept = savepoint(store, job_id, name, timeout, stop=True)
    except TimeoutError:
        withdrawn = Commits(store, job_id).withdraw_stop(name)
        if withdrawn is None:
            raise
        kept = withdrawn
    kill(store, job_id, f"stopped with savepoint {name!r} ({kept.epoch.describe()})")
    return kept


def dispose_savepoint(
    store: LogStore, storage: CheckpointStorage, job_id: str, name: str
) -> Savepoint:
    """Forget savepoint ``name`` and delete the snapshots of its epoch and its chains' that
    nothing else still needs: the job's latest two commits (recovery, and the collection that
    follows the next commit) or another savepoint."""
    gone, record = Commits(store, job_id).dispose_savepoint(name)
    first = chain_start(gone.epoch, gone.since)
    for number in range(first.number, gone.epoch.number + 1):
        epoch = Epoch(gone.epoch.version, number)
        if not record.retains(epoch):
            storage.delete_epoch(job_id, epoch)
    return gone
