"""JSON lines: an input reading one JSON value per line of a file, and two outputs writing them:
one that appends (at least once) and one that publishes whole committed epochs (exactly once).

The input treats its file as bounded: it reads what the file held when the task started on this
peer. Line i (0-based, blank lines counted but never emitted) belongs to slot ``i % slots``, so
every peer scans the file and parses only its own lines. It reads a line at a time, never the
whole file, and its checkpoint is ``[byte offset, lines read]`` so that recovery seeks straight
back to where it was instead of reading everything again. The file is not consumed, so a commit
has nothing to acknowledge.

``output`` appends compact JSON, one value per line. With ``{slot}`` in ``params.path`` each peer
has its own file; without, the peers share one, and each staged batch goes out in a single
``os.write`` on an O_APPEND descriptor, so batches from several processes on one machine land
whole and never interleave. With ``params.overwrite`` true, a task that starts from the
beginning (no checkpoint) empties its file first, so a job run again replaces its earlier output
instead of adding to it; that needs one writer per file (a single peer, or ``{slot}`` in the
path). What was written after the last committed epoch is written again after a failure, so a
reader may see a segment twice.

``exactly_once_output`` is a two-phase-commit sink: a reader sees every segment once, and only
once its epoch is committed. ``params.path`` is a directory, and it belongs to one job: its file
names are its allocation versions and epochs.

- Each peer writes the current epoch's segments to its own staged file,
  ``<path>/.staging/<version:012d>-<number:08d>-<slot:04d>.jsonl``, named for the epoch it will
  be sealed at: after the barrier that ends epoch e-1 the file is epoch e's. The file is made by
  the epoch's first write, so an epoch with nothing written leaves no file at all.
- ``checkpoint(epoch)`` (phase one) seals the file: it fsyncs it and the staging directory, so the
  epoch survives a crash once its snapshot is stored, closes it, and moves on to epoch e+1. Its
  checkpoint is None: where it stands is the directory itself.
- ``committed(epoch)`` (phase two) publishes every file this slot sealed up to ``epoch`` by an
  atomic rename to the same name in ``<path>``. Readers look only at ``<path>/*.jsonl``, so they
  never see an uncommitted epoch, and the names sort in epoch order (the widths are minimums: a
  wider number still parses, it only sorts out of place).
- ``recover(recovery)`` settles whatever a failure left, for every slot, since this slot alone
  may be the first to start: a staged file of an epoch up to ``recovery.committed`` was committed,
  even if no peer lived to hear so, and is published (another peer publishing it first is no
  error); one of an older allocation after it was never committed and is deleted, as its
  segments will be written again; one of this allocation or a newer one is left alone, as
  another peer may be writing it now.

It writes and fsyncs as ``output`` does; only sealing and publishing are new. A peer of an old
allocation that has not yet heard it was replaced may still make staged files of its allocation
after the new one recovered: they are never published, and the next recovery deletes them.
Encoding uses the standard library's C encoder.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, BinaryIO

from peer.job.spec import Task
from peer.plugins import Epoch, PluginError, Recovery, error, natural, param
from peer.plugins.files import fsync, fsync_directory, is_path, names, publish

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
STAGING = ".staging"
_NAME = re.compile(r"(\d+)-(\d+)-(\d+)\.jsonl")


def input(task: Task, slot: int, slots: int) -> JsonlInput:
    """The factory named ``peer.plugins.jsonl:input``."""
    path = param(task, "path", "a file path string", is_path)
    try:
        file = open(path, "rb")  # noqa: SIM115 - the input owns it until close()
    except OSError as e:
        raise error(task, f"cannot open {path!r}: {e.strerror}") from e
    return JsonlInput(task, path, file, slot, slots)


def output(task: Task, slot: int, slots: int) -> JsonlOutput:
    """The factory named ``peer.plugins.jsonl:output``."""
    pattern = param(task, "path", "a file path string", is_path)
    path = pattern.replace("{slot}", str(slot))
    overwrite = task.params.get("overwrite", False)
    if not isinstance(overwrite, bool):
        raise error(task, f"params.overwrite must be true or false, got {overwrite!r}")
    if overwrite and slots > 1 and "{slot}" not in pattern:
        raise error(task, "params.overwrite needs one writer per file: put {slot} in params.path")
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as e:
        raise error(task, f"cannot open {path!r} for appending: {e.strerror}") from e
    return JsonlOutput(task, path, fd, overwrite)


def exactly_once_output(task: Task, slot: int, slots: int) -> ExactlyOnceOutput:
    """The factory named ``peer.plugins.jsonl:exactly_once_output``."""
    directory = Path(param(task, "path", "a directory path string", is_path))
    try:
        (directory / STAGING).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise error(task, f"cannot make {str(directory / STAGING)!r}: {e.strerror}") from e
    return ExactlyOnceOutput(task, directory, slot)


def file_name(epoch: Epoch, slot: int) -> str:
    """The name of ``slot``'s file of ``epoch``, staged and published alike."""
    return f"{epoch.version:012d}-{epoch.number:08d}-{slot:04d}.jsonl"


