"""The null output: it discards every segment and only counts them.

For benchmarks that should measure the job rather than a sink, and for jobs whose functions act
by side effect. Nothing is kept, so there is nothing to lose: it is always synced, and a commit
has nothing to publish. Its checkpoint is the count, so the count goes on across recoveries.
"""

from __future__ import annotations

from peer.job.spec import Task
from peer.plugins import Recovery, error, natural
from peer.values.columnar import Batch
from peer.values.epoch import Epoch


def output(task: Task, slot: int, slots: int) -> NullOutput:
    """The factory named ``peer.plugins.null:output``."""
    return NullOutput(task)


class NullOutput:
    """``written`` counts the segments written, across recoveries."""

    def __init__(self, task: Task) -> None:
        self._task = task
        self._staged = 0
        self.written = 0

    def recover(self, recovery: Recovery) -> None:
        checkpoint = recovery.checkpoint
        if checkpoint is not None and not natural(checkpoint):
            raise error(self._task, f"checkpoint must be a segment count, got {checkpoint!r}")
        self.written = checkpoint or 0

    def prepare(self, segments: Batch) -> None:
        """Rows or an Arrow batch alike: only the count is kept."""
        self._staged += len(segments)

    def write(self) -> bool:
        self.written += self._staged
        self._staged = 0
        return True

    def synced(self) -> bool:
        return True

    def checkpoint(self, epoch: Epoch) -> int:
        return self.written

    def committed(self, epoch: Epoch) -> None:
        """Nothing to publish."""

    def close(self) -> None:
        """Nothing to release."""
