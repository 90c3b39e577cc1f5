"""The bodies of frames: batches of rows as msgpack, Arrow record batches as Arrow IPC.

Rows (format 0) are msgpack, written by msgpack-python with exact types and read by msgspec:
bench/codec.py chose the pair, which carries a batch of 100 small dicts 1.7 to 2.2 times as fast
as msgpack-python both ways (two runs on the shared 2-core machine). msgspec alone is 2.5 to 3.1
times as fast, but it also writes sets, datetimes, UUIDs, decimals and dataclasses, as lists,
strings and maps that come back as something else (a timezone-aware datetime even as an
extension type the reader refuses); checking every value's type in Python first brings it down
to 1.4 to 1.8 times, below this pair, since msgpack-python's exact-type writer refuses them
itself. msgspec reads about twice as fast as msgpack-python and checks, in its typed decoder,
that every dict key down to ``TYPED_DEPTH`` is a string; a body that does not fit that type
(bytes, deeper nesting, a key that is not a string, an extension) is read again untyped and
walked in Python, which refuses what the typed decoder would not take.

So exactly the JSON-like values come back: tuples as lists, bytes as bytes, NaN and the
infinities as themselves, integers from -2**63 to 2**64 - 1. Nesting is limited to
``MAX_DEPTH``; no extension types travel. What cannot travel is refused naming where it is:
``segment 3, field 'a.b': value of type set cannot travel``. Dict keys must be strings (integer
keys would let a peer build a dict of colliding hashes): the writer does not look at keys
(that would cost as much as checking values), the reader refuses the body, naming the field,
and the data plane fails the job the frame was for.

Arrow batches (format 1) are one ``pyarrow.RecordBatch`` in an Arrow IPC stream (the same 100
rows as four columns: 3.0 to 3.7 times msgpack-python), read without copying from the frame
that holds them (the body starts 32 bytes into the frame, aligned) and validated before use, so
a malformed stream is refused instead of read out of bounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from typing import Any, NoReturn

import msgpack
import msgspec
import pyarrow as pa

MAX_DEPTH = 1024
"""The most containers a value may be nested in, the batch's own list included: what
msgpack-python writes."""
TYPED_DEPTH = 4
"""How deep, below a segment, msgspec's typed decoder checks dict keys; bodies nested deeper
are walked in Python."""


class Format(IntEnum):
    """How a frame's body is encoded (the header's third byte)."""

    ROWS = 0
    ARROW = 1


class CodecError(ValueError):
    """A value that cannot travel, or a body that does not read back as one."""


Scalar = None | bool | int | float | str
"""What msgspec's typed decoder checks below a segment: bytes cannot be in a union with str
there, so a body with bytes is read untyped."""

ValuePath = tuple[int | str, ...]
"""Where a value is in a batch: its segment's index, then the dict keys and list indices down
to it."""


def _typed(depth: int) -> Any:
    value: Any = Scalar
    for _ in range(depth):
        value = Scalar | list[value] | dict[str, value]
    return value


_TYPED = msgspec.msgpack.Decoder(list[dict[str, _typed(TYPED_DEPTH)]])  # type: ignore[misc]


def _refuse_extension(code: int, data: memoryview) -> NoReturn:
    raise CodecError(f"msgpack extension type {code} is not a segment value")


_UNTYPED = msgspec.msgpack.Decoder(ext_hook=_refuse_extension)
EMPTY = msgpack.packb([])
"""The body of a message that carries nothing."""


def encode_rows(segments: Sequence[Any]) -> bytes:
    """The msgpack of ``segments`` (a list or tuple of JSON-like values); a CodecError naming
    the first value that cannot travel."""
    try:
        return msgpack.Packer(strict_types=True, default=_plain).pack(segments)
    except (TypeError, ValueError, OverflowError) as e:
        raise CodecError(_refusal(segments, e)) from e


def _plain(value: Any) -> Any:
    """What msgpack's exact-type writer does not take itself: tuples, and subclasses of the
    JSON-like types (an IntEnum, an OrderedDict), as their plain type."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, (float, bytes)):
        return type(value).__mro__[-2](value)
    raise TypeError(f"value of type {type(value).__name__} cannot travel")


