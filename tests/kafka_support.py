"""What the Kafka tests share: topics made, records produced, and a topic read back as a
read_committed consumer sees it, against a real broker (peer.local_servers.KafkaBroker)."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

_names = itertools.count()


def topic(bootstrap: str, partitions: int, prefix: str = "t") -> str:
    """A new topic of its own for a test."""
    name = f"{prefix}-{time.monotonic_ns()}-{next(_names)}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)
    return name


def produce(bootstrap: str, name: str, values: Iterable[Any], key: str | None = None) -> int:
    """Each value produced as JSON (bytes as they are), keyed by its ``key`` field; acknowledged
    before it returns. The count."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    count = 0
    for value in values:
        data = value if isinstance(value, bytes) else json.dumps(value).encode()
        k = None if key is None else str(value[key]).encode()
        while True:
            try:
                producer.produce(name, data, k)
                break
            except BufferError:
                producer.poll(0.1)
        count += 1
    assert producer.flush(30) == 0, "records left unacknowledged"
    return count


def read_all(bootstrap: str, name: str, isolation: str = "read_committed") -> list[Any]:
    """Every record of the topic as a reader with ``isolation`` sees it, each partition read to
    the end a fetch finds: (partition, key, value, headers) in each partition's order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{name}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation})  # fmt: skip
    partitions = consumer.list_topics(name, timeout=10).topics[name].partitions
    consumer.assign([TopicPartition(name, p, 0) for p in partitions])
    left, found = set(partitions), []
    deadline = time.monotonic() + 60
    while left:
        assert time.monotonic() < deadline, f"topic {name} not read to its end in 60 s"
        for message in consumer.consume(1000, 0.2):
            failure = message.error()
            if failure is None:
                found.append((message.partition(), message.key(), message.value(),
                              dict(message.headers() or [])))  # fmt: skip
            elif failure.code() == KafkaError._PARTITION_EOF:
                left.discard(message.partition())
    consumer.close()
    return found


def values(bootstrap: str, name: str) -> list[Any]:
    """The JSON values a read_committed reader sees, sorted as canonical JSON."""
    return sorted(
        json.dumps(json.loads(value), sort_keys=True)
        for _, _, value, _ in read_all(bootstrap, name)
    )
