"""Staged epochs: the two-phase commit the exactly-once file sinks share, so that a reader of a
sink's directory sees every row once, and only once its epoch is committed. Each sink supplies
only how it writes its format; the names, sealing, publishing and settling live here.

``params.path`` is the sink's directory, and it belongs to one job: its staged names are its
allocation versions and epochs. Each slot writes each epoch into a staged directory of its own,
``<path>/_staging/<version:012d>-<number:08d>-<slot:04d>`` (the epoch's *stem*), named for the
epoch it is sealed at: after the barrier that ends epoch e-1 the output is epoch e's. The files
in it sit at the relative paths they are published to, which the format chooses.

- Writing: the open epoch's files go under the stem with ``.tmp``, as rows come (the JSON-lines
  sink) or all at the seal (the Parquet sink). An epoch with nothing written leaves nothing.
- Sealing (phase one, at the barrier that ends the epoch) runs on the slot's own thread, never
  the group's: the format finishes its files, every file and directory is fsynced, the temp
  directory is renamed to the stem and the staging directory fsynced. ``checkpoint`` returns a
  ``Sealing`` at once, and the runner acknowledges the epoch only once it is durable, so the
  coordinator commits only epochs that survive a crash. A crash mid-seal leaves a temp
  directory, never a half-sealed epoch.
- Publishing (phase two, on ``committed``) queues behind the seals on that thread: each file of
  every epoch sealed up to the commit is renamed to its relative path under ``<path>``, the
  emptied staged directory removed and the directories fsynced. ``synced`` is True once no seal
  or publish is left, so a job completes only once its final epoch is published.
- Settling (on ``recover``, for every slot's entries, since this slot may be the first to
  start): an entry of the committed epoch's allocation, up to it, was committed even if no peer
  lived to hear so, and is published (finishing one a crash left half published; another peer
  publishing it first is no error). Any other entry of an allocation older than the one starting
  was never committed and is deleted. The rest, this allocation's or a newer one's, is left
  alone: another peer may be writing it now.

Why only the committed epoch's own allocation publishes: every output slot of an allocation
settles before it acknowledges its first epoch, so once an allocation commits an epoch, all that
was committed before it is published. An older allocation's entry still staged then was made by
a peer after it was replaced (a seal still running when its task closed, say), and publishing it
would write its rows twice.

Spark and pyarrow skip paths starting with ``_``, and the JSON-lines reader reads only
``<path>/*.jsonl``, so nothing staged is ever read. An epoch of many files is published a file
at a time: a reader listing at that very moment may see part of a committed epoch (as with
Spark's own file committers), never any of an uncommitted one.
"""

from __future__ import annotations

import os
import re
import shutil
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path, PurePath
from typing import Any

from peer.job.spec import Task
from peer.plugins import PluginError, Recovery, error, param
from peer.plugins.files import fsync_directory, fsync_path, is_path, names, publish
from peer.runtime.checkpoints import Epoch

