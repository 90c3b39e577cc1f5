"""Places: where an exactly-once sink stages its epochs and publishes them, a local directory or
an object store, behind the one protocol of peer.plugins.staged. The protocol decides what is
sealed, published or deleted, and when; a place decides how.

Either way a slot writes its open epoch into a temp directory on this machine (``temp``): the
formats write files. Then:

- ``DirectoryPlace`` (a path or ``file://`` URL). The temp directory is in the sink's staging
  directory itself; sealing fsyncs every file and directory and renames it to its stem, so a
  crash leaves a temp directory, never half a sealed epoch; publishing renames each file into
  view. Every name change is made durable by fsyncing its directory.
- ``StorePlace`` (any other fsspec URL: ``s3://bucket/path``). The temp directory is a scratch
  directory of this process. Sealing uploads each file to ``<path>/_staging/<stem>/<file>``,
  then, last, the epoch's manifest ``<path>/_staging/<stem>.sealed`` listing them: an upload cut
  short leaves no manifest, and an entry without one was never sealed. Publishing copies each
  file to ``<path>/<file>`` on the store (a server-side copy: nothing passes through this
  machine), then deletes the staged files and the manifest. Uploads are whole, so a reader never
  sees half a file, and nothing is renamed. Every operation is retried while the store is out of
  reach (peer.storage); a StorageError after that rolls the job back.

Nothing that decides what is published lists: an epoch is found by its stem, which the protocol
knows from the checkpoint (``files`` reads the epoch's own directory, or its manifest by key: a
GET). Only ``entries`` lists the staging area, and only for collecting what failures left: a
store's listing may lag behind what was written or come in pages, so a leftover it misses costs
space until a later recovery, never correctness.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import Any, Protocol

from peer.job.spec import Task
from peer.plugins import error, where
from peer.plugins.files import fsync_directory, fsync_path, names, publish
from peer.storage import StorageError, is_local, open_url, retried

STAGING = "_staging"
TEMP = ".tmp"
SEALED = ".sealed"

Entry = tuple[str, bool]
"""A staged epoch's stem, and whether it is sealed (else a seal never finished)."""


class Place(Protocol):
    """What the protocol of staged epochs needs of the place they are staged and published in."""

    def temp(self, name: str) -> Path:
        """The local temp directory the open epoch ``name`` is written into."""

    def entries(self) -> list[Entry]:
        """What failures may have left, for collecting: every staged epoch's stem, sealed or
        not, as a listing shows it (on an object store, maybe not all of them yet)."""

    def seal(self, name: str, temp: Path, files: list[str]) -> None:
        """Make the epoch written in ``temp`` durable as staged epoch ``name``."""

    def files(self, name: str) -> list[str] | None:
        """The files of sealed epoch ``name``, relative to where they are published, read by
        its name alone; None if it is not staged (published already, or nothing sealed)."""

    def read(self, name: str, relative: str) -> bytes:
        """A file of sealed epoch ``name``, for a sink that publishes by sending what the epoch
        holds elsewhere (peer.plugins.delivered)."""

    def publish(self, epochs: list[tuple[str, list[str]]]) -> None:
        """Put sealed epochs' files into view and remove what is left of them. Another peer
        publishing the same epoch at the same time is no error."""

    def remove(self, name: str, sealed: bool) -> None:
        """Delete staged epoch ``name`` if it is there: the sealed one, or what a seal that
        never finished left (an entry that is not sealed)."""

    def close(self) -> None:
        """Let go of what this slot holds on this machine."""


def place_for(task: Task, path: str) -> Place:
    """The place ``params.path`` names: a local directory, or an object store's URL."""
    try:
        fs, root = open_url(path)
    except ValueError as e:
        raise error(task, f"params.path {path!r} names no filesystem: {e}") from None
    if is_local(fs):
        return DirectoryPlace(task, Path(root))
    return StorePlace(task, fs, root.rstrip("/"))


