"""The Kafka connectors against a real Kafka-protocol broker: the input reads each partition
from its checkpointed offset on any number of peers, the exactly-once output's readers see each
record of a committed epoch once (a delivery cut short and resumed included), whole jobs give
exact output, and every bad input ends in one clear message naming the task."""

from __future__ import annotations

import collections
import io
import json
from pathlib import Path
from typing import Any

import msgpack
import pyarrow as pa
import pytest
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition

from peer.metrics import KAFKA_LAG
from peer.plugins import load
from peer.plugins.delivered import RECORDS
from peer.plugins.kafka.sink import EPOCH_HEADER, SEQ_HEADER
from peer.values.epoch import Epoch
from tests.count_workload import USERS, events, expected_counts
from tests.integration.test_run_failures import killed
from tests.kafka_support import produce, read_all, topic, values
from tests.support import onyx, wait_for
from tests.unit.plugins.plugin_fixtures import recovery, task

pytestmark = pytest.mark.integration

SPLITS = 8


def reader(bootstrap: str, name: str, slot: int, slots: int, checkpoint: Any = None, **params):
    t = task("peer.plugins.kafka:input", bootstrap=bootstrap, topic=name,
             **{"stop_at_end": True, **params})  # fmt: skip
    plugin = load(t, slot, slots, SPLITS)
    plugin.recover(recovery(checkpoint, Epoch(1, 1) if checkpoint is not None else None))
    return plugin


def drain(plugin: Any, until: int | None = None) -> list[Any]:
    """What the input gives until it completes (or holds ``until`` segments)."""
    taken: list[Any] = []
    while not plugin.completed() and (until is None or len(taken) < until):
        taken += plugin.poll(min(100, (until or 100) - len(taken)) if until else 100)
    return taken


def test_slots_share_the_partitions_and_read_each_record_once(kafka):
    name = topic(kafka.bootstrap, 5)
    produce(kafka.bootstrap, name, events(3000), key="user")
    read = [drain(reader(kafka.bootstrap, name, slot, 3, metadata=True)) for slot in range(3)]
    assert sorted(e["ts"] for r in read for e in r) == list(range(3000))
    partitions = [{e["kafka_partition"] for e in r} for r in read]
    assert sorted(map(len, partitions)) == [1, 2, 2], "five partitions spread over three slots"


def test_positions_restore_on_another_number_of_peers(kafka):
    """Two slots read part of the topic; their checkpoints go to one slot, then to three: no
    record twice, none missed."""
    name = topic(kafka.bootstrap, 6)
    produce(kafka.bootstrap, name, events(4000), key="user")
    two = [reader(kafka.bootstrap, name, slot, 2) for slot in range(2)]
    first = [drain(plugin, until=700) for plugin in two]
    held = {slot: plugin.checkpoint(Epoch(1, 1)) for slot, plugin in enumerate(two)}
    for plugin in two:
        plugin.close()
    one = load(task("peer.plugins.kafka:input", bootstrap=kafka.bootstrap, topic=name,
                    stop_at_end=True), 0, 1, SPLITS)  # fmt: skip
    # slot 0 of 1 owns every split: the positions of both old slots, in split order
    one.recover(recovery([*held[0], *held[1]], Epoch(1, 1)))
    second = drain(one, until=1500)
    positions = one.checkpoint(Epoch(1, 2))
    one.close()
    three = []
    for slot in range(3):
        plugin = load(task("peer.plugins.kafka:input", bootstrap=kafka.bootstrap, topic=name,
                           stop_at_end=True), slot, 3, SPLITS)  # fmt: skip
        owned = plugin.splits.owned
        plugin.recover(recovery([positions[s] for s in owned], Epoch(1, 2)))
        three.append(plugin)
    third = [e for plugin in three for e in drain(plugin)]
    seen = [e["ts"] for e in [*first[0], *first[1], *second, *third]]
    assert sorted(seen) == list(range(4000))


