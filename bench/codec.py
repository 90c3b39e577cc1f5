"""How fast each candidate body codec carries a batch of segments, to choose the wire format.

Each codec encodes and then decodes a batch of 100 small dicts like the segments of a word count
(``{"id": 17, "word": "alpha", "count": 3, "ts": 1700000000.5}``), --batches times, best of
--repeat rounds (each round runs every codec in turn, so a busy moment of a shared machine
does not favour one); the figure is segments per second through the whole round trip.

- ``msgpack``: msgpack-python both ways (the wire codec before msgspec was measured).
- ``msgspec``: msgspec both ways, untyped. A ceiling, not a candidate: it writes sets,
  datetimes, UUIDs and decimals as lists and strings that come back as something else.
- ``msgspec_checked``: msgspec after a check, in Python, that every value is JSON-like: what it
  takes to make msgspec's writer safe.
- ``rows``: the codec the frames use (peer.messaging.codec): msgpack-python's exact-type writer,
  msgspec's typed reader.
- ``arrow``: the same rows as one Arrow record batch, as an Arrow IPC stream, read in place.
- ``frame`` and ``frame_arrow``: rows and the Arrow batch inside a real frame
  (peer.messaging.frame encode + decode, header included), so the difference to their bare
  codec is what the header costs.
- ``orjson``, ``json``: JSON (orjson writes NaN and the infinities as ``null``); ``pickle`` is
  only a reference: it must never read bytes from another peer, since unpickling runs code.

Run: .venv/bin/python bench/codec.py [--batches 2000] [--repeat 5]
The last line of output is one JSON document holding every figure.
"""

from __future__ import annotations

import argparse
import json
import pickle
import time
from collections.abc import Callable
from itertools import chain
from typing import Any, NamedTuple

import msgpack
import msgspec
import orjson
import pyarrow as pa

from peer.messaging import codec, frame

BATCH_SIZE = 100
WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")
HEADER = frame.Header(frame.MessageType.BATCH, allocation_version=3, source=1, destination=2,
                      epoch=1, job=1)  # fmt: skip


def batch() -> list[dict[str, Any]]:
    return [
        {"id": i, "word": WORDS[i % len(WORDS)], "count": i % 7, "ts": 1_700_000_000.5 + i}
        for i in range(BATCH_SIZE)
    ]


class Codec(NamedTuple):
    encode: Callable[[Any], bytes]
    decode: Callable[[bytes], Any]
    arrow: bool = False
    """Whether it carries the batch as an Arrow record batch rather than as rows."""


_PLAIN = frozenset({type(None), bool, int, float, str, bytes})


def _checked(segments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The batch, once every segment is a dict of plain values (the check a safe msgspec
    writer needs; nested values would need a walk, which costs more)."""
    if not _PLAIN.issuperset(map(type, chain.from_iterable(map(dict.values, segments)))):
        raise TypeError("a value that is not JSON-like")
    return segments


_ENCODER, _DECODER = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder()

CODECS: dict[str, Codec] = {
    "msgpack": Codec(msgpack.packb, msgpack.unpackb),
    "msgspec": Codec(_ENCODER.encode, _DECODER.decode),
    "msgspec_checked": Codec(lambda v: _ENCODER.encode(_checked(v)), _DECODER.decode),
    "rows": Codec(codec.encode_rows, codec.decode_rows),
    "arrow": Codec(codec.encode_arrow, codec.decode_arrow, arrow=True),
    "frame": Codec(lambda v: frame.encode(HEADER, v), lambda b: frame.decode(b)[1]),
    "frame_arrow": Codec(lambda v: frame.encode(HEADER, v), lambda b: frame.decode(b)[1], True),
    "orjson": Codec(orjson.dumps, orjson.loads),
    "json": Codec(lambda v: json.dumps(v, separators=(",", ":")).encode(), json.loads),
    "pickle": Codec(lambda v: pickle.dumps(v, pickle.HIGHEST_PROTOCOL), pickle.loads),
}


def round_trips(encode: Callable[[Any], bytes], decode: Callable[[bytes], Any],
                value: Any, batches: int) -> float:  # fmt: skip
    start = time.perf_counter()
    for _ in range(batches):
        decode(encode(value))
    return time.perf_counter() - start


def measure(batches: int = 2000, repeat: int = 5) -> dict[str, float]:
    """Segments per second through encode + decode, per codec; each codec is first checked to
    give back exactly the batch it was handed."""
    rows = batch()
    columns = pa.RecordBatch.from_pylist(rows)
    for name, (encode, decode, arrow) in CODECS.items():
        value = columns if arrow else rows
        back = decode(encode(value))
        if not (back.equals(value) if arrow else back == value):
            raise AssertionError(f"{name} does not round-trip the batch")
    best = dict.fromkeys(CODECS, float("inf"))
    for _ in range(repeat):
        for name, (encode, decode, arrow) in CODECS.items():
            seconds = round_trips(encode, decode, columns if arrow else rows, batches)
            best[name] = min(best[name], seconds)
    return {name: round(batches * BATCH_SIZE / seconds) for name, seconds in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    figures = measure(args.batches, args.repeat)
    for name, per_s in figures.items():
        print(f"{name}: {per_s:,.0f} segments/s ({per_s / figures['msgpack']:.2f}x msgpack)")
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