def remove_tree(task: Task, path: Path) -> None:
    """Delete a local directory and all in it; what is gone already, another peer deleted."""

    def failed(function: Any, name: str, exc: BaseException) -> None:
        if not isinstance(exc, FileNotFoundError):
            reason = exc.strerror if isinstance(exc, OSError) else exc
            raise error(task, f"cannot delete uncommitted {name!r}: {reason}") from exc

    shutil.rmtree(path, onexc=failed)


def files_under(root: Path) -> list[str]:
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


class DirectoryPlace:
    """Epochs staged in ``<directory>/_staging`` and published into ``<directory>``, each step
    a rename made durable."""

    def __init__(self, task: Task, directory: Path) -> None:
        self._task = task
        self._directory = directory
        self._staging = directory / STAGING
        try:
            self._staging.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise error(task, f"cannot make {str(self._staging)!r}: {e.strerror}") from e

    def temp(self, name: str) -> Path:
        return self._staging / (name + TEMP)

    def entries(self) -> list[Entry]:
        found = []
        for name in names(self._task, self._staging):
            if name.endswith(TEMP):
                found.append((name.removesuffix(TEMP), False))
            else:
                found.append((name, True))
        return found

    def seal(self, name: str, temp: Path, files: list[str]) -> None:
        for relative in files:
            fsync_path(self._task, temp / relative)
        for directory in _deepest_first({temp / p for f in files for p in _parents(f)}):
            fsync_directory(self._task, directory)
        try:
            os.rename(temp, self._staging / name)
        except OSError as e:
            raise error(self._task, f"cannot seal {str(temp)!r}: {e.strerror}") from e
        fsync_directory(self._task, self._staging)

    def files(self, name: str) -> list[str] | None:
        """What is left of the epoch's own directory: a publish cut short renamed the rest."""
        staged = self._staging / name
        return files_under(staged) if staged.is_dir() else None

    def read(self, name: str, relative: str) -> bytes:
        path = self._staging / name / relative
        try:
            return path.read_bytes()
        except OSError as e:
            raise error(self._task, f"cannot read staged {str(path)!r}: {e.strerror}") from e

    def publish(self, epochs: list[tuple[str, list[str]]]) -> None:
        """Rename each file into view and remove each emptied staged directory, then make it
        all durable, deepest directories first (removals in the staging directory included)."""
        touched: set[Path] = {self._directory}
        for name, files in epochs:
            staged = self._staging / name
            for relative in files:
                published = self._directory / relative
                try:
                    published.parent.mkdir(parents=True, exist_ok=True)
                except OSError as e:
                    where = str(published.parent)
                    raise error(self._task, f"cannot make {where!r}: {e.strerror}") from e
                publish(self._task, staged / relative, published)
                touched |= {self._directory / p for p in _parents(relative)}
            self._remove_empty(staged)
        for directory in _deepest_first(touched):
            fsync_directory(self._task, directory)
        fsync_directory(self._task, self._staging)

    def remove(self, name: str, sealed: bool) -> None:
        remove_tree(self._task, self._staging / name if sealed else self.temp(name))

    def close(self) -> None:
        """Nothing: the temp directories are the staging directory's, settled by recovery."""

    def _remove_empty(self, root: Path) -> None:
        """Remove a published epoch's directories, deepest first. Only empty ones: a file left
        behind means something was not published, and must not be lost."""
        for directory, _, _ in os.walk(root, topdown=False):
            try:
                os.rmdir(directory)
            except FileNotFoundError:
                pass
            except OSError as e:
                reason = e.strerror
                raise error(self._task, f"cannot remove published {directory!r}: {reason}") from e


