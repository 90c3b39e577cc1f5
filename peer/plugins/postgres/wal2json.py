"""wal2json's changes as segments: LSNs, the add-tables filter, a change's segment, and a
snapshot row's values written as wal2json writes them, so that a row reads the same from the
snapshot and from the changes."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

NUMBERS = frozenset({20, 21, 23, 26, 700, 701, 1700})
"""The types wal2json writes as JSON numbers: int8, int2, int4, oid, float4, float8, numeric."""
BOOL, BYTEA = 16, 17
_OPS = {"I": "insert", "U": "update", "D": "delete", "T": "truncate"}
LSN_TEXT = re.compile(r"[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}")
"""An LSN as the server writes it."""


def lsn(text: str) -> int:
    """An LSN's text form, ``16/B374D848``, as the number it stands for."""
    high, low = text.split("/")
    return int(high, 16) << 32 | int(low, 16)


def lsn_text(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def add_tables(tables: list[str]) -> str:
    """wal2json's ``add-tables`` option: the tables, a backslash before each character it would
    read as a separator, an escape or a wildcard."""

    def escaped(name: str) -> str:
        return "".join("\\" + c if c in ",.\\*" or c.isspace() else c for c in name)

    return ",".join(".".join(escaped(part) for part in t.split(".", 1)) for t in tables)


def segment(change: Mapping[str, Any]) -> dict[str, Any] | None:
    """The segment a wal2json (format 2) change makes; None for what is not a row change."""
    op = _OPS.get(change.get("action", ""))
    if op is None:
        return None
    row = _values(change["columns"]) if op in ("insert", "update") else None
    before = _values(change.get("identity", [])) if op in ("update", "delete") else None
    return {"op": op, "table": f"{change['schema']}.{change['table']}", "lsn": change.get("lsn"),
            "row": row, "before": before}  # fmt: skip


def _values(columns: list[Mapping[str, Any]]) -> dict[str, Any]:
    return {c["name"]: c.get("value") for c in columns}


def snapshot_value(type_oid: int, text: str | None) -> Any:
    """A column's value from its type's text output, as wal2json would write it in a change."""
    if text is None:
        return None
    if type_oid in NUMBERS:
        if text.lstrip("+-")[:3].lower() in ("nan", "inf"):
            return None
        return json.loads(text)
    if type_oid == BOOL:
        return text == "t"
    if type_oid == BYTEA:
        return text[2:]
    return text


def key_text(type_oid: int, value: Any) -> str | None:
    """A key value from a change, as text its type's input reads (the inverse of wal2json's)."""
    if value is None or isinstance(value, str):
        return ("\\x" + value) if type_oid == BYTEA and value is not None else value
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)
