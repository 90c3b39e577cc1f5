"""A Kafka input: a topic's partitions shared among the input task's slots, each partition's
offset in the checkpoint.

It splits its share (peer.plugins.splits): the partitions are spread over the S splits
(``shard_splits``: evenly for those the topic had when the job started, so that any number of
slots holds its share of them, and those added later in between), slot s of n reads the
partitions of the splits it owns, and a checkpointed job's input may run on another number of
peers after a restore, each partition going on from its offset wherever it now is. A topic may
have at most as many partitions as the task's ``max_parallelism``. Its checkpoint holds, for each
split it owns, ``[offset, partitions]``: its partition's next offset (0 for a split with none
yet, so a partition added later is read from its start), and the partition count the job
started with, which fixes where each partition's split is.

The broker is read through librdkafka, whose own thread fetches: ``poll`` takes what has come,
never waits. The positions that count are the checkpoint's; with a ``group``, those of each
committed epoch are written back to it so that the usual tools show the group's lag. Each
partition's lag (its end less the next offset) is the metric ``onyx_kafka_consumer_lag``.

With ``event_time``, each partition has a watermark, the latest event time it gave less
``max_delay``, and the input's is the least over its partitions; one that has given nothing for
``partition_idle_timeout`` seconds holds it back no more (a partition that has given nothing at
all holds it until then).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

import msgspec
import pyarrow as pa
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from peer.job.spec import Task
from peer.metrics import KAFKA_LAG
from peer.plugins import PluginError, Recovery, error, out_of_reach
from peer.plugins.kafka.settings import (
    KafkaInputParams,
    client_config,
    located,
    partitions_of,
    reason,
)
from peer.plugins.splits import Splits, pair, shard_splits
from peer.values.epoch import Epoch

log = logging.getLogger(__name__)

_FATAL = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED,
                    KafkaError.GROUP_AUTHORIZATION_FAILED})  # fmt: skip
_JSON = msgspec.json.Decoder()
"""JSON as RFC 8259 has it (no NaN), a dozen times as fast as the standard library's."""
LAG_EVERY = 5.0
"""Seconds between reads of the partitions' ends for the lag metric."""


