"""Staged epochs: the two-phase commit the exactly-once file sinks share, so that a reader of a
sink's directory sees every row once, and only once its epoch is committed. Each sink supplies
only how it writes its format; the names, sealing, publishing and settling live here.

``params.path`` is the sink's directory (or an object store's URL, peer.plugins.places), and it
belongs to one job: its staged names are its allocation versions and epochs. Each slot stages
each epoch of its own as ``<path>/_staging/<version:012d>-<number:08d>-<slot:04d>`` (the
epoch's *stem*), named for the epoch it is sealed at: after the barrier that ends epoch e-1 the
output is epoch e's. The files in it sit at the relative paths they are published to, which the
format chooses.

- Writing: the open epoch's files go into a temp directory on this machine, as rows come (the
  JSON-lines sink) or all at the seal (the Parquet sink). An epoch with nothing written leaves
  nothing.
- Sealing (phase one, at the barrier that ends the epoch) runs on the slot's own thread, never
  the group's: the format finishes its files and the place makes them durable as the stem (a
  rename after fsyncs, or uploads and a manifest). ``checkpoint`` returns a ``Sealing`` at once,
  and the runner acknowledges the epoch only once it is durable, so the coordinator commits only
  epochs that survive a crash. A crash mid-seal leaves an entry that is not sealed, never a
  half-sealed one.
- Publishing (phase two, on ``committed``) queues behind the seals on that thread: each file of
  every epoch sealed up to the commit is put at its relative path under ``<path>`` and what is
  left of the staged epoch removed. ``synced`` is True once no seal or publish is left, so a job
  completes only once its final epoch is published.
- The checkpoint (``position``, the sink's position at each barrier) names, under
  ``unpublished``, this slot's stems sealed or being sealed and not yet known published: the
  epoch the barrier ends, and those before it whose publishing has not finished. A stem leaves
  the list once its publishing has, so a name too many costs a read, never a name too few.
- Settling (on ``recover``) publishes, by name, every stem the restored checkpoint names: that
  checkpoint is the committed epoch's, so all it names is committed. Each is read by its own key
  (a directory, a manifest), never found by listing, and publishing it again is no error: a stem
  no longer staged was published (or held nothing), a file no longer staged but published was
  published. Every output slot settles before it acknowledges its first epoch, so once an
  allocation commits an epoch, all that was committed before it is published.

Only collecting lists the staging area: what the listing shows of an allocation older than the
one starting, and not covered by the commit, was never committed and is deleted (a seal cut
short, an epoch sealed after the last commit, a seal still running when its task closed). A
listing of an object store may lag or be paged: a leftover it misses costs space until a later
recovery, never correctness, and an entry it shows that the commit covers is never deleted,
sealed or not (a manifest the listing does not show yet), as its slot is publishing it. When the
task runs on fewer slots than before, each slot also publishes what the old slots it adopts
named (``Recovery.adopted``). A sealed entry the listing shows that the commit covers and no
restored checkpoint named is published too: a checkpoint written by a version that named
nothing. The rest, this allocation's or a newer one's, is left alone: another peer may be
writing it now.

Why the listing publishes only the committed epoch's own allocation: an older allocation's entry
still staged once a newer allocation committed was made by a peer after it was replaced (a seal
still running when its task closed, say), and publishing it would write its rows twice.

Spark and pyarrow skip paths starting with ``_``, and the JSON-lines reader reads only
``<path>/*.jsonl``, so nothing staged is ever read. An epoch of many files is published a file
at a time: a reader listing at that very moment may see part of a committed epoch (as with
Spark's own file committers), never any of an uncommitted one. What an epoch holds is its own (a
directory's files, a manifest), never a listing's.
"""

from __future__ import annotations

import logging
import re
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from peer.job.spec import Task
from peer.plugins import PluginError, Recovery, error, param
from peer.plugins.files import is_path
from peer.plugins.places import Entry, Place, files_under, place_for, remove_tree
from peer.values.epoch import Epoch

log = logging.getLogger(__name__)

_STEM = r"(\d+)-(\d+)-(\d+)"

UNPUBLISHED = "unpublished"
"""The key of a slot's checkpoint that names its stems sealed and not yet known published."""

Finish = Callable[[Path, str], None]
"""How a format writes what it kept of an epoch: into the temp directory, with the epoch's stem
to name its files by. Runs on the slot's thread, so it may touch only what it was handed."""


def stem(epoch: Epoch, slot: int) -> str:
    """The name of ``slot``'s staged directory of ``epoch``, and the start of its files' names.
    The widths are minimums: a wider number still parses, it only sorts out of place."""
    return f"{epoch.version:012d}-{epoch.number:08d}-{slot:04d}"