STAGING = "_staging"
TEMP = ".tmp"
_STEM = r"(\d+)-(\d+)-(\d+)"

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
    """``slot``'s epochs in the directory ``params.path``, its staging directory made."""
    directory = Path(param(task, "path", "a directory path string", is_path))
    try:
        (directory / STAGING).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise error(task, f"cannot make {str(directory / STAGING)!r}: {e.strerror}") from e
    return StagedEpochs(task, directory, slot)


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
    """One slot's epochs: the open one, and those sealed but not yet published (touched only on
    the lane, which seals and publishes them in order)."""

    def __init__(self, task: Task, directory: Path, slot: int) -> None:
        self._task = task
        self._directory = directory
        self._staging = directory / STAGING
        self.slot = slot
        self._epoch: Epoch | None = None
        self._opened = False
        self._sealed: list[tuple[Epoch, list[str]]] = []
        self._lane = Lane(f"seal-{task.name}-{slot}")

    def recover(self, recovery: Recovery) -> None:
        """Settle what failures left in the staging directory and open ``recovery.start``."""
        touched: set[Path] = set()
        settled = False
        for name in sorted(names(self._task, self._staging)):
            entry = _entry(name)
            if entry is None:
                continue
            epoch, temp = entry
            if not temp and _committed(epoch, recovery.committed):
                touched |= self._publish(name, _files(self._staging / name))
            elif epoch.version < recovery.start.version:
                self._remove(self._staging / name)
            else:
                continue
            settled = True
        if settled:
            self._sync(touched)
        self._epoch, self._opened = recovery.start, False

    def writing(self) -> Epoch:
        """The open epoch."""
        if self._epoch is None:
            raise self._error("used before recover(): there is no epoch to write to")
        return self._epoch

    def directory(self) -> Path:
        """The open epoch's temp directory, for a format that writes as rows come: made empty
        at the epoch's first call, as whatever an earlier start left there was never
        committed."""
        temp = self._staging / (stem(self.writing(), self.slot) + TEMP)
        if not self._opened:
            self._remove(temp)
            try:
                temp.mkdir()
            except OSError as e:
                raise self._error(f"cannot make {str(temp)!r}: {e.strerror}") from e
            self._opened = True
        return temp

    def seal(self, epoch: Epoch, finish: Finish | None = None) -> Future[None]:
        """Seal ``epoch`` on the lane, ``finish`` first writing what the format kept of it,
        and open the next epoch; the future is done once the epoch is durable."""
        if epoch != self.writing():
            raise self._error(f"checkpoint at {epoch.describe()} while writing "
                              f"{self.writing().describe()}")  # fmt: skip
        self._lane.idle()
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

    # -- on the lane ------------------------------------------------------------------------

    def _seal(self, epoch: Epoch, opened: bool, finish: Finish | None) -> None:
        """What an earlier start left under either name for this epoch was never committed (a
        committed epoch is never started again), so it goes first."""
        name = stem(epoch, self.slot)
        temp, sealed = self._staging / (name + TEMP), self._staging / name
        self._remove(sealed)
        if not opened:
            self._remove(temp)
        if finish is not None:
            finish(temp, name)
        files = _files(temp)
        if not files:
            self._remove(temp)
            return
        for relative in files:
            fsync_path(self._task, temp / relative)
        for directory in _deepest_first({temp / p for f in files for p in _parents(f)}):
            fsync_directory(self._task, directory)
        try:
            os.rename(temp, sealed)
        except OSError as e:
            raise self._error(f"cannot seal {str(temp)!r}: {e.strerror}") from e
        fsync_directory(self._task, self._staging)
        self._sealed.append((epoch, files))

    def _publish_sealed(self, epoch: Epoch) -> None:
        ready = [(sealed, files) for sealed, files in self._sealed if sealed <= epoch]
        if not ready:
            return
        touched: set[Path] = set()
        for sealed, files in ready:
            touched |= self._publish(stem(sealed, self.slot), files)
        self._sealed = self._sealed[len(ready) :]
        self._sync(touched)

    # -- publishing and removing, on the lane or in recovery ----------------------------------

    def _publish(self, name: str, files: list[str]) -> set[Path]:
        """Move a sealed epoch's files into view and remove its emptied directory; the
        directories the files went to, for syncing."""
        staged = self._staging / name
        for relative in files:
            published = self._directory / relative
            try:
                published.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise self._error(f"cannot make {str(published.parent)!r}: {e.strerror}") from e
            publish(self._task, staged / relative, published)
        self._remove_empty(staged)
        return {self._directory / parent for relative in files for parent in _parents(relative)}

    def _sync(self, published: set[Path]) -> None:
        """Make renames, new directories and deletions durable, deepest directories first."""
        for directory in _deepest_first(published | {self._directory}):
            fsync_directory(self._task, directory)
        fsync_directory(self._task, self._staging)

    def _remove(self, path: Path) -> None:
        """Delete an uncommitted staged or temp directory; what is gone, another peer deleted."""

        def failed(function: Any, name: str, exc: BaseException) -> None:
            if not isinstance(exc, FileNotFoundError):
                reason = exc.strerror if isinstance(exc, OSError) else exc
                raise self._error(f"cannot delete uncommitted {name!r}: {reason}") from exc

        shutil.rmtree(path, onexc=failed)

    def _remove_empty(self, root: Path) -> None:
        """Remove a published epoch's directories, deepest first. Only empty ones: a file left
        behind means something was not published, and must not be lost."""
        for directory, _, _ in os.walk(root, topdown=False):
            try:
                os.rmdir(directory)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise self._error(f"cannot remove published {directory!r}: {e.strerror}") from e

    def _error(self, message: str) -> PluginError:
        return error(self._task, message)


def _entry(name: str) -> tuple[Epoch, bool] | None:
    """The epoch a staging entry is for, and whether it is a temp one; None for a name this
    module never makes."""
    sealed = epoch_of(name)
    if sealed is not None:
        return sealed, False
    temp = epoch_of(name, TEMP)
    return None if temp is None else (temp, True)


def _committed(epoch: Epoch, committed: Epoch | None) -> bool:
    """Whether a sealed entry is to be published: of the committed epoch's allocation, up to
    it (see the module's note on older allocations)."""
    return committed is not None and epoch.version == committed.version and epoch <= committed


def _files(root: Path) -> list[str]:
    """Every file under ``root``, as paths relative to it; none if it is gone."""
    return sorted(
        os.path.relpath(os.path.join(directory, name), root)
        for directory, _, names in os.walk(root)
        for name in names
    )


def _parents(relative: str) -> list[PurePath]:
    """The directories between the root and a file, deepest first, the root included."""
    return list(PurePath(relative).parents)


def _deepest_first(directories: set[Path]) -> list[Path]:
    return sorted(directories, key=lambda d: (-len(d.parts), str(d)))
