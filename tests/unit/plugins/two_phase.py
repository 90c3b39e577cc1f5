"""The generative run both two-phase-commit sinks are tested with: allocations that live, seal
and commit epochs at random, and crash at random, against a sink that must end up holding what a
failure-free run holds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from peer.values.epoch import Epoch


@dataclass
class Coordinator:
    """What outlives a sink's crash: the epochs committed, the input's position at each, and
    the sink's checkpoint at each, which its recovery from that epoch is handed."""

    segments: list[Any]
    data: st.DataObject
    put: Callable[..., None]
    """``put(plugin, *segments)``: prepare and write a batch."""
    positions: dict[Epoch | None, int] = field(default_factory=lambda: {None: 0})
    checkpoints: dict[Epoch | None, Any] = field(default_factory=lambda: {None: None})
    committed: Epoch | None = None

    def live(self, plugin: Any, version: int, crash: bool) -> None:
        """One allocation's run from the committed epoch: batches, barriers at random, commits a
        random number of epochs behind, and the sink hearing of them further behind still; to
        the end of the input and a final committed barrier, or to a crash at a random batch."""
        draw = self.data.draw
        index, epoch, sealed = self.positions[self.committed], Epoch(version, 1), []
        lag = draw(st.integers(0, 3), label="epochs from seal to commit")
        notice = draw(st.integers(0, 2), label="epochs from commit to the sink hearing it")
        stop = draw(st.integers(0, 12), label="batches before the crash") if crash else None
        batches = 0
        while index < len(self.segments) and batches != stop:
            size = draw(st.integers(1, 4), label="batch size")
            self.put(plugin, *self.segments[index : index + size])
            index, batches = min(index + size, len(self.segments)), batches + 1
            if draw(st.booleans(), label="barrier"):
                self.seal(plugin, epoch, index)
                sealed.append(epoch)
                epoch = Epoch(version, epoch.number + 1)
                if len(sealed) > lag:
                    self.committed = sealed[-1 - lag]
                if len(sealed) > lag + notice:
                    self.commit(plugin, sealed[-1 - lag - notice])
        if crash:
            self.crash(plugin, epoch, version)
        else:
            self.seal(plugin, epoch, index)
            self.committed = epoch
            self.commit(plugin, epoch)
        plugin.close()

    def crash(self, plugin: Any, epoch: Epoch, version: int) -> None:
        """Die between batches; a sink with more places to die in draws one here."""

    def seal(self, plugin: Any, epoch: Epoch, index: int) -> None:
        """Seal ``epoch`` and wait until it is durable, as a peer does before its ACK."""
        sealing = plugin.checkpoint(epoch)
        sealing.durable.result()
        self.positions[epoch] = index
        self.checkpoints[epoch] = sealing.position

    def commit(self, plugin: Any, epoch: Epoch) -> None:
        """Tell the sink ``epoch`` is committed and wait for its publishing, so that a crash
        after it finds the directory as the sink left it."""
        plugin.committed(epoch)
        plugin.drained().result()


@dataclass(frozen=True)
class Sink:
    """How a test opens its sink and looks at its directory."""

    open: Callable[[Path, int, Epoch | None, int, Any], Any]
    """``open(directory, slot, committed, version, checkpoint)``: a recovered sink."""
    visible: Callable[[Path], Any]
    """What a reader sees."""
    expected: Callable[[list[Any]], Any]
    """What a reader must see once these segments are committed."""
    staged: Callable[[Path], list[str]]
    """What is left staged, which a recovery leaves empty."""


def run(coordinator: Coordinator, sink: Sink, directory: Path, crashes: int) -> None:
    """Allocations 1 .. crashes + 1, each but the last ending in a crash; after each recovery the
    reader sees exactly the committed epochs and nothing older is left staged."""
    for version in range(1, crashes + 2):
        checkpoint = coordinator.checkpoints[coordinator.committed]
        plugin = sink.open(directory, 0, coordinator.committed, version, checkpoint)
        committed = coordinator.segments[: coordinator.positions[coordinator.committed]]
        assert sink.visible(directory) == sink.expected(committed)
        assert sink.staged(directory) == []
        coordinator.live(plugin, version, crash=version <= crashes)


class Unlisted:
    """A place whose listing shows nothing, as an object store's may while it lags: what a
    recovery publishes must not hang on it. Everything else is the place's own."""

    def __init__(self, place: Any) -> None:
        self._place = place

    def __getattr__(self, name: str) -> Any:
        return getattr(self._place, name)

    def entries(self) -> list[Any]:
        return []
