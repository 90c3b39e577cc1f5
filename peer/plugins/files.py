"""What file-writing plugins share: making their writes durable.

A file is durable once fsynced; its name in a directory (made, renamed, deleted) once the
directory is fsynced too. Each failure becomes a PluginError naming the task and the path.
"""

from __future__ import annotations

import os
from pathlib import Path

from peer.job.spec import Task
from peer.plugins import error


def fsync(task: Task, fd: int, path: str) -> None:
    try:
        os.fsync(fd)
    except OSError as e:
        raise error(task, f"syncing {path!r} failed: {e.strerror}") from e


def fsync_directory(task: Task, directory: Path) -> None:
    """Make the directory's entries (files made, renamed, deleted) durable."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        raise error(task, f"cannot open {str(directory)!r} to sync it: {e.strerror}") from e
    try:
        fsync(task, fd, str(directory))
    finally:
        os.close(fd)


def is_path(value: object) -> bool:
    return isinstance(value, str) and value != ""
