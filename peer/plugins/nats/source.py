"""A NATS JetStream input: a stream's messages, read in order by each slot of the input task, the
stream sequence of where it stands in the checkpoint.

It splits its share (peer.plugins.splits) as the JSON-lines input does: the stream sequence is
the item index, so message ``seq`` is in split ``seq % S``, and each slot reads the stream from
the least position of the splits it owns and keeps only its splits' messages. Its checkpoint is,
for each split it owns, ``[next seq, next seq]``; after a change of peers each new slot reads on
from the positions of the splits it now owns (``Cursor``), so nothing is read twice or missed. A
fresh start stands at the stream's first message (or, with ``start``, after its last one, or at
the first stored at a time), so that a checkpoint taken before anything came resumes there.

Each slot reads through an ordered consumer of its own: an ephemeral pull consumer that
acknowledges nothing (the stream is read, not consumed, so a commit has nothing to tell it),
delivering from the slot's position, filtered by ``subject``: as each JSON-lines reader scans
the whole file, each slot is sent every message and keeps its own. The slot checks the
consumer's sequence on every message, and the consumer's own count when nothing comes: a message
lost in between (a reconnection) or a consumer gone (the server restarted) makes it create
another from the next sequence it wants, as the NATS clients' ordered consumers do. Pulling,
rather than having messages pushed, is what holds a slow job back: the slot asks for more only
while its buffer has room.

The client lives on the plugin's own event loop (peer.plugins.nats.client); ``poll`` takes what
has arrived in a thread-safe buffer, and never waits. With ``stop_at_end`` the slot reads up to
the stream's last message as the task started (its last sequence, or, with a filter, until the
consumer says none is left), then completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from peer.job.spec import Task
from peer.plugins import PluginError, Recovery, error, out_of_reach, where
from peer.plugins.nats.client import CLOSE_WAIT, Connection, NatsUnreachable, reason
from peer.plugins.nats.settings import NatsInputParams
from peer.plugins.splits import Cursor, Splits
from peer.values.epoch import Epoch

log = logging.getLogger(__name__)

BUFFERED = 4096
"""Messages a slot holds that the job has not polled yet: it pulls no more while it has so many."""
BATCH = 256
"""Messages a pull asks for at most."""
IDLE = 1.0
"""Seconds a pull waits for messages before the slot checks its consumer's count."""
RETRY = 0.5
"""Seconds between attempts to create a consumer again while the server is away."""
INACTIVE = 120.0
"""Seconds after which the server deletes a consumer no pull has used (a slot that stopped)."""
SOURCE_HEADER, ERROR_HEADER, MSG_ID = "Onyx-Source", "Onyx-Error", "Nats-Msg-Id"
_EPOCH, _MILLISECOND = datetime(1970, 1, 1, tzinfo=UTC), timedelta(milliseconds=1)


class Delivered(NamedTuple):
    """A message as the slot's consumer delivered it."""

    seq: int
    subject: str
    data: bytes
    headers: dict[str, str] | None
    pending: int
    """Messages of the filter left in the stream after it, as it was delivered."""
    time: datetime | None


END = object()
"""Put in the buffer once the consumer said nothing is left of the stream as the task started."""


@dataclass
class Share:
    """A slot's reading of the stream's sequence: which delivered messages are its own, where it
    stands, and whether it has read all it must. No server here: it decides from what the
    consumer delivered alone."""

    cursor: Cursor
    end: int | None = None
    """With ``stop_at_end``: the stream's last sequence as the task started."""
    done: bool = False

    def take(self, buffer: deque[Any], limit: int, scan: int) -> list[Delivered]:
        """Up to ``limit`` of the next messages of the owned splits, looking at no more than
        ``scan`` of what the buffer holds; the cursor moved past all it looked at."""
        taken: list[Delivered] = []
        cursor, end = self.cursor, self.end
        while buffer and len(taken) < limit and scan > 0 and not self.done:
            scan -= 1
            item = buffer.popleft()
            if item is END:
                self.done = True
                break
            seq = item.seq
            if seq < cursor.at[0]:
                continue  # delivered again by a consumer made again: read already
            if end is not None and seq > end:
                self.done = True
                break
            if cursor.takes(seq):
                taken.append(item)
            cursor.moved(seq + 1, seq + 1)
            if end is not None and (seq >= end or item.pending == 0):
                self.done = True
        return taken


class Gone(Exception):
    """What the reader cannot get over by trying again: the stream was deleted."""


