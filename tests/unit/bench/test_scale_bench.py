"""The scale bench's parts: its UDP transport carries frames between members and wakes the one
they are for, and its reading of ZooKeeper's counters finds what the server says."""

from __future__ import annotations

import threading

import pytest

from bench.udp_transport import MAX_DATAGRAM, UdpHub, parse_site
from bench.zookeeper_counters import Counters, parse_mntr, parse_zxid
from tests.support import wait_for

SRVR = """Zookeeper version: 3.8.0-debian, built on 2023-03-07 17:21 UTC
Latency min/avg/max: 0/0.4571/12
Received: 4711
Sent: 4710
Connections: 3
Outstanding: 0
Zxid: 0x1a2b
Mode: standalone
Node count: 12
"""
MNTR = (
    "zk_version\t3.8.0-debian, built on 2023-03-07 17:21 UTC\n"
    "zk_server_state\tstandalone\n"
    "zk_packets_received\t4711\n"
    "zk_num_alive_connections\t3\n"
    "zk_avg_latency\t0.4571\n"
)


@pytest.fixture
def hub():
    hub = UdpHub()
    yield hub
    hub.close()


def taken(transport) -> list[bytes]:
    got: list[bytes] = []
    transport.poll(got.append)
    return got


def test_a_frame_reaches_its_member_and_wakes_it(hub):
    a_woken, b_woken = threading.Event(), threading.Event()
    a, b = hub.transport(a_woken), hub.transport(b_woken)
    assert a.offer(b.address, b"rumor")
    wait_for(b_woken.is_set, 10, "the receiver to be woken")
    assert taken(b) == [b"rumor"]
    assert not a_woken.is_set()
    assert taken(a) == []


def test_frames_up_to_max_frame_arrive_whole_and_in_order(hub):
    a, b = hub.transport(threading.Event()), hub.transport(threading.Event())
    frames = [bytes([i]) * MAX_DATAGRAM for i in range(5)]
    beacon = a.beacon()
    assert beacon.max_frame == MAX_DATAGRAM
    for frame in frames:
        assert beacon.offer(b.address, frame)
    got: list[bytes] = []
    wait_for(lambda: b.poll(got.append) >= 0 and len(got) == len(frames), 10, "five frames")
    assert got == frames


def test_poll_hands_over_at_most_its_limit(hub):
    a, b = hub.transport(threading.Event()), hub.transport(threading.Event())
    for i in range(3):  # a full send buffer refuses an offer: it is offered again
        wait_for(lambda i=i: a.offer(b.address, bytes([i])), 10, f"frame {i} taken to send")
    wait_for(lambda: len(b.inbox) == 3, 10, "three frames queued")
    got: list[bytes] = []
    assert b.poll(got.append, limit=2) == 2
    assert b.poll(got.append, limit=2) == 1
    assert got == [b"\x00", b"\x01", b"\x02"]


@pytest.mark.parametrize("site", ["nowhere", "host:", ":80", "host:port"])
def test_a_site_that_is_not_host_and_port_is_refused_naming_it(site):
    with pytest.raises(ValueError, match=repr(site)):
        parse_site(site)


def test_the_zxid_is_read_from_srvr_in_hexadecimal():
    assert parse_zxid(SRVR) == 0x1A2B


def test_an_answer_without_a_zxid_is_refused_quoting_it():
    with pytest.raises(ValueError, match="not currently serving"):
        parse_zxid("This ZooKeeper instance is not currently serving requests\n")


def test_mntr_figures_are_its_numeric_lines():
    figures = parse_mntr(MNTR)
    assert figures == {
        "zk_packets_received": 4711,
        "zk_num_alive_connections": 3,
        "zk_avg_latency": 0.4571,
    }


def test_counters_subtract_field_by_field():
    later, earlier = Counters(12.5, 110, 900, 7), Counters(2.5, 100, 400, 3)
    assert later.minus(earlier) == Counters(10.0, 10, 500, 4)
