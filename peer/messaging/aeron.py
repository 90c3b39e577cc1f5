"""Frames between peer groups over Aeron UDP: one subscription per group, one publication per
group it sends to.

Aeron runs in a media driver that owns the sockets and the log buffers; the group's client only
reads and writes shared memory, so ``offer`` and ``poll`` never block and never wait for the
network. The driver and the client's conductor are C threads that do not need the GIL: a group
busy in Python for seconds is not mistaken for a dead one. A group either embeds a driver of its
own or attaches to a standalone one shared by the groups of a machine (``run_media_driver``).

Settings, and why:

* Term length 16 MiB, set on every publication's channel so it holds whichever driver runs it.
  Aeron caps a message at an eighth of a term, so frames up to 2 MiB go through
  (``MAX_FRAME_LENGTH``); a publication may run half a term ahead of what its receiver has taken
  before ``offer`` reports back pressure. Log files are sparse, so a quiet stream does not hold
  its three terms of memory.
* Drivers keep their files in /dev/shm where there is one, as Aeron does on Linux: memory, not
  disk. Aeron deletes its directory on start and on shutdown, so a driver only starts in a
  directory that is absent, empty or an Aeron directory. An embedded driver's directory goes
  when its transport closes; one left by a killed process goes when the next transport starts.
* Timeouts are Aeron's defaults: a publication to a departed group reports NOT_CONNECTED after
  5 s without word from it, the driver drops a silent sender's image after about 10 s, and a
  standalone driver reclaims a dead client's publications and subscriptions after 10 s.
  pyaeron does not expose them, and they are well above anything a live group's C threads
  could miss, GIL or not.
* The embedded driver runs all its work on one thread: a Python group is far slower than one
  driver thread. The standalone driver serves every group on its machine, so it keeps Aeron's
  dedicated conductor, sender and receiver threads.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import tempfile
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

import pyaeron

from peer import metrics
from peer.processes import running, until_stopped

TERM_LENGTH = 16 * 1024 * 1024
MAX_FRAME_LENGTH = TERM_LENGTH // 8
"""The largest frame ``offer`` takes: Aeron's limit on one message for TERM_LENGTH."""
BEACON_TERM_LENGTH = 64 * 1024
"""Aeron's smallest term: heartbeats are a few dozen bytes, a gossiped state a few kilobytes."""
BEACON_MAX_FRAME = BEACON_TERM_LENGTH // 8
"""The largest message a beacon publication takes (Aeron's limit for its term)."""
PUBLICATION_WINDOW = 256 * 1024
"""How far a publication may run ahead of what its receiver has taken. Aeron's default is half
the term (8 MiB here): a receiver that stops reading would then let megabytes of segments pile
up ahead of a checkpoint barrier. A quarter MiB keeps back-pressure prompt and still holds many
batches; a frame larger than the window still goes, once the window has room for its start."""
MIN_MTU, MAX_MTU = 1408, 65504
"""Aeron's MTU bounds. Its default, 1408, fits a 1500-byte Ethernet frame; a larger MTU carries
a batch in fewer fragments, which pays on one machine (loopback) and with jumbo frames, but on a
standard network the kernel would fragment every datagram."""
DRIVER_LIVENESS_MS = 10_000
"""A driver whose heartbeat is older than this is dead: Aeron's own driver timeout. A live
driver's conductor marks its heartbeat about once a second."""
EMBEDDED_DRIVER_PARENT = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
"""Where each embedded driver makes a directory of its own, removed when its transport closes."""
_AERON_FILES = frozenset({"cnc.dat", "loss-report.dat", "publications", "images"})


class TransportError(RuntimeError):
    """A media driver missing where one should run, or running where another should start."""


