"""JSON lines: an input reading one JSON value per line of a file, and two outputs writing them:
one that appends (at least once) and one that publishes whole committed epochs (exactly once).

The input treats its file as bounded: it reads what the file held when the task started on this
peer. It splits its share (peer.plugins.splits): line i (0-based, blank lines counted but never
emitted) is in split ``i % S``, and each peer scans the file and parses only the lines of the
splits it owns, so a checkpointed job's input may run on another number of peers after a
restore. It reads a line at a time, never the whole file, and its checkpoint holds, for each
split it owns, ``[lines read, byte offset]``, so that recovery seeks straight back to where it
was instead of reading everything again. The file is not consumed, so a commit has nothing to
acknowledge.

``output`` appends compact JSON, one value per line. With ``{slot}`` in ``params.path`` each peer
has its own file; without, the peers share one, and each staged batch goes out in a single
``os.write`` on an O_APPEND descriptor, so batches from several processes on one machine land
whole and never interleave. With ``params.overwrite`` true, a task that starts from the
beginning (no checkpoint) empties its file first, so a job run again replaces its earlier output
instead of adding to it; that needs one writer per file (a single peer, or ``{slot}`` in the
path). What was written after the last committed epoch is written again after a failure, so a
reader may see a segment twice.

``exactly_once_output`` is a two-phase-commit sink: a reader sees every segment once, and only
once its epoch is committed. ``params.path`` is a directory, and it belongs to one job; readers
look only at ``<path>/*.jsonl``. The commit is peer.plugins.staged's: each slot writes an epoch's
segments, as they come, to ``<stem>.jsonl`` in the epoch's temp directory (made by the epoch's
first write, so an epoch with nothing written leaves nothing), and the file is published as
``<path>/<stem>.jsonl``, so the published names sort in epoch order. Its checkpoint is what
peer.plugins.staged keeps: the stems sealed and not yet known published, which recovery
publishes by name.

Encoding is peer.values.json_text's.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from peer.job.spec import Task
from peer.plugins import PluginError, Recovery, Sealing, error, natural, param, where
from peer.plugins.files import fsync, is_path
from peer.plugins.splits import Cursor, Splits, pair
from peer.plugins.staged import StagedEpochs, epoch_of, staged_epochs, stem
from peer.storage import StorageError, is_local, open_url, retried
from peer.values.columnar import Batch, rows
from peer.values.epoch import Epoch
from peer.values.json_text import json_text

SUFFIX = ".jsonl"


def input(task: Task, slot: int, slots: int, *, splits: Splits) -> JsonlInput:
    """The factory named ``peer.plugins.jsonl:input``: a local file, or an object store's
    (through fsspec), whose read failures roll the job back rather than kill it. ``splits`` are
    the splits of the file's lines this slot owns, of the task's max_parallelism."""
    path = param(task, "path", "a file path string or an fsspec URL", is_path)
    return JsonlInput(task, path, opened(task, path), splits)


def opened(task: Task, path: str) -> Opened:
    """The file at ``path`` opened for the input of ``task``; a PluginError, or a StorageError
    for a store out of reach, says why it cannot be."""
    try:
        fs, at = open_url(path)
    except ValueError as e:
        raise error(task, f"params.path {path!r} names no filesystem: {e}") from None
    try:
        if is_local(fs):
            file = open(at, "rb")  # noqa: SIM115 - the input owns it until close()
            return Opened(file, os.fstat(file.fileno()).st_size, PluginError)
        size = retried("read", path, lambda: fs.size(at))
        return Opened(retried("read", path, lambda: fs.open(at, "rb")), size, StorageError)
    except StorageError as e:
        raise StorageError(f"{where(task)}: {e}") from e
    except OSError as e:
        raise error(task, f"cannot open {path!r}: {e.strerror or e}") from e


@dataclass(frozen=True)
class Opened:
    """The file an input reads, its size when the task started, and what a failure to read
    it is: the file's fault (PluginError) or a store's out of reach (StorageError)."""

    file: BinaryIO
    size: int
    unreadable: type[Exception]


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
    return ExactlyOnceOutput(task, staged_epochs(task, slot))


def file_name(epoch: Epoch, slot: int) -> str:
    """The name of ``slot``'s file of ``epoch``, in its staged directory and published."""
    return stem(epoch, slot) + SUFFIX


def published_epoch(name: str) -> Epoch | None:
    """The epoch a published file is named for; None for a name ``file_name`` never makes."""
    return epoch_of(name, SUFFIX)


