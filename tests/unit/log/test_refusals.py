"""No entry, however it got into the log, can crash a replica: what is too large or too deep is
refused when decoded, by a fixed rule; whatever applying still raises is refused too; and a
refusal is logged in one short line."""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peer.log.apply import apply_entry
from peer.log.entries import KINDS
from peer.log.entries.jobs import SUBMIT_JOB
from peer.log.entries.virtual_peers import ADD_VIRTUAL_PEER
from peer.log.entry import Entry
from peer.log.replica import Replica
from peer.values.limits import MAX_ENTRY_BYTES, MAX_ENTRY_DEPTH, MAX_LOGGED_CHARS, deeper_than
from tests.unit.log.conftest import build_replica, effects_of, reactions_of


@pytest.fixture
def warnings(caplog):
    caplog.set_level(logging.WARNING, logger="peer.log.apply")
    return caplog


def job_doc(params: object = None) -> dict:
    """Paths name nothing importable on purpose: the log checks shape, never imports."""
    return {
        "workflow": [["in", "out"]],
        "catalog": [
            {"name": "in", "kind": "input", "plugin": "nowhere:input", "n_peers": 1,
             "params": params if params is not None else {}},
            {"name": "out", "kind": "output", "plugin": "nowhere:output"},
        ],
    }  # fmt: skip


def nested(depth: int) -> dict:
    """``{"x": {"x": ...}}``, ``depth`` mappings deep, built without recursion."""
    value: dict = {}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


def play(replica: Replica, *entries: Entry) -> Replica:
    for entry in entries:
        replica = apply_entry(replica, entry.at(replica.version + 1)).new
    return replica


def running_cluster() -> Replica:
    """Two joined groups with peers and one job running: every kind has something to act on."""
    base = build_replica(0, ring=["a", "b"])
    peers = [ADD_VIRTUAL_PEER.entry(id=f"{g}{i}", group=g) for g in "ab" for i in (1, 2)]
    return play(base, *peers, SUBMIT_JOB.entry(id="j", job=job_doc()))


# -- decoding -----------------------------------------------------------------------------------


