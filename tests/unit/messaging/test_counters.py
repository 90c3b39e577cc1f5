"""Reading a media driver's counters from its CnC file, without a driver: synthetic files laid
out as Aeron lays them out, read back exactly, and anything else refused with a clear message."""

from __future__ import annotations

import logging
import os
import socket
import struct
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from peer.messaging import counters
from peer.messaging.counters import (
    CHUNK_RECORDS,
    Cnc,
    CncError,
    Counter,
    DriverCollector,
    driver_metrics,
    parse_cnc,
    read_cnc,
    read_live,
    serve_driver_metrics,
)
from peer.metrics import MetricsError

VERSION_0_2_0 = 0x000200
TO_DRIVER, TO_CLIENTS, ERROR_LOG = 1024 + 768, 1024 + 128, 256
PID = 4242
ALLOCATED, RECLAIMED = 1, -1

Record = tuple[int, int, str, int]
"""state, type id, label, value"""

SYSTEM = [
    (ALLOCATED, 0, "Bytes sent", 1696),
    (ALLOCATED, 0, "Bytes received", 1736),
    (ALLOCATED, 0, "NAKs sent", 3),
    (ALLOCATED, 0, "NAKs received", 4),
    (ALLOCATED, 0, "Retransmits sent", 5),
    (ALLOCATED, 0, "Errors: version=1.53.0 commit=abc", 6),
    (ALLOCATED, 0, "Short sends", 7),
    (ALLOCATED, 0, "Sender flow control limits, i.e. back-pressure events", 8),
    (ALLOCATED, 0, "Client liveness timeouts", 9),
    (ALLOCATED, 0, "Bytes currently mapped", 49287168),
    (ALLOCATED, 0, "Retransmitted bytes", 10),
]
RESOURCES = [
    (ALLOCATED, 7, "rcv-channel: aeron:udp?endpoint=127.0.0.1:40001", 1),
    (ALLOCATED, 11, "client-heartbeat: id=1", 1795328050099),
    (ALLOCATED, 11, "client-heartbeat: id=3", 1795328050115),
    (ALLOCATED, 12, "pub-pos (exclusive): 5 -19 1001 aeron:udp?endpoint=127.0.0.1:40002", 1600),
    (ALLOCATED, 1, "pub-lmt: 5 -19 1001 aeron:udp?endpoint=127.0.0.1:40002", 263744),
    (RECLAIMED, 1, "pub-lmt: 7 -20 1001 aeron:udp?endpoint=127.0.0.1:40003", 99),
    (ALLOCATED, 4, "sub-pos: 4 -19 1001 aeron:udp?endpoint=127.0.0.1:40001 @0", 1600),
]


def cnc_bytes(records: Sequence[Record], *, capacity: int = 32, version: int = VERSION_0_2_0,
              heartbeat_ms: int | None = None, metadata: bytes | None = None) -> bytes:  # fmt: skip
    """A CnC file as a driver lays it out, with ``records`` at the start of a counters area of
    ``capacity`` records, a driver heartbeat at ``heartbeat_ms`` (now unless given), and the
    rest zero: unused records. ``metadata`` replaces the whole metadata area when given."""
    meta, values = bytearray(capacity * 512), bytearray(capacity * 128)
    for i, (state, type_id, label, value) in enumerate(records):
        encoded = label.encode()
        struct.pack_into("<ii", meta, i * 512, state, type_id)
        struct.pack_into("<i", meta, i * 512 + 16, i)  # the key: a system counter's id
        struct.pack_into(f"<i{len(encoded)}s", meta, i * 512 + 128, len(encoded), encoded)
        struct.pack_into("<q", values, i * 128, value)
    header = bytearray(128)
    struct.pack_into("<6i3q", header, 0, version, TO_DRIVER, TO_CLIENTS, len(meta), len(values),
                     ERROR_LOG, 10_000_000_000, 1795328050000, PID)  # fmt: skip
    to_driver = bytearray(TO_DRIVER)
    beat = int(time.time() * 1000) if heartbeat_ms is None else heartbeat_ms
    struct.pack_into("<q", to_driver, TO_DRIVER - 768 + 640, beat)
    return b"".join((header, to_driver, bytes(TO_CLIENTS), metadata or meta, values,
                     bytes(ERROR_LOG)))  # fmt: skip


def cnc_file(directory: Path, records: Sequence[Record], **options: object) -> Path:
    (directory / "cnc.dat").write_bytes(cnc_bytes(records, **options))
    return directory


