"""The interface every log store offers: the ordered log, its origin, group pulses, and one
small commit record per job (the checkpoint epoch it last committed; peer.runtime.checkpoints).

Two stores implement it: ZooKeeper (peer.log.stores.zookeeper) for a real cluster and an
in-memory one (peer.log.stores.memory), the embedded default for a cluster inside one process.
A store instance is one session: its pulses live exactly as long as the session does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol
from urllib.parse import quote

from peer.log.entry import Entry
from peer.log.replica import Replica
from peer.values.limits import MAX_ENTRY_BYTES


class StoreError(RuntimeError):
    """The store cannot serve this request; the message names what and where."""


class StoreUnreachable(StoreError):
    """No server of the store answered in time: the cluster cannot be reached, as opposed to
    a request it refused (a tenancy that does not exist, say)."""


class CommitRecords(Protocol):
    """The commit records alone: what a job's coordinator needs of the store
    (peer.runtime.checkpoints.Commits), and all a worker process's stand-in for it offers."""

    def read_commit(self, job: str) -> tuple[bytes | None, int]:
        """The commit record of ``job`` and its version; (None, -1) when there is none."""

    def write_commit(self, job: str, data: bytes, expected: int) -> int | None:
        """Compare-and-set: create the record when ``expected`` is -1, else replace it only if its
        version is still ``expected``. The new version, or None when the record is not as
        expected (someone else wrote first, or this session's own write went through and its
        reply was lost to a disconnection: read again to tell)."""

    def delete_commit(self, job: str) -> None:
        """Delete the commit record of ``job``, if there is one."""


class LogStore(CommitRecords, Protocol):
    @property
    def connected(self) -> bool:
        """Whether the store can serve requests right now. While it cannot, a group does not
        ask it (asking would wait for a server) and its data plane goes on."""

    def append(self, entry: Entry) -> int:
        """Write ``entry`` at the tail; its position."""

    def read(self, after: int) -> list[Entry]:
        """The entries past position ``after`` that are there now, in order. Positions may have
        gaps; a run of entries cut short by a concurrent trim ends before the trimmed one."""

    def read_at(self, position: int) -> Entry | None:
        """The entry at exactly ``position``, None when there is none (not written yet, or
        trimmed): one read of one entry, never a listing of the log."""

    def tail(self) -> int:
        """The position of the newest entry; EMPTY_VERSION (-1) before the first."""

    def on_append(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from any thread) whenever new entries may have arrived. A store
        that does not watch the log (the epidemic mode, peer.log.epidemic) calls it only when
        its connection comes back."""

    def origin(self) -> Replica | None:
        """The replica a gc stored, at its version; None before the first gc."""

    def origin_version(self) -> int:
        """The origin's version, EMPTY_VERSION before the first gc: one small read, without the
        origin's bytes, for a reader that must tell a trimmed entry from one not yet written
        without listing the log (peer.log.epidemic.fallback)."""

    def store_origin(self, replica: Replica) -> bool:
        """Make ``replica`` the origin unless a newer one is already there."""

    def trim(self, before: int) -> int:
        """Delete the entries before position ``before``; how many went."""

    def register_pulse(self, group: str, site: str | None = None) -> None:
        """Announce ``group`` alive for as long as this session lasts, and where it listens
        (its ``site``, when it has one), so a newcomer finds a member in one read."""

    def pulse_sites(self) -> dict[str, str]:
        """The groups with a pulse now that announced a site, and their sites: one read."""

    def remove_pulse(self, group: str) -> None: ...

    def pulse_exists(self, group: str) -> bool: ...

    def watch_pulse(self, group: str, on_gone: Callable[[str], None]) -> Callable[[], None]:
        """Call ``on_gone(group)`` once when its pulse disappears, at once if it is already gone;
        the returned function cancels the watch."""

    def on_session_lost(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the session expires: every pulse of this session is gone."""

    def close(self) -> None: ...


def encoded(entry: Entry) -> bytes:
    """``entry`` as a store writes it. One larger than MAX_ENTRY_BYTES is refused at once,
    saying what it is and by how much it is over: ZooKeeper would drop the connection instead,
    and the client retry until it gave up; the embedded store refuses it alike, so that what
    runs embedded also fits a cluster."""
    data = entry.encode()
    if len(data) > MAX_ENTRY_BYTES:
        raise StoreError(
            f"{describe(entry)} is {len(data):,} bytes, {len(data) - MAX_ENTRY_BYTES:,} bytes over "
            f"the limit of {MAX_ENTRY_BYTES:,} of a log entry (ZooKeeper's jute.maxbuffer)"
        )
    return data


def describe(entry: Entry) -> str:
    """An entry in a few words: its kind, and the id it is about when it names one."""
    about = entry.args.get("id")
    return f"{entry.fn} entry for {about!r}" if isinstance(about, str) else f"{entry.fn} entry"


def store_origin_and_trim(store: LogStore, replica: Replica) -> int:
    """What gc's caller does: the origin first, so that a reader who finds entries missing can
    always find the replica that replaces them; then the trim. Entries deleted."""
    if not store.store_origin(replica):
        return 0
    return store.trim(replica.version)


def path_component(name: str) -> str:
    """``name`` as one component of a znode or file path. Job ids are any non-empty string, so
    anything but a plain name is percent-quoted: a '/' cannot reach into another directory, nor
    can '..' climb out of one, and two different names never share a component."""
    if not name:
        raise ValueError("an empty name cannot be a path component")
    quoted = quote(name, safe="")
    return f"%2E{quoted[1:]}" if quoted.startswith(".") else quoted