def epoch_of(name: str) -> Epoch | None:
    """The epoch a file is named for; None for a name ``file_name`` never makes."""
    match = _NAME.fullmatch(name)
    return None if match is None else Epoch(int(match[1]), int(match[2]))


class JsonlInput:
    def __init__(self, task: Task, path: str, file: BinaryIO, slot: int, slots: int) -> None:
        self._task = task
        self._path = path
        self._file = file
        self._slot = slot
        self._slots = slots
        self._size = os.fstat(file.fileno()).st_size
        self._offset = 0
        self._lines = 0

    def recover(self, recovery: Recovery) -> None:
        checkpoint = recovery.checkpoint
        self._offset, self._lines = (0, 0) if checkpoint is None else self._position(checkpoint)

    def poll(self, limit: int) -> list[Any]:
        """Scans at most ``limit * slots`` lines, so a poll's work is bounded however the lines
        fall. Nothing moves unless the whole poll succeeds: a bad line fails every retry alike."""
        self._file.seek(self._offset)
        offset, lines, segments = self._offset, self._lines, []
        for _ in range(max(limit, 0) * self._slots):
            if offset >= self._size:
                break
            line = self._file.readline()
            offset, lines = offset + len(line), lines + 1
            if (lines - 1) % self._slots == self._slot and (text := line.rstrip()):
                segments.append(self._parse(text, lines))
        self._offset, self._lines = offset, lines
        return segments

    def checkpoint(self, epoch: Epoch) -> list[int]:
        return [self._offset, self._lines]

    def completed(self) -> bool:
        return self._offset >= self._size

    def synced(self) -> bool:
        return True

    def committed(self, epoch: Epoch) -> None:
        """Nothing to acknowledge: the file is read, not consumed."""

    def close(self) -> None:
        self._file.close()

    def _position(self, checkpoint: Any) -> tuple[int, int]:
        if not (
            isinstance(checkpoint, list | tuple)
            and len(checkpoint) == 2
            and all(natural(n) for n in checkpoint)
        ):
            raise self._error(f"checkpoint must be [byte offset, lines read], got {checkpoint!r}")
        if checkpoint[0] > self._size:
            end = f"the end of {self._path!r} ({self._size} bytes)"
            raise self._error(f"checkpoint offset {checkpoint[0]} is past {end}")
        return checkpoint[0], checkpoint[1]

    def _error(self, message: str) -> PluginError:
        return error(self._task, message)

    def _parse(self, line: bytes, number: int) -> Any:
        try:
            return json.loads(line)
        except ValueError as e:
            reason = f"{e.msg} at column {e.colno}" if isinstance(e, json.JSONDecodeError) else e
            raise self._error(f"{self._path!r} line {number} is not JSON: {reason}") from e


class JsonlOutput:
    def __init__(self, task: Task, path: str, fd: int, overwrite: bool = False) -> None:
        self._task = task
        self._overwrite = overwrite
        self._path = path
        self._fd = fd
        self._staged = b""
        self._written = 0
        self._unsynced = False

    def recover(self, recovery: Recovery) -> None:
        checkpoint = recovery.checkpoint
        if checkpoint is not None and not natural(checkpoint):
            raise self._error(f"checkpoint must be a byte count, got {checkpoint!r}")
        if checkpoint is None and self._overwrite:
            os.ftruncate(self._fd, 0)
        self._written = checkpoint or 0

    def prepare(self, segments: list[Any]) -> None:
        self._staged += _encoded(self._task, segments)

    def write(self) -> bool:
        """A short write (a full disk, say) keeps the rest staged and answers False."""
        if not self._staged:
            return True
        count = _write(self._task, self._fd, self._path, self._staged)
        self._staged = self._staged[count:]
        self._written += count
        self._unsynced = True
        return not self._staged

    def synced(self) -> bool:
        if self._unsynced:
            fsync(self._task, self._fd, self._path)
            self._unsynced = False
        return True

    def checkpoint(self, epoch: Epoch) -> int:
        return self._written

    def committed(self, epoch: Epoch) -> None:
        """Nothing to publish: every line is visible as soon as it is written."""

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _error(self, message: str) -> PluginError:
        return error(self._task, message)


