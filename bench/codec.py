"""How fast each candidate body codec carries a batch of segments, to choose the wire format.

Each codec encodes and then decodes a batch of 100 small dicts like the segments of a word count
(``{"id": 17, "word": "alpha", "count": 3, "ts": 1700000000.5}``), --batches times, best of
--repeat runs; the figure is segments per second through the whole round trip. ``frame`` is the
chosen codec inside a real frame (peer.messaging.frame encode + decode, header included), so the
difference to its bare codec is what the header costs. pickle is only a reference: it must never
read bytes from another peer, since unpickling runs arbitrary code.

Run: .venv/bin/python bench/codec.py [--batches 2000] [--repeat 3]
The last line of output is one JSON document holding every figure.
"""

from __future__ import annotations

import argparse
import json
import pickle
import time
from collections.abc import Callable
from typing import Any

import msgpack
import orjson

from peer.messaging import frame

BATCH_SIZE = 100
WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")
HEADER = frame.Header(frame.MessageType.BATCH, allocation_version=3, source=1, destination=2,
                      epoch=1, job=1)  # fmt: skip


def batch() -> list[dict[str, Any]]:
    return [
        {"id": i, "word": WORDS[i % len(WORDS)], "count": i % 7, "ts": 1_700_000_000.5 + i}
        for i in range(BATCH_SIZE)
    ]


CODECS: dict[str, tuple[Callable[[Any], bytes], Callable[[bytes], Any]]] = {
    "msgpack": (msgpack.packb, msgpack.unpackb),
    "orjson": (orjson.dumps, orjson.loads),
    "json": (lambda v: json.dumps(v, separators=(",", ":")).encode(), json.loads),
    "pickle": (lambda v: pickle.dumps(v, pickle.HIGHEST_PROTOCOL), pickle.loads),
    "frame": (lambda v: frame.encode(HEADER, v), lambda b: frame.decode(b)[1]),
}


def round_trips(encode: Callable[[Any], bytes], decode: Callable[[bytes], Any],
                segments: list[dict[str, Any]], batches: int) -> float:  # fmt: skip
    start = time.perf_counter()
    for _ in range(batches):
        decode(encode(segments))
    return time.perf_counter() - start


def measure(batches: int = 2000, repeat: int = 3) -> dict[str, float]:
    """Segments per second through encode + decode, per codec; each codec is first checked to
    give back exactly the batch it was handed."""
    segments = batch()
    figures = {}
    for name, (encode, decode) in CODECS.items():
        if decode(encode(segments)) != segments:
            raise AssertionError(f"{name} does not round-trip the batch")
        seconds = min(round_trips(encode, decode, segments, batches) for _ in range(repeat))
        figures[name] = round(batches * BATCH_SIZE / seconds)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    figures = measure(args.batches, args.repeat)
    for name, per_s in figures.items():
        print(f"{name}: {per_s:,.0f} segments/s")
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
