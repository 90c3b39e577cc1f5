"""apply_entry and Entry decoding: every peer refuses a bad entry the same way, as a no-op that
still advances the version, and logs it with its position."""

from __future__ import annotations

import logging

import pytest

from peer.log.apply import apply_entry, kind_of
from peer.log.entries import KINDS
from peer.log.entries.gc import GC
from peer.log.entries.join import PREPARE_JOIN
from peer.log.entry import Entry, EntryKind, InvalidEntry
from peer.log.replica import Replica

ALL_KINDS = [
    "prepare-join-cluster",
    "notify-join-cluster",
    "accept-join-cluster",
    "abort-join-cluster",
    "join-direct",
    "group-leave-cluster",
    "member-leave",
    "member-exit",
    "add-virtual-peer",
    "leave-cluster",
    "gc",
    "set-replica",
    "submit-job",
    "kill-job",
    "complete-job",
    "task-recovered",
    "rollback-job",
    "grow-job",
]


@pytest.fixture
def warnings(caplog):
    caplog.set_level(logging.WARNING, logger="peer.log.apply")
    return caplog


def assert_refused(t, before, position, effects, reactions):
    assert t.new == before.evolve(version=position)
    assert t.old is before
    assert t.kind is None
    assert t.diff is None
    assert reactions(t, "a", "j") == {"a": (), "j": ()}
    assert effects(t, "a", "j") == {"a": [], "j": []}


def test_registry_holds_every_kind_by_name():
    assert sorted(KINDS) == sorted(ALL_KINDS)
    assert all(kind.name == name for name, kind in KINDS.items())


def test_known_entry_is_applied_with_its_kind(make_replica):
    before = make_replica(2, ring=["a"])
    t = apply_entry(before, GC.entry(id="a").at(3))
    assert t.kind is KINDS["gc"]
    assert t.entry == Entry("gc", {"id": "a"}, 3)
    assert (t.old, t.new) == (before, make_replica(3, ring=["a"]))


def test_applying_leaves_the_old_replica_untouched(make_replica):
    before = make_replica(2, ring=["a", "b"])
    snapshot = make_replica(2, ring=["a", "b"])
    apply_entry(before, PREPARE_JOIN.entry(joiner="j").at(3))
    assert before == snapshot


def test_unknown_kind_is_a_no_op_that_advances_the_version(
    make_replica, reactions, effects, warnings
):
    before = make_replica(6, ring=["a"], prepared={"a": "j"})
    t = apply_entry(before, Entry("frobnicate", {"x": 1}).at(7))
    assert_refused(t, before, 7, effects, reactions)
    assert [r.getMessage() for r in warnings.records] == [
        "log entry 7 ignored ('frobnicate', 38 bytes): unknown kind of entry 'frobnicate'"
    ]


MALFORMED = {
    "missing": Entry("prepare-join-cluster", {}),
    "empty-string": Entry("prepare-join-cluster", {"joiner": ""}),
    "wrong-type": Entry("abort-join-cluster", {"id": 5}),
    "none": Entry("group-leave-cluster", {"id": None}),
    "one-of-two-missing": Entry("notify-join-cluster", {"joiner": "j"}),
    "list-for-string": Entry("add-virtual-peer", {"id": ["p"], "group": "a"}),
}
MALFORMED_MESSAGES = {
    "missing": "prepare-join-cluster: argument 'joiner' must be a non-empty str, got None",
    "empty-string": "prepare-join-cluster: argument 'joiner' must be a non-empty str, got ''",
    "wrong-type": "abort-join-cluster: argument 'id' must be a non-empty str, got 5",
    "none": "group-leave-cluster: argument 'id' must be a non-empty str, got None",
    "one-of-two-missing": "notify-join-cluster: argument 'watcher' must be a non-empty str, "
    "got None",
    "list-for-string": "add-virtual-peer: argument 'id' must be a non-empty str, got ['p']",
}


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_args_are_a_no_op_that_advances_the_version(
    make_replica, reactions, effects, warnings, case
):
    before = make_replica(6, ring=["a"], prepared={"a": "j"})
    entry = MALFORMED[case]
    t = apply_entry(before, entry.at(7))
    assert_refused(t, before, 7, effects, reactions)
    size = len(entry.encode())
    assert [r.getMessage() for r in warnings.records] == [
        f"log entry 7 ignored ({entry.fn!r}, {size} bytes): {MALFORMED_MESSAGES[case]}"
    ]


