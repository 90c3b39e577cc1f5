"""Make the Kafka-to-PostgreSQL job's input and table: the topic ``page-views`` (4 partitions)
holding 100,000 page views over an hour of event time, keyed by page, and the table
``page_views_per_minute`` the job upserts into. The servers are those `onyx servers` runs.

    .venv/bin/python -m examples.kafka_postgres.produce [--views N]
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator
from typing import Any

import psycopg
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

BOOTSTRAP = "127.0.0.1:9092"
DSN = "postgresql://onyx:onyx@127.0.0.1:5433/postgres"
TOPIC = "page-views"
PAGES = [f"/page/{n}" for n in range(40)]
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
TABLE = """CREATE TABLE IF NOT EXISTS page_views_per_minute (
    page text NOT NULL, minute bigint NOT NULL, views bigint NOT NULL,
    PRIMARY KEY (page, minute))"""


def views(count: int) -> Iterator[dict[str, Any]]:
    """The views, the same every time: a page and a user drawn for each, 36 ms apart."""
    rng = random.Random(7)
    for n in range(count):
        page = rng.choice(PAGES)
        yield {"page": page, "user": f"u{rng.randrange(5000)}", "ts": START_MS + n * 36}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--views", type=int, default=100_000)
    args = parser.parse_args()
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    if TOPIC not in admin.list_topics(timeout=10).topics:
        for done in admin.create_topics([NewTopic(TOPIC, 4, 1)]).values():
            done.result(30)
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "linger.ms": 5})
    for view in views(args.views):
        while True:
            try:
                producer.produce(TOPIC, json.dumps(view).encode(), view["page"].encode())
                break
            except BufferError:
                producer.poll(0.1)
    left = producer.flush(60)
    if left:
        raise SystemExit(f"{left} views were not acknowledged by {BOOTSTRAP}")
    with psycopg.connect(DSN, autocommit=True) as connection:
        connection.execute(TABLE)
    print(
        f"{args.views} views in topic {TOPIC!r} on {BOOTSTRAP}; table page_views_per_minute "
        f"ready on {DSN.rsplit('@', 1)[1]}"
    )


if __name__ == "__main__":
    main()