def depth_of(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    return 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(json_values, st.integers(min_value=0, max_value=8))
def test_the_flat_scan_measures_what_the_parser_reads(value, limit):
    assert deeper_than(json.dumps(value).encode(), limit) == (depth_of(value) > limit)


def test_brackets_inside_strings_do_not_count():
    data = json.dumps({"fn": "gc", "args": {"id": "[{" * 1000 + '\\"[[['}}).encode()
    assert not deeper_than(data, 2)
    assert Entry.decode(data, 0).fn == "gc"


def test_an_entry_at_the_depth_limit_is_read_and_one_deeper_is_refused():
    def entry_of_depth(depth: int) -> bytes:
        return json.dumps({"fn": "gc", "args": {"id": "a", "x": nested(depth - 2)}}).encode()

    assert Entry.decode(entry_of_depth(MAX_ENTRY_DEPTH), 0).fn == "gc"
    refused = Entry.decode(entry_of_depth(MAX_ENTRY_DEPTH + 1), 0)
    assert refused.fn == ""
    assert refused.args == {"undecodable": "nests deeper than the limit of 64 levels"}


def test_an_entry_over_the_size_limit_is_refused_before_it_is_parsed():
    padding = "x" * (MAX_ENTRY_BYTES - len(b'{"args": {"id": ""}, "fn": "gc"}'))
    fits = json.dumps({"args": {"id": padding}, "fn": "gc"}).encode()
    assert len(fits) == MAX_ENTRY_BYTES
    assert Entry.decode(fits, 0).fn == "gc"
    over = json.dumps({"args": {"id": padding + "x"}, "fn": "gc"}).encode()
    refused = Entry.decode(over, 4)
    assert (refused.fn, refused.position, refused.size) == ("", 4, MAX_ENTRY_BYTES + 1)
    assert refused.args == {"undecodable": f"{MAX_ENTRY_BYTES + 1:,} bytes, over the limit of "
                            f"{MAX_ENTRY_BYTES:,}"}  # fmt: skip


# -- applying -----------------------------------------------------------------------------------


def test_a_submitted_job_a_thousand_levels_deep_is_a_refused_no_op(warnings):
    """What took a cluster down: every group died applying this entry, and again replaying it."""
    before = running_cluster()
    data = SUBMIT_JOB.entry(id="deep", job=job_doc(nested(1000))).encode()
    t = apply_entry(before, Entry.decode(data, before.version + 1))
    assert t.new == before.evolve(version=before.version + 1)
    assert t.kind is None
    [record] = warnings.records
    assert record.getMessage() == (
        f"log entry {before.version + 1} ignored (no kind, {len(data):,} bytes): undecodable: "
        "nests deeper than the limit of 64 levels"
    )


def test_a_deep_entry_made_in_process_is_refused_even_past_the_decoder(warnings):
    """An entry that never went through the decoder (a group's own, a model's) reaches apply;
    what applying raises is a refusal, not a crash."""
    before = running_cluster()
    entry = SUBMIT_JOB.entry(id="deep", job=job_doc(nested(5000))).at(before.version + 1)
    t = apply_entry(before, entry)
    assert (t.new, t.kind) == (before.evolve(version=before.version + 1), None)
    [record] = warnings.records
    assert record.getMessage().startswith(f"log entry {before.version + 1} ignored ('submit-job', ")


def test_a_kind_that_raises_is_refused_like_a_malformed_entry(monkeypatch, warnings):
    def broken(replica, entry):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setitem(KINDS, "gc", KINDS["gc"].__class__(name="gc", args={}, apply=broken))
    before = running_cluster()
    t = apply_entry(before, Entry("gc", {"id": "a"}).at(before.version + 1))
    assert (t.new, t.kind, t.diff) == (before.evolve(version=before.version + 1), None, None)
    assert warnings.messages == [
        f"log entry {before.version + 1} ignored ('gc', 33 bytes): applying it raised "
        "ZeroDivisionError: division by zero"
    ]


@pytest.mark.parametrize("fn", ["no-such-kind", "k" * 900_000])
def test_a_large_refused_entry_is_logged_short(warnings, fn):
    """Position, kind, size and the reason cut short: never the entry itself."""
    data = json.dumps({"fn": fn, "args": {"blob": "y" * (900_000 - len(fn))}}).encode()
    t = apply_entry(running_cluster(), Entry.decode(data, 40))
    assert t.kind is None
    [message] = warnings.messages
    assert message.startswith(f"log entry 40 ignored ('{fn[:39]}")
    assert f"{len(data):,} bytes): unknown kind of entry " in message
    assert len(message) < 2 * MAX_LOGGED_CHARS


def test_a_long_reason_is_cut_in_the_log(warnings):
    value = ["z" * 10_000] * 50
    apply_entry(running_cluster(), Entry("gc", {"id": value}).at(40))
    [message] = warnings.messages
    assert message.startswith("log entry 40 ignored ('gc', ")
    assert len(message) < 2 * MAX_LOGGED_CHARS


args_of_any_kind = st.dictionaries(
    st.sampled_from(["id", "job", "peer", "version", "group", "joiner", "watcher", "site",
                     "tags", "reason", "hash", "replica", "x"]) | st.text(max_size=5),
    json_values,
    max_size=5,
)  # fmt: skip


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(KINDS)), args_of_any_kind)
def test_arbitrary_args_of_every_kind_never_raise_and_apply_alike(kind, args):
    """Every replica refuses or applies the same way: twice from equal replicas, equal results;
    and neither applying nor what a group then does for the entry raises."""
    before = running_cluster()
    entry = Entry(kind, args).at(before.version + 1)
    first = apply_entry(before, entry)
    second = apply_entry(running_cluster(), entry)
    assert first.new == second.new
    assert first.new.version == before.version + 1
    assert first.diff == second.diff
    actors = ("a", "a1", "b", "zz")
    assert reactions_of(first, *actors) == reactions_of(second, *actors)
    effects_of(first, *actors)


def test_the_same_entry_from_bytes_applies_alike_on_every_replica():
    """A refused entry in the middle of a log leaves no trace but the version."""
    before = running_cluster()
    deep = Entry.decode(SUBMIT_JOB.entry(id="x", job=job_doc(nested(80))).encode(), 0)
    assert play(before, deep, SUBMIT_JOB.entry(id="k", job=job_doc())) == play(
        before, Entry("gc-not", {}), SUBMIT_JOB.entry(id="k", job=job_doc())
    )
