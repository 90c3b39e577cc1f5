"""The phases of one virtual peer's work on a task, and which phase may follow which.

A task's life, as in Onyx's task lifecycle: load its code, recover (wait for the coordinator to
say where from, fetch and restore the snapshots; a peer that took a seat over then recalls and
replays what the seat had done since, peer.runtime.causal), then run (barriers, batches, watermarks,
heartbeats through the data plane) until its input ends, then wait, still passing barriers, for
the final epoch, and complete. A failure or the end of the allocation can come at any point.
The transitions are checked, so a runner that tries to go back (run again after its input
ended, restore while running) fails loudly instead of quietly doing work twice.
"""

from __future__ import annotations

from enum import Enum


class Phase(Enum):
    LOAD = "load"
    """Resolve the task's code and plugin, and assemble the runner's parts."""
    AWAIT_RECOVERY = "await recovery"
    """With checkpoints: wait for the coordinator's RECOVER, which names the epoch to restore."""
    RESTORE = "restore"
    """Fetch the snapshots of that epoch in the background."""
    RECALL = "recall"
    """A peer that took a seat over, restored: gather from every downstream peer what it holds
    of the seat's determinants and how much of its output it has."""
    REPLAY = "replay"
    """Run again what the seat ran since its snapshot, in the logged order, sending on only
    what downstream does not have yet."""
    REPLAY_ENDED = "replay ended"
    """The input ended within the replay, where the log says the seat's did: the replay goes
    on to the log's end, and the runner is then ENDED."""
    RUN = "run"
    """Read, apply and emit batches; pass barriers and watermarks."""
    ENDED = "ended"
    """The input is over and the end marker sent: barriers still pass until the final epoch."""
    COMPLETED = "completed"
    """An output that has reported the job complete: nothing is left to do."""
    FAILED = "failed"
    """A step raised: the job is being killed."""
    CLOSED = "closed"
    """The allocation is over for this runner: its plugin is closed, its futures cancelled."""


_EXITS = {Phase.FAILED, Phase.CLOSED}

TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.LOAD: frozenset({Phase.AWAIT_RECOVERY, Phase.RUN, *_EXITS}),
    Phase.AWAIT_RECOVERY: frozenset({Phase.RESTORE, Phase.RUN, Phase.RECALL, *_EXITS}),
    Phase.RESTORE: frozenset({Phase.RUN, Phase.RECALL, *_EXITS}),
    Phase.RECALL: frozenset({Phase.REPLAY, *_EXITS}),
    Phase.REPLAY: frozenset({Phase.RUN, Phase.REPLAY_ENDED, *_EXITS}),
    Phase.REPLAY_ENDED: frozenset({Phase.ENDED, *_EXITS}),
    Phase.RUN: frozenset({Phase.ENDED, *_EXITS}),
    Phase.ENDED: frozenset({Phase.COMPLETED, *_EXITS}),
    Phase.COMPLETED: frozenset({Phase.CLOSED}),
    Phase.FAILED: frozenset({Phase.CLOSED}),
    Phase.CLOSED: frozenset(),
}
"""Which phases may follow each: every live phase may fail or be closed."""


INPUT_OVER = frozenset({Phase.REPLAY_ENDED, Phase.ENDED})
"""The phases of a runner whose input has ended."""

RUNNING = frozenset({Phase.RUN, Phase.ENDED})
"""The phases in which a runner reads, applies and fires its timers."""

ENDING: dict[Phase, Phase] = {Phase.RUN: Phase.ENDED, Phase.REPLAY: Phase.REPLAY_ENDED}
"""Where a runner goes when its input ends, from the phases it may end in."""

REPLAYED: dict[Phase, Phase] = {Phase.REPLAY: Phase.RUN, Phase.REPLAY_ENDED: Phase.ENDED}
"""Where a runner goes once its replay is over."""


class PhaseError(RuntimeError):
    """A runner tried a transition its lifecycle does not allow."""


def advance(current: Phase, to: Phase) -> Phase:
    """``to``, when it may follow ``current``; PhaseError naming both otherwise."""
    if to not in TRANSITIONS[current]:
        raise PhaseError(f"a task in phase {current.value!r} cannot go to {to.value!r}")
    return to
