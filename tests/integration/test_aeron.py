"""The Aeron transport over real UDP, with real media drivers: embedded in this process,
standalone in a thread, and embedded in another OS process."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pyaeron
import pytest

from peer.messaging import aeron, fragments
from peer.messaging.aeron import (
    MAX_FRAME_LENGTH,
    TERM_LENGTH,
    AeronTransport,
    TransportError,
    run_media_driver,
)
from peer.messaging.frame import Header, MessageType, decode, encode
from tests.support import REPO, free_port, wait_for

pytestmark = pytest.mark.integration

DEADLINE = 20.0

# A group in a process of its own: prints its address, then echoes every frame back to the
# address it was given until it has echoed as many as it was told.
ECHO = """
import sys
from peer.messaging.aeron import AeronTransport
from tests.support import wait_for

reply_to, count = sys.argv[1], int(sys.argv[2])
transport = AeronTransport()
print(transport.address, flush=True)
echoed = []

def echo(frame):
    wait_for(lambda: transport.offer(reply_to, frame), 20, "the echo to be taken", 0.001)
    echoed.append(frame)

def echoed_all():
    transport.poll(echo)
    return len(echoed) >= count

wait_for(echoed_all, 20, f"{count} frames to echo", 0.001)
transport.close()
"""


@pytest.fixture
def transport() -> Iterator[Callable[..., AeronTransport]]:
    """A factory of transports, every one closed at the end of the test."""
    made: list[AeronTransport] = []

    def make(**options: object) -> AeronTransport:
        made.append(AeronTransport(**options))
        return made[-1]

    yield make
    for t in made:
        t.close()


def transfer(sender: AeronTransport, address: str, frames: Sequence[bytes],
             receiver: Callable[[Callable[[bytes], None]], int],
             expect: int | None = None) -> tuple[list[bytes], int]:  # fmt: skip
    """Offers ``frames`` in order, each again until Aeron takes it, while ``receiver`` polls;
    returns what arrived once ``expect`` frames arrived (as many as were offered unless told),
    and how often Aeron said not yet."""
    expect = len(frames) if expect is None else expect
    waiting, received, refusals = deque(frames), [], 0

    def step() -> bool:
        nonlocal refusals
        while waiting:
            if not sender.offer(address, waiting[0]):
                refusals += 1
                break
            waiting.popleft()
        receiver(received.append)
        return len(received) >= expect

    wait_for(step, DEADLINE, f"{expect} frames to arrive", interval=0.001)
    return received, refusals


def stopped() -> threading.Event:
    """A stop already given, so a driver that wrongly starts returns instead of hanging."""
    stop = threading.Event()
    stop.set()
    return stop


def numbered(count: int, size: int) -> list[bytes]:
    """``count`` frames of ``size`` bytes, each made of its own number over and over."""
    return [i.to_bytes(4, "little") * (size // 4) for i in range(count)]


def test_two_transports_exchange_frames_in_order(transport):
    a, b = transport(), transport()
    to_b = [encode(Header(MessageType.BATCH, 1, 1, 2, n, 7), [{"n": n}]) for n in range(200)]
    to_a = [encode(Header(MessageType.END, 1, 2, 1, n, 7)) for n in range(50)]

    received_by_b, _ = transfer(a, b.address, to_b, b.poll)
    received_by_a, _ = transfer(b, a.address, to_a, a.poll)

    assert received_by_b == to_b
    assert received_by_a == to_a
    assert [decode(f)[1] for f in received_by_b] == [[{"n": n}] for n in range(200)]


def test_frames_up_to_the_largest_arrive_whole(transport):
    a, b = transport(), transport()
    frames = [os.urandom(1 << 20), os.urandom(MAX_FRAME_LENGTH)]
    assert transfer(a, b.address, frames, b.poll)[0] == frames
    with pytest.raises(ValueError, match="larger than"):
        a.offer(b.address, bytes(MAX_FRAME_LENGTH + 1))


def test_a_larger_mtu_carries_frames_whole_and_a_bad_one_is_refused(transport):
    a, b = transport(mtu=8192), transport()
    frames = [os.urandom(size) for size in (100, 8000, 9000, 1 << 20)]
    assert transfer(a, b.address, frames, b.poll)[0] == frames
    with pytest.raises(TransportError, match="MTU 1000 is not a multiple of 32 from 1408"):
        AeronTransport(mtu=1000)


def test_a_burst_beyond_the_term_is_back_pressured_and_then_arrives_exactly_once(transport):
    a, b = transport(), transport()
    transfer(a, b.address, [b"connected"], b.poll)
    burst = numbered(count=4 * TERM_LENGTH // 65536, size=65536)  # four terms' worth

    taken = 0
    while taken < len(burst) and a.offer(b.address, burst[taken]):  # b does not poll
        taken += 1
    assert 0 < taken < len(burst)

    received, refusals = transfer(a, b.address, burst[taken:], lambda h: b.poll(h, 1024),
                                  expect=len(burst))  # fmt: skip
    assert refusals > 0
    assert received == burst
    assert b.poll(received.append) == 0


def test_a_handler_that_raises_loses_no_frames(transport):
    """Aeron counts a whole poll as read even when the handler raises part way through."""
    a, b = transport(), transport()
    transfer(a, b.address, [b"connected"], b.poll)
    frames = numbered(count=60, size=8)
    assert all(a.offer(b.address, frame) for frame in frames)
    seen: list[bytes] = []

    def handler(frame: bytes) -> None:
        seen.append(frame)
        if len(seen) % 7 == 0:
            raise RuntimeError("handler failed")

    def seen_all() -> bool:
        with contextlib.suppress(RuntimeError):
            b.poll(handler)
        return len(seen) >= len(frames)

    wait_for(seen_all, DEADLINE, "every frame", interval=0.001)
    assert seen == frames


def test_offer_to_a_group_not_listening_is_refused_not_dropped(transport):
    a = transport()
    nobody = f"127.0.0.1:{free_port()}"
    assert a.offer(nobody, b"kept by the caller") is False
    a.forget(nobody)
    a.forget(nobody)  # forgetting twice is harmless


def test_forget_closes_the_publication_and_a_later_offer_reopens_one(transport):
    a, b = transport(), transport()
    assert transfer(a, b.address, [b"one"], b.poll)[0] == [b"one"]
    a.forget(b.address)
    assert transfer(a, b.address, [b"two"], b.poll)[0] == [b"two"]


def test_close_removes_the_embedded_driver_directory_and_is_idempotent():
    def embedded_dirs() -> set[Path]:
        return set(Path(aeron.EMBEDDED_DRIVER_PARENT).glob(f"onyx-aeron-{os.getpid()}-*"))

    before = embedded_dirs()
    t = AeronTransport()
    [directory] = embedded_dirs() - before
    assert (directory / "cnc.dat").exists()
    t.close()
    t.close()
    assert not directory.exists()


def test_the_driver_directory_of_a_killed_process_goes_when_the_next_transport_starts(transport):
    killed = subprocess.Popen(
        [sys.executable, "-c", ECHO, "127.0.0.1:9", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        assert killed.stdout.readline().strip()
        [left] = Path(aeron.EMBEDDED_DRIVER_PARENT).glob(f"onyx-aeron-{killed.pid}-*")
    finally:
        killed.kill()
        killed.wait()
    assert left.exists()
    wait_for(lambda: not pyaeron.is_driver_active(str(left), aeron.DRIVER_LIVENESS_MS), DEADLINE,
             "the killed driver's heartbeat to go stale")  # fmt: skip
    transport()
    assert not left.exists()


def test_a_standalone_driver_in_a_thread_serves_a_transport(transport, tmp_path):
    directory = str(tmp_path / "driver")
    stop = threading.Event()
    driver = threading.Thread(target=run_media_driver, args=(directory, stop))
    driver.start()
    try:
        wait_for(lambda: pyaeron.is_driver_active(directory, 1000), DEADLINE, "the driver")
        with pytest.raises(TransportError, match=re.escape(f"already running in {directory}")):
            run_media_driver(directory, stopped())
        attached, embedded = transport(aeron_dir=directory), transport()
        assert transfer(attached, embedded.address, [b"out"], embedded.poll)[0] == [b"out"]
        assert transfer(embedded, attached.address, [b"back"], attached.poll)[0] == [b"back"]
        attached.close()
    finally:
        stop.set()
        driver.join(DEADLINE)
    assert not driver.is_alive()
    assert not Path(directory).exists()


def test_a_driver_refuses_a_directory_holding_other_files(tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(TransportError, match="holds files of its own"):
        run_media_driver(str(tmp_path), stopped())
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_attaching_where_no_driver_runs_fails_naming_the_directory(tmp_path):
    missing = re.escape(f"no media driver is running in {tmp_path}")
    with pytest.raises(TransportError, match=missing):
        AeronTransport(aeron_dir=str(tmp_path))


def test_frames_cross_to_another_process_and_back(transport):
    a = transport()
    frames = [encode(Header(MessageType.BATCH, 3, 1, 2, n, 9), [{"n": n}]) for n in range(100)]
    echo = subprocess.Popen(
        [sys.executable, "-c", ECHO, a.address, str(len(frames))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        echo_address = echo.stdout.readline().strip()
        assert echo_address, echo.stderr.read()
        assert transfer(a, echo_address, frames, a.poll)[0] == frames
        assert echo.wait(DEADLINE) == 0, echo.stderr.read()
    finally:
        echo.kill()
        echo.wait()


def test_a_12_mb_segment_and_a_batch_of_1_mb_segments_travel_in_pieces(transport):
    """What the data plane does with frames over one message: a batch split by segment, a
    large segment in fragments, put back together by the receiver in order."""
    a, b = transport(), transport()
    big = Header(MessageType.BATCH, 3, 1, 2, 0, 9)
    large = [{"n": 0, "blob": os.urandom(12 * 1024 * 1024)}]
    many = [{"n": n, "blob": os.urandom(1024 * 1024)} for n in range(1, 41)]
    pieces = fragments.frames(big, large, MAX_FRAME_LENGTH) + fragments.frames(
        big, many, MAX_FRAME_LENGTH
    )
    assert len(pieces) > 2
    assert max(map(len, pieces)) <= MAX_FRAME_LENGTH
    assembly = fragments.Assembly()
    received, _ = transfer(a, b.address, pieces, b.poll)
    messages = [m for m in map(assembly.add, received) if m is not None]
    assert messages == [(big, large), (big, many)]
