"""The NATS connectors' pure parts: their params as typed values, NATS's subject rules, the
message ids that make a delivery count once, a slot's share of a stream's sequence across
changes of peers, and a message as a segment and a segment as a message."""

from __future__ import annotations

import datetime
import json
from collections import deque
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from peer.plugins import PluginError
from peer.plugins.nats.settings import (
    NatsInputParams,
    NatsOutputParams,
    covers,
    login,
    msg_id,
    servers,
    subject_problem,
)
from peer.plugins.nats.sink import RESERVED_BYTES, NatsEncoder, TargetStream
from peer.plugins.nats.source import END, Delivered, Share, _bytes, _json
from peer.plugins.params import parsed
from peer.plugins.splits import Cursor, Splits
from tests.unit.plugins.plugin_fixtures import json_values, task

tokens = st.text("abcxyz019_-", min_size=1, max_size=5)
subjects = st.lists(tokens, min_size=1, max_size=5).map(".".join)


# -- params -----------------------------------------------------------------------------------


def test_params_become_typed_values():
    source = parsed(NatsInputParams, {"url": "nats://h:1", "stream": "s", "start": 1_700_000_000})
    assert (source.start, source.format, source.stop_at_end) == (1_700_000_000, "json", False)
    assert source.start_time() == datetime.datetime(1970, 1, 20, 16, 13, 20, tzinfo=datetime.UTC)
    assert parsed(NatsInputParams, {"url": "h:1", "stream": "s", "start": "new"}).start == "new"
    sink = parsed(NatsOutputParams, {"url": "nats://h:1", "subject": "a.b", "msg_id_prefix": "j",
                                     "staging": "/s"})  # fmt: skip
    assert (sink.subject, sink.stream, sink.format, sink.timeout) == ("a.b", None, "json", 10.0)


@pytest.mark.parametrize(
    ("params", "named"),
    [({"stream": "s"}, "url"),
     ({"url": "nats://h:1"}, "stream"),
     ({"url": "nats://h:1", "stream": "a b"}, "stream"),
     ({"url": "nats://h:1", "stream": "s", "start": "middle"}, "start"),
     ({"url": "nats://h:1", "stream": "s", "start": -1}, "start"),
     ({"url": "nats://h:1", "stream": "s", "subject": "a.>.b"}, "subject"),
     ({"url": "nats://h:1", "stream": "s", "dead_letter_subject": "dead.*"}, "dead_letter"),
     ({"url": "nats://h:1", "stream": "s", "timeout": 0}, "timeout"),
     ({"url": "nats://h:1", "stream": "s", "secrets": {"password": "P"}}, "user"),
     ({"url": "nats://h:1", "stream": "s", "secrets": {"nkey": "P"}}, "secrets.nkey"),
     ({"url": "nats://h:1", "stream": "s", "secrets": {"token": "a-b"}}, "secrets.token"),
     ({"url": "nats://h:1", "stream": "s", "surprise": 1}, "surprise"),
     ({"url": "nats://h:1,http://g", "stream": "s"}, "http://g"),
     ({"url": "nats://me:pw@h:1", "stream": "s"}, "login"),
     ({"url": "nats://t0ken@h:1", "stream": "s"}, "login")],
)  # fmt: skip
def test_a_wrong_input_param_is_named(params, named):
    with pytest.raises(ValueError, match=named):
        parsed(NatsInputParams, params)


SINK = {"url": "nats://h:1", "subject": "a", "msg_id_prefix": "j", "staging": "/s"}


@pytest.mark.parametrize(
    ("changes", "named"),
    [({"msg_id_prefix": "a job"}, "msg_id_prefix"),
     ({"staging": ""}, "staging"),
     ({"subject": None}, "subject_field"),
     ({"subject_field": "to"}, "subject or subject_field"),
     ({"subject": "a.>"}, "wildcard"),
     ({"subject": None, "subject_field": "to"}, "needs stream"),
     ({"format": "xml"}, "format")],
)  # fmt: skip
def test_a_wrong_output_param_is_named(changes, named):
    with pytest.raises(ValueError, match=named):
        parsed(NatsOutputParams, {**SINK, **changes})


def test_a_login_comes_from_the_members_environment_by_name(monkeypatch):
    monkeypatch.setenv("ONYX_SECRET_nats", "s3cret")
    t = task("peer.plugins.nats:input")
    client = parsed(NatsInputParams, {"url": "h:1", "stream": "s", "user": "me",
                                      "secrets": {"password": "nats"}})  # fmt: skip
    assert login(t, client) == {"user": "me", "password": "s3cret"}
    monkeypatch.delenv("ONYX_SECRET_nats")
    with pytest.raises(PluginError, match="ONYX_SECRET_nats") as failure:
        login(t, client)
    assert "s3cret" not in str(failure.value)


