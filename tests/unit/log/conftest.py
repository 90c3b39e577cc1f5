"""Builders shared by the log entry tests: replicas from plain values, and per-actor views of a
transition's reactions and side effects."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pytest
from pyrsistent import pmap, pset

from peer.log.entry import Entry, Transition
from peer.log.replica import EMPTY_VERSION, Replica


def build_replica(
    version: int = EMPTY_VERSION,
    *,
    ring: Iterable[str] = (),
    groups: Iterable[str] = (),
    pairs: Mapping[str, str] | None = None,
    prepared: Mapping[str, str] | None = None,
    accepted: Mapping[str, str] | None = None,
    aborted: Iterable[str] = (),
    left: Iterable[str] = (),
    group_peers: Mapping[str, Iterable[str]] | None = None,
) -> Replica:
    """A replica from plain values. ``ring`` lists joined groups in ring order and adds the
    pairs closing them into one cycle (none for a lone group); ``groups`` and ``pairs`` add to
    it as given."""
    ring = list(ring)
    ring_pairs = dict(zip(ring, [*ring[1:], *ring[:1]], strict=True)) if len(ring) > 1 else {}
    return Replica(
        version=version,
        groups=pset([*ring, *groups]),
        pairs=pmap({**ring_pairs, **(pairs or {})}),
        prepared=pmap(prepared or {}),
        accepted=pmap(accepted or {}),
        aborted=pset(aborted),
        left=pset(left),
        group_peers=pmap({g: pset(ps) for g, ps in (group_peers or {}).items()}),
    )


class Recorder:
    """An Effects that records every call, in order, as a tuple (method, *arguments)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def append(self, entry: Entry) -> None:
        self.calls.append(("append", entry))

    def back_off(self) -> None:
        self.calls.append(("back_off",))

    def report_if_dead(self, group: str) -> None:
        self.calls.append(("report_if_dead", group))

    def restart_group(self) -> None:
        self.calls.append(("restart_group",))

    def hand_over(self) -> None:
        self.calls.append(("hand_over",))

    def end_group(self) -> None:
        self.calls.append(("end_group",))

    def restart_virtual_peer(self, peer: str) -> None:
        self.calls.append(("restart_virtual_peer", peer))

    def store_origin(self, replica: Replica) -> None:
        self.calls.append(("store_origin", replica))


def reactions_of(t: Transition, *actors: str) -> dict[str, tuple[Entry, ...]]:
    return {actor: t.reactions(actor) for actor in actors}


def effects_of(t: Transition, *actors: str) -> dict[str, list[tuple[Any, ...]]]:
    calls = {}
    for actor in actors:
        recorder = Recorder()
        t.side_effects(actor, recorder)
        calls[actor] = recorder.calls
    return calls


@pytest.fixture
def make_replica() -> Callable[..., Replica]:
    return build_replica


@pytest.fixture
def reactions() -> Callable[..., dict[str, tuple[Entry, ...]]]:
    """``reactions(t, "j", "a")`` is ``{"j": <j's reactions>, "a": <a's reactions>}``."""
    return reactions_of


@pytest.fixture
def effects() -> Callable[..., dict[str, list[tuple[Any, ...]]]]:
    """``effects(t, "j", "a")`` maps each actor to the Effects calls its side effects made."""
    return effects_of
