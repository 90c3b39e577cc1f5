"""What a Kafka task's params say, as typed values checked when the job is submitted
(peer.plugins.params): where the broker is, the client settings passed through to librdkafka,
and the secrets those settings reference by name.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from confluent_kafka import KafkaError, KafkaException, Message

from peer.job.spec import Task
from peer.plugins.params import check_secret_names, secret_values

Setting = str | int | float | bool
_OWN = frozenset({"bootstrap.servers", "group.id", "enable.auto.commit", "isolation.level",
                  "transactional.id", "enable.idempotence", "enable.partition.eof"})  # fmt: skip
"""Settings the connectors choose themselves, as exactly-once needs them."""
_SECRET = ("password", "secret", ".pem", "private.key")
"""Parts of a librdkafka setting's name that say its value is a secret, to be named in
``secrets``, never written in the job (which the log keeps)."""


class Client(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """Where the broker is and how to reach it."""

    bootstrap: str
    """The brokers to start from, ``host:port[,host:port...]``."""
    config: dict[str, Setting] = {}
    """librdkafka settings passed through as they are (``security.protocol``,
    ``sasl.mechanism``, ``sasl.username``, ``ssl.ca.location``...)."""
    secrets: dict[str, str] = {}
    """librdkafka settings whose values are secrets, each naming the member's environment
    variable ``ONYX_SECRET_<name>`` that holds it."""
    timeout: float = 10.0
    """Seconds a start waits for the broker's metadata before it says it cannot reach it."""

    def __post_init__(self) -> None:
        if not self.bootstrap.strip():
            raise ValueError("bootstrap must name at least one broker, host:port")
        for key in sorted(self.config):
            if key in _OWN:
                raise ValueError(f"config.{key} is the connector's own to set")
            if any(part in key for part in _SECRET):
                raise ValueError(
                    f"config.{key} holds a secret, which the job must not carry: "
                    "name it in secrets, read from each member's environment"
                )
        check_secret_names(self.secrets)
        if not 0 < self.timeout <= 3600:
            raise ValueError(f"timeout must be in (0, 3600] seconds, got {self.timeout!r}")


class KafkaInputParams(Client, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """A Kafka input's params."""

    topic: str
    format: Literal["json", "bytes", "arrow"] = "json"
    """How a record's value is read: a JSON object (the segment), bytes as they are (the
    segment holds key, value, headers and where it was read), or an Arrow IPC stream of record
    batches (a poll's batches are one batch)."""
    start: Literal["earliest", "latest"] | int = "earliest"
    """Where a task with no checkpoint starts each partition: its first record, its end, or the
    first record at or after a timestamp (milliseconds since the epoch)."""
    stop_at_end: bool = False
    """Read each partition up to its end (where a fetch first finds it ends), then complete;
    after a restore, up to its end then."""
    group: str | None = None
    """The consumer group the committed positions are written back to, for lag monitoring
    only: the positions that count are the checkpoint's."""
    metadata: bool = False
    """Add ``kafka_key``, ``kafka_partition``, ``kafka_offset``, ``kafka_timestamp`` and
    ``kafka_headers`` (text) to each JSON segment."""
    event_time: str | None = None
    """``timestamp`` (the record's, in milliseconds), or a field of the JSON value: the input
    then gives a watermark, the least over its partitions."""
    max_delay: float = 0
    """How far, in units of event time, a record may come behind the latest of its partition."""
    partition_idle_timeout: float | None = None
    """Seconds after which a partition that gave nothing no longer holds the watermark back."""
    on_error: Literal["kill", "dead_letter"] = "kill"
    """What an undecodable record does: kill the job naming topic, partition and offset, or go
    to ``dead_letter_topic`` as it was read, with headers saying where from and why."""
    dead_letter_topic: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.topic:
            raise ValueError("topic must be a topic's name")
        if self.on_error == "dead_letter" and not self.dead_letter_topic:
            raise ValueError("on_error dead_letter needs dead_letter_topic")
        if self.event_time not in (None, "timestamp") and self.format != "json":
            raise ValueError(f"event_time {self.event_time!r} reads a field of a JSON value: "
                             f"format {self.format!r} can read only 'timestamp'")  # fmt: skip
        if self.max_delay < 0:
            raise ValueError(f"max_delay must be >= 0, got {self.max_delay!r}")
        if self.partition_idle_timeout is not None and self.partition_idle_timeout <= 0:
            raise ValueError("partition_idle_timeout must be > 0 seconds, got "
                             f"{self.partition_idle_timeout!r}")  # fmt: skip


class KafkaOutputParams(Client, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """A Kafka output's params."""

    topic: str
    format: Literal["json", "bytes"] = "json"
    """A segment written as its JSON, or a segment's ``value`` (and ``key``) field as bytes."""
    key: str | None = None
    """The field whose value keys the record (its partition): a string, bytes or an int."""
    transactional_id: str | None = None
    """Exactly-once only: the start of each slot's transactional id,
    ``<transactional_id>-<task>-<slot>``; stable for the life of the job, so that a restarted
    slot fences the one it replaces."""
    staging: str | None = None
    """Exactly-once only: the directory or object store URL where each epoch's records wait
    between its barrier and its commit (the job's checkpoint storage, in a cluster)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.topic:
            raise ValueError("topic must be a topic's name")


def client_config(task: Task, client: Client) -> dict[str, Setting]:
    """librdkafka's settings: the job's, its secrets read from this member's environment, and
    the broker. A secret not set here is an error that names the variable, never a value."""
    return {**client.config, "bootstrap.servers": client.bootstrap,
            **secret_values(task, client.secrets)}  # fmt: skip


def reason(e: KafkaException) -> str:
    """What librdkafka says went wrong."""
    failure = e.args[0] if e.args else None
    return failure.str() if isinstance(failure, KafkaError) else str(e)


def located(message: Message) -> tuple[int, int]:
    """A record's (or a partition end's) partition and offset, which librdkafka always sets
    on those."""
    return message.partition() or 0, message.offset() or 0


def partitions_of(metadata: Any, topic: str) -> list[int]:
    """The partitions of ``topic`` in a metadata answer; a ValueError says why there are none
    (it does not exist, or the broker's own reason)."""
    found = metadata.topics.get(topic)
    if found is None or (found.error is None and not found.partitions):
        raise ValueError("it does not exist")
    if found.error is not None:
        if found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise ValueError("it does not exist")
        raise ValueError(found.error.str())
    return sorted(found.partitions)
