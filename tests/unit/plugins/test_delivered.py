"""Delivered epochs: a delivery is told it resumes whenever part of its epoch may be out
already, so a sink never sends a record twice for being told it starts afresh."""

from __future__ import annotations

from pathlib import Path

import pytest

from peer.plugins import Recovery
from peer.plugins.delivered import DeliveredPlace
from peer.plugins.places import DirectoryPlace
from tests.unit.plugins.plugin_fixtures import task


class Recorded:
    """A delivery that notes each call, failing the first ``failures`` of them."""

    def __init__(self, failures: int = 0) -> None:
        self.calls: list[tuple[str, bool]] = []
        self.failures = failures

    def start(self, recovery: Recovery) -> None:
        """Nothing to reach."""

    def close(self) -> None:
        """Nothing held."""

    def deliver(self, name: str, files: dict[str, bytes], resumed: bool) -> None:
        self.calls.append((name, resumed))
        if len(self.calls) <= self.failures:
            raise OSError("the readers' system went away half way")


def staged(place: DeliveredPlace, tmp_path: Path, name: str) -> None:
    temp = place.temp(name)
    temp.mkdir()
    (temp / "records.msgpack").write_bytes(b"\x91\x01")
    place.seal(name, temp, ["records.msgpack"])


def test_an_epoch_sealed_here_is_delivered_afresh_and_then_removed(tmp_path):
    delivery = Recorded()
    place = DeliveredPlace(DirectoryPlace(task("x", kind="output"), tmp_path), delivery)
    staged(place, tmp_path, "000000000001-00000001-0000")
    place.publish([("000000000001-00000001-0000", ["records.msgpack"])])
    assert delivery.calls == [("000000000001-00000001-0000", False)]
    assert place.files("000000000001-00000001-0000") is None


def test_a_delivery_that_failed_resumes_when_it_is_tried_again(tmp_path):
    delivery = Recorded(failures=1)
    place = DeliveredPlace(DirectoryPlace(task("x", kind="output"), tmp_path), delivery)
    name = "000000000001-00000001-0000"
    staged(place, tmp_path, name)
    with pytest.raises(OSError, match="half way"):
        place.publish([(name, ["records.msgpack"])])
    assert place.files(name) == ["records.msgpack"], "still staged"
    place.publish([(name, ["records.msgpack"])])
    assert delivery.calls == [(name, False), (name, True)]


def test_an_epoch_another_start_sealed_resumes(tmp_path):
    """What a recovery settles: this place did not seal it, so part of it may be out."""
    base = DirectoryPlace(task("x", kind="output"), tmp_path)
    staged(DeliveredPlace(base, Recorded()), tmp_path, "000000000001-00000002-0001")
    delivery = Recorded()
    DeliveredPlace(base, delivery).publish([("000000000001-00000002-0001", ["records.msgpack"])])
    assert delivery.calls == [("000000000001-00000002-0001", True)]
