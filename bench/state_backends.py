"""Which embedded store the disk backend of keyed state uses: RocksDB (rocksdict) against LMDB
(lmdb), measured on the access a keyed running count makes.

Each contender runs in a process of its own (so that its peak resident memory is its own):
--keys entries put once (the state filled), then --events read-modify-writes of keys spread
evenly over them (event i's key as in bench/state_fns.py), each value a small msgpack entry as
peer.state.backends stores it, keys laid out as it lays them out; no write-ahead log and no
sync on either (the checkpoint makes state durable). Figures: operations per second of the
read-modify-writes, the process's peak resident memory, and the bytes on disk after the run
(blocks allocated: LMDB's map file is sparse), each contender's runs (--repeat) all shown.
Both run with their defaults otherwise (RocksDB's own caches; LMDB's pages mapped into
the process, so those it touched count as resident).

Run: .venv-bench/bin/python bench/state_backends.py [--keys 2000000] [--events 2000000]
     [--repeat 2]
The last line of output is one JSON document holding every figure.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgpack

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.state_fns import key_of  # noqa: E402

STORES = ("rocksdict", "lmdb")


def key(i: int) -> bytes:
    return struct.pack(">H", i % 128) + b"count\0" + str(i).encode()


def run_rocksdict(path: Path, keys: int, events: int) -> float:
    from rocksdict import Options, Rdict, WriteOptions  # noqa: PLC0415

    options = Options(raw_mode=True)
    options.create_if_missing(True)
    db = Rdict(str(path), options)
    unlogged = WriteOptions()
    unlogged.disable_wal = True
    db.set_write_options(unlogged)
    for i in range(keys):
        db[key(i)] = msgpack.packb([i, 0, float("inf")])
    start = time.perf_counter()
    for i in range(events):
        k = key(key_of(i, keys))
        entry = msgpack.unpackb(db[k])
        entry[1] += 1
        db[k] = msgpack.packb(entry)
    took = time.perf_counter() - start
    db.close()
    return events / took


def run_lmdb(path: Path, keys: int, events: int) -> float:
    import lmdb  # noqa: PLC0415

    env = lmdb.open(str(path), map_size=64 << 30, sync=False, metasync=False, writemap=True)
    with env.begin(write=True) as txn:
        for i in range(keys):
            txn.put(key(i), msgpack.packb([i, 0, float("inf")]))
    start = time.perf_counter()
    txn = env.begin(write=True)
    for n, i in enumerate(range(events)):
        k = key(key_of(i, keys))
        entry = msgpack.unpackb(txn.get(k))
        entry[1] += 1
        txn.put(k, msgpack.packb(entry))
        if n % 10_000 == 9_999:  # a batch's writes, then the next batch's
            txn.commit()
            txn = env.begin(write=True)
    txn.commit()
    took = time.perf_counter() - start
    env.close()
    return events / took


def one(store: str, keys: int, events: int) -> dict[str, float]:
    """One contender's run, in this process."""
    with tempfile.TemporaryDirectory(prefix=f"{store}-") as directory:
        path = Path(directory, "db")
        rate = (run_rocksdict if store == "rocksdict" else run_lmdb)(path, keys, events)
        on_disk = sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"ops_per_s": rate, "peak_rss_bytes": peak, "disk_bytes": on_disk}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=2_000_000)
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--one", choices=STORES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.keys, args.events)))
        return
    runs: dict[str, list[dict[str, float]]] = {store: [] for store in STORES}
    for _ in range(args.repeat):
        for store in STORES:
            command = [sys.executable, __file__, "--one", store, "--keys", str(args.keys),
                       "--events", str(args.events)]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            runs[store].append(json.loads(done.stdout.splitlines()[-1]))
    figures: dict[str, object] = {"keys": args.keys, "events": args.events, "runs": runs}
    for store, made in runs.items():
        rates = [r["ops_per_s"] for r in made]
        rss = max(r["peak_rss_bytes"] for r in made)
        disk = max(r["disk_bytes"] for r in made)
        figures[f"{store}_ops_per_s"] = statistics.median(rates)
        figures[f"{store}_peak_rss_bytes"] = rss
        print(f"{store:10} {statistics.median(rates):>10,.0f} read-modify-writes/s "
              f"(runs: {', '.join(f'{r:,.0f}' for r in rates)}); peak RSS {rss / 2**20:,.0f} MiB; "
              f"{disk / 2**20:,.0f} MiB on disk")  # fmt: skip
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
