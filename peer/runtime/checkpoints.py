"""Checkpoints: where a job's snapshots live, and how an epoch of them becomes committed.

Asynchronous barrier snapshotting splits a checkpoint in two. The snapshots, one blob per virtual
peer and epoch, can be large: they go to checkpoint storage through fsspec (a local directory by
default, any fsspec URL otherwise), uploaded in a thread pool so that no peer waits on them.
Whether an epoch counts is a different matter, decided by one small commit record per job in the
log store: an epoch is committed when the record says so and not before, so a crash between the
uploads and the commit leaves snapshots that nobody restores from.

The record also fences coordinators. A coordinator of a newer allocation first claims the record
(its owner becomes that allocation's version); from then on an older coordinator's
compare-and-set finds an owner that is not its own and its commit is refused, so two coordinators
that each believe they run the job can never both commit.

Storage layout: ``<url>/<tenancy>/<job>/<version:012d>-<number:08d>/<task>/<slot>.snap``, each
name percent-quoted where it is not plain. A reader never sees half a snapshot: in a local
directory it is written under a temporary name beside its final one and renamed; an object
store's PUT is whole by itself (peer.storage). Nothing is ever listed to restore: the
commit record names the epoch and how many slots each task has, which names every snapshot,
and each snapshot names the earlier ones of its slot its keyed state adds to (its chain,
peer.runtime.snapshot). A restore reads a slot's snapshot and its chain's, whole, or only the
key groups it owns: each snapshot's header, then one range. Listings only find epochs to
delete: those before the oldest epoch the last two commits' chains start at, and that no
savepoint's chain needs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import posixpath
import re
import tempfile
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from peer.job.values import is_int
from peer.log.store import CommitRecords, path_component
from peer.metrics import RESTORE_READ_BYTES
from peer.runtime.snapshot import (
    HEAD,
    TAIL,
    Restored,
    SnapshotError,
    StoredParts,
    TaskSnapshot,
    header_end,
    header_start,
    read,
    read_footer,
    read_header,
)
from peer.storage import (
    CheckpointError,
    StorageError,
    attempts,
    describe,
    is_local,
    open_url,
)
from peer.values.epoch import Epoch

log = logging.getLogger(__name__)

SUFFIX = ".snap"
PREFIX = 64 * 1024
"""What a restore reading some key groups of a snapshot reads first, from its end: its header,
usually."""
HOLD = 64 * 1024 * 1024
"""The most bytes of one snapshot's keyed parts a restore reads before it takes them: a larger
range of parts is read as it is taken (StoredParts), one run at a time."""
SPOOL = 64 * 1024 * 1024
"""The most bytes of a snapshot on its way to an object store held in memory: a larger one is
gathered in a temporary file, then sent from there, as one PUT needs all of it."""
Chunks = Callable[[], Iterable[bytes]]
"""What is stored, in pieces, given again for each try."""
EPOCH_NAME = re.compile(r"^(\d{12,})-(\d{8,})$")
FIELDS = ("committed", "owner", "slots")
EVERY = range(1 << 16)
"""Every key group there can be (two bytes): a restore of a slot's snapshot whole."""


HISTORY = 10
STOPPED = 1 << 62
"""The owner of a stopped job's commit record: above every allocation version the log will ever
give (versions are log positions), so no coordinator of the job, of whichever allocation,
commits again."""
SAVEPOINT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def chain_start(epoch: Epoch, since: int) -> Epoch:
    """The oldest epoch a restore from ``epoch`` reads, its snapshots' chains starting at
    number ``since`` of its allocation (0: its snapshots are whole)."""
    return Epoch(epoch.version, since or epoch.number)