def epoch_of(name: str, suffix: str = "") -> Epoch | None:
    """The epoch a name made of a stem and ``suffix`` is for; None for any other name."""
    match = re.fullmatch(_STEM + re.escape(suffix), name)
    return None if match is None else Epoch(int(match[1]), int(match[2]))


def staged_epochs(task: Task, slot: int) -> StagedEpochs:
    """``slot``'s epochs at ``params.path``: a directory (its staging directory made) or an
    object store's URL."""
    path = param(task, "path", "a directory path or an fsspec URL", is_path)
    return StagedEpochs(task, place_for(task, path), slot)


@dataclass(frozen=True)
class Settlement:
    """What a recovery does with the staged epochs (see the module's note on settling)."""

    publish: tuple[str, ...]
    """Stems to publish, oldest first: every one the restored checkpoint names, whatever the
    listing shows, then the sealed ones the listing shows that the commit covers."""
    collect: tuple[Entry, ...]
    """Entries the listing shows that were never committed, to delete."""


def settle(
    named: Sequence[str], listed: Sequence[Entry], committed: Epoch | None, start: Epoch
) -> Settlement:
    """The decision of a recovery to ``start`` from the ``committed`` epoch, whose checkpoint
    names ``named``, with ``listed`` what a listing of the staging area shows. Pure, so that
    what it publishes can be seen not to hang on the listing."""
    names = set(named)
    found: list[str] = []
    collect: list[Entry] = []
    for name, sealed in sorted(listed):
        epoch = epoch_of(name)
        if epoch is None or name in names:
            continue
        if _covered(epoch, committed):
            if sealed and name not in found:
                found.append(name)
        elif epoch.version < start.version:
            collect.append((name, sealed))
    return Settlement(tuple(_oldest_first(names)) + tuple(found), tuple(collect))


