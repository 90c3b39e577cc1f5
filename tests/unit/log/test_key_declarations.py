"""Every kind's declared keys against what applying it does, over random replicas and entries:
an entry never changes a key its kind does not declare to write, nothing it computes (its
result, diff, reactions, side effects) changes when the keys it does not declare to read do,
and a key it hands on as another object holds another value (key versions go by identity)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peer.log.apply import kind_of
from peer.log.entries import KINDS
from peer.log.entries.gc import SET_REPLICA, set_replica
from peer.log.entry import Entry, EntryKind, InvalidEntry, Transition
from peer.log.replica import KEYS, Replica
from peer.log.versions import changed_keys
from tests.unit.log.local_recovery import local_recovery_logs, replay_from
from tests.unit.log.random_logs import random_logs, replay
from tests.unit.log.test_allocation_properties import GROUPS


class Calls:
    """An Effects that records every call, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __getattr__(self, name: str):
        return lambda *args: self.calls.append((name, *args))


def outcome(replica: Replica, entry: Entry) -> tuple:
    """What the entry's kind computes on ``replica``: its refusal, or the keys it writes, its
    diff, and every actor's reactions and side effects."""
    kind = kind_of(entry)
    try:
        new = kind.apply(replica, entry)
    except InvalidEntry as refused:
        return ("refused", str(refused))
    t = Transition(entry, replica, new, kind.diff(entry, replica, new), kind)
    actors = sorted({*GROUPS, *(v for v in entry.args.values() if isinstance(v, str))})
    acts = []
    for actor in actors:
        calls = Calls()
        t.side_effects(actor, calls)
        acts.append((actor, t.reactions(actor), calls.calls))
    return {k: getattr(new, k) for k in sorted(kind.writes)}, t.diff, acts


def blend(replica: Replica, other: Replica, kind: EntryKind) -> Replica:
    """``replica`` with every key ``kind`` does not declare to read taken from ``other``."""
    return replica.evolve(**{k: getattr(other, k) for k in KEYS - kind.reads})


@settings(max_examples=150, deadline=None)
@given(random_logs(), st.data())
def test_entries_touch_only_the_keys_their_kinds_declare(log, data):
    check_declarations([Replica(), *replay(log)], log, data)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(local_recovery_logs(), st.data())
def test_local_recovery_entries_touch_only_the_keys_their_kinds_declare(case, data):
    """The same over logs of a job with local recovery, where standbys, takeovers and
    recovering peers come and go, and task-recovered entries are written."""
    start, log = case
    check_declarations([start, *replay_from(start, log)], log, data)


def check_declarations(replicas: list[Replica], log: list[Entry], data: st.DataObject) -> None:
    """``replicas`` holds the replica before every entry of ``log``, and the last one."""
    for position, entry in enumerate(log):
        before = replicas[position]
        kind = kind_of(entry)
        try:
            after = kind.apply(before, entry)
        except InvalidEntry:
            continue
        for key in sorted(KEYS - kind.writes):
            assert getattr(after, key) is getattr(before, key), f"{kind.name} changed {key}"
        for key in changed_keys(before, after):
            assert getattr(after, key) != getattr(before, key), (
                f"{kind.name} rebuilt {key} to an equal value: its version would move"
            )
        other = data.draw(st.sampled_from(replicas))
        assert outcome(blend(before, other, kind), entry) == outcome(before, entry), (
            f"{kind.name} at {position} depends on a key it does not declare to read"
        )


def test_every_kind_declares_its_keys():
    """Only gc (whose origin is the whole replica) reads every key, and only set-replica (which
    replaces the replica) writes every key; no kind is left with the default."""
    for kind in KINDS.values():
        assert kind.writes <= kind.reads or kind is SET_REPLICA, kind.name
    assert sorted(k.name for k in KINDS.values() if k.reads == KEYS) == ["gc"]
    assert sorted(k.name for k in KINDS.values() if k.writes == KEYS) == ["set-replica"]


def test_set_replica_reads_nothing():
    origin = Replica(version=7, groups=Replica().groups.add("g0"))
    entry = set_replica(origin)
    assert SET_REPLICA.apply(Replica(), entry) == SET_REPLICA.apply(origin, entry) == origin


def test_a_kind_naming_no_key_of_the_replica_is_refused():
    with pytest.raises(ValueError, match=r"odd: not keys of the replica: \['nothing'\]"):
        EntryKind(name="odd", args={}, apply=lambda r, e: r, reads=frozenset({"nothing"}))
