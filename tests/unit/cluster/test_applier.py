"""The member's appliers: allocations on a thread of their own give the transitions and the
replicas the classic apply gives, whatever the chunks the log is read in."""

from __future__ import annotations

import itertools
import threading
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from peer.cluster.applier import Background, Sequential
from peer.log.apply import apply_entry
from peer.log.replica import Replica
from tests.unit.log.random_logs import random_logs

LANDING_TIMEOUT = 30.0
"""The longest a test waits for the background thread to land an allocation."""


def chunks(log: list, cuts: list[int]) -> list[list]:
    edges = sorted({0, len(log), *(c % (len(log) + 1) for c in cuts)})
    return [log[a:b] for a, b in itertools.pairwise(edges)]


@settings(max_examples=40, deadline=None)
@given(random_logs(), st.lists(st.integers(0, 40), max_size=5))
def test_background_allocation_gives_the_classic_transitions(log, cuts):
    classic = Sequential(Replica())
    want = list(classic.transitions(log))
    wakeup = threading.Event()
    background = Background(Replica(), wakeup)
    try:
        got = []
        for chunk in chunks(log, cuts):
            got += background.transitions(chunk)
        deadline = time.monotonic() + LANDING_TIMEOUT
        while len(got) < len(log) or background.complete.version != log[-1].position:
            assert time.monotonic() < deadline, "allocations did not land in time"
            wakeup.wait(0.05)
            wakeup.clear()
            got += background.transitions(())
    finally:
        background.close()
    assert background.position == classic.position == log[-1].position
    assert [(t.entry, t.diff) for t in got] == [(t.entry, t.diff) for t in want]
    assert background.complete == classic.complete
    assert background.complete.key_versions == classic.complete.key_versions


@settings(max_examples=40, deadline=None)
@given(random_logs(), st.lists(st.integers(0, 40), max_size=5))
def test_the_complete_replica_and_the_entries_since_give_the_classic_replica(log, cuts):
    """What a member hands a worker that starts over: whatever lags, ``complete`` with
    ``since`` applied gives the classic replica at the last transition handed out."""
    classic = {t.entry.position: t.new for t in Sequential(Replica()).transitions(log)}
    background = Background(Replica(), threading.Event())
    try:
        for chunk in chunks(log, cuts):
            got = list(background.transitions(chunk))
            if not got:
                continue
            replica = background.complete
            for entry in background.since:
                replica = apply_entry(replica, entry).new
            assert replica == classic[got[-1].entry.position]
            assert replica.key_versions == classic[got[-1].entry.position].key_versions
    finally:
        background.close()
