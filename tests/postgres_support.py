"""What the PostgreSQL tests share: a test's view of a server, with tables and replication
slots of its own, dropped at the end so that no slot holds the server's WAL back."""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg

from peer.local_servers import Postgres
from peer.plugins.postgres.wal2json import lsn
from tests.support import wait_for

SECRET = "CDC_TEST"
"""The secret's name the tests' params give for the password (``ONYX_SECRET_CDC_TEST``)."""


class Database:
    """A test's view of a server: tables and slots of its own (the slots dropped at the end,
    so that none holds WAL back), changes made in transactions, and the input's params."""

    def __init__(self, server: Postgres) -> None:
        self.server = server
        self.conn = psycopg.connect(server.dsn, autocommit=True)
        self.slots: list[str] = []
        self.tables: list[str] = []

    @property
    def dsn(self) -> str:
        """The server's dsn without its password, which comes from a secret."""
        return self.server.dsn.replace(f":{Postgres.PASSWORD}@", "@")

    def table(self, columns: str = "id int PRIMARY KEY, v text") -> str:
        name = f"public.t_{uuid.uuid4().hex[:10]}"
        self.conn.execute(f"CREATE TABLE {name} ({columns})")
        self.tables.append(name)
        return name

    def slot(self, made: bool = True) -> str:
        name = f"s_{uuid.uuid4().hex[:12]}"
        self.slots.append(name)
        if made:
            self.conn.execute("SELECT pg_create_logical_replication_slot(%s, 'wal2json')", (name,))
        return name

    def run(self, *statements: str) -> None:
        """The statements in one transaction."""
        with self.conn.transaction():
            for statement in statements:
                self.conn.execute(statement)

    def confirmed(self, slot: str) -> int:
        found = self.conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                                  "WHERE slot_name = %s", (slot,)).fetchone()  # fmt: skip
        assert found is not None, f"slot {slot} is gone"
        return lsn(found[0])

    def rows(self, table: str) -> dict[Any, dict[str, Any]]:
        found = self.conn.execute(f"SELECT row_to_json(t)::text FROM {table} t").fetchall()
        return {json.loads(r)["id"]: json.loads(r) for (r,) in found}

    def params(self, slot: str, tables: list[str], **more: Any) -> dict[str, Any]:
        return {"dsn": self.dsn, "secrets": {"password": SECRET}, "slot": slot,
                "tables": tables, **more}  # fmt: skip

    def close(self) -> None:
        for slot in self.slots:
            wait_for(lambda s=slot: self._dropped(s), 30, f"slot {slot} to be dropped")
        for table in self.tables:
            self.conn.execute(f"DROP TABLE IF EXISTS {table}")
        self.conn.close()

    def _dropped(self, slot: str) -> bool:
        """Dropped, or gone: a reader closing may hold it a moment longer."""
        try:
            self.conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                              "pg_replication_slots WHERE slot_name = %s", (slot,))  # fmt: skip
        except psycopg.errors.ObjectInUse:
            return False
        return True