def test_reads_labels_type_ids_and_values_of_allocated_counters():
    cnc = parse_cnc(cnc_bytes(SYSTEM + RESOURCES, heartbeat_ms=1795328050500))

    assert cnc.version == (0, 2, 0)
    assert cnc.pid == PID
    assert cnc.heartbeat_ms == 1795328050500
    expected = [(i, t, label, v) for i, (s, t, label, v) in enumerate(SYSTEM + RESOURCES)
                if s == ALLOCATED]  # fmt: skip
    assert [(c.id, c.type_id, c.label, c.value) for c in cnc.counters] == expected


def test_reclaimed_records_are_skipped_and_the_first_unused_one_ends_the_counters():
    records = [(ALLOCATED, 0, "Bytes sent", 1), (RECLAIMED, 1, "pub-lmt: gone", 2),
               (ALLOCATED, 11, "client-heartbeat: id=1", 3), (0, 0, "", 0),
               (ALLOCATED, 1, "pub-lmt: after the end", 4)]  # fmt: skip

    cnc = parse_cnc(cnc_bytes(records))

    assert cnc.counters == (
        Counter(0, 0, "Bytes sent", 1),
        Counter(2, 11, "client-heartbeat: id=1", 3),
    )


def test_a_full_counters_area_is_read_to_its_end_across_chunks():
    records = [(ALLOCATED, 11, f"client-heartbeat: id={i}", i) for i in range(CHUNK_RECORDS + 9)]

    cnc = parse_cnc(cnc_bytes(records, capacity=len(records)))

    assert [c.value for c in cnc.counters] == list(range(len(records)))


def test_an_empty_counters_area_has_no_counters():
    assert parse_cnc(cnc_bytes([])).counters == ()


def test_an_impossible_label_length_is_held_to_the_record():
    records = [(ALLOCATED, 0, "Bytes sent", 1)]
    meta = bytearray(cnc_bytes(records)[128 + TO_DRIVER + TO_CLIENTS :][: 32 * 512])
    struct.pack_into("<i", meta, 128, 100_000)

    (counter,) = parse_cnc(cnc_bytes(records, metadata=bytes(meta))).counters

    assert counter.label.startswith("Bytes sent")
    assert len(counter.label) == 380


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([ALLOCATED, RECLAIMED]), st.integers(0, 2**31 - 1),
                          st.text(max_size=90), st.integers(-(2**63), 2**63 - 1)),
                max_size=40))  # fmt: skip
def test_every_allocated_counter_reads_back_exactly(records):
    cnc = parse_cnc(cnc_bytes(records, capacity=40))

    assert [(c.id, c.type_id, c.label, c.value) for c in cnc.counters] == [
        (i, t, label, v) for i, (s, t, label, v) in enumerate(records) if s == ALLOCATED
    ]


@pytest.mark.parametrize("version", [0x010000, 0x020100, 0xFF0000])
def test_a_layout_of_another_major_version_is_refused(version):
    major = version >> 16
    with pytest.raises(CncError, match=rf"CnC file version {major}\.\d+\.\d+ is not one this peer "
                       r"reads \(major version 0\)"):  # fmt: skip
        parse_cnc(cnc_bytes(SYSTEM, version=version))


def test_a_newer_minor_version_is_read():
    assert parse_cnc(cnc_bytes(SYSTEM, version=0x000300)).version == (0, 3, 0)


def test_a_file_the_driver_has_not_finished_is_refused():
    with pytest.raises(CncError, match="has not finished writing its CnC file"):
        parse_cnc(cnc_bytes(SYSTEM, version=0))


@pytest.mark.parametrize("cut", [1, 128 + TO_DRIVER, 5000])
def test_a_truncated_file_is_refused(cut):
    data = cnc_bytes(SYSTEM)
    with pytest.raises(CncError, match=rf"CnC file is truncated: {len(data) - cut} bytes, its "
                       rf"header says {len(data)}"):  # fmt: skip
        parse_cnc(data[:-cut])


@pytest.mark.parametrize("length", [0, 47, 127])
def test_a_file_shorter_than_its_header_is_refused(length):
    with pytest.raises(CncError, match=f"CnC file of {length} bytes is shorter than its"):
        parse_cnc(cnc_bytes(SYSTEM)[:length])


def test_impossible_buffer_lengths_are_refused():
    data = bytearray(cnc_bytes(SYSTEM))
    struct.pack_into("<i", data, 8, -1)
    with pytest.raises(CncError, match="impossible buffer lengths"):
        parse_cnc(bytes(data))