@dataclass(frozen=True)
class Savepoint:
    """A committed epoch kept until an operator disposes of it, with the number of peers per
    task whose snapshots make it up, each keyed task's key groups, and where its snapshots'
    chains start (peer.runtime.snapshot; 0: they are whole)."""

    epoch: Epoch
    slots: Mapping[str, int]
    groups: Mapping[str, int] = field(default_factory=dict)
    since: int = 0

    def needs(self, epoch: Epoch) -> bool:
        """Whether a restore from this savepoint reads snapshots of ``epoch``."""
        return chain_start(self.epoch, self.since) <= epoch <= self.epoch


@dataclass(frozen=True)
class CommitRecord:
    """What a job's commit record holds. ``slots`` maps each task to the number of peers whose
    snapshots make up the committed epoch: a restore reads that many, however many peers the
    task runs on now.

    Savepoints live here too, so that taking one needs no message to the coordinator and no
    entry in the log: a client adds its name to ``requested``, and the coordinator's next
    commit, in the same compare-and-set, turns every requested name into a savepoint of the
    epoch it commits. Their epochs are never collected. A stop with a savepoint names it in
    ``stop`` as well: the commit that takes that savepoint also makes the owner STOPPED, so
    nothing commits after it (and no exactly-once sink publishes past it)."""

    committed: Epoch | None
    owner: int
    slots: Mapping[str, int]
    history: tuple[Epoch, ...] = ()
    """The last HISTORY committed epochs, oldest first: what ``onyx job checkpoints`` lists."""
    requested: tuple[str, ...] = ()
    savepoints: Mapping[str, Savepoint] = field(default_factory=dict)
    stop: str | None = None
    quiesced: bool = False
    """The committed epoch was a hand-over's pause: nothing was read after its barrier, so a
    restore from it redoes nothing (peer.runtime.coordinator)."""
    groups: Mapping[str, int] = field(default_factory=dict)
    """Each keyed task's number of key groups when the committed epoch was taken; empty in a
    record written before key groups, whose keys were split by hash modulo slots."""
    since: int = 0
    """The epoch number, of the committed epoch's allocation, at which the oldest chain of its
    snapshots starts (peer.runtime.snapshot); 0 when they are whole."""
    floor: Epoch | None = None
    """The oldest epoch a restore from the last two commits reads: storage keeps every epoch
    from it on (the commit before the last stays readable for a restore that began before the
    last was written). None in a record written before chains, whose snapshots were whole: the
    older of the last two commits."""

    @property
    def scope(self) -> str:
        """What a restore from the committed epoch is, as ``onyx_task_restores_total`` counts
        it: a hand-over's, which redoes nothing, or a rollback of the whole job."""
        return "handover" if self.quiesced else "global"

    def retains(self, epoch: Epoch) -> bool:
        """Whether storage keeps ``epoch`` whatever commits after it: it is at or after the
        floor, or a savepoint needs it."""
        floor = self.floor
        if floor is None:
            floor = self.history[-2] if len(self.history) > 1 else self.committed
        return (floor is not None and epoch >= floor) or any(
            s.needs(epoch) for s in self.savepoints.values()
        )

    def encode(self) -> bytes:
        doc: dict[str, Any] = {
            "committed": self.committed,
            "owner": self.owner,
            "slots": dict(self.slots),
            "history": list(self.history),
        }
        if self.requested:
            doc["requested"] = list(self.requested)
        if self.stop is not None:
            doc["stop"] = self.stop
        if self.quiesced:
            doc["quiesced"] = True
        if self.groups:
            doc["groups"] = dict(self.groups)
        if self.since:
            doc["since"] = self.since
        if self.floor is not None:
            doc["floor"] = list(self.floor)
        if self.savepoints:
            doc["savepoints"] = {
                name: _savepoint_doc(s) for name, s in sorted(self.savepoints.items())
            }
        return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> CommitRecord:
        try:
            doc = json.loads(data)
        except ValueError as e:
            raise _undecodable(data, f"it is not JSON ({e})") from None
        if not isinstance(doc, dict) or any(f not in doc for f in FIELDS):
            raise _undecodable(data, f"it is not an object with {', '.join(FIELDS)}")
        committed, owner, slots = (doc[f] for f in FIELDS)
        if not (committed is None or _is_epoch(committed)):
            raise _undecodable(data, "committed is neither null nor [version, number]")
        if not is_int(owner):
            raise _undecodable(data, "owner is not an integer")
        if not _counts(slots):
            raise _undecodable(data, "slots is not an object of integers")
        history = doc.get("history", [])
        if not (isinstance(history, list) and all(_is_epoch(e) for e in history)):
            raise _undecodable(data, "history is not a list of [version, number]")
        committed = None if committed is None else Epoch(*committed)
        requested = doc.get("requested", [])
        if not (isinstance(requested, list) and all(isinstance(n, str) for n in requested)):
            raise _undecodable(data, "requested is not a list of names")
        savepoints = _decode_savepoints(data, doc.get("savepoints", {}))
        stop = doc.get("stop")
        if not (stop is None or isinstance(stop, str)):
            raise _undecodable(data, "stop is neither null nor a savepoint's name")
        quiesced = doc.get("quiesced", False)
        if not isinstance(quiesced, bool):
            raise _undecodable(data, "quiesced is not true or false")
        groups = doc.get("groups", {})
        if not _counts(groups):
            raise _undecodable(data, "groups is not an object of integers")
        history_epochs = tuple(Epoch(*e) for e in history)
        since, floor = _chains(data, doc)
        return cls(
            committed, owner, slots, history_epochs, tuple(requested), savepoints, stop, quiesced,
            groups, since, floor,
        )  # fmt: skip


