"""The Kafka connectors' pure parts: where partitions sit among an input's splits, their params
as typed values, and a segment as a record."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from peer.plugins import PluginError
from peer.plugins.kafka.settings import KafkaInputParams, KafkaOutputParams, client_config
from peer.plugins.kafka.sink import Encoder
from peer.plugins.params import parsed
from peer.plugins.splits import Splits, shard_splits
from tests.unit.plugins.plugin_fixtures import task


@given(st.integers(1, 300), st.data())
def test_each_partition_has_a_split_of_its_own(total, data):
    first = data.draw(st.integers(1, total))
    placed = shard_splits(total, first)
    assert sorted(placed) == list(range(total))


@given(st.integers(1, 256), st.data())
def test_a_partitions_split_does_not_hang_on_how_many_came_later(total, data):
    """Partitions added after the start take free splits: the first ones never move."""
    first = data.draw(st.integers(1, total))
    placed = shard_splits(total, first)
    assert placed[:first] == tuple(Splits.of(p, first, total).owned.start for p in range(first))


@given(st.integers(1, 256), st.data())
def test_the_partitions_a_job_started_with_spread_over_any_number_of_peers(total, data):
    """As many peers as partitions: one each; fewer: their counts at most two apart."""
    first = data.draw(st.integers(1, min(total, 64)))
    peers = data.draw(st.integers(1, first))
    placed = shard_splits(total, first)[:first]
    counts = [sum(1 for s in placed if s in Splits.of(slot, peers, total).owned)
              for slot in range(peers)]  # fmt: skip
    assert sum(counts) == first
    assert max(counts) - min(counts) <= 2
    if peers == first:
        assert counts == [1] * first


def test_params_become_typed_values():
    source = parsed(
        KafkaInputParams, {"bootstrap": "b:1", "topic": "t", "start": 1_700_000_000_000}
    )
    assert (source.start, source.format, source.stop_at_end) == (1_700_000_000_000, "json", False)
    assert parsed(KafkaOutputParams, {"bootstrap": "b:1", "topic": "t", "key": "k"}).key == "k"


@pytest.mark.parametrize(
    ("params", "named"),
    [({"topic": "t"}, "bootstrap"),
     ({"bootstrap": "b:1", "topic": "t", "start": "middle"}, "start"),
     ({"bootstrap": "b:1", "topic": "t", "max_delay": -1}, "max_delay"),
     ({"bootstrap": "b:1", "topic": "t", "partition_idle_timeout": 0}, "partition_idle_timeout"),
     ({"bootstrap": "b:1", "topic": "t", "format": "bytes", "event_time": "ts"}, "event_time"),
     ({"bootstrap": "b:1", "topic": "t", "config": {"isolation.level": "x"}}, "isolation.level"),
     ({"bootstrap": "b:1", "topic": "t", "config": {"sasl.password": "x"}}, "holds a secret"),
     ({"bootstrap": " ", "topic": "t"}, "bootstrap"),
     ({"bootstrap": "b:1", "topic": "t", "surprise": 1}, "surprise")],
)  # fmt: skip
def test_a_wrong_param_is_named(params, named):
    with pytest.raises(ValueError, match=named):
        parsed(KafkaInputParams, params)


def test_secrets_come_from_the_members_environment_by_name(monkeypatch):
    monkeypatch.setenv("ONYX_SECRET_broker", "s3cret")
    t = task("peer.plugins.kafka:input")
    client = parsed(
        KafkaInputParams, {"bootstrap": "b:1", "topic": "t", "secrets": {"sasl.password": "broker"}}
    )
    assert client_config(t, client)["sasl.password"] == "s3cret"
    monkeypatch.delenv("ONYX_SECRET_broker")
    with pytest.raises(PluginError, match="ONYX_SECRET_broker") as failure:
        client_config(t, client)
    assert "s3cret" not in str(failure.value)


def encoder(**params):
    settings = parsed(KafkaOutputParams, {"bootstrap": "b:1", "topic": "t", **params})
    return Encoder(task("peer.plugins.kafka:output", kind="output"), settings, {})


@given(st.one_of(st.text(), st.integers(-(2**63), 2**63 - 1)))
def test_a_key_field_becomes_the_records_key(key):
    got, _ = encoder(key="k")({"k": key, "v": 1})
    assert got == str(key).encode()


def test_a_segment_over_the_limit_is_refused_naming_its_size():
    with pytest.raises(
        PluginError, match=r"1000008 bytes, over the 999488 that message\.max\.bytes leaves"
    ):
        encoder()({"v": "x" * 1_000_000})


@given(st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=4))
def test_bytes_format_writes_the_value_field_as_it_is(extra):
    assume("value" not in extra and "key" not in extra)
    key, value = encoder(format="bytes")({"key": b"k", "value": b"\x00\xff", **extra})
    assert (key, value) == (b"k", b"\x00\xff")
