"""The log in ZooKeeper, through kazoo.

Layout under ``/onyx/<tenancy>``: ``log/entry-NNNNNNNNNN``, persistent sequential znodes whose
sequence number is the entry's position (readers do not assume the numbers are contiguous);
``origin``, the compressed replica the last gc stored, whose version the ``log`` znode's own
data holds too (written in one transaction with it); ``pulse/<group>``, one ephemeral
znode per peer group, whose disappearance is how a group's death is seen (its data, JSON, says
where the group runs and listens: ``host``, ``pid``, ``site``); and
``checkpoints/<job>``, each job's commit record, written only by compare-and-set on the znode's
version (made on first use, so a tenancy created before checkpoints existed needs nothing).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import socket
import threading
import zlib
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from peer.log.entry import Entry
from peer.log.replica import EMPTY_VERSION, Replica
from peer.log.store import StoreError, StoreUnreachable, encoded, path_component

ROOT = "/onyx"
"""The parent of every tenancy's znodes."""
ENTRY_PREFIX = "entry-"
TENANCY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def reconnecting(session_timeout: float) -> KazooRetry:
    """How a session whose server went away tries to get one back: for ever, its back-off never
    past an eighth of the session timeout (and 2 s). A restarted server keeps the session only
    for one timeout after it starts, so an attempt must land within it; kazoo's own back-off
    doubles to an hour, and after a 3 s outage its next attempt could come too late."""
    return KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_jitter=0.4,
                      max_delay=min(2.0, session_timeout / 8))  # fmt: skip


HANDSHAKE_S = 2.0
"""About the longest a client waits for a server to answer its handshake before it tries again."""


def handshaking(hosts: str, session_timeout: float) -> str:
    """``hosts`` with each server named often enough that a handshake waits about HANDSHAKE_S:
    kazoo waits for a server's answer for the session timeout over the number of servers named,
    and a restarting server that has taken the connection but not yet loaded its data would
    hold a lone server's client for the whole session, which the server then expires. Naming a
    server again changes nothing else: the client tries the names in turn."""
    servers, slash, chroot = hosts.partition("/")
    names = [name for name in servers.split(",") if name]
    times = max(1, math.ceil(session_timeout / HANDSHAKE_S / max(len(names), 1)))
    return ",".join(name for name in names for _ in range(times)) + slash + chroot


def _discard(client: KazooClient) -> None:
    with contextlib.suppress(Exception):
        client.stop()
        client.close()


def tenancy_root(tenancy: str) -> str:
    if not TENANCY_PATTERN.match(tenancy):
        raise StoreError(
            f"tenancy {tenancy!r} is not a valid name (letters, digits, '_', '.', '-')"
        )
    return f"{ROOT}/{tenancy}"