class ExactlyOnceOutput:
    """One slot's staged files: the open one of ``_epoch`` and those sealed but not published."""

    def __init__(self, task: Task, directory: Path, slot: int) -> None:
        self._task = task
        self._directory = directory
        self._staging = directory / STAGING
        self._slot = slot
        self._epoch: Epoch | None = None
        self._fd = -1
        self._staged = b""
        self._unsynced = False
        self._sealed: list[Epoch] = []

    def recover(self, recovery: Recovery) -> None:
        """Publish what was committed, delete older allocations' leftovers, and start writing
        ``recovery.start``; the checkpoint is not needed, as the directory says it all."""
        settled = False
        for name in sorted(names(self._task, self._staging)):
            epoch = epoch_of(name)
            if epoch is None:
                continue
            if recovery.committed is not None and epoch <= recovery.committed:
                self._publish(name)
                settled = True
            elif epoch.version < recovery.start.version:
                self._discard(name)
                settled = True
        if settled:
            self._sync_directories()
        self._epoch = recovery.start

    def prepare(self, segments: list[Any]) -> None:
        self._staged += _encoded(self._task, segments)

    def write(self) -> bool:
        """A short write (a full disk, say) keeps the rest staged and answers False."""
        if not self._staged:
            return True
        if self._fd < 0:
            self._fd = self._open()
        count = _write(self._task, self._fd, str(self._current()), self._staged)
        self._staged = self._staged[count:]
        self._unsynced = True
        return not self._staged

    def synced(self) -> bool:
        if self._unsynced:
            fsync(self._task, self._fd, str(self._current()))
            self._unsynced = False
        return True

    def checkpoint(self, epoch: Epoch) -> None:
        """Seal ``epoch``'s file, durably, and go on to the next epoch's."""
        if epoch != self._writing():
            writing = self._writing().describe()
            raise self._error(f"checkpoint at {epoch.describe()} while writing {writing}")
        if self._staged:
            raise self._error(
                f"checkpoint at {epoch.describe()} with {len(self._staged)} bytes prepared but "
                "not written: write() must finish before the barrier"
            )
        if self._fd >= 0:
            self._seal(epoch)
        self._epoch = Epoch(epoch.version, epoch.number + 1)

    def committed(self, epoch: Epoch) -> None:
        """Publish, oldest first, every file this slot sealed up to ``epoch``."""
        ready = [sealed for sealed in self._sealed if sealed <= epoch]
        if not ready:
            return
        for sealed in ready:
            self._publish(file_name(sealed, self._slot))
        self._sealed = self._sealed[len(ready) :]
        self._sync_directories()

    def close(self) -> None:
        """Leaves the open epoch's file staged: the next recovery decides its fate."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _writing(self) -> Epoch:
        if self._epoch is None:
            raise self._error("used before recover(): there is no epoch to write to")
        return self._epoch

    def _current(self) -> Path:
        return self._staging / file_name(self._writing(), self._slot)

    def _seal(self, epoch: Epoch) -> None:
        self.synced()
        os.close(self._fd)
        self._fd = -1
        fsync_directory(self._task, self._staging)
        self._sealed.append(epoch)

    def _open(self) -> int:
        """The current epoch's file, emptied: whatever an earlier start wrote to this very epoch
        was never committed."""
        path = self._current()
        try:
            return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as e:
            raise self._error(f"cannot open {str(path)!r} for writing: {e.strerror}") from e

    def _publish(self, name: str) -> None:
        publish(self._task, self._staging / name, self._directory / name)

    def _discard(self, name: str) -> None:
        """Delete an uncommitted staged file; if it is gone, another peer did so."""
        path = self._staging / name
        try:
            path.unlink(missing_ok=True)
        except OSError as e:
            raise self._error(f"cannot delete uncommitted {str(path)!r}: {e.strerror}") from e

    def _sync_directories(self) -> None:
        """Make renames and deletions durable in both directories."""
        fsync_directory(self._task, self._staging)
        fsync_directory(self._task, self._directory)

    def _error(self, message: str) -> PluginError:
        return error(self._task, message)


def _encoded(task: Task, segments: list[Any]) -> bytes:
    """Compact JSON lines; a PluginError names the first segment that cannot be encoded."""
    return b"".join(_encode(task, segment) for segment in segments)


def _encode(task: Task, segment: Any) -> bytes:
    try:
        return (_ENCODER.encode(segment) + "\n").encode()
    except (TypeError, ValueError) as e:
        raise error(task, f"segment {segment!r:.200} is not JSON-serialisable: {e}") from e


def _write(task: Task, fd: int, path: str, data: bytes) -> int:
    """One ``os.write`` of ``data``: how many bytes went out."""
    try:
        return os.write(fd, data)
    except OSError as e:
        raise error(task, f"writing {path!r} failed: {e.strerror}") from e
