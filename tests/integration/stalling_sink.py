"""An exactly-once JSON-lines sink that, on the first start of its job, never makes an epoch
after the first durable: its peer never acknowledges those epochs, as a sink whose storage hangs
would not. Every later start (once the job has rolled back) is the plain exactly-once sink.

The first start is told apart by a marker it makes in the sink's directory (``_stalled``: the
JSON-lines reader reads only ``*.jsonl``)."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any

from peer.job.spec import Task
from peer.plugins import Sealing
from peer.plugins.jsonl import ExactlyOnceOutput, exactly_once_output
from peer.values.epoch import Epoch


class StallsOnce:
    """The plain sink, but for ``checkpoint`` while this is the first start."""

    def __init__(self, inner: ExactlyOnceOutput, stalls: bool) -> None:
        self.inner, self.stalls = inner, stalls

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def checkpoint(self, epoch: Epoch) -> Sealing:
        sealing = self.inner.checkpoint(epoch)
        if self.stalls and epoch.number > 1:
            return Sealing(sealing.position, Future())
        return sealing


def output(task: Task, slot: int, slots: int) -> StallsOnce:
    marker = Path(task.params["path"]) / "_stalled"
    marker.parent.mkdir(parents=True, exist_ok=True)
    try:
        marker.touch(exist_ok=False)
    except FileExistsError:
        return StallsOnce(exactly_once_output(task, slot, slots), stalls=False)
    return StallsOnce(exactly_once_output(task, slot, slots), stalls=True)
