"""A snapshot of keyed state held in memory, packed by a child process forked at the barrier.

The memory backend's entries change in place, so its snapshots are packed from the state as it
is at the barrier. A whole one (every key's entry, one every chain: peer.runtime.snapshot) costs
as much as the state holds, a second or more for millions of keys, and one of changes as much
as an epoch changed; packed on the task's thread, either stops the task that long. So a
snapshot of many entries is packed by a child forked at the barrier: it sees the process's
memory as it was then (its pages are shared with the parent until the parent writes to them),
packs each key group's part on the machine's other core and writes them to a spool file,
unlinked from the start, then exits. The task's thread pays the fork, which costs with the
memory the process holds: a snapshot is forked only when it holds more entries than packing
them would cost (``worth_forking``).

The child runs nothing but the packing (msgpack over plain data), writes through a file it was
handed, and leaves with ``os._exit``: no lock another thread of the parent might have held is
taken, no import, no log, no exit handler. An error in the packing (a value that cannot be
stored) comes back through a pipe as its message; the upload reading the parts raises it
(PackingFailed), which kills the job as an error packing in the parent would. The child's copy of
the pages the parent writes meanwhile is memory of the machine, not of the task's process.
"""

from __future__ import annotations

import gc
import os
import signal
import struct
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import IO

from peer.storage import NotRetried

FRAME = struct.Struct(">HQ")
"""Ahead of each part in the spool file: its key group and its length."""

MESSAGE_LIMIT = 4096
"""The most bytes of an error's message the child sends back: a pipe takes that much at once."""


class PackingFailed(NotRetried, RuntimeError):
    """The child did not pack the snapshot; the message says why. An upload does not try again:
    the job fails with it."""


class ForkedPacking:
    """A child packing parts into ``spool``; ``read`` gives them once it has exited well."""

    def __init__(self, pid: int, spool: IO[bytes], errors: int) -> None:
        self.pid, self.spool, self.errors = pid, spool, errors
        self.failure: str | None = None
        self.length: int | None = None
        """The spool's bytes once the child has exited well."""
        self.lock = threading.Lock()

    def read(self) -> Iterator[tuple[int, bytes]]:
        """Each key group's part, in the order packed, once the child is through."""
        length = self._waited()
        fd, offset = self.spool.fileno(), 0
        while offset < length:
            group, size = FRAME.unpack(os.pread(fd, FRAME.size, offset))
            offset += FRAME.size
            yield group, os.pread(fd, size, offset)
            offset += size

    def release(self) -> None:
        """The parts are no longer needed: stop the child if it still packs, let go of the
        spool."""
        with self.lock:
            if self.length is None and self.failure is None:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                self.failure = "its parts were let go of before they were read"
                os.close(self.errors)
            self.spool.close()

    def _waited(self) -> int:
        """The spool's length once the child exited well; PackingFailed saying why it did not."""
        with self.lock:
            if self.length is None and self.failure is None:
                _, status = os.waitpid(self.pid, 0)
                message = os.read(self.errors, MESSAGE_LIMIT).decode(errors="replace")
                os.close(self.errors)
                code = os.waitstatus_to_exitcode(status)
                if code == 0:
                    self.length = os.fstat(self.spool.fileno()).st_size
                elif code < 0:
                    self.failure = f"the process packing it ended on signal {-code}"
                else:
                    self.failure = message or f"the process packing it exited with {code}"
        if self.length is None:
            raise PackingFailed(f"a snapshot of the keyed state failed: {self.failure}")
        return self.length


ENTRIES_PER_MIB = 300
"""A snapshot is packed by a forked child once it holds more entries than this per MiB the
process holds resident: a fork copies the process's page tables (about 0.13 ms per resident
MiB here), where the task's thread packs an entry in about 0.45 µs (both measured with
bench/state.py's keyed count on the 2-core machine)."""


def worth_forking(entries: int) -> bool:
    """Whether a child forked now packs ``entries`` sooner than this thread would."""
    return entries > ENTRIES_PER_MIB * resident_mib()


def resident_mib() -> float:
    """The process's resident memory now, in MiB."""
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def forked(pack: Callable[[], Iterator[tuple[int, bytes]]]) -> ForkedPacking:
    """``pack``'s parts, made in a child forked now, from the memory as it is now."""
    spool = tempfile.TemporaryFile(prefix="onyx-snapshot-")  # noqa: SIM115  (closed by release)
    errors, reply = os.pipe()
    with warnings.catch_warnings():
        # Forking a process with threads is safe here because the child takes no lock the
        # other threads use (see the module's docstring).
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover  (the child; its work shows in what the parent reads)
        _pack_and_exit(pack, spool.fileno(), reply)
    os.close(reply)
    return ForkedPacking(pid, spool, errors)


def _pack_and_exit(pack: Callable[[], Iterator[tuple[int, bytes]]], fd: int, reply: int) -> None:
    """The child: write each part, framed, to ``fd``; on an error its message to ``reply``."""
    code = 0
    try:
        gc.disable()  # the collector would walk, and copy, the whole heap for nothing
        with os.fdopen(fd, "wb", buffering=1 << 20, closefd=False) as out:
            for group, part in pack():
                out.write(FRAME.pack(group, len(part)))
                out.write(part)
    except BaseException as e:  # every failure goes back as a message
        os.write(reply, str(e).encode()[:MESSAGE_LIMIT] or type(e).__name__.encode())
        code = 1
    finally:
        os._exit(code)