class OrderedReader:
    """An ordered consumer on the plugin's loop: messages in stream order into ``buffer``."""

    def __init__(self, conn: Connection, settings: NatsInputParams, buffer: deque[Any],
                 end: int | None, description: str) -> None:  # fmt: skip
        self.conn, self.settings, self.buffer = conn, settings, buffer
        self.end, self.description = end, description
        self.next = 1
        """The stream sequence wanted next."""
        self.expected = 1
        """The consumer sequence of the next message: another means one was lost."""
        self.consumer: str | None = None
        self.sub: JetStreamContext.PullSubscription | None = None
        self.finished = False
        self.failure: str | None = None
        """Why the reader stopped for good; the plugin raises it from ``poll``."""
        self.stalled = False
        self.room = asyncio.Event()
        self.said: str | None = None

    async def open(self, first: api.ConsumerConfig) -> int:
        """The first consumer, made as ``first`` says; the sequence it starts at."""
        info = await self._create(first)
        self.next = (info.delivered.stream_seq if info.delivered else 0) + 1
        if self.end is not None and (info.num_pending == 0 or self.next > self.end):
            self._ended()
        return self.next

    async def run(self) -> None:
        while not self.finished:
            try:
                if self.sub is None:
                    await self._reopen()
                    continue
                await self._wait_for_room()
                await self._pull()
            except Gone as e:
                self.failure = str(e)
                return
            except (nats.errors.Error, OSError, TimeoutError) as e:
                self._lost(e)
                await asyncio.sleep(RETRY)

    def wake(self) -> None:
        """Called on the loop once the plugin took from a full buffer."""
        self.room.set()

    # -- consumers ------------------------------------------------------------------------------

    def config(self, **start: Any) -> api.ConsumerConfig:
        return api.ConsumerConfig(
            description=self.description, ack_policy=api.AckPolicy.NONE, mem_storage=True,
            num_replicas=1, inactive_threshold=INACTIVE, filter_subject=self.settings.subject,
            **start,
        )  # fmt: skip

    async def _create(self, config: api.ConsumerConfig) -> api.ConsumerInfo:
        js, stream = self.conn.js, self.settings.stream
        try:
            info = await js.add_consumer(stream, config=config, timeout=self.settings.timeout)
        except nats.js.errors.NotFoundError:
            raise Gone(f"stream {stream!r} does not exist on NATS at {self.conn.url}") from None
        except nats.js.errors.BadRequestError as e:
            raise Gone(f"stream {stream!r} refused a consumer: {e.description}") from None
        self.sub = await js.pull_subscribe_bind(consumer=info.name, stream=stream)
        self.consumer, self.expected = info.name, 1
        return info

    async def _reopen(self) -> None:
        """Another consumer from the next sequence wanted; the last one deleted if it can be."""
        await self.drop()
        await self._create(self.config(deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
                                       opt_start_seq=self.next))  # fmt: skip
        self.said = None

    async def drop(self) -> None:
        sub, consumer, self.sub, self.consumer = self.sub, self.consumer, None, None
        with contextlib.suppress(Exception):
            if sub is not None:
                await sub.unsubscribe()
            if consumer is not None:
                await self.conn.js.delete_consumer(self.settings.stream, consumer)

    def _lost(self, e: BaseException) -> None:
        """The consumer is given up (made again at the next turn); logged once a reason."""
        said = reason(e) or type(e).__name__
        if said != self.said:
            self.said = said
            log.warning("%s: reading stream %r from NATS at %s: %s; reading on from sequence %d",
                        where(self.conn.task), self.settings.stream, self.conn.url, said,
                        self.next)  # fmt: skip
        self.sub = None

    # -- reading --------------------------------------------------------------------------------

    async def _wait_for_room(self) -> None:
        while len(self.buffer) >= BUFFERED:
            self.room.clear()
            self.stalled = True
            if len(self.buffer) >= BUFFERED:
                await self.room.wait()
        self.stalled = False

    async def _pull(self) -> None:
        assert self.sub is not None
        wanted = max(1, min(BATCH, BUFFERED - len(self.buffer)))
        try:
            messages = await self.sub.fetch(wanted, timeout=IDLE)
        except TimeoutError:
            await self._check()
            return
        for message in messages:
            if not self._took(message):
                await self._reopen()
                return
            if self.finished:
                return

    def _took(self, message: Msg) -> bool:
        """Whether ``message`` follows the last one: if not, one was lost."""
        meta = message.metadata
        seq = meta.sequence.stream
        if meta.sequence.consumer != self.expected or seq < self.next:
            return False
        self.expected, self.next = self.expected + 1, seq + 1
        self.buffer.append(Delivered(seq, message.subject, message.data, message.headers,
                                     meta.num_pending, meta.timestamp))  # fmt: skip
        if self.end is not None and (seq >= self.end or meta.num_pending == 0):
            self.finished = True
        return True

    async def _check(self) -> None:
        """Nothing came: the consumer's count says whether something was lost on the way, and
        whether the stream has nothing left for it."""
        assert self.sub is not None
        info = await self.sub.consumer_info()
        delivered = info.delivered.consumer_seq if info.delivered else 0
        if delivered != self.expected - 1:
            await self._reopen()
        elif self.end is not None and info.num_pending == 0:
            self._ended()

    def _ended(self) -> None:
        self.buffer.append(END)
        self.finished = True


