"""A real standalone media driver's counters, read from its CnC file while two transports attached
to it exchange frames over UDP, and served over HTTP as a Prometheus scrape sees them."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyaeron
import pytest
from prometheus_client import CollectorRegistry

from peer import __version__
from peer.messaging.aeron import AeronTransport, run_media_driver
from peer.messaging.counters import DRIVER_TIMEOUT_MS, DriverCollector, serve_driver_metrics
from tests.support import free_port, wait_for

pytestmark = pytest.mark.integration

DEADLINE = 20.0
NAMES = (
    "onyx_aeron_driver_sent_bytes_total",
    "onyx_aeron_driver_received_bytes_total",
    "onyx_aeron_driver_naks_sent_total",
    "onyx_aeron_driver_naks_received_total",
    "onyx_aeron_driver_retransmits_sent_total",
    "onyx_aeron_driver_errors_total",
    "onyx_aeron_driver_short_sends_total",
    "onyx_aeron_driver_back_pressure_events_total",
    "onyx_aeron_driver_client_timeouts_total",
    "onyx_aeron_driver_mapped_bytes",
    "onyx_aeron_driver_publications",
    "onyx_aeron_driver_subscriptions",
    "onyx_aeron_driver_clients",
)


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[tuple[str, threading.Event]]:
    """A standalone media driver in a thread, as ``onyx media-driver`` runs one: its directory,
    and the event that stops it."""
    directory, stop = str(tmp_path / "driver"), threading.Event()
    thread = threading.Thread(target=run_media_driver, args=(directory, stop))
    thread.start()
    try:
        wait_for(lambda: pyaeron.is_driver_active(directory, DRIVER_TIMEOUT_MS), DEADLINE,
                 "the driver to start")  # fmt: skip
        yield directory, stop
    finally:
        stop.set()
        thread.join(DEADLINE)


@pytest.fixture
def pair(driver: tuple[str, threading.Event]) -> Iterator[tuple[AeronTransport, AeronTransport]]:
    """Two transports attached to the driver: frames between them go through its UDP sockets."""
    sender = AeronTransport(aeron_dir=driver[0])
    try:
        receiver = AeronTransport(aeron_dir=driver[0])
        yield sender, receiver
        receiver.close()
    finally:
        sender.close()


def exchange(sender: AeronTransport, receiver: AeronTransport, frames: list[bytes]) -> None:
    """Offers ``frames`` until Aeron has taken them all and the receiver has them all."""
    waiting, received = list(frames), []

    def arrived() -> bool:
        while waiting and sender.offer(receiver.address, waiting[0]):
            waiting.pop(0)
        receiver.poll(received.append)
        return len(received) == len(frames)

    wait_for(arrived, DEADLINE, f"{len(frames)} frames to arrive", interval=0.001)


def samples(collector: DriverCollector) -> dict[str, float]:
    return {s.name: s.value for family in collector.collect() for s in family.samples}


def test_the_collector_sees_the_traffic_and_resources_of_a_live_driver(driver, pair):
    sender, receiver = pair
    exchange(sender, receiver, [bytes([n]) * 1000 for n in range(20)])
    collector = DriverCollector(driver[0])

    def counted() -> dict[str, float] | None:
        """The driver counts a datagram after handling it: its counters may lag a moment."""
        values = samples(collector)
        return values if values["onyx_aeron_driver_received_bytes_total"] >= 20 * 1000 else None

    values = wait_for(counted, DEADLINE, "the driver to count the bytes it received")

    assert set(values) == set(NAMES)
    assert values["onyx_aeron_driver_sent_bytes_total"] >= 20 * 1000
    assert values["onyx_aeron_driver_publications"] >= 1
    assert values["onyx_aeron_driver_subscriptions"] >= 2  # each transport listens on its own
    assert values["onyx_aeron_driver_clients"] >= 2
    assert values["onyx_aeron_driver_mapped_bytes"] > 0
    assert values["onyx_aeron_driver_errors_total"] == 0


def test_a_stopped_driver_reports_nothing(driver):
    directory, stop = driver
    collector = DriverCollector(directory)
    assert samples(collector)["onyx_aeron_driver_clients"] == 0

    stop.set()

    wait_for(lambda: not samples(collector), DEADLINE, "the driver's metrics to go")


def test_a_scrape_over_http_finds_every_driver_metric(driver, pair):
    exchange(*pair, [b"x" * 100] * 5)
    port, registry = free_port(), CollectorRegistry()

    serve_driver_metrics(port, driver[0], registry, address="127.0.0.1")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()

    served = {line.split()[0] for line in text.splitlines() if not line.startswith("#")}
    assert served == set(NAMES)


def test_onyx_media_driver_serves_its_counters_and_no_peer_metrics(tmp_path):
    port = free_port()
    command = [sys.executable, "-m", "peer.cli", "media-driver", "--dir", str(tmp_path / "d"),
               "--metrics-port", str(port), "--metrics-address", "127.0.0.1"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        text = wait_for(lambda: _scrape(port, NAMES[-1]), DEADLINE, "the driver's metrics")
    finally:
        process.terminate()
        process.wait(DEADLINE)
    assert all(name in text for name in NAMES)
    assert f'onyx_build_info{{version="{__version__}"}} 1.0' in text
    assert "onyx_log_position" not in text
    assert "onyx_task_segments_in" not in text


def _scrape(port: int, needle: str) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
    except OSError:
        return None
    return text if needle in text else None


@pytest.mark.parametrize("thread", ["sender", "conductor", "receiver"])
def test_onyx_media_driver_stops_on_a_sigterm_that_lands_on_a_thread_of_its_driver(
    tmp_path, thread
):
    """A signal sent to a process may be taken by any of its threads; Python runs its handler
    in the main thread only. A SIGTERM taken by one of the driver's own threads must stop the
    driver all the same (the main thread's wait wakes to run the handler)."""
    command = [sys.executable, "-m", "peer.cli", "media-driver", "--dir", str(tmp_path / "d")]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        tid = wait_for(lambda: _thread_id(process.pid, thread), DEADLINE, f"its {thread} thread")
        assert ctypes.CDLL(None, use_errno=True).tgkill(process.pid, tid, signal.SIGTERM) == 0
        assert process.wait(DEADLINE) == 0
    finally:
        process.kill()


def _thread_id(pid: int, name: str) -> int | None:
    """The id of the thread of process ``pid`` called ``name``, once there is one."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            if (task / "comm").read_text().strip() == name:
                return int(task.name)
    return None
