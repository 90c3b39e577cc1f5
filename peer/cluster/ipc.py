"""What a member and its worker processes say to each other over their two local pipes.

The member's pipe to a worker carries the log: a ``Reset`` (the member's identity, its replica
and the worker's peers) whenever the worker must start over, then every entry the member
applies, in order, as ``ApplyEntries``, ``Assign`` when the worker's peers change, ``Ended``
when that identity ends (its peers are gone: the worker closes their data plane at once),
``Scrape`` when Prometheus scrapes the member, and ``Stop`` as the member stops (closing the
pipe is not enough: the member's own reader still holds it). The worker answers on the same
pipe with ``Hello`` (its site, once its transport listens: it is ready, and only from then on
does the member expect it to read), ``CannotListen`` instead when its transport cannot listen
(its port is taken), ``Append`` for each entry its peers want written, naming the identity
they belong to, and ``Samples`` for each ``Scrape``.

The second pipe carries the store calls of the worker's coordinators (``Call``, answered by
``Answer`` or ``Failure``): they wait for ZooKeeper, so they get a pipe of their own and never
hold up the log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from peer.log.entry import Entry

STORE_CALLS = frozenset({"read_commit", "write_commit", "delete_commit"})
"""The store calls a worker may make: the commit records of its jobs (peer.runtime.checkpoints)."""


@dataclass(frozen=True)
class Reset:
    member: str
    """The member's current identity: a new one means every peer of the old one is gone."""
    replica: dict[str, Any]
    """The member's last settled replica (Replica.to_json): with allocations computed in the
    background the entries it applied since follow as an ``ApplyEntries`` (MemberIncarnation)."""
    peers: tuple[str, ...]


@dataclass(frozen=True)
class ApplyEntries:
    entries: tuple[Entry, ...]


@dataclass(frozen=True)
class Assign:
    peers: tuple[str, ...]


@dataclass(frozen=True)
class Ended:
    member: str
    """The identity that has ended: its peers stop, before any Reset to the next one comes."""


@dataclass(frozen=True)
class Ping:
    """Whether the worker still reads, asked when nothing else has been sent for a while: one
    stopped while the log is idle would otherwise go unnoticed, its peers stalled for good."""


@dataclass(frozen=True)
class Pong:
    """The worker's answer to a ``Ping``, from its reader's thread."""


@dataclass(frozen=True)
class Scrape:
    request: int
    """Numbers the scrape: the answer to an earlier one is told apart from this one's."""


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class Hello:
    site: str


@dataclass(frozen=True)
class CannotListen:
    """The worker cannot listen, and exits: at a member's start the member exits with this
    ``reason`` (one line), later it starts the worker again after a back-off."""

    reason: str


@dataclass(frozen=True)
class Append:
    entry: Entry
    member: str
    """The identity whose peers want it written: the member drops what an earlier one's did."""


@dataclass(frozen=True)
class Family:
    """One metric family of a worker's registry, as plain values (prometheus_client's Metric)."""

    name: str
    documentation: str
    type: str
    unit: str
    samples: tuple[tuple[str, tuple[tuple[str, str], ...], float], ...]
    """Each sample's name, labels and value."""


@dataclass(frozen=True)
class Samples:
    request: int
    """The Scrape this answers."""
    families: tuple[Family, ...]


@dataclass(frozen=True)
class Call:
    method: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class Answer:
    value: Any


@dataclass(frozen=True)
class Failure:
    message: str
