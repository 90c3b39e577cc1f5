"""The exactly-once NATS JetStream output: each committed epoch published to a stream, every
message acknowledged, none twice.

It stages each epoch's records (peer.plugins.delivered) in ``params.staging`` and seals them at
the epoch's barrier, as the exactly-once Kafka output does; once the epoch commits, its delivery
publishes them, each with the header ``Nats-Msg-Id`` = ``<msg_id_prefix>-<stem>-<seq>``: the
staged epoch's name (which names the allocation version, the epoch and the slot) and the
record's place in it. Each publish is sent at once and their acknowledgements gathered; the
delivery returns, and the staged epoch is removed, only once the stream has acknowledged every
one. One not acknowledged (a server away, a timeout) is a StorageError: the job rolls back, and
the recovery delivers the epoch again.

Why a delivery cut short simply publishes everything again: JetStream drops a message whose id
it has stored within the stream's duplicate window, and acknowledges it as a duplicate, so
publishing an epoch twice stores it once, with no reading back. The window (the stream's
``duplicate_window``, two minutes by default) must therefore be longer than the time between a
delivery cut short and the recovery that delivers it again; the output warns when it starts on a
stream whose window is shorter than ``SHORT_WINDOW``. And ``msg_id_prefix`` must be the job's
own: another job publishing the same ids within the window would have its messages dropped.

Each record's subject is checked against the stream's subjects, and its size against the
server's and the stream's limits, when it is prepared, so that a committed epoch is never
refused at its delivery for what it holds.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

import nats.errors
import nats.js.errors
from nats.js import api

from peer.job.spec import Task
from peer.plugins import PluginError, Recovery, error, out_of_reach, segment_json, where
from peer.plugins.delivered import records as staged_records
from peer.plugins.nats.client import Connection, NatsUnreachable, reason
from peer.plugins.nats.settings import NatsOutputParams, covers, msg_id, subject_problem
from peer.storage import StorageError

log = logging.getLogger(__name__)

MSG_ID = "Nats-Msg-Id"
SHORT_WINDOW = 60.0
"""Seconds of duplicate window below which a recovery could outlast it: the output warns."""
RESERVED_BYTES = 512
"""Of a message's size limit, what a record's data and headers leave for the headers the output
adds (its id, the expected stream) and the protocol's framing."""

Record = tuple[str, bytes, dict[str, str] | None]
"""A message to publish: its subject, data and headers."""


@dataclass
class TargetStream:
    """What the output learns of its stream as the task starts."""

    subjects: list[str] = field(default_factory=list)
    """The subjects it captures."""
    limit: int = 0
    """The most bytes a message may hold, headers included: the server's and the stream's
    least (0: not known yet)."""


class NatsEncoder:
    """A segment as a record, checked against the stream's subjects and its size limit."""

    def __init__(self, task: Task, settings: NatsOutputParams, stream: TargetStream) -> None:
        self.task, self.settings, self.stream = task, settings, stream
        self.data = self._json if settings.format == "json" else self._bytes

    @property
    def subjects(self) -> list[str]:
        return self.stream.subjects

    @property
    def limit(self) -> int:
        """The most bytes a record's data and its own headers may hold (0: not known yet)."""
        known = self.stream.limit
        return max(known - RESERVED_BYTES - len(self.settings.msg_id_prefix), 1) if known else 0

    def __call__(self, segment: Any) -> Record:
        subject = self._subject(segment)
        data = self.data(segment)
        headers = self._headers(segment)
        size = len(data) + sum(len(k) + len(v) + 4 for k, v in (headers or {}).items())
        if self.limit and size > self.limit:
            raise error(self.task, f"a message for subject {subject!r} is {size} bytes, over the "
                                   f"{self.limit} the server and stream allow (less "
                                   f"{RESERVED_BYTES} for the output's own headers): "
                                   f"{segment!r:.120}")  # fmt: skip
        return subject, data, headers

    def _subject(self, segment: Any) -> str:
        field = self.settings.subject_field
        if field is None:
            return self.settings.subject or ""
        value = segment.get(field) if isinstance(segment, dict) else None
        if not isinstance(value, str):
            raise error(self.task, f"subject_field {field!r} must hold a subject string, got "
                                   f"{type(value).__name__} in {segment!r:.120}")  # fmt: skip
        problem = subject_problem(value, wildcards=False)
        if problem is None and self.subjects and not any(covers(p, value) for p in self.subjects):
            problem = f"stream {self.settings.stream!r} does not capture it ({self.subjects})"
        if problem is not None:
            raise error(self.task, f"subject_field {field!r} holds {value!r}, which is not a "
                                   f"subject to publish to: {problem}")  # fmt: skip
        return value

    def _json(self, segment: Any) -> bytes:
        return segment_json(self.task, segment)

    def _bytes(self, segment: Any) -> bytes:
        value = segment.get("data") if isinstance(segment, dict) else None
        if isinstance(value, str):
            return value.encode()
        if not isinstance(value, bytes):
            raise error(self.task, f"format bytes writes a segment's 'data' field, which must be "
                                   f"bytes or a string: {segment!r:.120}")  # fmt: skip
        return value

    def _headers(self, segment: Any) -> dict[str, str] | None:
        """A bytes segment's own headers, text to text, on one line each."""
        if self.settings.format != "bytes" or not isinstance(segment, dict):
            return None
        headers = segment.get("headers")
        if not headers:
            return None
        if not (isinstance(headers, dict) and all(_header(k) and _header(v)
                                                  for k, v in headers.items())):  # fmt: skip
            raise error(self.task, f"a segment's 'headers' must map text to text, each on one "
                                   f"line: {segment!r:.120}")  # fmt: skip
        return {k: v for k, v in headers.items() if k != MSG_ID}