class KafkaInput:
    """The partitions a slot owns, read from their offsets."""

    def __init__(self, task: Task, settings: KafkaInputParams, splits: Splits) -> None:
        self.task, self.settings, self.splits = task, settings, splits
        self.config = client_config(task, settings)
        self.consumer: Any = None
        self.held: dict[int, int] = {}
        """The partition of each owned split that has one (peer.plugins.splits.shard_splits)."""
        self.first = 0
        """The topic's partition count when the job started: where its partitions' splits are."""
        self.partitions: list[int] = []
        self.next: dict[int, int] = {}
        """Each owned partition's next offset."""
        self.ended: set[int] = set()
        """With ``stop_at_end``: the partitions read to their end."""
        self.positions: dict[Epoch, dict[int, int]] = {}
        """The offsets at each barrier not yet committed, for the group."""
        self.decode = _decoder(settings)
        self.dead: Any = None
        self.dead_failure: str | None = None
        self.lag_at = 0.0

    # -- the protocol ---------------------------------------------------------------------------

    def recover(self, recovery: Recovery) -> None:
        self._close()
        s = self.settings
        self.consumer = Consumer({
            **self.config, "group.id": s.group or f"onyx-{self.task.name}",
            "enable.auto.commit": False, "enable.partition.eof": s.stop_at_end,
            "isolation.level": "read_committed", "error_cb": self._client_error,
        })  # fmt: skip
        count = self._partition_count(recovery)
        if count > self.splits.total:
            raise self._error(f"topic {s.topic!r} has {count} partitions, more than the task's "
                              f"max_parallelism {self.splits.total}: raise max_parallelism to at "
                              "least the partition count")  # fmt: skip
        positions = self._positions(recovery.checkpoint)
        self.first = positions[0][1] if positions else count
        owned, placed = self.splits.owned, shard_splits(self.splits.total, self.first)
        self.held = {placed[p]: p for p in range(count) if placed[p] in owned}
        self.partitions = sorted(self.held.values())
        if positions:  # every owned split has one: 0 for a partition added since, its start
            at = dict(zip(owned, (offset for offset, _ in positions), strict=True))
            self.next = {p: at[split] for split, p in self.held.items()}
        else:
            self.next = {p: self._start(p) for p in self.partitions}
        self.ended = set()
        self.consumer.incremental_assign(
            [TopicPartition(s.topic, p, self.next[p]) for p in self.partitions]
        )
        if s.on_error == "dead_letter" and self.dead is None:
            self.dead = Producer({**self.config, "enable.idempotence": True})
        self.positions = {}

    def poll(self, limit: int) -> Any:
        messages = self.consumer.consume(limit, 0)
        taken = []
        for message in messages:
            failure = message.error()
            if failure is not None:
                self._failed(message, failure)
                continue
            partition, offset = located(message)
            if offset < self.next.get(partition, 0) or partition in self.ended:
                continue  # fetched before an assignment (read already), or past the end
            self.next[partition] = offset + 1
            try:
                taken.append(self._read(message))
            except ValueError as e:
                self._undecodable(message, e)
        self._lag()
        if not taken:
            return []
        try:
            return self.decode.batch(taken)
        except ValueError as e:
            raise self._error(f"topic {self.settings.topic!r}: {e}") from None

    def _read(self, message: Message) -> Any:
        """The segment a record makes; a ValueError says why it cannot be read."""
        return self.decode(message)

    def checkpoint(self, epoch: Epoch) -> list[list[int]]:
        self.positions[epoch] = dict(self.next)
        held, at, first = self.held, self.next, self.first
        return [[at[held[split]] if split in held else 0, first] for split in self.splits.owned]

    def completed(self) -> bool:
        return self.settings.stop_at_end and len(self.ended) == len(self.partitions)

    def synced(self) -> bool:
        """Dead letters are sent before the epoch's barrier passes on; one the broker did not
        take kills the job, as the record would otherwise be lost."""
        if self.dead is None:
            return True
        left = self.dead.flush(0)
        if self.dead_failure is not None:
            raise self._error(f"a dead letter for topic {self.settings.dead_letter_topic!r} was "
                              f"not taken: {self.dead_failure}")  # fmt: skip
        return left == 0

    def _dead_lettered(self, failure: KafkaError | None, _: Any) -> None:
        if failure is not None and self.dead_failure is None:
            self.dead_failure = failure.str()

    def committed(self, epoch: Epoch) -> None:
        """The group's positions follow the committed epochs."""
        done = sorted(e for e in self.positions if e <= epoch)
        if not done or self.settings.group is None:
            for e in done:
                del self.positions[e]
            return
        offsets = self.positions[done[-1]]
        for e in done:
            del self.positions[e]
        topic = self.settings.topic
        commits = [TopicPartition(topic, p, offset) for p, offset in sorted(offsets.items())]
        if commits:
            try:
                self.consumer.commit(offsets=commits, asynchronous=True)
            except KafkaException as e:
                log.warning("%s: the group's positions were not written back: %s",
                            self._where(), e.args[0])  # fmt: skip

    def close(self) -> None:
        self._close()
        if self.dead is not None:
            self.dead.flush(self.settings.timeout)
            self.dead = None

    # -- starting -------------------------------------------------------------------------------

    def _partition_count(self, recovery: Recovery) -> int:
        s = self.settings
        try:
            metadata = self.consumer.list_topics(s.topic, timeout=s.timeout)
        except KafkaException as e:
            why = f"cannot read the metadata of topic {s.topic!r} from {s.bootstrap}: {reason(e)}"
            raise out_of_reach(self.task, recovery, why) from None
        try:
            return len(partitions_of(metadata, s.topic))
        except ValueError as e:
            raise self._error(f"topic {s.topic!r} on {s.bootstrap}: {e}") from None

    def _positions(self, checkpoint: Any) -> list[tuple[int, int]]:
        """Each owned split's ``(offset, partitions at the job's start)`` from the checkpoint,
        checked; none without one."""
        if checkpoint is None:
            return []
        owned = self.splits.owned
        if not (isinstance(checkpoint, list | tuple) and len(checkpoint) == len(owned)):
            raise self._error(f"checkpoint must hold one [offset, partitions] for each of the "
                              f"splits {owned.start}..{owned.stop - 1}, got "
                              f"{checkpoint!r:.200}")  # fmt: skip
        positions = [pair(at) for at in checkpoint]
        firsts = {position[1] for position in positions if position is not None}
        if None in positions or len(firsts) != 1 or not 0 < min(firsts) <= self.splits.total:
            raise self._error(f"checkpoint must hold [offset, partitions] (ints >= 0, the same "
                              f"partition count in each), got {checkpoint!r:.200}")  # fmt: skip
        return [position for position in positions if position is not None]

    def _start(self, partition: int) -> int:
        """Where a partition with no checkpoint starts: its low or high watermark, or the
        first offset at or after the timestamp."""
        start = self.settings.start
        if start == "earliest":
            return self._bounds(partition)[0]
        if start == "latest":
            return self._bounds(partition)[1]
        wanted = TopicPartition(self.settings.topic, partition, start)
        try:
            found = self.consumer.offsets_for_times([wanted], timeout=self.settings.timeout)[0]
        except KafkaException as e:
            raise self._error(f"cannot find the offset of timestamp {start} in partition "
                              f"{partition}: {reason(e)}") from None  # fmt: skip
        return found.offset if found.offset >= 0 else self._bounds(partition)[1]

    def _bounds(self, partition: int) -> tuple[int, int]:
        try:
            low, high = self.consumer.get_watermark_offsets(
                TopicPartition(self.settings.topic, partition), timeout=self.settings.timeout
            )
        except KafkaException as e:
            raise self._error(f"cannot read the offsets of partition {partition}: "
                              f"{reason(e)}") from None  # fmt: skip
        return max(low, 0), max(high, 0)

    # -- reading --------------------------------------------------------------------------------

    def _failed(self, message: Message, failure: KafkaError) -> None:
        """A partition's error: one that will not pass (the topic deleted, no access) kills
        the job naming it; librdkafka retries the others on its own. With ``stop_at_end``, a
        partition's end reached (where the broker's own fetch says it ends: a broker's listed
        offsets may lag behind it) ends its reading."""
        if failure.code() == KafkaError._PARTITION_EOF:
            partition = located(message)[0]
            self.ended.add(partition)
            self.consumer.incremental_unassign([TopicPartition(self.settings.topic, partition)])
            return
        if failure.code() in _FATAL or failure.fatal():
            raise self._error(f"topic {self.settings.topic!r} partition {message.partition()}: "
                              f"{failure.str()}")  # fmt: skip
        log.warning("%s partition %s: %s", self._where(), message.partition(), failure.str())

    def _undecodable(self, message: Message, reason: ValueError) -> None:
        where = (f"topic {self.settings.topic!r} partition {message.partition()} offset "
                 f"{message.offset()}")  # fmt: skip
        if self.dead is None:
            raise self._error(f"{where}: cannot decode its value as {self.settings.format}: "
                              f"{reason}")  # fmt: skip
        headers = [*(message.headers() or []),
                   ("onyx.source", f"{message.topic()}/{message.partition()}/{message.offset()}"),
                   ("onyx.error", str(reason)[:500])]  # fmt: skip
        self.dead.produce(self.settings.dead_letter_topic, message.value(), message.key(),
                          headers=headers, on_delivery=self._dead_lettered)  # fmt: skip
        self.dead.poll(0)

    def _lag(self) -> None:
        """Each partition's lag, from the ends librdkafka last fetched (no request made)."""
        now = time.monotonic()
        if now - self.lag_at < LAG_EVERY:
            return
        self.lag_at = now
        topic = self.settings.topic
        for p in self.partitions:
            try:
                _, high = self.consumer.get_watermark_offsets(TopicPartition(topic, p), cached=True)
            except KafkaException:
                continue
            if high >= 0:
                KAFKA_LAG.labels(self.task.name, topic, str(p)).set(max(high - self.next[p], 0))

    def _client_error(self, failure: KafkaError) -> None:
        """librdkafka's own retries (a broker away and back) are logged, not raised."""
        log.warning("%s: %s", self._where(), failure.str())

    def _close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None

    def _where(self) -> str:
        return f"task {self.task.name!r} (Kafka topic {self.settings.topic!r})"

    def _error(self, message: str) -> PluginError:
        return error(self.task, message)


