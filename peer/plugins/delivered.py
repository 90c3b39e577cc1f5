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

import io
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import msgpack

from peer.job.spec import Task
from peer.plugins import Recovery, Sealing, error
from peer.plugins.places import Entry, Place, place_for
from peer.plugins.staged import Finish, StagedEpochs
from peer.values.columnar import Batch, rows
from peer.values.epoch import Epoch

RECORDS = "records.msgpack"
"""The staged file of an epoch's records, each packed with msgpack, in the order written."""


class Delivery(Protocol):
    """How a sink sends a committed epoch to its readers."""

    def start(self, recovery: Recovery) -> None:
        """Reach the readers' system as the task starts (fencing an older writer, learning a
        table's columns), before any delivery."""

    def close(self) -> None:
        """Let go of the connections."""

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
        """Deliver each epoch, oldest first, then remove it from the staging place. A delivery
        that fails may have sent part of its epoch: any later one of it resumes."""
        for name, files in epochs:
            held = {relative: self._staging.read(name, relative) for relative in files}
            fresh = name in self._sealed_here
            self._sealed_here.discard(name)
            self._delivery.deliver(name, held, resumed=not fresh)
            self._staging.remove(name, sealed=True)

    def remove(self, name: str, sealed: bool) -> None:
        self._staging.remove(name, sealed)
        self._sealed_here.discard(name)

    def close(self) -> None:
        self._staging.close()


def records(files: dict[str, bytes]) -> Iterator[Any]:
    """The records a staged epoch holds, in the order they were written."""
    return iter(msgpack.Unpacker(io.BytesIO(files.get(RECORDS, b"")), use_list=False))


class DeliveredOutput:
    """An exactly-once output whose readers are elsewhere: each epoch's records appended to one
    staged file as they come, sealed at its barrier, delivered at its commit. ``record`` makes a
    segment the record the delivery will send, checked now, so that a committed epoch always
    delivers; ``finish`` adds what the delivery needs besides, at the seal."""

    def __init__(self, task: Task, staging: str, slot: int, delivery: Delivery, *,
                 record: Callable[[Any], Any], finish: Finish | None = None) -> None:  # fmt: skip
        self.task, self.delivery, self.record, self.finish = task, delivery, record, finish
        self.epochs = StagedEpochs(task, DeliveredPlace(place_for(task, staging), delivery), slot)
        self.staged: list[bytes] = []
        self.file: BinaryIO | None = None

    def recover(self, recovery: Recovery) -> None:
        """Start the delivery, then deliver what the committed checkpoint names."""
        self._close_file()
        self.delivery.start(recovery)
        self.epochs.recover(recovery)

    def prepare(self, segments: Batch) -> None:
        pack, record = msgpack.packb, self.record
        self.staged.extend(pack(record(segment)) for segment in rows(segments))

    def write(self) -> bool:
        if self.staged:
            if self.file is None:
                self.file = (self.epochs.directory() / RECORDS).open("ab")
            self.file.write(b"".join(self.staged))
            self.staged.clear()
        return True

    def synced(self) -> bool:
        return self.epochs.synced()

    def checkpoint(self, epoch: Epoch) -> Sealing:
        if self.staged:
            raise error(self.task, f"checkpoint at {epoch.describe()} with records prepared "
                                   "but not written: write() must finish first")  # fmt: skip
        written = self.file is not None
        self._close_file()
        durable = self.epochs.seal(epoch, self.finish if written else None)
        return Sealing(self.epochs.position() or None, durable)

    def committed(self, epoch: Epoch) -> None:
        self.epochs.committed(epoch)

    def drained(self) -> Future[None]:
        return self.epochs.drained()

    def close(self) -> None:
        self._close_file()
        self.epochs.close()
        self.delivery.close()

    def _close_file(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
