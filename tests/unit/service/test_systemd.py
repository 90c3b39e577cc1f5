"""Notifications reach systemd's socket, a path or an abstract name, and nothing is sent (or
raised) where there is no socket."""

from __future__ import annotations

import os
import socket
import tempfile
import uuid
from pathlib import Path

import pytest

from peer import systemd
from peer.cluster.readiness import Readiness


@pytest.fixture
def path_socket(monkeypatch):
    directory = tempfile.mkdtemp(prefix="notify-")  # short: a socket path has ~100 bytes
    path = os.path.join(directory, "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", path)
        yield sock
    Path(path).unlink()
    os.rmdir(directory)


@pytest.fixture
def abstract_socket(monkeypatch):
    name = f"onyx-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        yield sock


def test_a_notification_is_one_datagram_of_lines(path_socket):
    assert systemd.notify(READY="1", STATUS="group a has joined the ring")
    assert path_socket.recv(4096) == b"READY=1\nSTATUS=group a has joined the ring"


def test_an_abstract_socket_is_named_with_a_leading_at(abstract_socket):
    assert systemd.notify(STATUS="up")
    assert abstract_socket.recv(4096) == b"STATUS=up"


def test_without_notify_socket_nothing_is_sent(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert not systemd.notify(READY="1")


def test_a_socket_nobody_listens_on_is_logged_not_raised(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "gone"))
    assert not systemd.notify(READY="1")
    assert f"cannot notify systemd at {tmp_path / 'gone'}" in caplog.text


@pytest.mark.parametrize(
    ("readiness", "expected"),
    [
        (Readiness(True, "ready", "group a has joined the ring"),
         b"READY=1\nSTATUS=group a has joined the ring"),
        (Readiness(False, "leaving", "group a is leaving the ring"),
         b"STOPPING=1\nSTATUS=group a is leaving the ring"),
        (Readiness(False, "lost", "group a: its ZooKeeper session was lost; rejoining"),
         b"STATUS=group a: its ZooKeeper session was lost; rejoining"),
    ],
)  # fmt: skip
def test_readiness_is_announced_as_systemd_reads_it(path_socket, readiness, expected):
    systemd.announce(readiness)
    assert path_socket.recv(4096) == expected