hosts = st.from_regex(r"[a-z][a-z0-9-]{0,10}(\.[a-z0-9]{1,5}){0,2}", fullmatch=True)


@given(st.lists(st.tuples(st.sampled_from(["nats://", "tls://", ""]), hosts,
                          st.none() | st.integers(1, 65535)), min_size=1, max_size=4))  # fmt: skip
def test_each_server_of_a_url_is_named_with_its_scheme_and_port(parts):
    url = ",".join(f"{scheme}{host}" + ("" if port is None else f":{port}")
                   for scheme, host, port in parts)  # fmt: skip
    assert servers(url) == [f"{scheme or 'nats://'}{host}:{port or 4222}"
                            for scheme, host, port in parts]  # fmt: skip


# -- subjects ---------------------------------------------------------------------------------


@given(subjects)
def test_a_subject_of_plain_tokens_is_one_to_publish_to_and_a_stream_captures_it(subject):
    assert subject_problem(subject, wildcards=False) is None
    assert covers(subject, subject)


@given(subjects, st.data())
def test_a_pattern_captures_the_subjects_its_wildcards_stand_for(subject, data):
    parts = subject.split(".")
    stars = [data.draw(st.booleans()) for _ in parts]
    pattern = ".".join("*" if star else part for star, part in zip(stars, parts, strict=True))
    assert subject_problem(pattern, wildcards=True) is None
    assert covers(pattern, subject)
    cut = data.draw(st.integers(0, len(parts) - 1))
    assert covers(".".join([*parts[:cut], ">"]), subject)
    assert not covers(".".join([*parts, ">"]), subject), "'>' stands for one token at least"
    assert not covers(f"{pattern}.x", subject)
    if any(stars):
        assert subject_problem(pattern, wildcards=False) is not None


@given(subjects, subjects)
def test_a_literal_pattern_captures_only_itself(pattern, subject):
    assert covers(pattern, subject) == (pattern == subject)


@pytest.mark.parametrize(
    ("subject", "problem"),
    [("", "empty"), ("a..b", "empty token"), ("a b", "whitespace"), ("a.>.b", "last"),
     ("a.b*", "whole token"), ("a.>", None)],
)  # fmt: skip
def test_a_subject_that_is_not_one_says_why(subject, problem):
    found = subject_problem(subject, wildcards=True)
    assert (found is None) if problem is None else (problem in (found or ""))


@given(st.lists(st.tuples(st.integers(1, 10**6), st.integers(1, 10**4), st.integers(0, 9999),
                          st.integers(0, 10**6)), unique=True, max_size=30))  # fmt: skip
def test_each_record_of_each_epoch_has_an_id_of_its_own(records):
    """The id names the record alone: the same however often it is sent, no other's."""
    ids = {msg_id("job", f"{v:012d}-{e:08d}-{s:04d}", seq) for v, e, s, seq in records}
    assert len(ids) == len(records)


# -- a slot's share of the stream ---------------------------------------------------------------


def delivered(seq: int, pending: int = 1) -> Delivered:
    return Delivered(seq, "s", b"{}", None, pending, None)


@given(st.lists(st.integers(1, 4), min_size=1, max_size=200), st.integers(1, 16), st.data())
def test_slots_read_each_message_once_across_changes_of_peers(gaps, total, data):
    """The stream's sequence with gaps (the messages a filter leaves out), read by two slots,
    then one, then three (at most one per split), each slot stopping at a random point and its
    splits' positions going to whichever slot owns them next: nothing twice, nothing missed."""
    sequence = [sum(gaps[: i + 1]) for i in range(len(gaps))]
    positions: list[list[int]] | None = None
    taken: list[int] = []
    phases = [min(n, total) for n in (2, 1, 3)]
    for phase, slots in enumerate(phases):
        last = phase == len(phases) - 1
        held: list[list[int]] = []
        for slot in range(slots):
            splits = Splits.of(slot, slots, total)
            checkpoint = None if positions is None else [positions[s] for s in splits.owned]
            share = Share(Cursor(splits, checkpoint, ValueError))
            if checkpoint is None:
                share.cursor.moved(1, 1)  # a fresh start stands at the stream's first message
            buffer = deque(delivered(seq) for seq in sequence if seq >= share.cursor.at[0])
            budget = len(buffer) if last else data.draw(st.integers(0, len(buffer)))
            while buffer and budget > 0:
                limit = data.draw(st.integers(1, 10))
                budget -= limit
                taken += [m.seq for m in share.take(buffer, limit, limit * total)]
            held += share.cursor.checkpoint()
        positions = held
    assert sorted(taken) == sequence


