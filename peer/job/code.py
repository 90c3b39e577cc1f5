"""A job's own code, shipped with it: so changing a job's code needs no redeploy and no restart.

The submitter packs the code (a wheel as it is, or a directory as a zip of its files, made
byte for byte the same from the same files), uploads it beside the job's checkpoints and names
its sha256 in the job. The hash travels in the log with the job, where only clients holding
the tenancy's credentials can write, so a peer that runs the job checks the archive it fetched
against it and refuses anything else: code nobody submitted is never run.

A peer unpacks each archive once into a directory named for its hash, complete or not at all
(unpacked beside, then renamed), and imports the job's paths from there (``imports_from``).
An archive is an import root, as a wheel is: its top-level packages and modules become
importable, ahead of anything installed under the same names: a module the archive holds is
the archive's, and a copy imported before (from another archive, or installed) is forgotten
first, though the tasks that already run on it keep it. An archive may not hold the runtime's
own package.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib
import io
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from peer.job.spec import JobError

ARCHIVE_LIMIT = 256 * 1024 * 1024
"""The largest code archive, packed, that a client uploads: code, not data."""
UNPACKED_LIMIT = 1024 * 1024 * 1024
"""The most an archive may unpack to on a peer, as its members declare (zipfile stops reading a
member at its declared size): a small archive of highly compressed bytes fills no disk."""
SHA256 = re.compile(r"^[0-9a-f]{64}$")
RUNTIME = "peer"
"""The runtime's own package, which no archive may replace."""
SKIPPED = frozenset({"__pycache__", ".git", ".hg", ".venv", ".mypy_cache", ".pytest_cache"})
"""Directories a packed directory leaves out: caches and tools' state, not code."""
FIXED_TIME = (1980, 1, 1, 0, 0, 0)
"""Every member's timestamp, so the same files always pack to the same bytes and hash."""
_IMPORTING = threading.Lock()


class CodeError(RuntimeError):
    """Code that cannot be packed, fetched, verified or unpacked; the message names the file."""


@dataclass(frozen=True)
class CodeArchive:
    """Packed code: ``name`` is the file it came from, for messages."""

    name: str
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def reference(self) -> dict[str, str]:
        """What the job holds of it: the ``code`` field."""
        return {"name": self.name, "sha256": self.sha256}


def pack(path: Path) -> CodeArchive:
    """A wheel as it is, or a directory as a zip of its files in sorted order."""
    if path.is_dir():
        data = _zip_directory(path)
    elif path.is_file() and path.suffix == ".whl" and zipfile.is_zipfile(path):
        data = _read_wheel(path)
    else:
        raise CodeError(f"code {str(path)!r} is neither a wheel (.whl) nor a directory")
    if len(data) > ARCHIVE_LIMIT:
        raise CodeError(
            f"code {str(path)!r} packs to {len(data):,} bytes, over the limit of "
            f"{ARCHIVE_LIMIT:,} by {len(data) - ARCHIVE_LIMIT:,}"
        )
    return CodeArchive(path.resolve().name, data)


def _read_wheel(path: Path) -> bytes:
    """The wheel's bytes, its size checked before they are read: a wheel over the limit would
    be refused once packed anyway."""
    size = path.stat().st_size
    if size > ARCHIVE_LIMIT:
        raise CodeError(
            f"code {str(path)!r} is {size:,} bytes, over the limit of {ARCHIVE_LIMIT:,} by "
            f"{size - ARCHIVE_LIMIT:,}"
        )
    return path.read_bytes()


@dataclass(frozen=True)
class _Packed:
    """One file to pack: ``member`` its name in the archive, ``source`` where its bytes are
    read (itself, or the file inside the tree that it links to), ``size`` as lstat found it."""

    member: str
    source: str
    size: int