class WatermarkedInput(KafkaInput):
    """A Kafka input with ``event_time``: a watermark per partition, the least of them its
    own."""

    def __init__(self, task: Task, settings: KafkaInputParams, splits: Splits) -> None:
        super().__init__(task, settings, splits)
        self.time_of = _event_time(settings)
        self.latest: dict[int, float] = {}
        self.heard: dict[int, float] = {}
        self.idle_after = settings.partition_idle_timeout or math.inf

    def recover(self, recovery: Recovery) -> None:
        super().recover(recovery)
        now = time.monotonic()
        self.latest, self.heard = {}, dict.fromkeys(self.partitions, now)

    def watermark(self) -> float | None:
        """The least partition watermark; partitions idle past the timeout left out (all of
        them idle: the greatest, as nothing is on its way)."""
        now = time.monotonic()
        active = [p for p in self.partitions if now - self.heard.get(p, now) < self.idle_after]
        marks = [self.latest.get(p) for p in active]
        if not active:
            known = list(self.latest.values())
            return max(known) - self.settings.max_delay if known else None
        if any(m is None for m in marks):
            return None
        return min(m for m in marks if m is not None) - self.settings.max_delay

    def _read(self, message: Message) -> Any:
        """The segment, its partition's latest event time moved on."""
        segment = self.decode(message)
        p = located(message)[0]
        self.heard[p] = time.monotonic()
        t = self.time_of(message, segment)
        if t is not None and t > self.latest.get(p, -math.inf):
            self.latest[p] = t
        return segment