class JsonlInput:
    def __init__(self, task: Task, path: str, opened: Opened, splits: Splits) -> None:
        self._task = task
        self._path = path
        self._file = opened.file
        self._splits = splits
        self._size = opened.size
        self._unreadable = opened.unreadable
        self._cursor = Cursor(splits, None, self._error)
        self._scan = -(-splits.total // max(len(splits.owned), 1))
        """Lines scanned per segment asked for: a poll's work is bounded however lines fall."""

    def recover(self, recovery: Recovery) -> None:
        checkpoint = recovery.checkpoint
        if (one := pair(checkpoint)) is not None:  # [byte offset, lines read], as before splits
            if not self._splits.whole:
                raise self._error(
                    f"checkpoint {checkpoint!r} is a reader's [byte offset, lines read] from "
                    "before a file's lines were split, which restores only where one peer "
                    "reads the whole file"
                )
            checkpoint = [[one[1], one[0]] for _ in self._splits.owned]
        self._cursor = Cursor(self._splits, checkpoint, self._error)
        if self._cursor.at[1] > self._size:
            end = f"the end of {self._path!r} ({self._size} bytes)"
            raise self._error(f"checkpoint offset {self._cursor.at[1]} is past {end}")

    def poll(self, limit: int) -> list[Any]:
        """Nothing moves unless the whole poll succeeds: a bad line fails every retry alike."""
        cursor = self._cursor
        lines, offset = cursor.at
        self._seek(offset)
        segments = []
        for _ in range(max(limit, 0) * self._scan):
            if offset >= self._size:
                break
            line = self._readline()
            if cursor.takes(lines) and (text := line.rstrip()):
                segments.append(self._parse(text, lines + 1))
            offset, lines = offset + len(line), lines + 1
        cursor.moved(lines, offset)
        return segments

    def _seek(self, offset: int) -> None:
        try:
            self._file.seek(offset)
        except OSError as e:
            raise self._unreadable(f"{where(self._task)}: cannot read {self._path!r}: {e}") from e

    def _readline(self) -> bytes:
        """A failure to read is the file's (a PluginError) or, for a file on an object store,
        the store's (a StorageError: the job rolls back and reads again once it is back)."""
        try:
            return self._file.readline()
        except OSError as e:
            raise self._unreadable(f"{where(self._task)}: cannot read {self._path!r}: {e}") from e

    def checkpoint(self, epoch: Epoch) -> list[list[int]]:
        return self._cursor.checkpoint()

    def completed(self) -> bool:
        return not self._splits.owned or self._cursor.at[1] >= self._size

    def synced(self) -> bool:
        return True

    def committed(self, epoch: Epoch) -> None:
        """Nothing to acknowledge: the file is read, not consumed."""

    def close(self) -> None:
        self._file.close()

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

    def prepare(self, segments: Batch) -> None:
        self._staged += _encoded(self._task, rows(segments))

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
    """One slot's epochs, and the open epoch's file while it is being written."""

    def __init__(self, task: Task, epochs: StagedEpochs) -> None:
        self._task = task
        self._epochs = epochs
        self._fd = -1
        self._path = ""
        self._staged = b""

    def recover(self, recovery: Recovery) -> None:
        """The checkpoint names the committed epochs that may still be staged."""
        self._epochs.recover(recovery)

    def prepare(self, segments: Batch) -> None:
        self._staged += _encoded(self._task, rows(segments))

    def write(self) -> bool:
        """A short write (a full disk, say) keeps the rest staged and answers False."""
        if not self._staged:
            return True
        if self._fd < 0:
            self._open()
        count = _write(self._task, self._fd, self._path, self._staged)
        self._staged = self._staged[count:]
        return not self._staged

    def synced(self) -> bool:
        """Whether every seal and publish is done: the open epoch need not be durable until
        it is sealed."""
        return self._epochs.synced()

    def checkpoint(self, epoch: Epoch) -> Sealing:
        """Seal ``epoch``'s file in the background and go on to the next epoch's."""
        if self._staged:
            raise error(
                self._task,
                f"checkpoint at {epoch.describe()} with {len(self._staged)} bytes prepared but "
                "not written: write() must finish before the barrier",
            )
        self._close_file()
        durable = self._epochs.seal(epoch)
        return Sealing(self._epochs.position() or None, durable)

    def committed(self, epoch: Epoch) -> None:
        self._epochs.committed(epoch)

    def drained(self) -> Future[None]:
        """Done once every seal and publish asked for so far is."""
        return self._epochs.drained()

    def close(self) -> None:
        """Leaves the open epoch's file staged: the next recovery decides its fate."""
        self._close_file()
        self._epochs.close()

    def _open(self) -> None:
        """The open epoch's file, in its temp directory (made empty by its first write)."""
        path = self._epochs.directory() / file_name(self._epochs.writing(), self._epochs.slot)
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as e:
            raise error(self._task, f"cannot open {str(path)!r} for writing: {e.strerror}") from e
        self._path = str(path)

    def _close_file(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _encoded(task: Task, segments: list[Any]) -> bytes:
    """Compact JSON lines; a PluginError names the first segment that cannot be encoded."""
    return b"".join(_encode(task, segment) for segment in segments)


def _encode(task: Task, segment: Any) -> bytes:
    try:
        return (json_text(segment) + "\n").encode()
    except (TypeError, ValueError, RecursionError) as e:
        raise error(task, f"segment {segment!r:.200} is not JSON-serialisable: {e}") from e


def _write(task: Task, fd: int, path: str, data: bytes) -> int:
    """One ``os.write`` of ``data``: how many bytes went out."""
    try:
        return os.write(fd, data)
    except OSError as e:
        raise error(task, f"writing {path!r} failed: {e.strerror}") from e
