"""Kafka outputs: one that produces as segments come (at least once), and one that produces each
epoch once it is committed, in one Kafka transaction per slot and epoch (exactly once).

The exactly-once sink stages each epoch's records (peer.plugins.delivered) in ``params.staging``
and seals them at the epoch's barrier; once the epoch commits, it produces them in a transaction
of its own, committed at once. Its transactional id, ``<transactional_id>-<task>-<slot>``, is
the same for the slot on whichever member it runs, so that a restarted slot fences the one it
replaces. Each record carries two headers, ``onyx.epoch`` (the staged epoch's name, which names
the slot) and ``onyx.seq`` (its place in the epoch).

Why produce only committed epochs, rather than produce during the epoch and commit the
transaction at the commit: a transaction left open by a crash cannot be resumed by librdkafka
(a restarted producer aborts it), so a committed epoch's records must outlive the process
somewhere other than the broker anyway; and some Kafka-protocol brokers show an aborted
transaction's records to read_committed readers, so aborting cannot be what hides a failed
attempt. A delivery cut short is resumed instead: the epoch's records already in the topic are
read back (read_committed, from the partitions' ends as they stood when the epoch was sealed)
and only the others are produced. So a reader sees each record once on a broker that hides
aborted transactions and on one that does not.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from peer.job.spec import Task
from peer.plugins import Recovery, error, out_of_reach, segment_json, where
from peer.plugins.delivered import records as staged_records
from peer.plugins.kafka.settings import (
    KafkaOutputParams,
    Setting,
    client_config,
    located,
    partitions_of,
    reason,
)
from peer.storage import StorageError
from peer.values.columnar import Batch, rows
from peer.values.epoch import Epoch

log = logging.getLogger(__name__)

OFFSETS = "offsets.json"
EPOCH_HEADER, SEQ_HEADER = "onyx.epoch", "onyx.seq"
DEFAULT_MAX_BYTES = 1_000_000
"""librdkafka's ``message.max.bytes`` when the job does not set it."""
RESERVED_BYTES = 512
"""Of that limit, what a record's key and value leave for its headers and framing: so that a
record staged in a committed epoch is never refused when it is delivered."""
_TOO_LARGE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE,
                        KafkaError.INVALID_RECORD})  # fmt: skip
"""What a broker says of a record it will never take, however often it is sent."""

Record = tuple[bytes | None, bytes]


class Encoder:
    """A segment as a record's key and value, checked against the producer's size limit."""

    def __init__(self, task: Task, settings: KafkaOutputParams, config: dict[str, Setting]) -> None:
        self.task, self.settings = task, settings
        self.limit = int(config.get("message.max.bytes", DEFAULT_MAX_BYTES)) - RESERVED_BYTES
        self.value = self._json if settings.format == "json" else self._bytes

    def __call__(self, segment: Any) -> Record:
        key = self._key(segment)
        value = self.value(segment)
        size = len(value) + (0 if key is None else len(key))
        if size > self.limit:
            topic = self.settings.topic
            raise error(self.task, f"a record for topic {topic!r} is {size} bytes, over the "
                                   f"{self.limit} that message.max.bytes leaves for a key and "
                                   f"value: {segment!r:.120}")  # fmt: skip
        return key, value

    def _key(self, segment: Any) -> bytes | None:
        field = self.settings.key or ("key" if self.settings.format == "bytes" else None)
        if field is None:
            return None
        value = segment.get(field) if isinstance(segment, dict) else None
        if value is None or isinstance(value, bytes):
            return value
        if isinstance(value, str):
            return value.encode()
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value).encode()
        raise error(self.task, f"key field {field!r} must be a string, bytes or an int, got "
                               f"{type(value).__name__} in {segment!r:.120}")  # fmt: skip

    def _json(self, segment: Any) -> bytes:
        return segment_json(self.task, segment)

    def _bytes(self, segment: Any) -> bytes:
        value = segment.get("value") if isinstance(segment, dict) else None
        if isinstance(value, str):
            return value.encode()
        if not isinstance(value, bytes):
            raise error(self.task, f"format bytes writes a segment's 'value' field, which must be "
                                   f"bytes or a string: {segment!r:.120}")  # fmt: skip
        return value


def producer_config(settings: KafkaOutputParams, config: dict[str, Setting]) -> dict[str, Setting]:
    """The job's settings, with Java's key partitioner (so a key lands where a Java client
    puts it) and a short linger unless the job says otherwise."""
    return {"partitioner": "murmur2_random", "linger.ms": 5, **config}