class AeronTransport:
    """One peer group's end of the messaging layer; use it from one thread.

    With ``aeron_dir`` it attaches to the standalone driver running there; without, it embeds a
    driver of its own. It listens on ``host:port`` (a free port unless given), the ``address``
    other groups send to. Frames leave in order per destination and arrive in order per sender.
    ``offer`` never drops a frame and never waits: when Aeron cannot take it yet it says so and
    the caller keeps it.
    """

    address: str
    max_frame = MAX_FRAME_LENGTH
    """The largest frame ``offer`` takes; the data plane sends larger ones in pieces
    (peer.messaging.fragments)."""

    def __init__(self, *, aeron_dir: str | None = None, host: str = "127.0.0.1",
                 port: int | None = None, stream_id: int = 1001,
                 mtu: int | None = None) -> None:  # fmt: skip
        if mtu is not None and not (MIN_MTU <= mtu <= MAX_MTU and mtu % 32 == 0):
            raise TransportError(f"MTU {mtu} is not a multiple of 32 from {MIN_MTU} to {MAX_MTU}")
        self._stream_id = stream_id
        self._mtu = f"|mtu={mtu}" if mtu else ""
        self._publications: dict[str, pyaeron.ExclusivePublication] = {}
        self._pending: deque[bytes] = deque()
        self._copy = _copier(self._pending)
        self._driver: pyaeron.MediaDriver | None = None
        self._aeron: pyaeron.Aeron | None = None
        self._closed = False
        try:
            if aeron_dir is None:
                self._driver = _embedded_driver()
                aeron_dir = self._driver.dir
            self._aeron = _attach(aeron_dir)
            self.address = _receiving_address(host, port)
            self._subscription = _subscribe(self._aeron, self.address, stream_id)
        except BaseException:
            self.close()
            raise

    def offer(self, address: str, frame: bytes) -> bool:
        """True once Aeron holds ``frame`` for the group at ``address``; False when it cannot
        take it yet (back pressure, not yet connected, a driver's admin action), and the caller
        offers the same frame again later. The first offer to an address waits once for the
        driver to open the publication: a round trip through shared memory, not the network."""
        if len(frame) > MAX_FRAME_LENGTH:
            raise ValueError(f"frame of {len(frame)} bytes is larger than the "
                             f"{MAX_FRAME_LENGTH} bytes Aeron carries in one message")  # fmt: skip
        publication = self._publications.get(address) or self._publish(address)
        try:
            taken = bool(publication.offer(frame))
        except pyaeron.PublicationClosed:  # the driver closed it: the next offer opens another
            del self._publications[address]
            taken = False
        if taken:
            metrics.FRAMES_SENT.inc()
            metrics.BYTES_SENT.inc(len(frame))
        else:
            metrics.BACK_PRESSURED.inc()
        return taken

    def publications(self) -> int:
        """How many publications the data plane holds open: one per group it sends to."""
        return len(self._publications)

    def poll(self, handler: Callable[[bytes], None], limit: int = 64) -> int:
        """Hands each whole frame that has arrived to ``handler``, reading at most ``limit``
        fragments from Aeron; returns how many frames it handed over.

        Frames are copied out of Aeron before any is handled, because Aeron counts every
        fragment of a poll as read even when the handler raises half way through. A frame whose
        handler raised counts as handed over; the frames after it wait for the next poll.
        """
        if not self._pending:
            self._subscription.poll(self._copy, limit)
        delivered = 0
        while self._pending:
            frame = self._pending.popleft()
            metrics.FRAMES_RECEIVED.inc()
            metrics.BYTES_RECEIVED.inc(len(frame))
            handler(frame)
            delivered += 1
        return delivered

    def beacon(self) -> Beacon:
        """A sender for another thread (the heartbeats): its own concurrent publications, so
        it never touches this transport's."""
        return Beacon(self._client(), self._stream_id)

    def forget(self, address: str) -> None:
        """Closes the publication to a group that is gone; offering to it again reopens one."""
        publication = self._publications.pop(address, None)
        if publication is not None:
            publication.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._aeron is not None:
            self._aeron.close()  # closes its publications and subscription too
        if self._driver is not None:
            self._driver.close()

    def _client(self) -> pyaeron.Aeron:
        """The Aeron client, which only a transport whose ``__init__`` failed lacks: nothing
        offers through one of those, or asks it for a beacon."""
        if self._aeron is None:
            raise RuntimeError("the transport has no Aeron client: its construction failed")
        return self._aeron

    def _publish(self, address: str) -> pyaeron.ExclusivePublication:
        """Exclusive, so each sending group is an image of its own at the receiver."""
        channel = (
            f"{_channel(address)}|term-length={TERM_LENGTH}|sparse=true"
            f"|pub-wnd={PUBLICATION_WINDOW}{self._mtu}"
        )
        publication = self._client().add_exclusive_publication(channel, self._stream_id)
        self._publications[address] = publication
        return publication


class Beacon:
    """Small frames to other groups from one thread of its own, beside the transport's.

    Heartbeats and gossip must keep going while the data plane's thread is busy with a long
    batch, so the membership thread sends them through this: concurrent publications on the same
    client, which arrive at the same subscription as the data. A refused offer is simply
    skipped; the next beat or gossip round follows soon.
    """

    max_frame = BEACON_MAX_FRAME

    def __init__(self, aeron: pyaeron.Aeron, stream_id: int) -> None:
        self._aeron, self._stream_id = aeron, stream_id
        self._publications: dict[str, pyaeron.Publication] = {}

    def offer(self, address: str, frame: bytes) -> bool:
        publication = self._publications.get(address)
        if publication is None:
            channel = f"{_channel(address)}|term-length={BEACON_TERM_LENGTH}|sparse=true"
            publication = self._aeron.add_publication(channel, self._stream_id)
            self._publications[address] = publication
        try:
            return bool(publication.offer(frame))
        except pyaeron.PublicationClosed:
            del self._publications[address]
            return False

    def forget(self, address: str) -> None:
        publication = self._publications.pop(address, None)
        if publication is not None:
            publication.close()


