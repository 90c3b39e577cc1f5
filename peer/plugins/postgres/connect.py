"""How a PostgreSQL plugin reaches its server: the connection params every PostgreSQL plugin
shares, checked when the job is submitted, and a connection made from them whose failure names
the server (host:port, never a password) and says why.

A secret is never written in a job, since a job is kept in the log: the job names it,
``secrets: {"password": "orders_db"}``, and each member reads its value from its own environment,
``ONYX_SECRET_orders_db`` (peer.plugins.params). Any libpq keyword may be given so
(``password``, ``sslpassword``...); a dsn holding a password is refused. Messages never show
one.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

import msgspec
import psycopg
from psycopg.conninfo import conninfo_to_dict

from peer.job.spec import Task
from peer.plugins import PluginError, error, where
from peer.plugins.params import check_secret_names, secret_values

_KEYWORD = re.compile(r"[a-z_]{1,64}")
_PASSING = ("the database system is", "too many clients", "remaining connection slots")
"""What a server says when it refuses a connection for now (starting, stopping, full), not for
good: a connection refused so may be tried again."""


class Server(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """Where a PostgreSQL server is and how to log in: the params a PostgreSQL plugin starts
    with (its own params subclass this)."""

    dsn: str
    """A libpq connection string or URI, ``postgresql://user@host:5432/db``."""
    secrets: dict[str, str] = {}
    """libpq keywords whose values are secrets, each naming the member's environment variable
    ``ONYX_SECRET_<name>`` that holds it: ``{"password": "orders_db"}``."""
    timeout: float = 10.0
    """Seconds a connection may take, and a plugin's start may wait for its server."""

    def __post_init__(self) -> None:
        try:
            given = conninfo_to_dict(self.dsn)
        except psycopg.ProgrammingError as e:
            raise ValueError(f"dsn is not a libpq connection string or URI: {e}") from None
        if "password" in given:
            raise ValueError(
                "dsn holds a password, which the job must not carry (the log keeps "
                "it): name it in secrets, read from each member's environment"
            )
        for key in sorted(self.secrets):
            if not _KEYWORD.fullmatch(key):
                raise ValueError(f"secrets: {key!r} is not a libpq keyword (password...)")
        check_secret_names(self.secrets)
        if not 0 < self.timeout <= 3600:
            raise ValueError(f"timeout must be in (0, 3600] seconds, got {self.timeout!r}")


class Unreachable(PluginError):
    """The server could not be reached, or refused a connection for now: worth trying again,
    unlike a refusal for good (a wrong password, a database that does not exist)."""


def address(server: Server) -> str:
    """The server as messages name it, ``host:port``: never a password."""
    fields = conninfo_to_dict(server.dsn)
    host = fields.get("host") or fields.get("hostaddr") or os.environ.get("PGHOST") or "localhost"
    port = fields.get("port") or os.environ.get("PGPORT") or "5432"
    return f"{host}:{port}"


def connect(task: Task, server: Server, **kwargs: Any) -> psycopg.Connection[Any]:
    """A connection to ``server`` (``kwargs`` go to ``psycopg.connect``: ``autocommit``...). One
    it could not make is a PluginError naming the server and why: ``Unreachable`` when the
    server may yet answer, a plain PluginError when it refused the login for good."""
    values = {**secret_values(task, server.secrets), **kwargs}
    if "connect_timeout" not in conninfo_to_dict(server.dsn):
        values.setdefault("connect_timeout", max(2, math.ceil(server.timeout)))
    values.setdefault("application_name", f"onyx {task.name}"[:63])
    try:
        return psycopg.connect(server.dsn, **values)
    except psycopg.OperationalError as e:
        why = reason(e)
        message = f"cannot connect to PostgreSQL at {address(server)}: {why}"
        refused = "FATAL:" in str(e) and not any(p in why for p in _PASSING)
        if refused:
            raise error(task, message) from None
        raise Unreachable(f"{where(task)}: {message}") from None


def reason(e: psycopg.Error) -> str:
    """What the server or libpq said, in one line: a connection failure without libpq's
    ``connection to server at ... failed:`` preamble, a server error as its primary message."""
    primary = e.diag.message_primary if e.diag is not None else None
    if primary:
        return primary
    text = str(e).strip()
    first = text.splitlines()[0] if text else type(e).__name__
    said = first.rsplit(" failed: ", 1)[-1]
    return said.removeprefix("FATAL:").strip() or first


def transient(e: BaseException) -> bool:
    """Whether ``e`` may pass if tried again: the server out of reach or the connection lost
    (class 08), the server shutting down or starting (57P0x), a statement cancelled (57014),
    or the server short of a resource (class 53)."""
    if isinstance(e, Unreachable):
        return True
    if not isinstance(e, psycopg.OperationalError | psycopg.InterfaceError):
        return False
    state = e.sqlstate if isinstance(e, psycopg.Error) else None
    return state is None or state[:2] in ("08", "53", "57")