def _chains(data: bytes, doc: dict[str, Any]) -> tuple[int, Epoch | None]:
    """A record's ``since`` and ``floor`` (none in one written before chains)."""
    since, floor = doc.get("since", 0), doc.get("floor")
    if not is_int(since):
        raise _undecodable(data, "since is not an integer")
    if not (floor is None or _is_epoch(floor)):
        raise _undecodable(data, "floor is neither null nor [version, number]")
    return since, None if floor is None else Epoch(*floor)


def _savepoint_doc(savepoint: Savepoint) -> dict[str, Any]:
    doc: dict[str, Any] = {"epoch": list(savepoint.epoch), "slots": dict(savepoint.slots)}
    if savepoint.groups:
        doc["groups"] = dict(savepoint.groups)
    if savepoint.since:
        doc["since"] = savepoint.since
    return doc


def _counts(value: Any) -> bool:
    """Whether ``value`` is an object of integers (per task)."""
    return isinstance(value, dict) and all(is_int(n) for n in value.values())


def _decode_savepoints(data: bytes, raw: Any) -> dict[str, Savepoint]:
    if not isinstance(raw, dict):
        raise _undecodable(data, "savepoints is not an object")
    savepoints = {}
    for name, item in raw.items():
        if not (
            isinstance(item, dict)
            and _is_epoch(item.get("epoch"))
            and _counts(item.get("slots"))
            and _counts(item.get("groups", {}))
            and is_int(item.get("since", 0))
        ):
            raise _undecodable(data, f"savepoint {name!r} is not an epoch with its slots")
        savepoints[name] = Savepoint(Epoch(*item["epoch"]), item["slots"], item.get("groups", {}),
                                     item.get("since", 0))  # fmt: skip
    return savepoints