def _zip_directory(root: Path) -> bytes:
    """Only regular files inside the tree are packed, each checked by lstat before it is
    opened: a link that leaves the tree would ship what lies beside it (a secret), a FIFO or a
    device would hang the submit or never end, and sizes are bounded before anything is read."""
    buffer = io.BytesIO()
    total = 0
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for packed in sorted(_files(root), key=lambda p: p.member.split("/")):  # as paths sort
            total += packed.size
            if total > UNPACKED_LIMIT:
                raise CodeError(_too_large(root, packed, total))
            member = zipfile.ZipInfo(packed.member, FIXED_TIME)
            member.external_attr = 0o644 << 16
            member.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(member, _read(root, packed))
    return buffer.getvalue()


def _too_large(root: Path, packed: _Packed, total: int) -> str:
    where = f"code {str(root)!r}: {packed.member!r} is {packed.size:,} bytes"
    if packed.size > UNPACKED_LIMIT:
        return f"{where}, over the limit of {UNPACKED_LIMIT:,} for all the code's files"
    return f"{where}, which brings the files to {total:,}, over the limit of {UNPACKED_LIMIT:,}"


def _files(root: Path) -> Iterator[_Packed]:
    inside = root.resolve()

    def unreadable(error: OSError) -> None:
        raise CodeError(f"code {str(root)!r}: {error.filename!r} cannot be read: {error.strerror}")

    for directory, subdirectories, names in os.walk(root, onerror=unreadable, followlinks=False):
        subdirectories[:] = sorted(d for d in subdirectories if d not in SKIPPED)
        for name in subdirectories:
            if os.path.islink(os.path.join(directory, name)):
                raise _refused(
                    root, _relative(root, directory, name), "is a symlink to a directory"
                )
        for name in sorted(names):  # the first of several refused is always the same
            if not name.endswith((".pyc", ".pyo")):
                yield _checked(root, inside, _relative(root, directory, name))


def _refused(root: Path, member: str, why: str) -> CodeError:
    return CodeError(
        f"code {str(root)!r}: {member!r} {why}: only files, and links to files inside the "
        "directory, are packed"
    )


def _relative(root: Path, directory: str, name: str) -> str:
    return Path(directory, name).relative_to(root).as_posix()


def _checked(root: Path, inside: Path, member: str) -> _Packed:
    """``member`` as a file to pack, from its lstat: a regular file as it is, a link as the
    regular file inside the tree that it resolves to; anything else refused, never opened."""
    try:
        return _examined(root, inside, member)
    except OSError as e:  # gone, or unreadable, since the walk listed it
        raise CodeError(f"code {str(root)!r}: {member!r} cannot be read: {e.strerror}") from None


def _examined(root: Path, inside: Path, member: str) -> _Packed:
    path = root / member
    found = os.lstat(path)
    if stat.S_ISREG(found.st_mode):
        return _Packed(member, str(path), found.st_size)
    if not stat.S_ISLNK(found.st_mode):
        raise _refused(root, member, f"is {_kind(found.st_mode)}")
    target = _target(root, member)
    if not target.is_relative_to(inside):
        raise _refused(root, member, f"links outside the directory, to {str(target)!r}")
    linked = os.lstat(target)
    if not stat.S_ISREG(linked.st_mode):
        raise _refused(root, member, f"links to {_kind(linked.st_mode)}")
    return _Packed(member, str(target), linked.st_size)