class KafkaOutput:
    """At least once: records produced as they come, all acknowledged before each barrier
    passes; after a failure, what followed the last committed epoch is produced again."""

    def __init__(self, task: Task, settings: KafkaOutputParams) -> None:
        self.task, self.settings = task, settings
        config = client_config(task, settings)
        self.encode = Encoder(task, settings, config)
        self.producer = Producer({**producer_config(settings, config),
                                  "enable.idempotence": True})  # fmt: skip
        self.staged: list[Record] = []
        self.failure: str | None = None

    def recover(self, recovery: Recovery) -> None:
        """Nothing to settle: what was produced stays produced."""

    def prepare(self, segments: Batch) -> None:
        self.staged.extend(map(self.encode, rows(segments)))

    def write(self) -> bool:
        """Hand the staged records to librdkafka; a full queue keeps the rest for later."""
        self._raise_failure()
        topic, produce = self.settings.topic, self.producer.produce
        sent = 0
        try:
            for key, value in self.staged:
                produce(topic, value, key, on_delivery=self._delivered)
                sent += 1
        except BufferError:
            pass
        except KafkaException as e:
            raise error(self.task, f"topic {topic!r}: {reason(e)}") from None
        finally:
            del self.staged[:sent]
        self.producer.poll(0)
        return not self.staged

    def synced(self) -> bool:
        """Whether every record produced is acknowledged by the broker."""
        self._raise_failure()
        return self.producer.flush(0) == 0

    def checkpoint(self, epoch: Epoch) -> None:
        return None

    def committed(self, epoch: Epoch) -> None:
        """Nothing to publish: the records are out already."""

    def close(self) -> None:
        self.producer.flush(self.settings.timeout)

    def _delivered(self, failure: KafkaError | None, _: Any) -> None:
        if failure is not None and self.failure is None:
            self.failure = failure.str()

    def _raise_failure(self) -> None:
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise StorageError(f"{where(self.task)}: a record for topic "
                               f"{self.settings.topic!r} was not delivered: {failure}")  # fmt: skip


