"""Generates the clickstream example's input: page-view events as Parquet files and a small
dimension table of pages.

Visitors browse in visits: a few to a few dozen views seconds to minutes apart, visits hours
apart. The events of one file cover one stretch of time, in time order, as a log shipper would
roll them; some rows are dirty the way real click logs are (bots, missing users, pages written
with other case or a trailing slash), for the pipeline's cleaning step to deal with. The same seed
gives the same files, so two runs of the pipeline can be compared row for row. The sessions
table of an earlier run goes too: a table belongs to one job, and new input means a new job.
``--out`` is a directory or an object store's URL (``s3://BUCKET/PATH``, the endpoint and
credentials from the standard AWS environment variables).

    python -m examples.clickstream.generate [--out out/clickstream] [--events N] [--seed S]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import random
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from peer.job.arrow_schema import to_table
from peer.storage import open_url

START = 1_767_225_600.0
"""2026-01-01T00:00:00Z: the first visit starts then or later."""
SECTIONS = {
    "home": ["/"],
    "catalog": [f"/catalog/{name}" for name in ("shoes", "hats", "coats", "bags", "socks")],
    "product": [f"/product/{n}" for n in range(1, 31)],
    "checkout": ["/cart", "/checkout", "/checkout/done"],
    "help": ["/help", "/help/returns", "/help/shipping", "/contact"],
}
AGENTS = ["Mozilla/5.0 (X11; Linux)", "Mozilla/5.0 (Macintosh)", "Mozilla/5.0 (iPhone)"]
BOTS = ["Googlebot/2.1", "bingbot/2.0", "AhrefsBot/7.0"]
SCHEMA = pa.schema(
    [
        ("user_id", pa.string()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("page", pa.string()),
        ("referrer", pa.string()),
        ("user_agent", pa.string()),
        ("duration_ms", pa.int64()),
    ]
)


def pages() -> list[tuple[str, str]]:
    return [(page, section) for section, paths in SECTIONS.items() for page in paths]


def events(count: int, users: int, rng: random.Random) -> list[dict]:
    """``count`` events of ``users`` visitors, sorted by time."""
    paths = [page for page, _ in pages()]
    out: list[dict] = []
    clock = {f"u{n:05d}": START + rng.uniform(0, 6 * 3600) for n in range(users)}
    agent = {user: rng.choice(AGENTS) for user in clock}
    visitors = sorted(clock)
    while len(out) < count:
        user = rng.choice(visitors)
        t = clock[user]
        for _ in range(min(rng.randint(1, 25), count - len(out))):
            out.append(_view(user, t, agent[user], rng.choice(paths), rng))
            t += rng.expovariate(1 / 60)
        clock[user] = t + rng.uniform(2, 12) * 3600
    out.sort(key=lambda e: e["ts"])
    return out


def _view(user: str, t: float, agent: str, page: str, rng: random.Random) -> dict:
    dirt = rng.random()
    if dirt < 0.02:
        agent = rng.choice(BOTS)
    elif dirt < 0.03:
        user = None
    elif dirt < 0.08:
        page = page.upper() + ("/" if page != "/" else "")
    return {
        "user_id": user,
        "ts": round(t, 3),
        "page": page,
        "referrer": rng.choice(["", "https://search.example", "https://social.example"]),
        "user_agent": agent,
        "duration_ms": int(rng.expovariate(1 / 20_000)),
    }


def write(out: str | Path, count: int, users: int, files: int, seed: int) -> None:
    """The events and pages under ``out``, a directory or an object store's URL."""
    rows = events(count, users, random.Random(seed))
    fs, root = open_url(str(out))
    for old in ("events", "sessions"):
        with contextlib.suppress(FileNotFoundError):
            fs.rm(f"{root}/{old}", recursive=True)
    fs.makedirs(f"{root}/events", exist_ok=True)
    per_file = -(-len(rows) // files)
    for index in range(files):
        part = rows[index * per_file : (index + 1) * per_file]
        with fs.open(f"{root}/events/part-{index:04d}.parquet", "wb") as f:
            pq.write_table(to_table(part, SCHEMA), f)
    with fs.open(f"{root}/pages.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["page", "section"])
        writer.writerows(pages())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="generate", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/clickstream", help="a directory or s3://BUCKET/PATH")
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--users", type=int, default=2_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if min(args.events, args.users, args.files) < 1:
        parser.error("--events, --users and --files must be at least 1")
    write(args.out, args.events, args.users, args.files, args.seed)
    out = args.out.rstrip("/")
    print(
        f"{args.events} events of {args.users} users in {args.files} Parquet files under "
        f"{out}/events; pages in {out}/pages.csv"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