def test_the_share_ends_at_the_streams_end_as_it_started():
    cursor = Cursor(Splits.of(0, 1, 4), None, ValueError)
    share = Share(cursor, end=5)
    taken = share.take(deque([delivered(2), delivered(4), delivered(7)]), 10, 100)
    assert [m.seq for m in taken] == [2, 4]
    assert share.done, "a message past the end ends it"
    assert Share(Cursor(Splits.of(0, 1, 4), None, ValueError), end=9).take(
        deque([delivered(3, pending=0), delivered(4)]), 10, 100
    ) == [delivered(3, pending=0)], "nothing pending after a message ends it"
    ended = Share(Cursor(Splits.of(0, 1, 4), None, ValueError), end=9)
    assert ended.take(deque([END, delivered(4)]), 10, 100) == []
    assert ended.done


def test_a_message_delivered_again_is_not_read_twice():
    share = Share(Cursor(Splits.of(0, 1, 2), None, ValueError))
    assert len(share.take(deque(map(delivered, [1, 2, 3])), 10, 100)) == 3
    assert [m.seq for m in share.take(deque(map(delivered, [2, 3, 4])), 10, 100)] == [4]


# -- messages and segments ----------------------------------------------------------------------


@given(st.dictionaries(st.text(max_size=5), json_values, max_size=4), st.integers(1, 10**9))
def test_a_json_object_is_the_segment(value, seq):
    message = Delivered(seq, "a.b", json.dumps(value).encode(), {"h": "v"}, 0, None)
    assert _json(False)(message) == value
    with_metadata = _json(True)(message)
    assert (with_metadata["nats_seq"], with_metadata["nats_headers"]) == (seq, {"h": "v"})


@pytest.mark.parametrize(
    ("data", "why"), [(b"[1]", "list is not an object"), (b"", "no data"), (b"{x", "Expecting")]
)
def test_data_that_is_not_a_json_object_says_why(data, why):
    with pytest.raises(ValueError, match=why):
        _json(False)(Delivered(1, "a", data, None, 0, None))


def test_bytes_come_with_where_they_were_read():
    got = _bytes(Delivered(7, "a.b", b"\x00", {"k": "v"}, 0, None))
    assert got == {"subject": "a.b", "data": b"\x00", "headers": {"k": "v"}, "seq": 7}


def encoder(**params: Any) -> NatsEncoder:
    """An encoder for a stream capturing ``out.>`` whose messages hold 1000 bytes at most,
    besides what the output adds."""
    settings = parsed(NatsOutputParams, {**SINK, "stream": "S", **params})
    stream = TargetStream(["out.>"], 1000 + RESERVED_BYTES + len(settings.msg_id_prefix))
    return NatsEncoder(task("peer.plugins.nats:exactly_once_output", "output"), settings, stream)


@given(st.lists(tokens, min_size=1, max_size=3).map(".".join))
def test_a_subject_field_names_each_records_subject(rest):
    encode = encoder(subject=None, subject_field="to")
    subject, data, headers = encode({"to": f"out.{rest}", "n": 1})
    assert (subject, json.loads(data), headers) == (f"out.{rest}", {"to": f"out.{rest}", "n": 1},
                                                    None)  # fmt: skip


@pytest.mark.parametrize(
    ("segment", "words"),
    [({"to": "elsewhere.x"}, ["'elsewhere.x'", "does not capture it"]),
     ({"to": "out.*"}, ["wildcard"]),
     ({"to": 3}, ["'to'", "int"]),
     ({"n": 1}, ["'to'", "NoneType"])],
)  # fmt: skip
def test_a_record_without_a_subject_to_publish_to_is_named(segment, words):
    encode = encoder(subject=None, subject_field="to")
    with pytest.raises(PluginError, match="task 't'") as failure:
        encode(segment)
    for word in words:
        assert word in str(failure.value)


def test_a_record_over_the_limit_is_named_with_its_size():
    encode = encoder(subject="out.a")
    assert encode({"v": "x" * 900})[0] == "out.a"
    with pytest.raises(PluginError, match=r"1008 bytes, over the 1000"):
        encode({"v": "x" * 1000})


def test_bytes_records_carry_their_data_and_headers():
    encode = encoder(subject="out.a", format="bytes")
    assert encode({"data": b"\x00", "headers": {"k": "v"}}) == ("out.a", b"\x00", {"k": "v"})
    assert encode({"data": "text"}) == ("out.a", b"text", None)
    with pytest.raises(PluginError, match="'data' field"):
        encode({"data": 3})
    with pytest.raises(PluginError, match="'headers'"):
        encode({"data": b"", "headers": {"k": "two\nlines"}})


@given(json_values)
def test_a_json_record_is_the_segments_json(value):
    _, data, _ = encoder(subject="out.a")(value)
    assert json.loads(data) == value
