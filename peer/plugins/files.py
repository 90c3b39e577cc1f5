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
    fsync_path(task, directory, os.O_DIRECTORY)


def fsync_path(task: Task, path: Path, flags: int = 0) -> None:
    """Open ``path`` read-only (with ``flags``) and fsync it."""
    try:
        fd = os.open(path, os.O_RDONLY | flags)
    except OSError as e:
        raise error(task, f"cannot open {str(path)!r} to sync it: {e.strerror}") from e
    try:
        fsync(task, fd, str(path))
    finally:
        os.close(fd)


def publish(task: Task, staged: Path, published: Path) -> None:
    """Rename a staged file into view. If it is gone but published, another peer did it; if it
    is gone altogether, something deleted a committed file, which no recovery rule allows."""
    try:
        os.rename(staged, published)
    except FileNotFoundError as e:
        if not published.exists():
            reason = "it is neither staged nor published: was it deleted as uncommitted?"
            raise error(task, f"cannot publish {str(staged)!r}: {reason}") from e
    except OSError as e:
        raise error(task, f"cannot publish {str(staged)!r}: {e.strerror}") from e


def names(task: Task, directory: Path) -> list[str]:
    """The names in ``directory``."""
    try:
        return os.listdir(directory)
    except OSError as e:
        raise error(task, f"cannot list {str(directory)!r}: {e.strerror}") from e


def is_path(value: object) -> bool:
    return isinstance(value, str) and value != ""