def _event_time(settings: KafkaInputParams) -> Callable[[Message, Any], float | None]:
    if settings.event_time == "timestamp":
        return lambda message, _: float(message.timestamp()[1])
    field = settings.event_time

    def of_field(_: Message, segment: Any) -> float | None:
        value = segment.get(field) if isinstance(segment, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        return None

    return of_field


class Decoder:
    """How a record becomes a segment, and a poll's segments a batch."""

    def __call__(self, message: Message) -> Any:
        raise NotImplementedError

    def batch(self, segments: list[Any]) -> Any:
        return segments


class JsonValues(Decoder):
    def __init__(self, metadata: bool) -> None:
        self.metadata = metadata

    def __call__(self, message: Message) -> Any:
        value = message.value()
        if value is None:
            raise ValueError("it has no value")
        try:
            decoded = _JSON.decode(value)
        except msgspec.DecodeError as e:
            raise ValueError(str(e)) from None
        if not isinstance(decoded, dict):
            raise ValueError(f"a JSON {type(decoded).__name__} is not an object")
        if self.metadata:
            key = message.key()
            decoded["kafka_key"] = None if key is None else key.decode("utf-8", "replace")
            decoded["kafka_partition"] = message.partition()
            decoded["kafka_offset"] = message.offset()
            decoded["kafka_timestamp"] = message.timestamp()[1]
            decoded["kafka_headers"] = {h[0]: _text(h[1]) for h in message.headers() or []}
        return decoded


def _text(value: str | bytes | None) -> str | None:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class RawRecords(Decoder):
    def __call__(self, message: Message) -> Any:
        return {"key": message.key(), "value": message.value(),
                "headers": [list(header) for header in message.headers() or []],
                "partition": message.partition(), "offset": message.offset(),
                "timestamp": message.timestamp()[1]}  # fmt: skip


class ArrowBatches(Decoder):
    """Each record an Arrow IPC stream; a poll's batches, of one schema, are one batch."""

    def __call__(self, message: Message) -> Any:
        value = message.value()
        if value is None:
            raise ValueError("it has no value")
        try:
            return pa.ipc.open_stream(value).read_all()
        except (pa.ArrowInvalid, OSError) as e:
            raise ValueError(f"not an Arrow IPC stream: {e}") from None

    def batch(self, segments: list[Any]) -> Any:
        tables = [t for t in segments if t.num_rows]
        if not tables:
            return []
        try:
            return pa.concat_tables(tables).combine_chunks().to_batches()[0]
        except pa.ArrowInvalid as e:
            raise ValueError(f"the records of one poll differ in schema: {e}") from None


def _decoder(settings: KafkaInputParams) -> Decoder:
    if settings.format == "bytes":
        return RawRecords()
    if settings.format == "arrow":
        return ArrowBatches()
    return JsonValues(settings.metadata)