def test_each_partition_keeps_its_order_and_metadata_names_it(kafka):
    name = topic(kafka.bootstrap, 3)
    produce(kafka.bootstrap, name, events(600), key="user")
    got = drain(reader(kafka.bootstrap, name, 0, 1, metadata=True))
    by_partition = collections.defaultdict(list)
    for e in got:
        by_partition[e["kafka_partition"]].append((e["kafka_offset"], e["ts"]))
    for records in by_partition.values():
        assert records == sorted(records)
        assert [o for o, _ in records] == list(range(len(records)))
    assert {e["kafka_key"] for e in got} == {f"u{i}" for i in range(USERS)}


def test_the_watermark_is_the_least_over_partitions_until_one_goes_idle(kafka):
    name = topic(kafka.bootstrap, 2)
    produce(kafka.bootstrap, name, [{"user": "a", "ts": t} for t in (10, 20, 30)], key="user")
    plugin = reader(kafka.bootstrap, name, 0, 1, event_time="ts", max_delay=5,
                    partition_idle_timeout=3600)  # fmt: skip
    drain(plugin)
    # one key, so one partition holds it all; the other has given nothing and holds it back
    assert plugin.watermark() is None
    plugin.idle_after = 0  # the other partition idle at once (the timeout's effect, now)
    assert plugin.watermark() == 25


def committed_epoch(plugin: Any, epoch: Epoch) -> None:
    """Seal ``epoch`` and commit it, waiting until its delivery is done."""
    sealing = plugin.checkpoint(epoch)
    sealing.durable.result(60)
    plugin.committed(epoch)
    plugin.drained().result(60)
    assert plugin.synced()


def sink(bootstrap: str, name: str, staging: Path | str, slot: int = 0, **params: Any) -> Any:
    t = task("peer.plugins.kafka:exactly_once_output", kind="output", name="w",
             bootstrap=bootstrap, topic=name, transactional_id=f"tx-{name}",
             staging=str(staging), **params)  # fmt: skip
    return load(t, slot, 1)


def test_only_committed_epochs_are_read_and_each_record_once(kafka, tmp_path):
    name = topic(kafka.bootstrap, 3)
    out = sink(kafka.bootstrap, name, tmp_path / "staging", key="user")
    out.recover(recovery())
    out.prepare(events(500))
    out.write()
    committed_epoch(out, Epoch(1, 1))
    out.prepare(events(1000)[500:])
    out.write()
    out.checkpoint(Epoch(1, 2)).durable.result(60)  # sealed, never committed
    records = read_all(kafka.bootstrap, name)
    assert sorted(json.loads(v)["ts"] for _, _, v, _ in records) == list(range(500))
    assert all(k == json.dumps(None).encode() or k for _, k, _, _ in records)
    out.close()


def test_a_delivery_cut_short_is_resumed_without_a_duplicate(kafka, tmp_path):
    """An epoch staged and committed, part of it produced before a crash: the recovery that
    delivers it again produces only the rest."""
    name = topic(kafka.bootstrap, 3)
    staging = tmp_path / "staging"
    first = sink(kafka.bootstrap, name, staging, key="user")
    first.recover(recovery())
    first.prepare(events(300))
    first.write()
    position = first.checkpoint(Epoch(1, 1))
    position.durable.result(60)
    (stem,) = position.position["unpublished"]
    data = (staging / "_staging" / stem / RECORDS).read_bytes()
    staged = list(msgpack.Unpacker(io.BytesIO(data), use_list=False))
    # the crash: the first 120 records produced with their headers, then nothing
    produce_with_headers(kafka.bootstrap, name, stem, staged[:120])
    first.close()
    again = sink(kafka.bootstrap, name, staging, key="user")
    again.recover(recovery(position.position, Epoch(1, 1), version=2))
    assert again.synced()
    got = [json.loads(v)["ts"] for _, _, v, _ in read_all(kafka.bootstrap, name)]
    assert sorted(got) == list(range(300))
    assert not (staging / "_staging" / stem).exists()
    again.close()


