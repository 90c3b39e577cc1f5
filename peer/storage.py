"""Storage: how the engine reaches the filesystem or object store that holds checkpoints, shipped
code and the exactly-once sinks' output, whatever fsspec URL names it.

Two things differ between a local directory and an object store, and each is decided once, when
the storage is opened:

- Making a write whole. A local file is written under a temporary name and renamed, since a
  reader could otherwise see half of it; an object store's PUT is whole by itself, and it has no
  rename (s3fs's ``mv`` is a copy and a delete, twice the traffic for nothing).
- Failing. A local directory fails for good (a full disk, a permission); an object store fails
  for a moment (a server restarting, a slow link, a throttle). Every operation on an object store
  is therefore given up after ``ATTEMPT_SECONDS`` and retried with a growing pause for up to
  ``RETRY_SECONDS``, each failure counted in
  ``onyx_checkpoint_storage_failures_total{operation}``. What still fails is a StorageError: the
  store is out of reach, not the job wrong, so a task rolls its job back to its last commit
  (and tries again from there) instead of killing it.

The object store must be strongly consistent, as S3, SeaweedFS and MinIO are: an object once
written is read and listed by everyone. Correctness needs no rename; listings only find what a
failure left behind, to delete it or to publish what was committed.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from peer import metrics

log = logging.getLogger(__name__)

RETRY_SECONDS = 60.0
"""How long an operation on an object store is retried before it fails: a store that restarts
comes back within it, and a job whose store is gone for longer rolls back and tries again."""
ATTEMPT_SECONDS = 20.0
"""How long one try of an operation on an object store may take: a hung server answers nothing,
and the client's own timeouts do not cover every wait (a PUT waits for the server's "100
Continue" without one)."""
FIRST_PAUSE, LONGEST_PAUSE = 0.2, 3.0


class CheckpointError(RuntimeError):
    """A snapshot, a commit record or a code archive cannot be had; the message names which and
    where."""


class StorageError(CheckpointError):
    """The store did not answer, or answered with an error, for RETRY_SECONDS: it is out of
    reach, and whoever needed it should try again later, from what is committed."""


CLIENT_OPTIONS: dict[str, dict[str, Any]] = {
    "s3": {"config_kwargs": {"connect_timeout": 5, "read_timeout": 15,
                             "retries": {"max_attempts": 2}}},
}  # fmt: skip
"""Options for an object store's client by protocol. Its own defaults wait 60 s for an answer
and retry a few times more, so a hung server would hold an operation for minutes, past
RETRY_SECONDS; here each try is short and ``retried`` does the rest. Endpoint and credentials
are not set here: the client reads them where its users put them (AWS_ENDPOINT_URL,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, or ~/.aws)."""


def open_url(url: str) -> tuple[Any, str]:
    """The filesystem and path a URL (or a plain directory) names, an object store's calls
    bounded; a ValueError says why a URL names none (an unknown protocol, a library missing
    for it)."""
    protocol = fsspec.utils.get_protocol(url)
    try:
        fs, path = fsspec.url_to_fs(url, **CLIENT_OPTIONS.get(protocol, {}))
    except ImportError as e:
        raise ValueError(f"{url!r} needs a library that is not installed: {e}") from None
    return (Bounded(fs) if fs.async_impl else fs), path


class Bounded:
    """An object store's client whose every call that runs on fsspec's event loop gives up
    after ATTEMPT_SECONDS with a timeout error (the call is cancelled), so ``retried`` gets to
    try again; everything else is the client's own."""

    def __init__(self, fs: fsspec.AbstractFileSystem) -> None:
        self._fs = fs

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._fs, name)
        if callable(attribute) and hasattr(self._fs, f"_{name}"):
            return functools.partial(attribute, timeout=ATTEMPT_SECONDS)
        return attribute


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether ``fs`` is this machine's own filesystem, where a rename is atomic and a write
    needs one to be whole."""
    return isinstance(fs, LocalFileSystem)


class NotRetried(Exception):
    """A failure of what was being stored rather than of the store (a snapshot whose state
    could not be read or packed): no retry changes it."""


ANSWERS = (FileNotFoundError, TypeError, AttributeError, NameError, NotRetried)
"""What no retry changes: an object that is not there, a bug, and what was to be stored."""


def retried[T](operation: str, where: str, call: Callable[[], T]) -> T:
    """``call()`` retried on failure for RETRY_SECONDS; ANSWERS go straight up. ``operation``
    (upload, read, publish, delete) labels the metric and ``where`` names the object in the
    error."""
    deadline = time.monotonic() + RETRY_SECONDS
    pause = FIRST_PAUSE
    while True:
        try:
            return call()
        except ANSWERS:
            raise
        except Exception as e:
            metrics.STORAGE_FAILURES.labels(operation).inc()
            if time.monotonic() + pause > deadline:
                raise StorageError(
                    f"checkpoint storage failed to {operation} {where} for {RETRY_SECONDS:g} s: "
                    f"{describe(e)}"
                ) from e
            log.warning("%s of %s failed, trying again in %.1f s: %s",
                        operation, where, pause, describe(e))  # fmt: skip
            time.sleep(pause)
            pause = min(pause * 2, LONGEST_PAUSE)


def once[T](operation: str, where: str, call: Callable[[], T]) -> T:
    """``call()`` on a local filesystem: its failures are for good, but counted all the same."""
    try:
        return call()
    except FileNotFoundError:
        raise
    except Exception:
        metrics.STORAGE_FAILURES.labels(operation).inc()
        raise


def attempts(fs: fsspec.AbstractFileSystem) -> Callable[..., Any]:
    """How operations on ``fs`` are tried: once on a local disk, ``retried`` on a store."""
    return once if is_local(fs) else retried


def describe(error: BaseException) -> str:
    """An error as one line: an OSError's reason alone, anything else with its type, since an
    object store's client raises errors of its own (a refused connection, a bad signature)."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return f"{type(error).__name__}: {error}"