class ZooKeeperStore:
    """One ZooKeeper session for one tenancy. ``create`` makes the tenancy's znodes; without it
    a tenancy that does not exist is an error, so a typo is not silently an empty cluster.

    With ``auth`` (``USER:PASSWORD``) the session authenticates with ZooKeeper's digest scheme
    and every znode it creates carries that user's ACL, so where an operator protected /onyx
    (roles/zookeeper) only holders of the tenancy's credentials read or write its log: submit
    jobs, ship code, join the ring."""

    def __init__(
        self,
        hosts: str,
        tenancy: str,
        *,
        session_timeout: float = 10.0,
        connect_timeout: float = 10.0,
        create: bool = False,
        auth: str | None = None,
        watch_log: bool = True,
    ) -> None:
        """Without ``watch_log`` nothing watches the log directory: a reader that learns of
        new entries otherwise (peer.log.epidemic) reads them by position, and ``on_append``
        only hears of reconnections."""
        self.watch_log = watch_log
        self.hosts, self.tenancy = hosts, tenancy
        self.auth = auth
        self.root = tenancy_root(tenancy)
        self.log_path, self.pulse_path = f"{self.root}/log", f"{self.root}/pulse"
        self.origin_path = f"{self.root}/origin"
        self.checkpoints_path = f"{self.root}/checkpoints"
        self.lost_callbacks: list[Callable[[], None]] = []
        self.append_callbacks: list[Callable[[], None]] = []
        self.closing = False
        self.client = self._connect(session_timeout, connect_timeout)
        if create:
            # /onyx is shared by every tenancy: a client never puts its own ACL on it (an
            # operator may, roles/zookeeper); the tenancy's own znodes get this session's.
            self._guard(self.client.ensure_path, ROOT, acl=OPEN_ACL_UNSAFE)
            self._guard(self.client.ensure_path, self.log_path)
            self._guard(self.client.ensure_path, self.pulse_path)
        elif self._guard(self.client.exists, self.log_path) is None:
            self.client.stop()
            self.client.close()
            raise StoreError(f"no tenancy {tenancy!r} at ZooKeeper {hosts} ({self.root} is absent)")

    def _connect(self, session_timeout: float, connect_timeout: float) -> KazooClient:
        digest = _digest(self.auth)
        try:
            retry = KazooRetry(max_tries=-1, max_delay=1.0, deadline=session_timeout)
            client = KazooClient(
                hosts=handshaking(self.hosts, session_timeout), timeout=session_timeout,
                command_retry=retry,
                connection_retry=reconnecting(session_timeout), **digest,
            )  # fmt: skip
        except ValueError as e:
            raise StoreError(f"bad ZooKeeper address {self.hosts!r}: {e}") from None
        client.add_listener(self._state_changed)
        if not client.start_async().wait(connect_timeout) or not client.connected:
            # kazoo's own stop waits for the attempt in flight, which a server that takes the
            # connection and never answers holds for the whole session timeout: stop it aside.
            threading.Thread(target=_discard, args=(client,), daemon=True).start()
            raise StoreUnreachable(
                f"cannot reach ZooKeeper at {self.hosts} within {connect_timeout:g} s"
            )
        return client

    @property
    def connected(self) -> bool:
        """Whether the session has a server right now."""
        return bool(self.client.connected)

    def _state_changed(self, state: str) -> None:
        """On a reconnection, entries written meanwhile may be there to read (a reader skips
        the log while there is no server); when the session is lost, say so."""
        if self.closing:
            return
        if state == KazooState.CONNECTED:
            callbacks = self.append_callbacks
        elif state == KazooState.LOST:
            callbacks = self.lost_callbacks
        else:
            return
        for callback in list(callbacks):
            callback()

    def _guard(self, operation: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``operation`` with kazoo's retries for a passing disconnection; what still fails
        (an expired session, a server gone for longer than the session) is a StoreError."""
        try:
            return self.client.retry(operation, *args, **kwargs)
        except (NoNodeError, NodeExistsError, BadVersionError):
            raise
        except NoAuthError:
            who = "without credentials" if self.auth is None else "with the credentials given"
            raise StoreError(
                f"ZooKeeper at {self.hosts} refused tenancy {self.tenancy!r} {who}: give the "
                "tenancy's USER:PASSWORD with --zookeeper-auth"
            ) from None
        except KazooException as e:
            raise StoreUnreachable(
                f"ZooKeeper at {self.hosts} failed: {type(e).__name__} {e}"
            ) from e

    def _entry_path(self, position: int) -> str:
        return f"{self.log_path}/{ENTRY_PREFIX}{position:010d}"

    def append(self, entry: Entry) -> int:
        path = self._guard(
            self.client.create, f"{self.log_path}/{ENTRY_PREFIX}", encoded(entry), sequence=True
        )
        return int(path.rsplit(ENTRY_PREFIX, 1)[1])

    def _positions(self) -> list[int]:
        names = self.client.get_children(self.log_path)
        return sorted(int(n[len(ENTRY_PREFIX) :]) for n in names if n.startswith(ENTRY_PREFIX))

    def tail(self) -> int:
        return max(self._guard(self._positions), default=EMPTY_VERSION)

    def read(self, after: int) -> list[Entry]:
        return self._guard(self._read, after)

    def _read(self, after: int) -> list[Entry]:
        pending = [
            (p, self.client.get_async(self._entry_path(p))) for p in self._positions() if p > after
        ]
        entries = []
        for position, result in pending:
            try:
                data, _ = result.get()
            except NoNodeError:
                break
            entries.append(Entry.decode(data, position))
        return entries

    def read_at(self, position: int) -> Entry | None:
        try:
            data, _ = self._guard(self.client.get, self._entry_path(position))
        except NoNodeError:
            return None
        return Entry.decode(data, position)

    def on_append(self, callback: Callable[[], None]) -> None:
        self.append_callbacks.append(callback)
        if self.watch_log:
            ChildrenWatch(self.client, self.log_path, lambda _children: callback())

    def origin(self) -> Replica | None:
        try:
            data, _ = self._guard(self.client.get, self.origin_path)
        except NoNodeError:
            return None
        return _decode_origin(data)

    def store_origin(self, replica: Replica) -> bool:
        return self._guard(self._store_origin, replica)

    def origin_version(self) -> int:
        """The log directory's data: a get of that one znode, never a listing of its
        children (a tenancy whose last gc predates it reads as having no origin)."""
        data, _ = self._guard(self.client.get, self.log_path)
        return int(data) if data.isdigit() else EMPTY_VERSION

    def _store_origin(self, replica: Replica) -> bool:
        """Compare-and-set, the origin and its version in one transaction."""
        data = zlib.compress(json.dumps({"replica": replica.to_json()}).encode())
        version = str(replica.version).encode()
        while True:
            transaction = self.client.transaction()
            try:
                current, stat = self.client.get(self.origin_path)
            except NoNodeError:
                transaction.create(self.origin_path, data)
            else:
                if _decode_origin(current).version >= replica.version:
                    return False
                transaction.set_data(self.origin_path, data, version=stat.version)
            transaction.set_data(self.log_path, version)
            failed = [r for r in transaction.commit() if isinstance(r, Exception)]
            if not failed:
                return True
            if any(isinstance(r, NodeExistsError | BadVersionError) for r in failed):
                continue  # another gc stored an origin meanwhile: compare again
            rolled_back = RolledBackError | RuntimeInconsistency  # the ops around the failed one
            raise next((r for r in failed if not isinstance(r, rolled_back)), failed[0])

    def trim(self, before: int) -> int:
        return self._guard(self._trim, before)

    def _trim(self, before: int) -> int:
        pending = [
            self.client.delete_async(self._entry_path(p)) for p in self._positions() if p < before
        ]
        deleted = 0
        for result in pending:
            try:
                result.get()
                deleted += 1
            except NoNodeError:
                pass
        return deleted

    def register_pulse(self, group: str, site: str | None = None) -> None:
        about: dict[str, object] = {"host": socket.gethostname(), "pid": os.getpid()}
        if site is not None:
            about["site"] = site
        data = json.dumps(about).encode()
        self._guard(self.client.create, f"{self.pulse_path}/{group}", data, ephemeral=True)

    def pulse_sites(self) -> dict[str, str]:
        return self._guard(self._pulse_sites)

    def _pulse_sites(self) -> dict[str, str]:
        """A pulse that went meanwhile, or whose data is not ours, is left out."""
        pending = [
            (g, self.client.get_async(f"{self.pulse_path}/{g}"))
            for g in sorted(self.client.get_children(self.pulse_path))
        ]
        sites = {}
        for group, result in pending:
            try:
                site = json.loads(result.get()[0]).get("site")
            except (NoNodeError, ValueError, AttributeError):
                continue
            if isinstance(site, str):
                sites[group] = site
        return sites

    def remove_pulse(self, group: str) -> None:
        with contextlib.suppress(NoNodeError):
            self._guard(self.client.delete, f"{self.pulse_path}/{group}")

    def pulse_exists(self, group: str) -> bool:
        return self._guard(self.client.exists, f"{self.pulse_path}/{group}") is not None

    def watch_pulse(self, group: str, on_gone: Callable[[str], None]) -> Callable[[], None]:
        active = [True]

        def changed(_data: bytes | None, stat: object) -> bool:
            if not active[0]:
                return False
            if stat is None:
                active[0] = False
                on_gone(group)
                return False
            return True

        DataWatch(self.client, f"{self.pulse_path}/{group}", changed)
        return lambda: active.__setitem__(0, False)

    def on_session_lost(self, callback: Callable[[], None]) -> None:
        self.lost_callbacks.append(callback)

    def _commit_path(self, job: str) -> str:
        return f"{self.checkpoints_path}/{path_component(job)}"

    def read_commit(self, job: str) -> tuple[bytes | None, int]:
        try:
            data, stat = self._guard(self.client.get, self._commit_path(job))
        except NoNodeError:
            return None, -1
        return data, stat.version

    def write_commit(self, job: str, data: bytes, expected: int) -> int | None:
        path = self._commit_path(job)
        try:
            if expected == -1:
                self._guard(self.client.create, path, data, makepath=True)
                return 0
            return self._guard(self.client.set, path, data, version=expected).version
        except (NodeExistsError, BadVersionError, NoNodeError):
            return None

    def delete_commit(self, job: str) -> None:
        with contextlib.suppress(NoNodeError):
            self._guard(self.client.delete, self._commit_path(job))

    def close(self) -> None:
        self.closing = True
        self.client.stop()
        self.client.close()


def _digest(auth: str | None) -> dict[str, Any]:
    """KazooClient's settings for digest authentication as ``auth`` (``USER:PASSWORD``)."""
    if auth is None:
        return {}
    user, _, password = auth.partition(":")
    if not user or not password:
        raise StoreError("ZooKeeper credentials must be USER:PASSWORD")
    return {
        "auth_data": [("digest", auth)],
        "default_acl": [make_digest_acl(user, password, all=True)],
    }


def _decode_origin(data: bytes) -> Replica:
    return Replica.from_json(json.loads(zlib.decompress(data))["replica"])