def decode_rows(body: bytes | memoryview) -> list[Any]:
    """The list a rows body holds; a CodecError for anything encode_rows would not write."""
    try:
        return _TYPED.decode(body)
    except msgspec.ValidationError:
        pass
    except (ValueError, RecursionError) as e:
        raise CodecError(f"body does not decode: {e}") from e
    try:
        value = _UNTYPED.decode(body)
    except (ValueError, RecursionError) as e:
        raise CodecError(f"body does not decode: {e}") from e
    if not isinstance(value, list):
        raise CodecError(f"body is a {type(value).__name__}, not a list of segments")
    problem = _problem(value, reading=True)
    if problem is not None:
        raise CodecError(problem)
    return value


def encode_arrow(batch: pa.RecordBatch, prefix: bytes = b"") -> bytes:
    """``prefix`` (a frame's header) and the Arrow IPC stream of ``batch``, written once."""
    sink = pa.BufferOutputStream()
    sink.write(prefix)
    try:
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
    except (pa.ArrowException, TypeError) as e:
        raise CodecError(f"an Arrow batch cannot travel: {e}") from e
    return sink.getvalue().to_pybytes()


def decode_arrow(body: bytes | memoryview) -> pa.RecordBatch:
    """The one record batch of an Arrow IPC stream, its buffers pointing into ``body``."""
    try:
        reader = pa.ipc.open_stream(pa.py_buffer(body))
        batch = reader.read_next_batch()
        try:
            reader.read_next_batch()
        except StopIteration:
            batch.validate(full=True)
            return batch
    except StopIteration:
        raise CodecError("an Arrow body holds no record batch") from None
    except (pa.ArrowException, OSError, ValueError) as e:
        raise CodecError(f"Arrow body does not read: {e}") from e
    raise CodecError("an Arrow body holds more than one record batch")


def _refusal(segments: Sequence[Any], error: Exception) -> str:
    """Where in ``segments`` the value msgpack refused is, and why."""
    problem = _problem(segments, reading=False)
    return problem or f"segments cannot travel: {type(error).__name__}: {error}"


def _problem(segments: Sequence[Any], *, reading: bool) -> str | None:
    """The first value in ``segments`` that cannot travel, by where it is; walked without
    recursion, so any depth is answered. ``reading`` says the values came from msgspec's
    untyped decoder (which gives datetimes for msgpack timestamps)."""
    stack: list[tuple[Any, int, ValuePath]] = [
        (v, 2, (i,)) for i, v in reversed(list(enumerate(segments)))
    ]
    while stack:
        value, depth, path = stack.pop()
        reason = _reason(value, reading)
        if reason is None and isinstance(value, dict):
            reason = next((f"key {k!r} of type {type(k).__name__}: dict keys must be strings"
                           for k in value if type(k) is not str), None)  # fmt: skip
        if reason is None and depth > MAX_DEPTH and isinstance(value, (list, tuple, dict)):
            reason = f"nested in more than {MAX_DEPTH} lists and dicts"
        if reason is not None:
            return f"{_where(path)}: {reason}"
        if isinstance(value, dict):
            stack.extend((v, depth + 1, (*path, k)) for k, v in reversed(value.items()))
        elif isinstance(value, (list, tuple)):
            stack.extend((v, depth + 1, (*path, i)) for i, v in reversed(list(enumerate(value))))
    return None


def _reason(value: Any, reading: bool) -> str | None:
    """Why this value cannot travel, not looking inside lists and dicts; None if it can."""
    if value is None or isinstance(value, (bool, float, bytes, list, dict)):
        return None
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return "a string with a lone surrogate cannot travel (it is not UTF-8)"
        return None
    if isinstance(value, int):
        return None if -(2**63) <= value < 2**64 else f"integer {value} does not fit in 64 bits"
    if not reading and isinstance(value, (tuple, bytearray, memoryview)):
        return None
    if reading:
        return f"a {type(value).__name__} (a msgpack extension) is not a segment value"
    return f"value of type {type(value).__name__} cannot travel"


def _where(path: ValuePath) -> str:
    """``segment 3, field 'a.b[2]'`` for the path (3, 'a', 'b', 2)."""
    field = ""
    for step in path[1:]:
        field += f"[{step}]" if isinstance(step, int) else (f".{step}" if field else step)
    if len(field) > 80:
        field = field[:80] + "..."
    return f"segment {path[0]}" + (f", field {field!r}" if field else "")