def run_media_driver(directory: str, stop: threading.Event) -> None:
    """A standalone media driver in ``directory`` until ``stop`` is set; the groups of this
    machine attach to it with ``AeronTransport(aeron_dir=directory)``."""
    _check_free(directory)
    driver = pyaeron.MediaDriver(dir=directory, threading="dedicated",
                                 term_buffer_length=TERM_LENGTH, dir_delete_on_start=True,
                                 dir_delete_on_shutdown=True)  # fmt: skip
    try:
        until_stopped(stop)
    finally:
        driver.close()


def _embedded_driver() -> pyaeron.MediaDriver:
    """A driver of this process's own, in a directory no other driver uses."""
    _remove_dead_embedded_drivers()
    name = f"onyx-aeron-{os.getpid()}-{secrets.token_hex(4)}"
    directory = os.path.join(EMBEDDED_DRIVER_PARENT, name)
    return pyaeron.MediaDriver(dir=directory, threading="shared", term_buffer_length=TERM_LENGTH,
                               dir_delete_on_shutdown=True)  # fmt: skip


def _remove_dead_embedded_drivers() -> None:
    """Directories left by processes that died without closing their transport (kill -9, the
    OOM killer): in /dev/shm they hold memory until someone removes them. One is only removed
    when both its process and its driver are gone, so a driver still starting is left alone."""
    for path in Path(EMBEDDED_DRIVER_PARENT).glob("onyx-aeron-*-*"):
        pid = path.name.split("-")[2]
        if (pid.isdigit() and not running(int(pid))
                and not pyaeron.is_driver_active(str(path), DRIVER_LIVENESS_MS)):  # fmt: skip
            shutil.rmtree(path, ignore_errors=True)


def _attach(directory: str) -> pyaeron.Aeron:
    """A client of the driver in ``directory``, refused at once if there is none: Aeron itself
    would wait 10 s and then report a driver timeout."""
    if not pyaeron.is_driver_active(directory, DRIVER_LIVENESS_MS):
        raise TransportError(f"no media driver is running in {directory}; start one with "
                             f"`onyx media-driver --dir {directory}`")  # fmt: skip
    return pyaeron.Aeron(dir=directory)


def _check_free(directory: str) -> None:
    path = Path(directory)
    if pyaeron.is_driver_active(directory, DRIVER_LIVENESS_MS):
        raise TransportError(f"a media driver is already running in {directory}")
    if path.exists() and not path.is_dir():
        raise TransportError(f"{directory} is not a directory")
    if path.is_dir() and not {p.name for p in path.iterdir()} <= _AERON_FILES:
        raise TransportError(f"{directory} holds files of its own; a media driver deletes its "
                             "directory, so give it one of its own")  # fmt: skip


def _copier(frames: deque[bytes]) -> Callable[[pyaeron.BufferView, pyaeron.Header], None]:
    """The one handler a transport hands to every poll. pyaeron reassembles fragments per
    handler object: a new one each poll, even an equal bound method, would silently lose every
    frame that spans two polls."""

    def copy(buffer: pyaeron.BufferView, header: pyaeron.Header) -> None:
        frames.append(buffer.tobytes())

    return copy


def _receiving_address(host: str, port: int | None) -> str:
    """``host:port``, a free port unless given, once a UDP socket could bind there: an address
    this machine lacks or a port in use is refused here in one line, where the driver would
    report it as a page of C call sites."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((host, port or 0))
            return f"{host}:{s.getsockname()[1]}"
    except OSError as e:
        where = f"{host}:{port}" if port else host
        raise TransportError(
            f"cannot receive segments on {where} (--bind, --port): {e.strerror or e}"
        ) from None


def _subscribe(aeron: pyaeron.Aeron, address: str, stream_id: int) -> pyaeron.Subscription:
    """The group's subscription; what the driver refuses (the port taken between the check and
    here) is a TransportError with the driver's reason."""
    try:
        return aeron.add_subscription(_channel(address), stream_id)
    except pyaeron.AeronError as e:
        reasons = [
            line for line in str(e).splitlines() if line.startswith("(") and "generic" not in line
        ]
        reason = reasons[0] if reasons else str(e).splitlines()[0]
        raise TransportError(f"cannot receive segments on {address}: {reason}") from None


def _channel(address: str) -> str:
    return f"aeron:udp?endpoint={address}"
