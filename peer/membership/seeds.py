"""Seed nodes: the sites of running members that a new member asks for the cluster first.

A member learns the others from the log, which it reads from ZooKeeper once it has booted its
replica. Given seed nodes, it also sends each a join request carrying its id and its own site
(a seed cannot know where to answer otherwise), until one answers with a welcome (its gossiped
state and the sites of the members it knows) or ``SEED_TIMEOUT`` passes; then it goes on with
what the log tells it, as without seeds. Here are the pure parts: reading a site and a list of
seeds, and the schedule of the requests. The clock is the caller's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SEED_TIMEOUT = 5.0
"""Seconds a new member keeps asking its seed nodes before it learns the cluster from ZooKeeper
alone: a seed that is up answers within a few heartbeat intervals."""

_HOST = re.compile(r"[A-Za-z0-9_.\-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]")
_PORT = re.compile(r"[0-9]{1,5}")


def parse_site(text: str) -> str:
    """``text`` if it is HOST:PORT (a name, an IPv4 address or a bracketed IPv6 one, and a port
    from 1 to 65535), else a ValueError saying what is wrong with it."""
    host, colon, port = text.rpartition(":")
    if not colon:
        raise ValueError(f"{text!r} has no port")
    if not host:
        raise ValueError(f"{text!r} has no host")
    if not _HOST.fullmatch(host):
        raise ValueError(f"{text!r}: {host!r} is not a host name or address")
    if not _PORT.fullmatch(port) or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r}: {port!r} is not a port from 1 to 65535")
    return text


def parse_seed_nodes(text: str) -> tuple[str, ...]:
    """The seeds of HOST:PORT[,HOST:PORT...], blanks around each ignored and repeats dropped;
    a ValueError naming the first that is not a site."""
    return tuple(dict.fromkeys(parse_site(part.strip()) for part in text.split(",")))


@dataclass
class SeedContact:
    """When a new member sends its join requests: to every seed, from the first call to ``due``
    and then every ``retry`` seconds, until a seed answers or ``timeout`` seconds have passed.
    A seed's first answer is the one reported; silent seeds are reported once, at the deadline,
    unless another has answered."""

    seeds: tuple[str, ...]
    retry: float
    timeout: float = SEED_TIMEOUT
    deadline: float | None = None
    next_try: float = float("-inf")
    over: bool = False
    """Answered or given up: nothing more is sent or reported."""

    def due(self, now: float) -> tuple[str, ...]:
        """The seeds to send a join request to at ``now``."""
        if self.over or not self.seeds:
            return ()
        if self.deadline is None:
            self.deadline = now + self.timeout
        if now < self.next_try or now >= self.deadline:
            return ()
        self.next_try = now + self.retry
        return self.seeds

    def silent(self, now: float) -> tuple[str, ...]:
        """The seeds that never answered, once, when the deadline passes without an answer."""
        if self.over or self.deadline is None or now < self.deadline:
            return ()
        self.over = True
        return self.seeds

    def answered(self) -> bool:
        """A welcome has arrived: whether it is the first, in time, so the one to report."""
        first = not self.over and self.deadline is not None
        self.over = True
        return first