class TransactionalDelivery:
    """A slot's transactional producer, and the reading back a resumed delivery needs."""

    def __init__(self, task: Task, settings: KafkaOutputParams, slot: int,
                 config: dict[str, Setting]) -> None:  # fmt: skip
        self.task, self.settings = task, settings
        self.config = config
        self.id = f"{settings.transactional_id}-{task.name}-{slot}"
        self.producer: Any = None
        self.reader: Any = None
        self.refused: str | None = None
        """Why the broker refused a record of the delivery under way, for good."""

    def start(self, recovery: Recovery) -> None:
        """A new producer under the slot's transactional id, fencing any other still alive;
        the topic checked, so that a missing one is named now, not at a commit."""
        self.close()
        self.producer = Producer({**producer_config(self.settings, self.config),
                                  "transactional.id": self.id})  # fmt: skip
        try:
            self._partitions()
            self._call("start its transactions", lambda: self.producer.init_transactions(
                self.settings.timeout))  # fmt: skip
        except StorageError as e:
            raise out_of_reach(self.task, recovery, str(e).removeprefix(
                f"{where(self.task)}: ")) from None  # fmt: skip

    def mark_ends(self, temp: Any, name: str) -> None:
        """At the seal: the topic's partitions' ends, where this epoch's records can start."""
        ends = {str(p): self._bounds(p)[1] for p in self._partitions()}
        (temp / OFFSETS).write_text(json.dumps(ends))

    def deliver(self, name: str, files: dict[str, bytes], resumed: bool) -> None:
        records = list(staged_records(files))
        sent: set[int] = set()
        if resumed and records:
            sent = self._sent(name, json.loads(files.get(OFFSETS, b"{}")))
            if sent:
                log.info("%s: epoch %s resumed, %d of its %d records were sent before",
                         where(self.task), name, len(sent), len(records))  # fmt: skip
        if len(sent) >= len(records):
            return
        self.refused = None
        self._call("begin a transaction", self.producer.begin_transaction)
        try:
            self._produce(name, records, sent)
            self._call("commit a transaction", lambda: self.producer.commit_transaction(
                self.settings.timeout))  # fmt: skip
        except StorageError:
            self._abort()
            if self.refused is not None:  # sent again it would be refused again: say so
                raise error(self.task, f"epoch {name}: topic {self.settings.topic!r} refused a "
                                       f"record: {self.refused}") from None  # fmt: skip
            raise

    def _produce(self, name: str, records: list[Any], sent: set[int]) -> None:
        topic, producer, mark = self.settings.topic, self.producer, name.encode()
        for seq, (key, value) in enumerate(records):
            if seq in sent:
                continue
            headers = [(EPOCH_HEADER, mark), (SEQ_HEADER, str(seq).encode())]
            while True:
                try:
                    producer.produce(topic, value, key, headers=headers,
                                     on_delivery=self._delivered)  # fmt: skip
                    break
                except BufferError:
                    producer.poll(0.05)
                except KafkaException as e:
                    self._note(e.args[0] if e.args else None)
                    raise StorageError(f"{where(self.task)}: topic {topic!r}: "
                                       f"{reason(e)}") from None  # fmt: skip

    def _delivered(self, failure: KafkaError | None, _: Any) -> None:
        self._note(failure)

    def _note(self, failure: Any) -> None:
        """A record the broker will never take, noted so the delivery is not tried forever."""
        if isinstance(failure, KafkaError) and failure.code() in _TOO_LARGE:
            self.refused = self.refused or failure.str()

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None
        self.producer = None

    # -- reading back -----------------------------------------------------------------------

    def _sent(self, name: str, ends: dict[str, int]) -> set[int]:
        """The places in epoch ``name`` of its records a reader sees already, read from each
        partition's end at the seal (or before it) to where a fetch finds the partition ends, at
        or past its end as listed now: a transaction of another slot still open holds a
        read_committed fetch's end back, and some brokers list an end behind the true one."""
        reader = self._reader()
        topic, mark = self.settings.topic, name.encode()
        listed = {p: self._bounds(p)[1] for p in self._partitions()}
        reader.assign([TopicPartition(topic, p, int(ends.get(str(p), 0))) for p in listed])
        seen: set[int] = set()
        left = set(listed)
        deadline = time.monotonic() + 10 * self.settings.timeout
        while left:
            if time.monotonic() > deadline:
                raise StorageError(f"{where(self.task)}: could not read topic {topic!r} to its "
                                   f"end to resume epoch {name}")  # fmt: skip
            for message in reader.consume(1000, 0.2):
                failure = message.error()
                if failure is None:
                    headers = dict(message.headers() or [])
                    if headers.get(EPOCH_HEADER) == mark:
                        seen.add(int(headers[SEQ_HEADER]))
                elif failure.code() == KafkaError._PARTITION_EOF and _at_or_past(message, listed):
                    left.discard(located(message)[0])
        reader.unassign()
        return seen

    def _reader(self) -> Any:
        if self.reader is None:
            self.reader = Consumer({**self.config, "group.id": self.id,
                                    "enable.auto.commit": False, "enable.partition.eof": True,
                                    "isolation.level": "read_committed"})  # fmt: skip
        return self.reader

    def _partitions(self) -> list[int]:
        topic = self.settings.topic
        metadata = self._call("read the topic's metadata", lambda: self._reader().list_topics(
            topic, timeout=self.settings.timeout))  # fmt: skip
        try:
            return partitions_of(metadata, topic)
        except ValueError as e:
            raise error(self.task, f"topic {topic!r} on {self.settings.bootstrap}: {e}") from None

    def _bounds(self, partition: int) -> tuple[int, int]:
        tp = TopicPartition(self.settings.topic, partition)
        reader, timeout = self._reader(), self.settings.timeout
        return self._call("read a partition's offsets",
                          lambda: reader.get_watermark_offsets(tp, timeout=timeout))  # fmt: skip

    def _abort(self) -> None:
        try:
            self.producer.abort_transaction(self.settings.timeout)
        except KafkaException as e:
            log.warning("%s: aborting a transaction failed: %s", where(self.task), reason(e))

    def _call[T](self, what: str, call: Callable[[], T]) -> T:
        """``call()``; a broker that fails it makes the job roll back, naming the broker; a
        fenced producer (a newer one has the slot's id) says so."""
        try:
            return call()
        except KafkaException as e:
            failure = e.args[0] if e.args else None
            if isinstance(failure, KafkaError) and failure.code() == KafkaError._FENCED:
                raise StorageError(f"{where(self.task)}: fenced by a newer producer of "
                                   f"{self.id!r}: this slot was replaced") from None  # fmt: skip
            raise StorageError(f"{where(self.task)}: cannot {what} on {self.settings.bootstrap}: "
                               f"{reason(e)}") from None  # fmt: skip


def _at_or_past(end: Message, listed: dict[int, int]) -> bool:
    """Whether a partition's end a fetch found is at or past its end as listed."""
    partition, offset = located(end)
    return offset >= listed.get(partition, 0)