class Lane:
    """Work done in order on a thread of its own; its failures are raised on the caller's
    thread when it next asks whether the lane is idle."""

    def __init__(self, name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._queued: deque[Future[Any]] = deque()

    def submit(self, work: Callable[[], Any]) -> Future[Any]:
        future = self._executor.submit(work)
        self._queued.append(future)
        return future

    def idle(self) -> bool:
        """Whether all the work is done; raises what the oldest failed piece raised."""
        while self._queued and self._queued[0].done():
            self._queued.popleft().result()
        return not self._queued

    def close(self) -> None:
        """Drop the work not yet started; what runs finishes on its own, without a wait."""
        self._executor.shutdown(wait=False, cancel_futures=True)


class StagedEpochs:
    """One slot's epochs: the open one, those the checkpoint names (kept on the caller's
    thread), and those sealed but not yet published (touched only on the lane, which seals and
    publishes them in order). The lane tells the caller's thread how far it has published by
    replacing one value, ``_published``, never by sharing a list."""

    def __init__(self, task: Task, place: Place, slot: int) -> None:
        self._task = task
        self._place = place
        self.slot = slot
        self._epoch: Epoch | None = None
        self._opened = False
        self._unpublished: list[Epoch] = []
        self._published: Epoch | None = None
        self._sealed: list[tuple[Epoch, list[str]]] = []
        self._lane = Lane(f"seal-{task.name}-{slot}")

    def recover(self, recovery: Recovery) -> None:
        """Publish what the restored checkpoint names, collect what failures left staged, and
        open ``recovery.start``."""
        named = self._named(recovery)
        plan = settle(named, self._place.entries(), recovery.committed, recovery.start)
        ready = [(name, files) for name in plan.publish
                 if (files := self._place.files(name)) is not None]  # fmt: skip
        if plan.collect:
            log.info("task %r slot %d: deletes staged epochs never committed (%s starting, "
                     "%s committed): %s", self._task.name, self.slot, recovery.start.describe(),
                     "none" if recovery.committed is None else recovery.committed.describe(),
                     ", ".join(name for name, _ in plan.collect))  # fmt: skip
        for name, sealed in plan.collect:
            self._place.remove(name, sealed)
        if ready or plan.collect:
            self._place.publish(ready)
        self._epoch, self._opened = recovery.start, False
        self._unpublished, self._published = [], None

    def position(self) -> dict[str, list[str]]:
        """What the checkpoint of the epoch just sealed keeps of this slot's epochs: the stems
        sealed or being sealed and not yet known published, none once all are."""
        published = self._published
        if published is not None:
            self._unpublished = [epoch for epoch in self._unpublished if epoch > published]
        if not self._unpublished:
            return {}
        return {UNPUBLISHED: [stem(epoch, self.slot) for epoch in self._unpublished]}

    def writing(self) -> Epoch:
        """The open epoch."""
        if self._epoch is None:
            raise self._error("used before recover(): there is no epoch to write to")
        return self._epoch

    def directory(self) -> Path:
        """The open epoch's temp directory, for a format that writes as rows come: made empty
        at the epoch's first call, as whatever an earlier start left there was never
        committed."""
        temp = self._place.temp(stem(self.writing(), self.slot))
        if not self._opened:
            remove_tree(self._task, temp)
            try:
                temp.mkdir()
            except OSError as e:
                raise self._error(f"cannot make {str(temp)!r}: {e.strerror}") from e
            self._opened = True
        return temp

    def seal(self, epoch: Epoch, finish: Finish | None = None) -> Future[None]:
        """Seal ``epoch`` on the lane, ``finish`` first writing what the format kept of it,
        and open the next epoch; the future is done once the epoch is durable. An epoch that
        may hold something is named by ``position`` from now on."""
        if epoch != self.writing():
            raise self._error(f"checkpoint at {epoch.describe()} while writing "
                              f"{self.writing().describe()}")  # fmt: skip
        self._lane.idle()
        if self._opened or finish is not None:
            self._unpublished.append(epoch)
        work = partial(self._seal, epoch, self._opened, finish)
        self._epoch, self._opened = Epoch(epoch.version, epoch.number + 1), False
        return self._lane.submit(work)

    def committed(self, epoch: Epoch) -> None:
        """Publish on the lane, oldest first, every epoch sealed up to ``epoch``."""
        self._lane.idle()
        self._lane.submit(partial(self._publish_sealed, epoch))

    def synced(self) -> bool:
        """Whether every seal and publish asked for is done; raises the first that failed."""
        return self._lane.idle()

    def drained(self) -> Future[None]:
        """A future done once every seal and publish asked for so far is."""
        return self._lane.submit(lambda: None)

    def close(self) -> None:
        """Seals and publishes not yet started are dropped: the next recovery settles them."""
        self._lane.close()
        self._place.close()

    def _named(self, recovery: Recovery) -> list[str]:
        """The stems the restored checkpoint and the adopted ones name: all committed, as they
        are the committed epoch's."""
        checkpoints = (recovery.checkpoint, *recovery.adopted)
        return [n for c in checkpoints if c is not None for n in self._names(c, recovery.committed)]

    def _names(self, checkpoint: Any, committed: Epoch | None) -> list[str]:
        """The stems one checkpoint names, checked."""
        if not isinstance(checkpoint, Mapping):
            raise self._error(f"checkpoint must be a mapping ({{{UNPUBLISHED!r}: names}}), "
                              f"got {checkpoint!r:.200}")  # fmt: skip
        named = checkpoint.get(UNPUBLISHED, [])
        if not (isinstance(named, list | tuple) and all(_is_stem(n) for n in named)):
            raise self._error(f"checkpoint {UNPUBLISHED} must be a list of staged epochs' "
                              f"names, got {named!r:.200}")  # fmt: skip
        for name in named:
            epoch = epoch_of(name)
            if committed is None or epoch is None or epoch > committed:
                commit = "no commit" if committed is None else committed.describe()
                raise self._error(f"checkpoint {UNPUBLISHED} names {name!r}, which {commit} "
                                  "does not cover")  # fmt: skip
        return list(named)

    # -- on the lane ------------------------------------------------------------------------

    def _seal(self, epoch: Epoch, opened: bool, finish: Finish | None) -> None:
        """What an earlier start left under either name for this epoch was never committed (a
        committed epoch is never started again), so it goes first."""
        name = stem(epoch, self.slot)
        temp = self._place.temp(name)
        self._place.remove(name, sealed=True)
        if not opened:
            remove_tree(self._task, temp)
        if finish is not None:
            finish(temp, name)
        files = files_under(temp)
        if not files:
            remove_tree(self._task, temp)
            return
        self._place.seal(name, temp, files)
        self._sealed.append((epoch, files))

    def _publish_sealed(self, epoch: Epoch) -> None:
        """Then every epoch sealed up to ``epoch`` is published: the checkpoint need not name
        them any more."""
        ready = [(sealed, files) for sealed, files in self._sealed if sealed <= epoch]
        if ready:
            self._place.publish([(stem(sealed, self.slot), files) for sealed, files in ready])
            self._sealed = self._sealed[len(ready) :]
        self._published = epoch

    def _error(self, message: str) -> PluginError:
        return error(self._task, message)


def _covered(epoch: Epoch, committed: Epoch | None) -> bool:
    """Whether the commit covers a listed entry: of the committed epoch's allocation, up to it
    (see the module's note on older allocations)."""
    return committed is not None and epoch.version == committed.version and epoch <= committed


def _is_stem(name: object) -> bool:
    return isinstance(name, str) and epoch_of(name) is not None


def _oldest_first(names: set[str]) -> list[str]:
    return sorted(names, key=lambda name: (epoch_of(name), name))
