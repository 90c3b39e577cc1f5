"""A media driver's Aeron counters as Prometheus metrics, served by ``onyx media-driver
--metrics-port``.

pyaeron has no API for a driver's counters, so they are read here from the driver's
command-and-control file, ``<aeron dir>/cnc.dat``, as Aeron's own AeronStat does. The layout
(CnC version 0.2.0, Aeron 1.53; Aeron changes the major version whenever it changes the layout):

* a 128-byte header: int32 cncVersion and the lengths of the five buffers that follow (to-driver,
  to-clients, counters metadata, counters values, error log), then int64 client liveness
  timeout (ns), start timestamp (ms) and the driver's pid;
* counters metadata: 512-byte records, int32 state at 0 (1 allocated, -1 reclaimed, 0 unused and
  none after it), int32 type id at 4, key at 16, int32 label length at 128, label at 132;
* counters values: 128-byte records, the record's int64 value at its start.

The file is read with ``pread`` afresh at every scrape and closed at once. It is never mapped:
a mapped file that a restarting driver truncates would kill the process with SIGBUS, and a
mapping kept open would go on showing a dead driver's counters after a new one replaced it.

Besides the driver's system counters (type 0, told apart by their labels) the driver keeps
counters per resource; their type ids are Aeron's (aeron_counters.h), and one of each of these
exists per resource counted here:

* publisher limit (``pub-lmt``, 1): one per publication the driver runs, UDP or IPC. Concurrent
  publications of one client on the same channel and stream share one; exclusive ones do not;
* receive channel status (``rcv-channel``, 7): one per UDP endpoint the driver receives on,
  which is one per group's subscription. Subscriber positions (``sub-pos``, 4) would miss a
  subscription no publisher has connected to yet, since there is one per subscription *and*
  image;
* client heartbeat (``client-heartbeat``, 11): one per Aeron client attached to the driver.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import REGISTRY, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from peer.metrics import MetricsError  # importing peer.metrics also registers onyx_build_info

log = logging.getLogger(__name__)

CNC_FILE = "cnc.dat"
CNC_MAJOR_VERSION = 0
"""The CnC layout this module reads (Aeron's CNC_VERSION 0.2.0); a driver whose file has another
major version lays it out differently."""
HEADER = struct.Struct("<6i3q")
HEADER_LENGTH = 128
METADATA_LENGTH = 512
VALUE_LENGTH = 128
LABEL_OFFSET, MAX_LABEL_LENGTH = 132, 380
RING_TRAILER_LENGTH, CONSUMER_HEARTBEAT_OFFSET = 768, 640
"""Where the driver's heartbeat lies in the trailer of the to-driver ring buffer."""
RECORD_ALLOCATED, RECORD_UNUSED = 1, 0
CHUNK_RECORDS = 256
"""Metadata records read at once: the area holds 65536 of them, a few hundred are in use."""
DRIVER_TIMEOUT_MS = 10_000
"""Aeron's default driver timeout: a driver beats about once a second, and clients deem it dead
after ten seconds without a beat."""

SYSTEM_COUNTER_TYPE_ID = 0
PUBLISHER_LIMIT_TYPE_ID = 1
RECEIVE_CHANNEL_STATUS_TYPE_ID = 7
CLIENT_HEARTBEAT_TYPE_ID = 11

SYSTEM_COUNTERS = (
    ("onyx_aeron_driver_sent_bytes", "Bytes sent", "Bytes the driver sent"),
    ("onyx_aeron_driver_received_bytes", "Bytes received", "Bytes the driver received"),
    ("onyx_aeron_driver_naks_sent", "NAKs sent", "NAKs the driver sent: loss it asked resent"),
    ("onyx_aeron_driver_naks_received", "NAKs received",
     "NAKs the driver received: loss its receivers reported"),
    ("onyx_aeron_driver_retransmits_sent", "Retransmits sent", "Retransmissions the driver sent"),
    ("onyx_aeron_driver_errors", "Errors", "Errors the driver logged"),
    ("onyx_aeron_driver_short_sends", "Short sends",
     "Datagrams the socket took only part of, or none"),
    ("onyx_aeron_driver_back_pressure_events", "Sender flow control limits",
     "Times a sender waited for its receivers' flow control: back pressure"),
    ("onyx_aeron_driver_client_timeouts", "Client liveness timeouts",
     "Clients the driver dropped for missing their heartbeats"),
)  # fmt: skip
"""(metric, label prefix of the driver's system counter, help): counters, exposed with _total."""
MAPPED_BYTES = ("onyx_aeron_driver_mapped_bytes", "Bytes currently mapped",
                "Bytes of log buffers and files the driver has mapped")  # fmt: skip
RESOURCES = (
    ("onyx_aeron_driver_publications", PUBLISHER_LIMIT_TYPE_ID,
     "Publications the driver runs (UDP and IPC)"),
    ("onyx_aeron_driver_subscriptions", RECEIVE_CHANNEL_STATUS_TYPE_ID,
     "UDP endpoints the driver receives on: one per subscribed channel"),
    ("onyx_aeron_driver_clients", CLIENT_HEARTBEAT_TYPE_ID, "Aeron clients attached to the driver"),
)  # fmt: skip
"""(metric, counter type id, help): gauges counting the driver's counters of that type."""


class CncError(RuntimeError):
    """A CnC file that cannot be read: absent, still being written, truncated, of a layout this
    module does not know, or left by a driver that is gone."""


@dataclass(frozen=True)
class Counter:
    """One allocated counter: its id (its record's index), Aeron type id, label and value."""

    id: int
    type_id: int
    label: str
    value: int


@dataclass(frozen=True)
class Cnc:
    """What a CnC file says: the layout's version, the driver's pid and last heartbeat (epoch
    ms), and its allocated counters in id order."""

    version: tuple[int, int, int]
    pid: int
    heartbeat_ms: int
    counters: tuple[Counter, ...]


Read = Callable[[int, int], bytes]
"""Reads ``length`` bytes at ``offset``: a slice of bytes, or a pread of the file."""


def parse_cnc(data: bytes) -> Cnc:
    """The counters of a CnC file's bytes; raises CncError for bytes that are not one."""
    return _parse(lambda offset, length: data[offset : offset + length], len(data))


def read_cnc(directory: str) -> Cnc:
    """The counters of the driver in ``directory``, read now; raises CncError when there are
    none to read. One open file, read with pread and closed again (see the module's doc)."""
    path = os.path.join(directory, CNC_FILE)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise CncError(f"no media driver in {directory}: {path} does not exist") from None
    except OSError as e:
        raise CncError(f"cannot read {path}: {e.strerror}") from e
    try:
        return _parse(_reader(fd, path), os.fstat(fd).st_size)
    finally:
        os.close(fd)


def _reader(fd: int, path: str) -> Read:
    """Reads of the open file that fail clearly when it is cut short while being read."""

    def read(offset: int, length: int) -> bytes:
        data = os.pread(fd, length, offset)
        if len(data) < length:
            raise CncError(f"{path} was cut short while being read")
        return data

    return read


def _parse(read: Read, size: int) -> Cnc:
    if size < HEADER_LENGTH:
        raise CncError(f"CnC file of {size} bytes is shorter than its {HEADER_LENGTH}-byte header")
    version, to_driver, to_clients, metadata, values, errors, _, _, pid = HEADER.unpack(
        read(0, HEADER.size)
    )
    semantic = (version >> 16 & 0xFF, version >> 8 & 0xFF, version & 0xFF)
    if version == 0:
        raise CncError("the media driver has not finished writing its CnC file yet")
    if semantic[0] != CNC_MAJOR_VERSION:
        found = ".".join(map(str, semantic))
        raise CncError(f"CnC file version {found} is not one this peer reads (major version "
                       f"{CNC_MAJOR_VERSION}); run a media driver of a matching Aeron")  # fmt: skip
    lengths = (to_driver, to_clients, metadata, values, errors)
    if min(lengths) < 0 or to_driver < RING_TRAILER_LENGTH:
        raise CncError(f"CnC file header has impossible buffer lengths {lengths}")
    if size < HEADER_LENGTH + sum(lengths):
        raise CncError(f"CnC file is truncated: {size} bytes, its header says "
                       f"{HEADER_LENGTH + sum(lengths)}")  # fmt: skip
    heartbeat_at = HEADER_LENGTH + to_driver - RING_TRAILER_LENGTH + CONSUMER_HEARTBEAT_OFFSET
    (heartbeat,) = struct.unpack("<q", read(heartbeat_at, 8))
    metadata_at = HEADER_LENGTH + to_driver + to_clients
    capacity = min(metadata // METADATA_LENGTH, values // VALUE_LENGTH)
    records = _metadata(read, metadata_at, capacity)
    counters = _counters(records, read(metadata_at + metadata, len(records) * VALUE_LENGTH))
    return Cnc(semantic, pid, heartbeat, counters)


def _metadata(read: Read, at: int, capacity: int) -> list[bytes]:
    """The metadata records up to the first unused one, read a chunk at a time."""
    records: list[bytes] = []
    while len(records) < capacity:
        count = min(CHUNK_RECORDS, capacity - len(records))
        chunk = read(at + len(records) * METADATA_LENGTH, count * METADATA_LENGTH)
        for i in range(count):
            record = chunk[i * METADATA_LENGTH : (i + 1) * METADATA_LENGTH]
            if struct.unpack_from("<i", record)[0] == RECORD_UNUSED:
                return records
            records.append(record)
    return records


def _counters(records: list[bytes], values: bytes) -> tuple[Counter, ...]:
    counters = []
    for i, record in enumerate(records):
        state, type_id = struct.unpack_from("<ii", record)
        if state != RECORD_ALLOCATED:
            continue
        length = min(max(struct.unpack_from("<i", record, 128)[0], 0), MAX_LABEL_LENGTH)
        label = record[LABEL_OFFSET : LABEL_OFFSET + length].decode("utf-8", "replace")
        (value,) = struct.unpack_from("<q", values, i * VALUE_LENGTH)
        counters.append(Counter(i, type_id, label, value))
    return tuple(counters)


def read_live(directory: str, now_ms: int | None = None) -> Cnc:
    """The counters of the driver in ``directory`` if it is alive: a file whose driver stopped
    beating holds its last counters forever, which must not pass for a running driver's."""
    cnc = read_cnc(directory)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if now_ms - cnc.heartbeat_ms > DRIVER_TIMEOUT_MS:
        raise CncError(f"the media driver in {directory} (pid {cnc.pid}) is gone: no heartbeat "
                       f"for {(now_ms - cnc.heartbeat_ms) / 1000:.0f} s")  # fmt: skip
    return cnc


class DriverCollector(Collector):
    """The media driver's counters in ``directory``, read when Prometheus scrapes. When there
    is no live driver to read it reports none of them, and logs why once, rather than failing
    the scrape: the build info and the exporter's own metrics still answer."""

    def __init__(self, directory: str) -> None:
        self._directory = directory
        self._last_error: str | None = None

    def describe(self) -> Iterator[Metric]:
        """The families, without reading the file: registering must not depend on a driver."""
        for name, _, doc in SYSTEM_COUNTERS:
            yield CounterMetricFamily(name, doc)
        yield GaugeMetricFamily(MAPPED_BYTES[0], MAPPED_BYTES[2])
        for name, _, doc in RESOURCES:
            yield GaugeMetricFamily(name, doc)

    def collect(self) -> Iterator[Metric]:
        try:
            cnc = read_live(self._directory)
        except CncError as e:
            if str(e) != self._last_error:
                log.warning("no media driver metrics: %s", e)
                self._last_error = str(e)
            return
        self._last_error = None
        yield from driver_metrics(cnc)


def driver_metrics(cnc: Cnc) -> Iterator[Metric]:
    """The metric families of one reading; a system counter the driver lacks is left out."""
    for name, prefix, doc in SYSTEM_COUNTERS:
        value = _system_counter(cnc, prefix)
        if value is not None:
            yield CounterMetricFamily(name, doc, value=value)
    mapped = _system_counter(cnc, MAPPED_BYTES[1])
    if mapped is not None:
        yield GaugeMetricFamily(MAPPED_BYTES[0], MAPPED_BYTES[2], value=mapped)
    for name, type_id, doc in RESOURCES:
        count = sum(1 for c in cnc.counters if c.type_id == type_id)
        yield GaugeMetricFamily(name, doc, value=float(count))


def _system_counter(cnc: Cnc, prefix: str) -> float | None:
    for counter in cnc.counters:
        if counter.type_id == SYSTEM_COUNTER_TYPE_ID and counter.label.startswith(prefix):
            return float(counter.value)
    return None


def serve_driver_metrics(port: int, directory: str, registry: CollectorRegistry = REGISTRY,
                         address: str = "0.0.0.0") -> None:  # fmt: skip
    """Serve ``/metrics`` on ``address:port`` from a daemon thread: the counters of the media
    driver in ``directory``, and whatever else ``registry`` holds (the default registry holds
    ``onyx_build_info``)."""
    try:
        start_http_server(port, address, registry=registry)
    except OSError as e:
        raise MetricsError(f"cannot serve metrics on {address}:{port}: {e.strerror}") from e
    registry.register(DriverCollector(directory))
