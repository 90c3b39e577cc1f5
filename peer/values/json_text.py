"""Segments as compact JSON text, as the JSON-lines, Kafka and NATS sinks write them: UTF-8 as
it is, no spaces, and no NaN or infinity (which JSON does not have: such a segment is refused,
not written as something else).

The standard library's C encoder, made once: ``json.JSONEncoder.encode`` makes it anew for each
value, which costs more than encoding a small segment. Without the encoder's record of the
containers it is in (it would outlive a failed call), a segment that contains itself fails on
the depth of its nesting, as a RecursionError, instead of being named circular.
"""

from __future__ import annotations

from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any


def _unencodable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_encode = c_make_encoder(None, _unencodable, encode_basestring, None, ":", ",", False, False, False)


def json_text(value: Any) -> str:
    """``value`` as compact JSON; a TypeError or ValueError (or RecursionError) says why it
    cannot be."""
    return "".join(_encode(value, 0))