def test_kind_of_raises_for_refused_entries():
    with pytest.raises(InvalidEntry, match="unknown kind of entry 'nope'"):
        kind_of(Entry("nope"))
    with pytest.raises(InvalidEntry, match="argument 'id' must be a non-empty str"):
        kind_of(Entry("gc", {"id": ""}))
    assert kind_of(Entry("gc", {"id": "a", "extra": 1})) is GC


@pytest.mark.parametrize(
    "entry",
    [
        Entry("gc", {"id": "a"}),
        Entry("notify-join-cluster", {"joiner": "j", "watcher": "a"}),
        Entry("add-virtual-peer", {"group": "a", "id": "p"}),
    ],
)
def test_encode_decode_round_trip(entry):
    assert Entry.decode(entry.encode(), 12) == entry.at(12)


def test_decode_defaults_missing_args_to_empty():
    assert Entry.decode(b'{"fn": "gc"}', 3) == Entry("gc", {}, 3)


UNDECODABLE = {
    "not-json": (b"not json", "JSONDecodeError: "),
    "not-utf8": (b"\xff\xfe\x00", "UnicodeDecodeError: "),
    "json-list": (b"[1, 2]", "TypeError: "),
    "json-null": (b"null", "TypeError: "),
    "missing-fn": (b'{"args": {}}', "KeyError: 'fn'"),
    "fn-not-string": (b'{"fn": 5, "args": {}}', "TypeError: fn must be a string"),
    "args-not-object": (b'{"fn": "gc", "args": ["a"]}', "TypeError: fn must be a string"),
    "args-null": (b'{"fn": "gc", "args": null}', "TypeError: fn must be a string"),
}


@pytest.mark.parametrize("case", UNDECODABLE)
def test_undecodable_bytes_become_a_refused_no_op(make_replica, reactions, effects, warnings, case):
    data, reason = UNDECODABLE[case]
    entry = Entry.decode(data, 9)
    assert entry.fn == ""
    assert entry.position == 9
    assert entry.args["undecodable"].startswith(reason)
    before = make_replica(8, ring=["a", "b"])
    t = apply_entry(before, entry)
    assert_refused(t, before, 9, effects, reactions)
    [record] = warnings.records
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith(
        f"log entry 9 ignored (no kind, {len(data)} bytes): undecodable: {reason}"
    )


@pytest.mark.parametrize("data", [b"[" * 100_000, b'{"fn": "gc", "args": {"id": ' + b"[" * 100_000])
def test_deeply_nested_bytes_become_a_refused_no_op(make_replica, warnings, data):
    entry = Entry.decode(data, 9)
    assert (entry.fn, entry.position, entry.size) == ("", 9, len(data))
    assert entry.args["undecodable"] == "nests deeper than the limit of 64 levels"
    t = apply_entry(make_replica(8, ring=["a"]), entry)
    assert (t.new, t.kind, t.diff) == (make_replica(9, ring=["a"]), None, None)
    [record] = warnings.records
    assert record.getMessage() == (
        f"log entry 9 ignored (no kind, {len(data):,} bytes): undecodable: nests deeper than the "
        "limit of 64 levels"
    )


def test_act_fans_out_to_the_group_and_each_virtual_peer(monkeypatch):
    seen = []
    probe = EntryKind(
        "probe",
        {},
        apply=lambda replica, entry: replica,
        reactions=lambda t, actor: (Entry("hello", {"from": actor}),) if actor != "g" else (),
        side_effects=lambda t, actor, effects: seen.append(actor),
    )
    monkeypatch.setitem(KINDS, probe.name, probe)
    t = apply_entry(Replica(), Entry("probe").at(0))
    reactions = t.act(("g", "p1", "p2"), effects=None)
    assert reactions == [Entry("hello", {"from": "p1"}), Entry("hello", {"from": "p2"})]
    assert seen == ["g", "p1", "p2"]