class NatsInput:
    """The splits a slot owns of a stream's sequence, read by an ordered consumer of its own."""

    def __init__(self, task: Task, settings: NatsInputParams, splits: Splits) -> None:
        self.task, self.settings, self.splits = task, settings, splits
        owned = splits.owned
        self.conn = Connection(task, settings, f"{task.name}-{owned.start}")
        self.buffer: deque[Any] = deque()
        self.share = Share(Cursor(splits, None, self._error))
        self.reader: OrderedReader | None = None
        self.reading: Future[None] | None = None
        self.decode = _json(settings.metadata) if settings.format == "json" else _bytes
        self.dead: list[Future[Any]] = []
        self.scan = -(-splits.total // max(len(owned), 1))
        """Messages looked at per segment asked for: a poll's work is bounded however the
        owned splits' messages fall."""

    # -- the protocol ---------------------------------------------------------------------------

    def recover(self, recovery: Recovery) -> None:
        self._stop()
        cursor = Cursor(self.splits, recovery.checkpoint, self._error)
        self.conn.connect(recovery)
        state = self._stream_state(recovery)
        end = state.last_seq if self.settings.stop_at_end else None
        self.share = Share(cursor, end, done=not self.splits.owned)
        restored = recovery.checkpoint is not None
        if restored and 0 < cursor.at[0] < state.first_seq:
            log.warning("%s: stream %r no longer holds sequences %d..%d (its limits removed "
                        "them): reading on from %d", where(self.task), self.settings.stream,
                        cursor.at[0], state.first_seq - 1, state.first_seq)  # fmt: skip
        if self.share.done or (end is not None and restored and cursor.at[0] > end):
            self.share.done = True
            return
        start = self._open(recovery, end, cursor if restored else None)
        if not restored:
            cursor.moved(start, start)

    def poll(self, limit: int) -> list[Any]:
        self._raise_failure()
        taken = self.share.take(self.buffer, max(limit, 0), max(limit, 1) * self.scan)
        reader = self.reader
        if reader is not None and reader.stalled:
            self.conn.loop.call_soon_threadsafe(reader.wake)
        if self.share.done:
            self._stop()
        segments = []
        for message in taken:
            try:
                segments.append(self.decode(message))
            except ValueError as e:
                self._undecodable(message, str(e))
        return segments

    def checkpoint(self, epoch: Epoch) -> list[list[int]]:
        return self.share.cursor.checkpoint()

    def completed(self) -> bool:
        return self.share.done

    def synced(self) -> bool:
        """Dead letters are acknowledged before the epoch's barrier passes on; one the server
        did not take kills the job, as the message would otherwise be lost."""
        while self.dead and self.dead[0].done():
            failure = self.dead.pop(0).exception()
            if failure is not None:
                subject = self.settings.dead_letter_subject
                raise self._error(f"a dead letter to subject {subject!r} was not taken: "
                                  f"{reason(failure)}")  # fmt: skip
        return not self.dead

    def committed(self, epoch: Epoch) -> None:
        """Nothing to acknowledge: the stream is read, not consumed."""

    def close(self) -> None:
        """The consumer deleted if the server answers soon, else left to expire."""
        reader = self.reader
        self._stop(drop=False)
        if reader is not None:
            with contextlib.suppress(Exception):
                self.conn.call(reader.drop(), CLOSE_WAIT)
        self.conn.close()

    # -- starting -------------------------------------------------------------------------------

    def _stream_state(self, recovery: Recovery) -> api.StreamState:
        stream = self.settings.stream
        try:
            info = self.conn.call(self._info())
        except Gone as e:
            raise self._error(str(e)) from None
        except NatsUnreachable as e:
            why = f"cannot read stream {stream!r} from NATS at {self.conn.url}: {e}"
            raise out_of_reach(self.task, recovery, why) from None
        return info.state

    async def _info(self) -> api.StreamInfo:
        stream = self.settings.stream
        try:
            return await self.conn.js.stream_info(stream)
        except nats.js.errors.NotFoundError:
            raise Gone(f"stream {stream!r} does not exist on NATS at {self.conn.url}") from None
        except (nats.errors.Error, OSError) as e:
            raise NatsUnreachable(reason(e)) from None

    def _open(self, recovery: Recovery, end: int | None, cursor: Cursor | None) -> int:
        """The slot's ordered consumer started: from the cursor's least position, or as
        ``start`` says; the sequence it starts at."""
        owned = self.splits.owned
        description = (f"onyx task {self.task.name!r} splits {owned.start}..{owned.stop - 1} "
                       f"of {self.splits.total}")  # fmt: skip
        self.buffer = deque()
        reader = OrderedReader(self.conn, self.settings, self.buffer, end, description)
        first = reader.config(**self._start(cursor))
        try:
            start = self.conn.call(self._opened(reader, first))
        except Gone as e:
            raise self._error(str(e)) from None
        except NatsUnreachable as e:
            why = f"cannot read stream {self.settings.stream!r} from NATS at {self.conn.url}: {e}"
            raise out_of_reach(self.task, recovery, why) from None
        self.reader = reader
        if not reader.finished:
            self.reading = self.conn.submit(reader.run())
        return start

    async def _opened(self, reader: OrderedReader, first: api.ConsumerConfig) -> int:
        try:
            return await reader.open(first)
        except (nats.errors.Error, OSError) as e:
            raise NatsUnreachable(reason(e)) from None

    def _start(self, cursor: Cursor | None) -> dict[str, Any]:
        """The consumer's start: the cursor's least position, or ``start``'s."""
        if cursor is not None:
            return {"deliver_policy": api.DeliverPolicy.BY_START_SEQUENCE,
                    "opt_start_seq": max(cursor.at[0], 1)}  # fmt: skip
        when = self.settings.start_time()
        if when is not None:
            return {"deliver_policy": api.DeliverPolicy.BY_START_TIME, "opt_start_time": when}
        if self.settings.start == "new":
            return {"deliver_policy": api.DeliverPolicy.NEW}
        return {"deliver_policy": api.DeliverPolicy.ALL}

    def _stop(self, drop: bool = True) -> None:
        """The reader stopped and its buffer dropped: nothing is read until the next recovery,
        or ever again once the share is done. Each reader has a buffer of its own, so that what
        a stopping one still puts in it never reaches the next."""
        if self.reading is not None:
            self.reading.cancel()
            self.reading = None
        if self.reader is not None and drop:
            self.conn.submit(self.reader.drop())
        self.reader = None
        self.buffer = deque()

    # -- reading --------------------------------------------------------------------------------

    def _raise_failure(self) -> None:
        reader = self.reader
        if reader is not None and reader.failure is not None:
            raise self._error(reader.failure)

    def _undecodable(self, message: Delivered, reason: str) -> None:
        stream, dead = self.settings.stream, self.settings.dead_letter_subject
        place = f"stream {stream!r} sequence {message.seq} (subject {message.subject!r})"
        if dead is None:
            raise self._error(f"{place}: cannot decode its data as {self.settings.format}: "
                              f"{reason}")  # fmt: skip
        headers = {**(message.headers or {}), SOURCE_HEADER: f"{stream}/{message.seq}",
                   ERROR_HEADER: " ".join(reason.split())[:500],
                   MSG_ID: f"onyx-dead-{self.task.name}-{stream}-{message.seq}"}  # fmt: skip
        self.dead.append(self.conn.submit(self.conn.js.publish(dead, message.data,
                                                               headers=headers)))  # fmt: skip

    def _error(self, message: str) -> PluginError:
        return error(self.task, message)


def _json(metadata: bool) -> Any:
    def decode(message: Delivered) -> dict[str, Any]:
        if not message.data:
            raise ValueError("it has no data")
        value = json.loads(message.data)
        if not isinstance(value, dict):
            raise ValueError(f"a JSON {type(value).__name__} is not an object")
        if metadata:
            value["nats_subject"] = message.subject
            value["nats_seq"] = message.seq
            value["nats_timestamp"] = None if message.time is None else (
                (message.time - _EPOCH) // _MILLISECOND)  # fmt: skip
            value["nats_headers"] = dict(message.headers or {})
        return value

    return decode


def _bytes(message: Delivered) -> dict[str, Any]:
    return {"subject": message.subject, "data": message.data,
            "headers": dict(message.headers or {}), "seq": message.seq}  # fmt: skip