def test_a_file_reads_as_its_bytes_parse(tmp_path):
    cnc_file(tmp_path, SYSTEM + RESOURCES, heartbeat_ms=1795328050500)

    assert read_cnc(str(tmp_path)) == parse_cnc(cnc_bytes(SYSTEM + RESOURCES,
                                                          heartbeat_ms=1795328050500))  # fmt: skip


def test_a_directory_without_a_driver_is_refused(tmp_path):
    with pytest.raises(CncError, match=f"no media driver in {tmp_path}: .*cnc.dat does not exist"):
        read_cnc(str(tmp_path))


def test_a_driver_that_stopped_beating_is_gone(tmp_path):
    cnc_file(tmp_path, SYSTEM, heartbeat_ms=1_000_000)

    assert read_live(str(tmp_path), now_ms=1_000_000 + 10_000).pid == PID
    with pytest.raises(CncError, match=rf"\(pid {PID}\) is gone: no heartbeat for 11 s"):
        read_live(str(tmp_path), now_ms=1_000_000 + 11_000)


def test_system_counters_match_by_label_and_resources_count_by_type_id():
    values = {m.name: m.samples[0].value for m in driver_metrics(parse_cnc(cnc_bytes(
        SYSTEM + RESOURCES)))}  # fmt: skip

    assert values == {
        "onyx_aeron_driver_sent_bytes": 1696,
        "onyx_aeron_driver_received_bytes": 1736,
        "onyx_aeron_driver_naks_sent": 3,
        "onyx_aeron_driver_naks_received": 4,
        "onyx_aeron_driver_retransmits_sent": 5,
        "onyx_aeron_driver_errors": 6,
        "onyx_aeron_driver_short_sends": 7,
        "onyx_aeron_driver_back_pressure_events": 8,
        "onyx_aeron_driver_client_timeouts": 9,
        "onyx_aeron_driver_mapped_bytes": 49287168,
        "onyx_aeron_driver_publications": 1,  # the reclaimed pub-lmt is not counted
        "onyx_aeron_driver_subscriptions": 1,
        "onyx_aeron_driver_clients": 2,
    }


def test_system_counters_a_driver_lacks_are_left_out_and_resources_count_zero():
    cnc = Cnc((0, 2, 0), PID, 0, (Counter(0, 0, "Bytes sent", 5),))

    values = {m.name: m.samples[0].value for m in driver_metrics(cnc)}

    assert values == {
        "onyx_aeron_driver_sent_bytes": 5,
        "onyx_aeron_driver_publications": 0,
        "onyx_aeron_driver_subscriptions": 0,
        "onyx_aeron_driver_clients": 0,
    }


def test_the_collector_serves_counters_with_total_and_gauges_without(tmp_path):
    registry = CollectorRegistry()
    registry.register(DriverCollector(str(cnc_file(tmp_path, SYSTEM + RESOURCES))))

    text = generate_latest(registry).decode()

    assert "# TYPE onyx_aeron_driver_sent_bytes_total counter" in text
    assert "onyx_aeron_driver_sent_bytes_total 1696.0" in text
    assert "# TYPE onyx_aeron_driver_mapped_bytes gauge" in text
    assert "onyx_aeron_driver_clients 2.0" in text


def test_the_collector_reports_nothing_without_a_driver_and_says_why_once(tmp_path, caplog):
    collector = DriverCollector(str(tmp_path))
    caplog.set_level(logging.WARNING, logger=counters.__name__)

    assert list(collector.collect()) == []
    assert list(collector.collect()) == []
    cnc_file(tmp_path, SYSTEM)
    assert list(collector.collect()) != []

    assert [r.getMessage() for r in caplog.records] == [
        f"no media driver metrics: no media driver in {tmp_path}: {tmp_path}/cnc.dat does not exist"
    ]


def test_registering_the_collector_reads_no_file_and_takes_its_names(tmp_path):
    registry = CollectorRegistry()
    registry.register(DriverCollector(str(tmp_path)))

    with pytest.raises(ValueError, match="Duplicated timeseries"):
        registry.register(DriverCollector(str(tmp_path)))


def test_a_port_in_use_is_refused_and_nothing_is_registered(tmp_path):
    registry = CollectorRegistry()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MetricsError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            serve_driver_metrics(port, str(tmp_path), registry, address="127.0.0.1")

    assert list(registry.collect()) == []


def test_a_file_cut_short_while_being_read_is_refused(tmp_path):
    path = tmp_path / "cnc.dat"
    path.write_bytes(bytes(10))
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(CncError, match=r"cnc\.dat was cut short while being read"):
            counters._reader(fd, str(path))(0, 20)
    finally:
        os.close(fd)
