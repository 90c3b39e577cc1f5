"""Delivered epochs: the two-phase commit of peer.plugins.staged for a sink whose readers are
elsewhere (a Kafka topic, a PostgreSQL table), not in the staging place.

A slot stages each epoch's records as files, as the file sinks do, and they are sealed durable at
the barrier that ends the epoch. Publishing, once the epoch commits, is a delivery instead of a
rename: each sealed epoch's files are read back and handed to the sink's ``Delivery``, and only
once it returns is the staged epoch removed. So an epoch reaches its readers only once it is
committed, and what a crash interrupts is still staged, or named by the committed checkpoint,
for the next recovery to deliver again.

A delivery may therefore be asked for twice: once cut short by a crash (or a rollback), then
again by the recovery. ``resumed`` tells it so: true for every epoch this place did not seal
itself, which is each epoch a recovery settles. A resumed delivery must send only what its
readers do not have yet (a PostgreSQL sink finds the epoch's marker row; a Kafka sink reads the
records the epoch already wrote); a fresh one may send it all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from peer.plugins.places import Entry, Place


class Delivery(Protocol):
    """How a sink sends a committed epoch to its readers."""

    def deliver(self, name: str, files: dict[str, bytes], resumed: bool) -> None:
        """Send staged epoch ``name`` (its files by name) so that readers see it once; with
        ``resumed``, part of it may have been sent before. Runs on the slot's lane, or within
        ``recover``; raises to fail the publish."""


class DeliveredPlace:
    """A place whose publishing is a delivery; everything else is the staging place's own."""

    def __init__(self, staging: Place, delivery: Delivery) -> None:
        self._staging = staging
        self._delivery = delivery
        self._sealed_here: set[str] = set()
        """Epochs this place sealed: none of them has been delivered before."""

    def temp(self, name: str) -> Path:
        return self._staging.temp(name)

    def entries(self) -> list[Entry]:
        return self._staging.entries()

    def seal(self, name: str, temp: Path, files: list[str]) -> None:
        self._staging.seal(name, temp, files)
        self._sealed_here.add(name)

    def files(self, name: str) -> list[str] | None:
        return self._staging.files(name)

    def read(self, name: str, relative: str) -> bytes:
        return self._staging.read(name, relative)

    def publish(self, epochs: list[tuple[str, list[str]]]) -> None:
        """Deliver each epoch, oldest first, then remove it from the staging place."""
        for name, files in epochs:
            held = {relative: self._staging.read(name, relative) for relative in files}
            self._delivery.deliver(name, held, resumed=name not in self._sealed_here)
            self._staging.remove(name, sealed=True)
            self._sealed_here.discard(name)

    def remove(self, name: str, sealed: bool) -> None:
        self._staging.remove(name, sealed)
        self._sealed_here.discard(name)

    def close(self) -> None:
        self._staging.close()