def _is_epoch(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(is_int(v) for v in value)


def _undecodable(data: bytes, why: str) -> CheckpointError:
    shown = data if len(data) <= 80 else data[:80] + b"..."
    return CheckpointError(f"commit record {shown!r} does not decode: {why}")


class Commits:
    """A job's commit record, as its coordinator uses it. Every write is a compare-and-set that
    is retried from a fresh read when it loses. That read also recognises this coordinator's own
    write whose reply a disconnection swallowed (the store reports it as a lost race), so such a
    write is neither done twice nor mistaken for a rival's."""

    def __init__(self, store: CommitRecords, job: str) -> None:
        self.store, self.job = store, job

    def read(self) -> tuple[CommitRecord | None, int]:
        """The record (None before the first claim) and its version in the store."""
        data, version = self.store.read_commit(self.job)
        if data is None:
            return None, version
        try:
            return CommitRecord.decode(data), version
        except CheckpointError as e:
            raise CheckpointError(f"job {self.job!r}: {e}") from None

    def claim(self, version: int) -> CommitRecord | None:
        """Make allocation ``version`` the record's owner, keeping what is committed; the record
        as claimed, or None when a newer allocation owns it already (this coordinator is stale)."""
        while True:
            record, at = self.read()
            if record is not None and record.owner > version:
                return None
            if record is not None and record.owner == version:
                return record
            claimed = replace(record, owner=version) if record else CommitRecord(None, version, {})
            if self.store.write_commit(self.job, claimed.encode(), at) is not None:
                return claimed

    def commit(
        self,
        version: int,
        epoch: Epoch,
        slots: Mapping[str, int],
        *,
        quiesced: bool = False,
        groups: Mapping[str, int] | None = None,
        since: int = 0,
    ) -> CommitRecord | None:
        """Record ``epoch``, snapshotted by ``slots`` (keyed tasks' keys split into ``groups``,
        the snapshots' chains starting at number ``since``), as committed (``quiesced`` if it
        was a hand-over's pause), if allocation ``version`` still owns the record, and make it
        every requested savepoint; the record as written, or None when a newer allocation owns
        it. An epoch already committed gives the record again; one before it is a
        coordinator's bug, a ValueError."""
        while True:
            record, at = self.read()
            if record is None or record.owner != version:
                return None
            if record.committed == epoch:
                return record
            if record.committed is not None and epoch < record.committed:
                raise ValueError(
                    f"job {self.job!r}: cannot commit {epoch.describe()}, "
                    f"{record.committed.describe()} is committed already"
                )
            split = dict(groups or {})
            taken = {name: Savepoint(epoch, dict(slots), split, since)
                     for name in record.requested}  # fmt: skip
            last = record.committed
            floor = chain_start(epoch, since) if last is None else chain_start(last, record.since)
            stops = record.stop in taken
            committed = replace(
                record,
                committed=epoch,
                owner=STOPPED if stops else record.owner,
                slots=dict(slots),
                history=(*record.history, epoch)[-HISTORY:],
                requested=(),
                savepoints={**record.savepoints, **taken},
                stop=None if stops else record.stop,
                quiesced=quiesced,
                groups=split,
                since=since,
                floor=floor,
            )
            if self.store.write_commit(self.job, committed.encode(), at) is not None:
                return committed

    def request_savepoint(self, name: str, stop: bool = False) -> None:
        """Ask the job's coordinator to keep its next committed epoch as savepoint ``name``;
        with ``stop``, to commit nothing after it."""
        if not SAVEPOINT_NAME.match(name):
            raise CheckpointError(
                f"job {self.job!r}: savepoint name {name!r} is not letters, digits, '_', '.' "
                "and '-' (at most 100)"
            )
        while True:
            record, at = self.read()
            if record is not None and name in (*record.requested, *record.savepoints):
                raise CheckpointError(f"job {self.job!r} already has a savepoint {name!r}")
            if stop and record is not None and record.stop is not None:
                raise CheckpointError(
                    f"job {self.job!r} is stopping already, with savepoint {record.stop!r}"
                )
            base = record or CommitRecord(None, -1, {})
            asked = replace(
                base, requested=(*base.requested, name), stop=name if stop else base.stop
            )
            if self.store.write_commit(self.job, asked.encode(), at) is not None:
                return

    def withdraw_stop(self, name: str) -> Savepoint | None:
        """Take back a stop with savepoint ``name`` not yet taken (the savepoint stays asked
        for); the savepoint if it was taken meanwhile, and the job stopped with it."""
        while True:
            record, at = self.read()
            if record is None:
                return None
            if name in record.savepoints:
                return record.savepoints[name]
            if record.stop != name:
                return None
            kept = replace(record, stop=None)
            if self.store.write_commit(self.job, kept.encode(), at) is not None:
                return None

    def dispose_savepoint(self, name: str) -> tuple[Savepoint, CommitRecord]:
        """Forget savepoint ``name``; it and the record as it is now."""
        while True:
            record, at = self.read()
            if record is None or name not in record.savepoints:
                raise CheckpointError(f"job {self.job!r} has no savepoint {name!r}")
            savepoints = {n: s for n, s in record.savepoints.items() if n != name}
            kept = replace(record, savepoints=savepoints)
            if self.store.write_commit(self.job, kept.encode(), at) is not None:
                return record.savepoints[name], kept


class CheckpointStorage:
    """The snapshots of one tenancy's jobs in an fsspec filesystem. Uploads, fetches and
    collections run in a pool of ``workers`` threads; ``get``, ``epochs`` and ``collect`` are the
    blocking forms for callers that may wait."""

    def __init__(self, url: str, tenancy: str, workers: int = 2) -> None:
        try:
            self.url = url
            self.fs, path = open_url(url)
        except ValueError as e:
            raise CheckpointError(f"checkpoint storage {url!r} cannot be opened: {e}") from None
        self.root = f"{path.rstrip('/')}/{path_component(tenancy)}"
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="checkpoints")
        self._attempt = attempts(self.fs)
        local = is_local(self.fs)
        self._store = self._renamed if local else self._whole
        self._write: Callable[[str, Iterable[bytes]], int] = (
            self._write_in_directory if local else self._write_object
        )

    def check_writable(self) -> None:
        """Write and remove a small file under the tenancy's root, once, so that storage where
        nothing can be written (a wrong endpoint, bucket or credential, an unwritable directory)
        refuses a group at its start, not every job at its first checkpoint."""
        probe = f"{self.root}/.probe-{uuid.uuid4().hex}"
        try:
            self._write(probe, [b"probe"])
            self.fs.rm(probe)
        except Exception as e:
            raise CheckpointError(
                f"checkpoint storage {self.url} cannot be written ({self._where(self.root)}): "
                f"{describe(e)}"
            ) from None

    def _job_root(self, job: str) -> str:
        return f"{self.root}/{path_component(job)}"

    def _path(self, job: str, epoch: Epoch, task: str, slot: int) -> str:
        name = f"{epoch.version:012d}-{epoch.number:08d}"
        return f"{self._job_root(job)}/{name}/{path_component(task)}/{slot}{SUFFIX}"

    def _where(self, path: str) -> str:
        return self.fs.unstrip_protocol(path)

    def put(
        self, job: str, epoch: Epoch, task: str, slot: int, data: bytes | Chunks
    ) -> Future[int]:
        """Store a snapshot in the background: bytes, or its chunks (packed as they are
        written, so a large snapshot is never held whole). The future gives the bytes stored,
        or fails with a CheckpointError (a StorageError if the store is out of reach)."""
        chunks = (lambda: (data,)) if isinstance(data, bytes) else data
        path = self._path(job, epoch, task, slot)
        return self.pool.submit(self._store, path, chunks, _snapshot(job, epoch, task, slot))

    def _whole(self, path: str, chunks: Chunks, what: str) -> int:
        """Write ``chunks`` at ``path`` on an object store, whose writes are whole."""
        return self._stored(path, what, lambda: self._write(path, chunks()))

    def _renamed(self, path: str, chunks: Chunks, what: str) -> int:
        """Write ``chunks`` whole at ``path`` in a directory, by way of a temporary name."""
        temporary = f"{path}.{uuid.uuid4().hex}.tmp"

        def write() -> int:
            try:
                size = self._write(temporary, chunks())
                self.fs.mv(temporary, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    self.fs.rm(temporary)
                raise
            return size

        return self._stored(path, what, write)

    def _stored(self, path: str, what: str, write: Callable[[], int]) -> int:
        where = self._where(path)
        try:
            return self._attempt("upload", where, write)
        except StorageError as e:
            raise StorageError(f"cannot store {what}: {e}") from e
        except Exception as e:
            raise CheckpointError(f"cannot store {what} at {where}: {describe(e)}") from e

    def _write_object(self, path: str, chunks: Iterable[bytes]) -> int:
        """One PUT of every chunk: from memory, or, past SPOOL bytes, from a temporary file."""
        held: list[bytes] = []
        size, spool = 0, None
        try:
            for chunk in chunks:
                size += len(chunk)
                if spool is not None:
                    spool.write(chunk)
                    continue
                held.append(chunk)
                if size > SPOOL:
                    spool = tempfile.NamedTemporaryFile(prefix="onyx-snapshot-")  # noqa: SIM115
                    spool.writelines(held)
                    held = []
            if spool is None:
                self.fs.pipe_file(path, b"".join(held))
            else:
                spool.flush()
                self.fs.put_file(spool.name, path)
        finally:
            if spool is not None:
                spool.close()
        return size

    def _write_in_directory(self, path: str, chunks: Iterable[bytes]) -> int:
        """Directories are made where the write needs one. Not on an object store: it has
        none, and a client may take making one at a bucket's place to mean making the bucket."""
        try:
            file = self.fs.open(path, "wb")
        except FileNotFoundError:
            self.fs.makedirs(posixpath.dirname(path), exist_ok=True)
            file = self.fs.open(path, "wb")
        size = 0
        with file:
            for chunk in chunks:
                file.write(chunk)
                size += len(chunk)
        return size

    def get(self, job: str, epoch: Epoch, task: str, slot: int) -> bytes:
        return self._read(self._path(job, epoch, task, slot), _snapshot(job, epoch, task, slot))

    def _read(
        self, path: str, what: str, start: int | None = None, end: int | None = None
    ) -> bytes:
        return self._asked(path, what, lambda: self.fs.cat_file(path, start=start, end=end))

    def _size(self, path: str, what: str) -> int:
        """The stored length of ``path``: a ranged read must not reach past it (an object store
        may refuse the range)."""
        return self._asked(path, what, lambda: self.fs.size(path))

    def _asked[T](self, path: str, what: str, call: Callable[[], T]) -> T:
        """``call()``, a read of ``path`` (holding ``what``), retried on an object store; a
        failure names what and where."""
        where = self._where(path)
        try:
            return self._attempt("read", where, call)
        except FileNotFoundError:
            raise CheckpointError(f"{what} is not at {where}") from None
        except StorageError as e:
            raise StorageError(f"cannot read {what}: {e}") from e
        except Exception as e:
            raise CheckpointError(f"cannot read {what} at {where}: {describe(e)}") from e

    def restore(
        self, job: str, epoch: Epoch, task: str, slot: int, groups: range | None = None,
        *, held: tuple[Epoch, Restored] | None = None,
    ) -> Future[Restored]:  # fmt: skip
        """In the background: the snapshot of ``slot`` of ``task`` at ``epoch``, with the keyed
        parts of its chain and its own, of the key groups in ``groups`` (None: all it has).
        ``held``, the same slot's whole restore of an earlier epoch, lends the layers of the
        chain the two share, which are then not read again. The future fails with a
        CheckpointError, or a SnapshotError naming the snapshot that is not one."""
        return self.pool.submit(self._restored, job, epoch, task, slot, groups, held=held)

    def _restored(
        self, job: str, epoch: Epoch, task: str, slot: int, groups: range | None,
        *, held: tuple[Epoch, Restored] | None,
    ) -> Restored:  # fmt: skip
        snapshot, parts = self._parts(job, epoch, task, slot, groups)
        known = _shared(held, epoch, snapshot.chain) if groups is None else []
        chain = [self._parts(job, Epoch(epoch.version, number), task, slot, groups)[1]
                 for number in snapshot.chain[len(known):]]  # fmt: skip
        return Restored(snapshot, [*known, *chain, parts])

    def _parts(
        self, job: str, epoch: Epoch, task: str, slot: int, groups: range | None
    ) -> tuple[TaskSnapshot, Mapping[int, bytes]]:
        path, what = self._path(job, epoch, task, slot), _snapshot(job, epoch, task, slot)
        meter = RESTORE_READ_BYTES.labels(job, task)

        def fetched(start: int | None = None, end: int | None = None) -> bytes:
            data = self._read(path, what, start, end)
            meter.inc(len(data))
            return data

        try:
            return self._groups(path, what, EVERY if groups is None else groups, fetched)
        except SnapshotError as e:
            raise SnapshotError(f"{what} is not a task's snapshot: {e}") from None

    def _groups(
        self, path: str, what: str, groups: range, fetched: Callable[..., bytes]
    ) -> tuple[TaskSnapshot, Mapping[int, bytes]]:
        """The snapshot at ``path`` and its parts of ``groups``, read through ``fetched``: its
        tail, which holds its header, then the one range of bytes those parts lie in (key
        groups are stored in order, and a slot owns a contiguous range of them). A small
        snapshot, or one asked for whole that can be held, is read at once."""
        size = self._size(path, what)
        if size <= PREFIX or (groups is EVERY and size <= HOLD):
            snapshot, parts = read(fetched())
            return snapshot, {g: part for g, part in parts.items() if g in groups}
        at = size - PREFIX
        held = fetched(at, size)
        start = header_start(held, size)
        if start is None:
            return self._groups_header_first(path, what, groups, fetched, size)
        if start < at:
            held, at = fetched(start, size), start
        header = read_footer(held[start - at : len(held) - TAIL], start)
        return header.snapshot, self._ranged(header.parts, groups, held, at, fetched, what=what)

    def _groups_header_first(
        self, path: str, what: str, groups: range, fetched: Callable[..., bytes], size: int
    ) -> tuple[TaskSnapshot, Mapping[int, bytes]]:
        """``_groups`` of a snapshot stored with its header first, or of one msgpack map."""
        prefix = fetched(0, PREFIX)
        end = header_end(prefix[:HEAD])
        if end is None:
            snapshot, parts = read(fetched())
            return snapshot, {g: part for g, part in parts.items() if g in groups}
        if end > len(prefix):
            prefix = fetched(0, end)
        header = read_header(prefix, size)
        return header.snapshot, self._ranged(header.parts, groups, prefix, 0, fetched, what=what)

    @staticmethod
    def _ranged(
        spans: dict[int, tuple[int, int]], groups: range, held: bytes, at: int,
        fetched: Callable[..., bytes], *, what: str,
    ) -> Mapping[int, bytes]:  # fmt: skip
        """The parts of ``groups`` of ``what`` where ``spans`` say they lie: from ``held``, the
        bytes read already from ``at`` on, where it holds them, else read in one range, or,
        past HOLD bytes, as they are taken."""
        wanted = [(g, span) for g, span in spans.items() if g in groups]
        if not wanted:
            return {}
        low, high = wanted[0][1][0], wanted[-1][1][1]
        if at <= low and high <= at + len(held):
            data = held[low - at : high - at]
        elif high - low > HOLD:
            return StoredParts(dict(wanted), fetched, what)
        else:
            data = fetched(low, high)
        if len(data) != high - low:
            raise SnapshotError(f"its parts end at byte {low + len(data)}, not {high}")
        return {g: data[a - low : b - low] for g, (a, b) in wanted}

    def epochs(self, job: str) -> list[Epoch]:
        """The epochs of ``job`` with at least one snapshot stored, in order."""
        found = {
            _parse_epoch(path.rsplit("/", 3)[-3])
            for path in self.fs.find(self._job_root(job))
            if path.endswith(SUFFIX)
        }
        return sorted(e for e in found if e is not None)

    def collect(self, job: str, keeps: Callable[[Epoch], bool]) -> int:
        """Delete every epoch of ``job`` that ``keeps`` lets go (a commit record's
        ``retains``), leftovers of failed uploads included; how many epochs went."""
        try:
            listing = self.fs.ls(self._job_root(job), detail=False)
        except FileNotFoundError:
            return 0
        deleted = 0
        for path in sorted(listing):
            epoch = _parse_epoch(posixpath.basename(path.rstrip("/")))
            if epoch is not None and not keeps(epoch):
                deleted += self._delete(path)
        return deleted

    def delete_epoch(self, job: str, epoch: Epoch) -> bool:
        """Delete one epoch's snapshots of ``job``; whether there were any."""
        name = f"{epoch.version:012d}-{epoch.number:08d}"
        return bool(self._delete(f"{self._job_root(job)}/{name}"))

    def _delete(self, path: str) -> int:
        where = self._where(path)
        try:
            self._attempt("delete", where, lambda: self.fs.rm(path, recursive=True))
        except FileNotFoundError:
            return 0
        except CheckpointError:
            raise
        except Exception as e:
            raise CheckpointError(f"cannot delete {where}: {describe(e)}") from e
        return 1

    def collect_later(self, job: str, keeps: Callable[[Epoch], bool]) -> Future[int]:
        """``collect`` in the background; a failure is logged, as nobody need wait for it."""
        future = self.pool.submit(self.collect, job, keeps)

        def report(done: Future[int]) -> None:
            if not done.cancelled() and done.exception() is not None:
                log.warning("job %s: deleting its epochs no longer needed failed: %s",
                            job, done.exception())  # fmt: skip

        future.add_done_callback(report)
        return future

    # -- shipped code ----------------------------------------------------------------------------

    def _code_path(self, job: str, sha256: str) -> str:
        return f"{self._job_root(job)}/code/{sha256}.zip"

    def put_code(self, job: str, sha256: str, data: bytes) -> str:
        """Upload the code archive shipped with ``job``; where it went."""
        path = self._code_path(job, sha256)
        self._store(path, lambda: (data,), f"the code of job {job!r}")
        return self._where(path)

    def get_code(self, job: str, sha256: str) -> bytes:
        return self._read(self._code_path(job, sha256), f"the code of job {job!r}")

    def delete_code(self, job: str) -> int:
        """Delete the code shipped with a finished job; how many archives went."""
        return self._delete(f"{self._job_root(job)}/code")

    def close(self) -> None:
        """Drop the work still queued, finish what is running (so no upload is cut short)."""
        self.pool.shutdown(wait=True, cancel_futures=True)


def _shared(
    held: tuple[Epoch, Restored] | None, epoch: Epoch, chain: tuple[int, ...]
) -> list[Mapping[int, bytes]]:
    """The layers of ``held`` (an earlier epoch's whole restore of the slot) that the chain of
    the snapshot at ``epoch`` starts with: its chain and its own snapshot, when the new chain
    goes on from them (the same allocation, the same base)."""
    if held is None:
        return []
    at, restored = held
    prefix = (*restored.snapshot.chain, at.number)
    if at.version != epoch.version or chain[: len(prefix)] != prefix:
        return []
    return restored.layers


def _snapshot(job: str, epoch: Epoch, task: str, slot: int) -> str:
    return f"the snapshot of job {job!r} {epoch.describe()} task {task!r} slot {slot}"


def _parse_epoch(name: str) -> Epoch | None:
    match = EPOCH_NAME.match(name)
    return Epoch(int(match[1]), int(match[2])) if match else None


def committed_epochs(
    storage: CheckpointStorage, job: str, record: CommitRecord | None
) -> list[Epoch]:
    """The committed epochs of ``job`` whose snapshots are still stored, as
    ``onyx job checkpoints`` lists them."""
    if record is None:
        return []
    stored = set(storage.epochs(job))
    return [e for e in record.history if e in stored]
