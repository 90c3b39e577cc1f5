"""The declared schema of a Spark task's or Spark plugin's rows, as data: field names and Spark
type names, checked without starting Spark or loading Arrow, so the log can judge a job alike on
every peer. Flat fields only; peer.job.arrow_schema maps these types to Arrow and back."""

from __future__ import annotations

from collections.abc import Mapping

TYPES: dict[str, str] = {
    "string": "string",
    "varchar": "string",
    "bigint": "bigint",
    "long": "bigint",
    "int": "int",
    "integer": "int",
    "smallint": "smallint",
    "short": "smallint",
    "double": "double",
    "float": "float",
    "real": "float",
    "boolean": "boolean",
    "bool": "boolean",
    "binary": "binary",
    "timestamp": "timestamp",
    "date": "date",
}
"""Spark type names a schema may use (case-insensitive), each to its canonical name."""

Schema = tuple[tuple[str, str], ...]


class SchemaError(ValueError):
    """A schema that cannot be used, or rows that do not fit one; the message names the field."""


def parse(value: object) -> Schema:
    """A declared schema (a mapping, [name, type] pairs, or a DDL string such as
    ``"user string, ts timestamp"``) as ``((field, canonical type), ...)`` in order."""
    if isinstance(value, str):
        pairs = [_ddl_field(part) for part in value.split(",")]
    elif isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, list | tuple) and all(
        isinstance(p, list | tuple) and len(p) == 2 for p in value
    ):
        pairs = [tuple(p) for p in value]
    else:
        raise SchemaError("must be a mapping of field to Spark type, or a DDL string")
    if not pairs:
        raise SchemaError("has no fields")
    seen: set[str] = set()
    schema = []
    for name, kind in pairs:
        if not isinstance(name, str) or not name:
            raise SchemaError(f"field name {name!r} is not a non-empty string")
        if name in seen:
            raise SchemaError(f"field {name!r} appears twice")
        seen.add(name)
        canonical = TYPES.get(kind.lower()) if isinstance(kind, str) else None
        if canonical is None:
            known = ", ".join(sorted(set(TYPES.values())))
            raise SchemaError(f"field {name!r} has type {kind!r}; known types: {known}")
        schema.append((name, canonical))
    return tuple(schema)


def _ddl_field(part: str) -> tuple[str, str]:
    words = part.split()
    if len(words) != 2:
        raise SchemaError(f"{part.strip()!r} is not 'name type'")
    return words[0].strip("`"), words[1]