def produce_with_headers(bootstrap: str, name: str, stem: str, records: list[Any]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for seq, (key, value) in enumerate(records):
        producer.produce(name, value, key, headers=[(EPOCH_HEADER, stem.encode()),
                                                    (SEQ_HEADER, str(seq).encode())])  # fmt: skip
    assert producer.flush(30) == 0


def count_job(tmp_path: Path, bootstrap: str, source: str, target: str, *,
              reading: dict | None = None, writing: dict | None = None) -> Path:  # fmt: skip
    doc = {
        "workflow": [["read", "count"], ["count", "write"]],
        "catalog": [
            {"name": "read", "kind": "input", "plugin": "peer.plugins.kafka:input",
             "params": {"bootstrap": bootstrap, "topic": source, "stop_at_end": True,
                        **(reading or {})}, "n_peers": 2},
            {"name": "count", "kind": "function", "fn": "tests.chaos.pacing:pace",
             "group_by_key": "user"},
            {"name": "write", "kind": "output", "plugin": "peer.plugins.kafka:exactly_once_output",
             "params": {"bootstrap": bootstrap, "topic": target, "key": "key",
                        "transactional_id": f"tx-{target}", "staging": str(tmp_path / "staging"),
                        **(writing or {})}},
        ],
        "windows": [{"id": "w", "task": "count", "type": "fixed", "aggregation": "count",
                     "key": "ts", "range": 1000}],
        "triggers": [{"window": "w", "on": "watermark"}],
        "barrier_period": 0.3,
    }  # fmt: skip
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_keyed_count_from_kafka_to_kafka_is_exact(kafka, tmp_path):
    source, target = topic(kafka.bootstrap, 4), topic(kafka.bootstrap, 3)
    produce(kafka.bootstrap, source, events(20_000), key="user")
    path = count_job(tmp_path, kafka.bootstrap, source, target,
                     reading={"event_time": "ts"})  # fmt: skip
    result = onyx("run", str(path), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert values(kafka.bootstrap, target) == expected_counts(20_000)
    keys = {k for _, k, _, _ in read_all(kafka.bootstrap, target)}
    assert keys == {f"u{i}".encode() for i in range(USERS)}


def test_an_unreachable_broker_is_named(tmp_path):
    path = count_job(tmp_path, "127.0.0.1:1", "events", "out", reading={"timeout": 1})
    line = killed(onyx("run", str(path), timeout=120), "task 'read'", "127.0.0.1:1", "events")
    assert "Traceback" not in line


def test_a_missing_topic_is_named(kafka, tmp_path):
    target = topic(kafka.bootstrap, 1)
    path = count_job(tmp_path, kafka.bootstrap, "no-such-topic", target)
    killed(onyx("run", str(path), timeout=120), "task 'read'", "'no-such-topic'", "does not exist")


def test_an_undecodable_record_kills_the_job_naming_where_it_is(kafka, tmp_path):
    source, target = topic(kafka.bootstrap, 1), topic(kafka.bootstrap, 1)
    produce(kafka.bootstrap, source, [{"user": "a", "ts": 1}, b"{not json", {"user": "b", "ts": 2}])
    path = count_job(tmp_path, kafka.bootstrap, source, target)
    killed(onyx("run", str(path), timeout=120), "task 'read'", f"topic {source!r} partition 0 "
           "offset 1", "cannot decode")  # fmt: skip


def test_an_undecodable_record_goes_to_the_dead_letter_topic(kafka, tmp_path):
    source, target, dead = (topic(kafka.bootstrap, 1) for _ in range(3))
    produce(kafka.bootstrap, source, [{"user": "a", "ts": 1}, b"[1, 2]", {"user": "b", "ts": 2}])
    path = count_job(tmp_path, kafka.bootstrap, source, target,
                     reading={"on_error": "dead_letter", "dead_letter_topic": dead})  # fmt: skip
    result = onyx("run", str(path), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(values(kafka.bootstrap, target)) == 2
    ((_, _, value, headers),) = read_all(kafka.bootstrap, dead)
    assert value == b"[1, 2]"
    assert headers["onyx.source"] == f"{source}/0/1".encode()
    assert b"list is not an object" in headers["onyx.error"]


def test_a_record_over_the_limit_is_named_with_its_size(kafka, tmp_path):
    source, target = topic(kafka.bootstrap, 1), topic(kafka.bootstrap, 1)
    produce(kafka.bootstrap, source, [{"n": n, "size": 100 * n} for n in range(10)])
    path = count_job(tmp_path, kafka.bootstrap, source, target,
                     writing={"config": {"message.max.bytes": 1000}, "key": None})  # fmt: skip
    doc = yaml.safe_load(path.read_text())
    doc["catalog"][1] |= {"fn": "tests.integration.bulky:inflate", "group_by_key": None}
    doc |= {"windows": [], "triggers": []}
    path.write_text(yaml.safe_dump(doc))
    killed(onyx("run", str(path), timeout=120), "task 'write'", "bytes, over the 488 "
           "that message.max.bytes leaves")  # fmt: skip


def test_a_secret_missing_from_the_members_environment_is_named_not_shown(kafka, tmp_path):
    source, target = topic(kafka.bootstrap, 1), topic(kafka.bootstrap, 1)
    path = count_job(tmp_path, kafka.bootstrap, source, target,
                     reading={"secrets": {"sasl.password": "NOT_SET_ANYWHERE"}})  # fmt: skip
    killed(onyx("run", str(path), timeout=120), "task 'read'", "ONYX_SECRET_NOT_SET_ANYWHERE")


@pytest.mark.parametrize(
    ("params", "words"),
    [({"bootstrap": "x:1"}, ["topic", "required"]),
     ({"bootstrap": "x:1", "topic": "t", "format": "xml"}, ["format"]),
     ({"bootstrap": "x:1", "topic": "t", "config": {"group.id": "g"}}, ["group.id", "own"]),
     ({"bootstrap": "x:1", "topic": "t", "on_error": "dead_letter"}, ["dead_letter_topic"]),
     ({"bootstrap": "x:1", "topic": "t", "secrets": {"sasl.password": "a-b"}}, ["secrets"])],
)  # fmt: skip
def test_bad_params_are_refused_at_submit_naming_the_param(tmp_path, params, words):
    doc = {"workflow": [["read", "write"]], "catalog": [
        {"name": "read", "kind": "input", "plugin": "peer.plugins.kafka:input", "params": params},
        {"name": "write", "kind": "output", "plugin": "peer.plugins.null:output"}]}  # fmt: skip
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = onyx("run", str(path))
    assert result.returncode != 0
    message = result.stderr.strip()
    assert "task 'read'" in message, message
    assert "Traceback" not in message, message
    for word in words:
        assert word in message, message


def test_bytes_come_as_they_are_with_their_headers(kafka):
    name = topic(kafka.bootstrap, 1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    producer.produce(name, b"\x00\xffraw", b"k1", headers=[("trace", b"abc")])
    assert producer.flush(30) == 0
    (got,) = drain(reader(kafka.bootstrap, name, 0, 1, format="bytes"))
    assert (got["key"], got["value"], got["headers"]) == (
        b"k1",
        b"\x00\xffraw",
        [["trace", b"abc"]],
    )
    assert (got["partition"], got["offset"]) == (0, 0)


def test_arrow_records_come_as_one_batch_per_poll(kafka):
    name = topic(kafka.bootstrap, 1)
    tables = [pa.table({"n": list(range(i * 10, i * 10 + 10)), "s": ["x"] * 10}) for i in range(3)]
    produce(kafka.bootstrap, name, [_ipc(t) for t in tables])
    plugin = reader(kafka.bootstrap, name, 0, 1, format="arrow")
    batches = []
    while not plugin.completed():
        got = plugin.poll(100)
        if len(got):
            batches.append(got)
    assert all(isinstance(b, pa.RecordBatch) for b in batches)
    assert [n for b in batches for n in b.column("n").to_pylist()] == list(range(30))


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def test_a_partitions_lag_is_a_metric(kafka):
    name = topic(kafka.bootstrap, 1)
    produce(kafka.bootstrap, name, events(500))
    plugin = reader(kafka.bootstrap, name, 0, 1, stop_at_end=False)
    taken = drain(plugin, until=200)
    lag = KAFKA_LAG.labels("t", name, "0")

    def measured() -> bool:
        plugin.lag_at = 0  # the next poll reads the ends again rather than in LAG_EVERY seconds
        taken.extend(plugin.poll(0))
        return lag._value.get() == 500 - len(taken)

    wait_for(measured, 30, "the lag to be measured")


def test_the_at_least_once_output_writes_each_record_as_it_comes(kafka):
    name = topic(kafka.bootstrap, 2)
    out = load(task("peer.plugins.kafka:output", kind="output", name="w",
                    bootstrap=kafka.bootstrap, topic=name, key="user"), 0, 1)  # fmt: skip
    out.recover(recovery())
    out.prepare(events(300))
    while not out.write():
        pass
    wait_for(out.synced, 30, "every record acknowledged")
    got = read_all(kafka.bootstrap, name)
    assert sorted(json.loads(v)["ts"] for _, _, v, _ in got) == list(range(300))
    out.close()


def test_a_missing_output_topic_is_named_when_the_job_starts(kafka, tmp_path):
    source = topic(kafka.bootstrap, 1)
    produce(kafka.bootstrap, source, events(10), key="user")
    path = count_job(tmp_path, kafka.bootstrap, source, "no-such-output")
    killed(onyx("run", str(path), timeout=120), "task 'write'", "'no-such-output'",
           "does not exist")  # fmt: skip


def test_committed_positions_are_written_back_to_the_group(kafka):
    """For the usual lag tools only: the group's positions follow the committed epochs."""
    name = topic(kafka.bootstrap, 2)
    produce(kafka.bootstrap, name, events(400), key="user")
    group = f"g-{name}"
    plugin = reader(kafka.bootstrap, name, 0, 1, group=group)
    taken = drain(plugin)
    plugin.checkpoint(Epoch(1, 1))
    ends = dict(plugin.next)
    plugin.committed(Epoch(1, 1))
    check = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group})

    def written() -> bool:
        plugin.poll(0)  # serves the commit's callback
        found = check.committed([TopicPartition(name, p) for p in ends], timeout=10)
        return {tp.partition: tp.offset for tp in found} == ends

    wait_for(written, 30, "the group's positions")
    assert len(taken) == 400
    check.close()
    plugin.close()


def test_epochs_staged_on_an_object_store_are_delivered_once(kafka, object_store, prefix):
    """As in a cluster, where the staging is the checkpoint storage: another member's recovery
    finds what this one staged."""
    name = topic(kafka.bootstrap, 2)
    staging = f"s3://{prefix}/staging"
    first = sink(kafka.bootstrap, name, staging, key="user")
    first.recover(recovery())
    first.prepare(events(200))
    first.write()
    position = first.checkpoint(Epoch(1, 1))
    position.durable.result(60)
    first.close()  # gone before the commit's delivery: the recovery delivers it
    again = sink(kafka.bootstrap, name, staging, key="user")
    again.recover(recovery(position.position, Epoch(1, 1), version=2))
    assert sorted(json.loads(v)["ts"] for _, _, v, _ in read_all(kafka.bootstrap, name)) == list(
        range(200)
    )
    root = f"{prefix}/staging/_staging"
    left = [p for p in object_store.filesystem().find(root) if p.rstrip("/") != root]
    assert not left, "nothing left staged"
    again.close()
