"""Where a task's output goes: the emitter part of its runner, chosen once by the task's kind.

An input or a function routes its batches to the downstream peers its router picks, on credit:
each batch down an edge costs one credit, and it sends while every peer it routes to has some.
The receiver decides how much it gives back as it takes them (peer.runtime.intake): at most the
edge's fixed window (``window``: WINDOW to a peer of another group, LOCAL_WINDOW to one of its
own), and in a job with ``debloat_target`` only what keeps about that many seconds of the
receiver's work in flight; an edge starts with the credit both sides read from the job
(peer.runtime.debloat ``first_credit``). An output hands its batches to its plugin, which may take
several steps to write one (``staged`` until it has).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from peer.job.spec import Task
from peer.runtime.placement import Placement
from peer.runtime.routing import Router

WINDOW = 64
"""Batches a peer may have in flight to a downstream peer of another group before it waits for
credit: enough to cover the time credit takes to come back over the network. The windows bound
every inbox, so a barrier never queues behind more than a window of batches per edge; a
debloated receiver keeps its senders below it when it is slow (peer.runtime.debloat)."""

LOCAL_WINDOW = 4
"""Batches a peer may have in flight to a downstream peer of its own group. One thread steps
both, so there is no latency to cover: a few batches keep the receiver busy, and a short queue
keeps each batch in the processor's cache from one task to the next. With a network-sized
window, a pause (a barrier waiting for its copy from another group) leaves a backlog that one
batch in, one batch out never drains, and every batch then waits long enough to go cold: that
made a colocated pipeline need half as much time again per segment."""


def window(placement: Placement, sender: str, receiver: str) -> int:
    """The fixed credit window of the edge from peer ``sender`` to peer ``receiver``: the most
    it may have in flight."""
    group = placement.groups.get(sender)
    return LOCAL_WINDOW if group is not None and group == placement.groups.get(receiver) else WINDOW


class Emitter(Protocol):
    staged: bool
    """Whether a batch is still being written (an output's plugin): nothing else goes first."""

    def emit(self, segments: Any) -> None:
        """Send a batch on (it is not empty)."""

    def broadcast(self, item: Any) -> None:
        """Send a Barrier, Watermark or END to every downstream peer."""

    def credit(self, peer: str, batches: int) -> None:
        """A downstream peer gives this many more batches of credit."""

    def blocked(self) -> bool:
        """Whether downstream cannot take another batch now."""

    def write(self) -> bool:
        """Go on writing the staged batch; whether it is written."""

    def pump(self) -> bool:
        """Send what waited for credit or room (a logged emitter's); whether any went."""


class RouterEmitter:
    """An input's or a function's: batches to the peers the router picks, on credit."""

    staged = False

    def __init__(
        self,
        router: Router,
        send: Callable[[str, Any], None],
        congested: Callable[[], bool],
        window: Callable[[str], int] = lambda peer: WINDOW,
    ) -> None:
        self.router, self.send, self.congested = router, send, congested
        self.peers = router.peers()
        self.credits = {peer: window(peer) for peer in self.peers}
        self.exhausted: set[str] = set()
        """The peers with no credit left: kept as credit changes, so ``blocked`` costs little."""

    def emit(self, segments: Any) -> None:
        credits = self.credits
        for peer, batch in self.router.split(segments).items():
            left = credits[peer] - 1
            credits[peer] = left
            if left <= 0:
                self.exhausted.add(peer)
            self.send(peer, batch)

    def broadcast(self, item: Any) -> None:
        for peer in self.peers:
            self.send(peer, item)

    def credit(self, peer: str, batches: int) -> None:
        if peer in self.credits:
            left = self.credits[peer] + batches
            self.credits[peer] = left
            if left > 0:
                self.exhausted.discard(peer)

    def blocked(self) -> bool:
        return bool(self.exhausted) or self.congested()

    def write(self) -> bool:
        return False

    def pump(self) -> bool:
        """Nothing waits here: what has no credit is never made."""
        return False


class PluginEmitter:
    """An output's: batches, rows or Arrow as they come, prepared and written by its plugin,
    attached when it loads."""

    def __init__(self) -> None:
        self.plugin: Any = None
        self.staged = False

    def attach(self, plugin: Any) -> None:
        self.plugin = plugin

    def emit(self, segments: Any) -> None:
        self.plugin.prepare(segments)
        self.staged = True
        self.write()

    def broadcast(self, item: Any) -> None:
        """An output has no downstream peers."""

    def credit(self, peer: str, batches: int) -> None:
        """An output has no downstream peers."""

    def blocked(self) -> bool:
        return False

    def write(self) -> bool:
        if self.plugin.write():
            self.staged = False
            return True
        return False

    def pump(self) -> bool:
        return False


def emitter_for(
    task: Task,
    router: Router,
    send: Callable[[str, Any], None],
    congested: Callable[[], bool],
    window: Callable[[str], int] = lambda peer: WINDOW,
) -> RouterEmitter | PluginEmitter:
    """``window`` gives the credit each downstream peer's edge starts with."""
    if task.kind == "output":
        return PluginEmitter()
    return RouterEmitter(router, send, congested, window)
