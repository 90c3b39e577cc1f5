"""JSON lines: an input reading one JSON value per line of a file, an output appending them.

The input treats its file as bounded: it reads what the file held when the task started on this
peer. Line i (0-based, blank lines counted but never emitted) belongs to slot ``i % slots``, so
every peer scans the file and parses only its own lines. It reads a line at a time, never the
whole file, and its checkpoint is ``[byte offset, lines read]`` so that recovery seeks straight
back to where it was instead of reading everything again.

The output appends compact JSON, one value per line. With ``{slot}`` in ``params.path`` each peer
has its own file; without, the peers share one, and each staged batch goes out in a single
``os.write`` on an O_APPEND descriptor, so batches from several processes on one machine land
whole and never interleave. With ``params.overwrite`` true, a task that starts from the
beginning (no checkpoint) empties its file first, so a job run again replaces its earlier output
instead of adding to it; that needs one writer per file (a single peer, or ``{slot}`` in the
path). Encoding uses the standard library's C encoder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, BinaryIO

from peer.job.spec import Task
from peer.plugins import PluginError, error, natural, param

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def input(task: Task, slot: int, slots: int) -> JsonlInput:
    """The factory named ``peer.plugins.jsonl:input``."""
    path = param(task, "path", "a file path string", _is_path)
    try:
        file = open(path, "rb")  # noqa: SIM115 - the input owns it until close()
    except OSError as e:
        raise error(task, f"cannot open {path!r}: {e.strerror}") from e
    return JsonlInput(task, path, file, slot, slots)


def output(task: Task, slot: int, slots: int) -> JsonlOutput:
    """The factory named ``peer.plugins.jsonl:output``."""
    pattern = param(task, "path", "a file path string", _is_path)
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

    def recover(self, checkpoint: Any | None) -> None:
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

    def checkpoint(self) -> list[int]:
        return [self._offset, self._lines]

    def completed(self) -> bool:
        return self._offset >= self._size

    def synced(self) -> bool:
        return True

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

    def recover(self, checkpoint: Any | None) -> None:
        if checkpoint is not None and not natural(checkpoint):
            raise self._error(f"checkpoint must be a byte count, got {checkpoint!r}")
        if checkpoint is None and self._overwrite:
            os.ftruncate(self._fd, 0)
        self._written = checkpoint or 0

    def prepare(self, segments: list[Any]) -> None:
        self._staged += b"".join(self._encode(segment) for segment in segments)

    def write(self) -> bool:
        """A short write (a full disk, say) keeps the rest staged and answers False."""
        if not self._staged:
            return True
        try:
            count = os.write(self._fd, self._staged)
        except OSError as e:
            raise self._error(f"writing {self._path!r} failed: {e.strerror}") from e
        self._staged = self._staged[count:]
        self._written += count
        self._unsynced = True
        return not self._staged

    def synced(self) -> bool:
        if self._unsynced:
            try:
                os.fsync(self._fd)
            except OSError as e:
                raise self._error(f"syncing {self._path!r} failed: {e.strerror}") from e
            self._unsynced = False
        return True

    def checkpoint(self) -> int:
        return self._written

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _error(self, message: str) -> PluginError:
        return error(self._task, message)

    def _encode(self, segment: Any) -> bytes:
        try:
            return (_ENCODER.encode(segment) + "\n").encode()
        except (TypeError, ValueError) as e:
            raise self._error(f"segment {segment!r:.200} is not JSON-serialisable: {e}") from e


def _is_path(value: object) -> bool:
    return isinstance(value, str) and value != ""
