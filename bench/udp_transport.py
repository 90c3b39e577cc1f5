"""A cheap data transport for the scale bench: one UDP socket on loopback per simulated member.

bench/scale.py runs hundreds of members' coordination in one process, and Aeron's media driver
and publications per member would cost more than the members do. What the coordination sends
over the data transport (join direct's asks and replies, the epidemic log's rumors, membership
heartbeats and gossip) is datagrams either way, so plain UDP carries it here. A frame larger
than ``MAX_DATAGRAM`` is cut by the data plane itself (the transport's ``max_frame``), as it is
for Aeron.

The simulated members' host (bench.scale_members) reads their sockets from its own selector, on
the one thread that drives them. ``UdpHub`` serves a group with a thread of its own (the bench's
joiner): one selector thread over its sockets queues each datagram for its member and sets that
member's wakeup Event, so the group sleeps until something comes instead of polling. A datagram
the kernel drops (a full receive buffer) is lost as Aeron's refused offers are: gossip and
heartbeats are made to survive that.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)

MAX_DATAGRAM = 60_000
"""The largest frame one datagram carries: under UDP's 65,507 bytes on loopback."""
RECEIVE_BUFFER = 4 * 1024 * 1024
"""Bytes the kernel may hold for one member's socket (capped by net.core.rmem_max): a replica
sent by join direct arrives as a burst of full datagrams."""
SELECT_WAIT = 0.2
"""Seconds the selector waits before looking for sockets registered meanwhile."""


def parse_site(site: str) -> tuple[str, int]:
    """``HOST:PORT`` as a socket address; a ValueError naming the site otherwise."""
    host, sep, port = site.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"site {site!r} is not HOST:PORT")
    return host, int(port)


def open_socket(host: str = "127.0.0.1") -> socket.socket:
    """A member's non-blocking UDP socket on a free port, with room for a burst."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, RECEIVE_BUFFER)
    sock.bind((host, 0))
    sock.setblocking(False)
    return sock


class UdpTransport:
    """A member's end: ``offer`` sends a datagram, ``poll`` hands over what the hub queued."""

    max_frame = MAX_DATAGRAM

    def __init__(self, sock: socket.socket, wakeup: threading.Event) -> None:
        self.sock, self.wakeup = sock, wakeup
        host, port = sock.getsockname()[:2]
        self.address = f"{host}:{port}"
        self.inbox: deque[bytes] = deque()
        self.sites: dict[str, tuple[str, int]] = {}

    def offer(self, address: str, frame: bytes) -> bool:
        """False when the socket's send buffer is full (back-pressure: offer it again)."""
        to = self.sites.get(address)
        if to is None:
            to = self.sites[address] = parse_site(address)
        try:
            self.sock.sendto(frame, to)
        except BlockingIOError:
            return False
        return True

    def poll(self, handler: Callable[[bytes], None], limit: int = 64) -> int:
        taken = 0
        while taken < limit and self.inbox:
            handler(self.inbox.popleft())
            taken += 1
        return taken

    def forget(self, address: str) -> None:
        self.sites.pop(address, None)

    def beacon(self) -> UdpTransport:
        """Datagrams need no publication of their own: the membership thread and the log feed
        send through the same socket (sendto is safe from any thread)."""
        return self

    def received(self, frame: bytes) -> None:
        self.inbox.append(frame)
        self.wakeup.set()

    def close(self) -> None:
        self.sock.close()


class UdpHub:
    """Every member socket of this process, read by one thread."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.selector = selectors.DefaultSelector()
        self.lock = threading.Lock()
        self.transports: list[UdpTransport] = []
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="bench-udp-hub", daemon=True)
        self.thread.start()

    def transport(self, wakeup: threading.Event) -> UdpTransport:
        """A new member's socket on a free port, its datagrams waking ``wakeup``."""
        transport = UdpTransport(open_socket(self.host), wakeup)
        with self.lock:
            self.selector.register(transport.sock, selectors.EVENT_READ, transport)
            self.transports.append(transport)
        return transport

    def _run(self) -> None:
        while not self.stopping:
            for key, _ in self.selector.select(SELECT_WAIT):
                self._drain(key.data)

    @staticmethod
    def _drain(transport: UdpTransport) -> None:
        while True:
            try:
                frame = transport.sock.recv(MAX_DATAGRAM + 1024)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # closed under us while stopping
                log.debug("member socket %s: %s", transport.address, e)
                return
            transport.received(frame)

    def close(self) -> None:
        self.stopping = True
        self.thread.join(timeout=2 * SELECT_WAIT + 1)
        with self.lock:
            for transport in self.transports:
                self.selector.unregister(transport.sock)
                transport.close()
            self.transports.clear()
        self.selector.close()