def _target(root: Path, member: str) -> Path:
    """The file a link resolves to, every link on the way followed; a dangling link or a loop
    is refused."""
    try:
        return Path(os.path.realpath(root / member, strict=True))
    except OSError as e:
        known: dict[int | None, str] = {
            errno.ELOOP: "is a symlink loop",
            errno.ENOENT: "is a dangling symlink",
        }  # by errno, which an OSError may lack
        why = known.get(e.errno, f"cannot be followed: {e.strerror}")
        raise _refused(root, member, why) from None


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _kind(mode: int) -> str:
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def _read(root: Path, packed: _Packed) -> bytes:
    """The file's bytes, as lstat found it: opened without following a link and without
    waiting (a FIFO swapped in since then neither blocks nor is read), and refused if it is no
    longer a regular file of that size."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        descriptor = os.open(packed.source, flags)
        try:
            regular = stat.S_ISREG(os.fstat(descriptor).st_mode)
            with open(descriptor, "rb", closefd=False) as file:
                data = file.read(packed.size + 1) if regular else b""
        finally:
            os.close(descriptor)
    except OSError as e:
        raise CodeError(
            f"code {str(root)!r}: {packed.member!r} cannot be read: {e.strerror or e}"
        ) from None
    if not regular or len(data) != packed.size:
        raise CodeError(f"code {str(root)!r}: {packed.member!r} changed while it was packed")
    return data


def check_reference(where: str, code: object) -> None:
    """The job's ``code`` field: ``{name, sha256}`` as ``CodeArchive.reference`` makes it."""
    if not (
        isinstance(code, Mapping)
        and set(code) == {"name", "sha256"}
        and isinstance(code["name"], str)
        and code["name"]
        and isinstance(code["sha256"], str)
        and SHA256.match(code["sha256"])
    ):
        raise JobError(f"{where}: code must be {{name, sha256}} (64 hex digits), got {code!r}")


def unpack(data: bytes, code: Mapping[str, str], cache: Path) -> Path:
    """The directory ``cache/<sha256>`` holding the archive's files, after checking that
    ``data`` is the archive the job names; unpacked only once."""
    name, expected = code["name"], code["sha256"]
    found = hashlib.sha256(data).hexdigest()
    if found != expected:
        raise CodeError(
            f"code {name!r}: the archive fetched has sha256 {found}, the job names {expected}: "
            "refused, never run"
        )
    target = cache / expected
    if target.is_dir():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{expected[:12]}-", dir=cache))
    try:
        _extract(data, name, staging)
        if RUNTIME in top_level_names(staging):
            raise CodeError(f"code {name!r} holds a package {RUNTIME!r}: the runtime's own name")
        os.rename(staging, target)
    except OSError as e:
        shutil.rmtree(staging, ignore_errors=True)
        if target.is_dir():  # another thread or process unpacked it first
            return target
        raise CodeError(f"code {name!r} cannot be unpacked into {str(cache)!r}: {e}") from e
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _extract(data: bytes, name: str, into: Path) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for member in archive.namelist():
                parts = Path(member).parts
                if Path(member).is_absolute() or ".." in parts:
                    raise CodeError(f"code {name!r}: member {member!r} would land outside it")
            unpacked = sum(member.file_size for member in archive.infolist())
            if unpacked > UNPACKED_LIMIT:
                raise CodeError(
                    f"code {name!r} unpacks to {unpacked:,} bytes, over the limit of "
                    f"{UNPACKED_LIMIT:,} by {unpacked - UNPACKED_LIMIT:,}"
                )
            archive.extractall(into)
    except zipfile.BadZipFile as e:
        raise CodeError(f"code {name!r} is not a zip archive: {e}") from e


@contextlib.contextmanager
def imports_from(directory: Path) -> Iterator[None]:
    """Import from ``directory`` first for the duration, with the modules it holds forgotten if
    another archive's copies were imported before. One import at a time: ``sys.path`` and
    ``sys.modules`` are the process's."""
    root = str(directory)
    with _IMPORTING:
        _forget_other_copies(directory)
        sys.path.insert(0, root)
        importlib.invalidate_caches()
        try:
            yield
        finally:
            sys.path.remove(root)


def _forget_other_copies(directory: Path) -> None:
    mine = top_level_names(directory)
    inside = str(directory) + os.sep
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None) or ""
        if name.partition(".")[0] in mine and not origin.startswith(inside):
            del sys.modules[name]


def top_level_names(directory: Path) -> set[str]:
    """The modules and packages an import root offers."""
    return {
        path.stem if path.is_file() else path.name
        for path in directory.iterdir()
        if path.is_dir() or path.suffix == ".py"
    }


def remove(cache: Path, sha256: str) -> None:
    """Delete an unpacked archive that no job on this peer uses any more."""
    shutil.rmtree(cache / sha256, ignore_errors=True)