class StorePlace:
    """Epochs written in a scratch directory of this process, staged under
    ``<root>/_staging`` on an object store with a manifest each, and published by copies."""

    def __init__(self, task: Task, fs: Any, root: str) -> None:
        """``fs`` is the store's client as peer.storage.open_url gives it (bounded)."""
        self._task = task
        self._fs = fs
        self._root = root
        self._staging = f"{root}/{STAGING}"
        self._scratch = Path(tempfile.mkdtemp(prefix=f"onyx-sink-{os.getpid()}-"))

    def temp(self, name: str) -> Path:
        return self._scratch / (name + TEMP)

    def entries(self) -> list[Entry]:
        """A listing, as the store gives it: a lagging one hides entries, or shows an epoch's
        files before its manifest (an entry that looks unsealed), which the protocol allows
        for."""

        def listing() -> list[str]:
            self._fs.invalidate_cache(self._staging)
            return self._fs.ls(self._staging, detail=False)

        try:
            paths = self._call("read", self._staging, listing)
        except FileNotFoundError:
            return []
        found = {PurePath(p).name for p in paths}
        sealed = {n.removesuffix(SEALED) for n in found if n.endswith(SEALED)}
        unsealed = {n for n in found if not n.endswith(SEALED)} - sealed
        return [(n, True) for n in sealed] + [(n, False) for n in unsealed]

    def seal(self, name: str, temp: Path, files: list[str]) -> None:
        for relative in files:
            staged = f"{self._staging}/{name}/{relative}"
            local = str(temp / relative)
            self._call("upload", staged, functools.partial(self._fs.put_file, local, staged))
        manifest = json.dumps(files).encode()
        sealed = self._manifest(name)
        self._call("upload", sealed, lambda: self._fs.pipe_file(sealed, manifest))
        remove_tree(self._task, temp)

    def files(self, name: str) -> list[str] | None:
        """The manifest, by its key: gone only once every file was published (a publish deletes
        it last), or if nothing was sealed."""
        manifest = self._manifest(name)
        try:
            data = self._call("read", manifest, lambda: self._fs.cat_file(manifest))
        except FileNotFoundError:
            return None
        try:
            files = json.loads(data)
        except ValueError:
            files = None
        if not (isinstance(files, list) and all(isinstance(f, str) for f in files)):
            raise error(self._task, f"the manifest {self._fs.unstrip_protocol(manifest)} is not a "
                                    "list of file names")  # fmt: skip
        return files

    def read(self, name: str, relative: str) -> bytes:
        staged = f"{self._staging}/{name}/{relative}"
        return self._call("read", staged, lambda: self._fs.cat_file(staged))

    def publish(self, epochs: list[tuple[str, list[str]]]) -> None:
        for name, files in epochs:
            for relative in files:
                self._copy(f"{self._staging}/{name}/{relative}", f"{self._root}/{relative}")
            self._delete([f"{self._staging}/{name}/{relative}" for relative in files])
            self._delete([self._manifest(name)])

    def remove(self, name: str, sealed: bool) -> None:
        """Both ways alike, the manifest first: an entry whose files are half deleted must not
        look sealed."""
        self._delete([self._manifest(name)])
        prefix = f"{self._staging}/{name}"
        with contextlib.suppress(FileNotFoundError):
            self._call("delete", prefix, lambda: self._fs.rm(prefix, recursive=True))

    def close(self) -> None:
        remove_tree(self._task, self._scratch)

    def _manifest(self, name: str) -> str:
        return f"{self._staging}/{name}{SEALED}"

    def _copy(self, staged: str, published: str) -> None:
        """A staged file gone but published was published already (by another peer, or by a
        publish cut short); gone altogether, something deleted a committed file, which no
        recovery rule allows. Whether it is published is asked of the store, never of a
        listing the client may have kept."""
        try:
            self._call("publish", published, lambda: self._fs.cp_file(staged, published))
        except FileNotFoundError:
            if not self._call("read", published, lambda: self._published(published)):
                lost = self._fs.unstrip_protocol(staged)
                reason = "it is neither staged nor published: was it deleted as uncommitted?"
                raise error(self._task, f"cannot publish {lost}: {reason}") from None

    def _published(self, path: str) -> bool:
        self._fs.invalidate_cache(path)
        return self._fs.exists(path)

    def _delete(self, paths: list[str]) -> None:
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                self._call("delete", path, functools.partial(self._fs.rm_file, path))

    def _call[T](self, operation: str, path: str, call: Callable[[], T]) -> T:
        """``call()`` retried while the store is out of reach. The StorageError that ends it
        names the task, and stays one, so that the job rolls back rather than dies."""
        try:
            return retried(operation, self._fs.unstrip_protocol(path), call)
        except StorageError as e:
            raise StorageError(f"{where(self._task)}: {e}") from e