def _header(value: object) -> bool:
    return isinstance(value, str) and bool(value) and "\r" not in value and "\n" not in value


class JetStreamDelivery:
    """A slot's publishing of its committed epochs, on the plugin's loop."""

    def __init__(self, task: Task, settings: NatsOutputParams, slot: int) -> None:
        self.task, self.settings = task, settings
        self.conn = Connection(task, settings, f"{task.name}-{slot}")
        self.stream = settings.stream or ""
        self.known = TargetStream()

    def start(self, recovery: Recovery) -> None:
        """Connected again, the stream found and checked, so that a wrong one is named now, not
        at a commit."""
        self.conn.connect(recovery)
        try:
            info = self.conn.call(self._stream())
        except NatsUnreachable as e:
            why = f"cannot read stream {self.stream!r} from NATS at {self.conn.url}: {e}"
            raise out_of_reach(self.task, recovery, why) from None
        config = info.config
        subjects = list(config.subjects or [])
        subject = self.settings.subject
        if subject is not None and not any(covers(p, subject) for p in subjects):
            raise self._error(f"stream {self.stream!r} does not capture subject {subject!r} "
                              f"(its subjects: {subjects})")  # fmt: skip
        limits = [n for n in (self.conn.max_payload, config.max_msg_size or 0) if n > 0]
        self.known.subjects, self.known.limit = subjects, min(limits, default=0)
        self._check_window(config)

    def close(self) -> None:
        self.conn.close()

    def deliver(self, name: str, files: dict[str, bytes], resumed: bool) -> None:
        """Every record published and acknowledged; a delivery resumed publishes all again, and
        the stream drops what it has."""
        records = list(staged_records(files))
        if not records:
            return
        duplicates = self.conn.wait(self._publish(name, records))
        if resumed or duplicates:
            log.info("%s: epoch %s delivered%s, %d of its %d messages already in stream %r",
                     where(self.task), name, " again" if resumed else "", duplicates,
                     len(records), self.stream)  # fmt: skip

    # -- on the loop ----------------------------------------------------------------------------

    async def _stream(self) -> api.StreamInfo:
        js = self.conn.js
        try:
            if not self.stream:
                subject = self.settings.subject or ""
                try:
                    self.stream = await js.find_stream_name_by_subject(subject)
                except nats.js.errors.NotFoundError:
                    raise self._error(f"no stream on NATS at {self.conn.url} captures subject "
                                      f"{subject!r}") from None  # fmt: skip
            return await js.stream_info(self.stream)
        except nats.js.errors.NotFoundError:
            raise self._error(f"stream {self.stream!r} does not exist on NATS at "
                              f"{self.conn.url}") from None  # fmt: skip
        except (nats.errors.Error, OSError) as e:
            raise NatsUnreachable(reason(e)) from None

    async def _publish(self, name: str, records: list[Any]) -> int:
        """Each record sent, then their acknowledgements gathered; how many were duplicates.
        No acknowledgement within the timeout, and one that is a failure, are StorageErrors."""
        js, prefix, stream = self.conn.js, self.settings.msg_id_prefix, self.stream
        acks: list[asyncio.Future[api.PubAck]] = []
        try:
            for seq, (subject, data, headers) in enumerate(records):
                sent = {**(headers or {}), MSG_ID: msg_id(prefix, name, seq)}
                acks.append(await js.publish_async(subject, data, wait_stall=self.settings.timeout,
                                                   stream=stream, headers=sent))  # fmt: skip
            return await self._acknowledged(name, acks)
        except (nats.errors.Error, OSError) as e:
            why = reason(e)
            raise StorageError(f"{where(self.task)}: epoch {name}: a publish to stream "
                               f"{stream!r} failed: {why}") from None  # fmt: skip
        finally:
            for ack in acks:  # what is left waiting holds the client's room for publishes
                ack.cancel()

    async def _acknowledged(self, name: str, acks: list[asyncio.Future[api.PubAck]]) -> int:
        left, duplicates = set(acks), 0
        while left:
            done, left = await asyncio.wait(left, timeout=self.settings.timeout)
            if not done:
                wait = self.settings.timeout
                raise StorageError(f"{where(self.task)}: epoch {name}: {len(left)} of its "
                                   f"{len(acks)} messages not acknowledged by stream "
                                   f"{self.stream!r} within {wait:g} s")  # fmt: skip
            for ack in done:
                duplicates += bool(ack.result().duplicate)
        return duplicates

    def _check_window(self, config: api.StreamConfig) -> None:
        window = config.duplicate_window or 0
        if window < SHORT_WINDOW:
            log.warning("%s: stream %r keeps message ids for %g s, less than %g s: a delivery "
                        "cut short and delivered again after longer would publish messages "
                        "twice (raise its duplicate_window)", where(self.task), self.stream,
                        window, SHORT_WINDOW)  # fmt: skip

    def _error(self, message: str) -> PluginError:
        return error(self.task, message)
