"""The NATS JetStream connectors against a real nats-server: the input reads a stream's sequence
exactly, split among any number of peers and restored on another number; the exactly-once
output's stream holds each record of a committed epoch once, an epoch delivered again included;
whole jobs give exact output; and every bad input ends in one clear message naming the task."""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgpack
import nats
import pytest
import yaml
from nats.js import api

from peer.local_servers import Nats
from peer.plugins import load
from peer.plugins.delivered import RECORDS
from peer.plugins.nats.sink import MSG_ID
from peer.plugins.nats.source import BUFFERED
from peer.plugins.splits import Splits
from peer.values.epoch import Epoch
from tests.count_workload import events, expected_counts
from tests.integration.test_run_failures import killed
from tests.support import onyx, wait_for
from tests.unit.plugins.plugin_fixtures import recovery, task

pytestmark = pytest.mark.integration

SPLITS = 8
_names = itertools.count()


# -- the server, as a test reaches it ---------------------------------------------------------


def stream(url: str, window: float = 120.0) -> str:
    """A new stream of the test's own, capturing the subjects ``<name>.>``."""
    name = f"S{time.monotonic_ns()}x{next(_names)}"

    async def make(js: Any) -> None:
        await js.add_stream(name=name, subjects=[f"{name}.>"], duplicate_window=window)

    _with_server(url, make)
    return name


def publish(url: str, subject: str, values: Iterable[Any]) -> int:
    """Each value published as JSON (bytes as they are), every one acknowledged; the count."""

    async def send(js: Any) -> int:
        acks = [await js.publish_async(subject, v if isinstance(v, bytes) else
                                       json.dumps(v).encode()) for v in values]  # fmt: skip
        await asyncio.gather(*acks)
        return len(acks)

    return _with_server(url, send)


def messages(url: str, name: str) -> list[tuple[str, bytes, dict[str, str]]]:
    """Every message the stream holds, in order: (subject, data, headers)."""

    async def read(js: Any) -> list[tuple[str, bytes, dict[str, str]]]:
        last = (await js.stream_info(name)).state.last_seq
        found: list[tuple[str, bytes, dict[str, str]]] = []
        if last == 0:
            return found
        sub = await js.pull_subscribe(f"{name}.>", stream=name, config=api.ConsumerConfig(
            ack_policy=api.AckPolicy.NONE, mem_storage=True, inactive_threshold=30))  # fmt: skip
        while not found or found[-1][0] != last:
            for m in await sub.fetch(500, timeout=10):
                found.append((m.metadata.sequence.stream, m.subject, m.data, m.headers or {}))
        return [(subject, data, headers) for _, subject, data, headers in found]

    return _with_server(url, read)


def values(url: str, name: str) -> list[str]:
    """The stream's JSON values, sorted as canonical JSON."""
    return sorted(
        json.dumps(json.loads(data), sort_keys=True) for _, data, _ in messages(url, name)
    )


def _with_server[T](url: str, work: Any) -> T:
    async def run() -> T:
        nc = await nats.connect(url)
        try:
            return await work(nc.jetstream())
        finally:
            await nc.close()

    return asyncio.run(run())


def reader(url: str, name: str, slot: int, slots: int, checkpoint: Any = None, **params: Any):
    t = task("peer.plugins.nats:input", url=url, stream=name, **{"stop_at_end": True, **params})
    plugin = load(t, slot, slots, SPLITS)
    plugin.recover(recovery(checkpoint, Epoch(1, 1) if checkpoint is not None else None))
    return plugin


def drain(plugin: Any, until: int | None = None, timeout: float = 60) -> list[Any]:
    """What the input gives until it completes (or holds ``until`` segments)."""
    taken: list[Any] = []

    def more() -> bool:
        if until is not None and len(taken) >= until:
            return True
        taken.extend(plugin.poll(100 if until is None else min(100, until - len(taken))))
        return plugin.completed()

    wait_for(more, timeout, "the input to give what it holds", interval=0.01)
    return taken


def test_slots_share_the_stream_and_read_each_message_once(nats):
    name = stream(nats.url)
    publish(nats.url, f"{name}.events", events(3000))
    slots = [reader(nats.url, name, slot, 3) for slot in range(3)]
    read = [drain(plugin) for plugin in slots]
    assert sorted(e["ts"] for r in read for e in r) == list(range(3000))
    assert all(r for r in read), "every slot owns splits, and so messages"
    for plugin in slots:
        plugin.close()


def test_positions_restore_on_another_number_of_peers(nats):
    """Two slots read part of the stream; their checkpoints go to one slot, then to three: no
    message twice, none missed."""
    name = stream(nats.url)
    publish(nats.url, f"{name}.events", events(4000))
    two = [reader(nats.url, name, slot, 2) for slot in range(2)]
    first = [drain(plugin, until=700) for plugin in two]
    held = {slot: plugin.checkpoint(Epoch(1, 1)) for slot, plugin in enumerate(two)}
    for plugin in two:
        plugin.close()
    # slot 0 of 1 owns every split: the positions of both old slots, in split order
    one = reader(nats.url, name, 0, 1, [*held[0], *held[1]])
    second = drain(one, until=1500)
    positions = one.checkpoint(Epoch(1, 2))
    one.close()
    three = []
    for slot in range(3):
        owned = Splits.of(slot, 3, SPLITS).owned
        three.append(reader(nats.url, name, slot, 3, [positions[s] for s in owned]))
    third = [e for plugin in three for e in drain(plugin)]
    seen = [e["ts"] for e in [*first[0], *first[1], *second, *third]]
    assert sorted(seen) == list(range(4000))
    for plugin in three:
        plugin.close()


def test_stop_at_end_reads_what_the_filter_holds_as_it_started(nats):
    """With a subject filter the stream's last message may be another subject's: the input
    still completes, with none published after it started."""
    name = stream(nats.url)
    publish(nats.url, f"{name}.a", events(50))
    publish(nats.url, f"{name}.b", events(10))
    plugin = reader(nats.url, name, 0, 1, subject=f"{name}.a", metadata=True)
    publish(nats.url, f"{name}.a", [{"user": "late", "ts": -1}])
    got = drain(plugin)
    assert [e["ts"] for e in got] == list(range(50))
    assert {e["nats_subject"] for e in got} == {f"{name}.a"}
    assert [e["nats_seq"] for e in got] == list(range(1, 51))
    assert plugin.checkpoint(Epoch(1, 1))[0][0] == 51
    plugin.close()


def test_an_empty_stream_completes_at_once(nats):
    name = stream(nats.url)
    plugin = reader(nats.url, name, 0, 1)
    assert drain(plugin) == []
    plugin.close()


def test_start_new_reads_only_messages_published_after_the_start(nats):
    name = stream(nats.url)
    publish(nats.url, f"{name}.x", events(20))
    plugin = reader(nats.url, name, 0, 1, start="new", stop_at_end=False)
    assert plugin.checkpoint(Epoch(1, 1)) == [[21, 21]] * SPLITS, "a position before any message"
    publish(nats.url, f"{name}.x", [{"user": "new", "ts": 100}])
    got = drain(plugin, until=1)
    assert got == [{"user": "new", "ts": 100}]
    plugin.close()


def test_a_start_time_reads_the_messages_stored_from_then_on(nats):
    """The messages published once the clock has passed the start (a millisecond after the
    last earlier one was stored), and none of those before."""
    name = stream(nats.url)
    publish(nats.url, f"{name}.x", events(30))
    before = time.time_ns() // 1_000_000
    start = wait_for(lambda: time.time_ns() // 1_000_000 > before and time.time_ns() // 1_000_000,
                     5, "the clock to pass a millisecond", interval=0.001)  # fmt: skip
    publish(nats.url, f"{name}.x", [{"user": "later", "ts": t} for t in range(100, 110)])
    plugin = reader(nats.url, name, 0, 1, start=start, metadata=True)
    got = drain(plugin)
    assert [e["ts"] for e in got] == list(range(100, 110))
    assert all(e["nats_timestamp"] >= start for e in got)
    plugin.close()


def test_bytes_come_as_they_are_with_their_headers(nats):
    name = stream(nats.url)

    async def send(js: Any) -> None:
        await js.publish(f"{name}.raw", b"\x00\xffraw", headers={"trace": "abc"})

    _with_server(nats.url, send)
    plugin = reader(nats.url, name, 0, 1, format="bytes")
    (got,) = drain(plugin)
    assert got == {"subject": f"{name}.raw", "data": b"\x00\xffraw", "headers": {"trace": "abc"},
                   "seq": 1}  # fmt: skip
    plugin.close()


def test_a_restart_of_the_server_mid_read_loses_nothing(nats_of_its_own):
    """The server killed and started again while a slot reads: its consumer (kept in memory)
    is gone, and the slot makes another from where it stands."""
    server = nats_of_its_own
    name = stream(server.url)
    publish(server.url, f"{name}.e", events(3 * BUFFERED))
    plugin = reader(server.url, name, 0, 1)
    first = drain(plugin, until=300)
    server.kill()  # the slot has buffered what it could, and waits to pull more
    server.start()
    rest = drain(plugin, timeout=120)
    assert sorted(e["ts"] for e in [*first, *rest]) == list(range(3 * BUFFERED))
    plugin.close()


@pytest.fixture
def nats_of_its_own():
    """A server of the test's own, to kill."""
    server = Nats().start()
    yield server
    server.stop()


# -- the exactly-once output ------------------------------------------------------------------


def committed_epoch(plugin: Any, epoch: Epoch) -> None:
    """Seal ``epoch`` and commit it, waiting until its delivery is done."""
    sealing = plugin.checkpoint(epoch)
    sealing.durable.result(60)
    plugin.committed(epoch)
    plugin.drained().result(60)
    assert plugin.synced()


def sink(url: str, name: str, staging: Path, slot: int = 0, **params: Any) -> Any:
    t = task("peer.plugins.nats:exactly_once_output", kind="output", name="w", url=url,
             msg_id_prefix=f"job-{name}", staging=str(staging),
             **{"subject": f"{name}.out", **params})  # fmt: skip
    return load(t, slot, 1)


def test_only_committed_epochs_are_published_and_each_record_once(nats, tmp_path):
    name = stream(nats.url)
    out = sink(nats.url, name, tmp_path / "staging")
    out.recover(recovery())
    out.prepare(events(500))
    out.write()
    committed_epoch(out, Epoch(1, 1))
    out.prepare(events(1000)[500:])
    out.write()
    out.checkpoint(Epoch(1, 2)).durable.result(60)  # sealed, never committed
    found = messages(nats.url, name)
    assert [json.loads(data)["ts"] for _, data, _ in found] == list(range(500))
    ids = [headers[MSG_ID] for _, _, headers in found]
    assert ids == [f"job-{name}-000000000001-00000001-0000-{seq}" for seq in range(500)]
    out.close()


def test_an_epoch_delivered_again_publishes_nothing_twice(nats, tmp_path):
    """An epoch staged and committed, part of it published before a crash: the recovery that
    delivers it again publishes it all, and the stream keeps each message once; and a delivery
    of the same staged epoch once more adds nothing."""
    name = stream(nats.url)
    staging = tmp_path / "staging"
    first = sink(nats.url, name, staging)
    first.recover(recovery())
    first.prepare(events(300))
    first.write()
    position = first.checkpoint(Epoch(1, 1))
    position.durable.result(60)
    (stem,) = position.position["unpublished"]
    files = {RECORDS: (staging / "_staging" / stem / RECORDS).read_bytes()}
    first.delivery.deliver(stem, {RECORDS: _first(files[RECORDS], 120)}, resumed=False)
    first.close()  # the crash, the epoch's first 120 records published
    again = sink(nats.url, name, staging)
    again.recover(recovery(position.position, Epoch(1, 1), version=2))
    assert again.synced()
    assert not (staging / "_staging" / stem).exists()
    again.delivery.deliver(stem, files, resumed=True)
    found = messages(nats.url, name)
    assert sorted(json.loads(data)["ts"] for _, data, _ in found) == list(range(300))
    assert len({headers[MSG_ID] for _, _, headers in found}) == 300
    again.close()


def _first(records: bytes, count: int) -> bytes:
    """The first ``count`` records of a staged file."""
    unpacker = msgpack.Unpacker(io.BytesIO(records), use_list=False)
    return b"".join(msgpack.packb(r) for r in itertools.islice(unpacker, count))


def test_a_subject_field_picks_each_records_subject(nats, tmp_path):
    name = stream(nats.url)
    out = sink(nats.url, name, tmp_path / "staging", subject=None, subject_field="to",
               stream=name)  # fmt: skip
    out.recover(recovery())
    out.prepare([{"to": f"{name}.{u}", "n": i} for i, u in enumerate("abab")])
    out.write()
    committed_epoch(out, Epoch(1, 1))
    assert [s for s, _, _ in messages(nats.url, name)] == [f"{name}.{u}" for u in "abab"]
    with pytest.raises(ValueError, match=r"task 'w'.*'elsewhere\.x'.*does not capture it"):
        out.prepare([{"to": "elsewhere.x"}])
    out.close()


def test_a_stream_with_a_short_duplicate_window_is_warned_of(nats, tmp_path, caplog):
    name = stream(nats.url, window=5)
    out = sink(nats.url, name, tmp_path / "staging")
    out.recover(recovery())
    assert "keeps message ids for 5 s" in caplog.text
    out.close()


# -- whole jobs -------------------------------------------------------------------------------


def count_job(tmp_path: Path, url: str, source: str, target: str, *,
              reading: dict | None = None, writing: dict | None = None) -> Path:  # fmt: skip
    doc = {
        "workflow": [["read", "count"], ["count", "write"]],
        "catalog": [
            {"name": "read", "kind": "input", "plugin": "peer.plugins.nats:input",
             "params": {"url": url, "stream": source, "stop_at_end": True, **(reading or {})},
             "max_peers": 2},
            {"name": "count", "kind": "function", "fn": "tests.chaos.pacing:pace",
             "group_by_key": "user"},
            {"name": "write", "kind": "output", "plugin": "peer.plugins.nats:exactly_once_output",
             "params": {"url": url, "subject": f"{target}.counts", "msg_id_prefix": f"j-{target}",
                        "staging": str(tmp_path / "staging"), **(writing or {})}},
        ],
        "windows": [{"id": "w", "task": "count", "type": "fixed", "aggregation": "count",
                     "key": "ts", "range": 1000}],
        "triggers": [{"window": "w", "on": "watermark"}],
        "barrier_period": 0.3,
    }  # fmt: skip
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_keyed_count_from_nats_to_nats_is_exact(nats, tmp_path):
    source, target = stream(nats.url), stream(nats.url)
    publish(nats.url, f"{source}.events", events(20_000))
    result = onyx("run", str(count_job(tmp_path, nats.url, source, target)), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert values(nats.url, target) == expected_counts(20_000)


def test_an_unreachable_server_is_named(nats, tmp_path):
    path = count_job(tmp_path, "nats://127.0.0.1:1", "events", "out", reading={"timeout": 1})
    killed(onyx("run", str(path), timeout=120), "task 'read'", "nats://127.0.0.1:1",
           "cannot reach NATS")  # fmt: skip
    assert nats.proc.process.poll() is None, "the server lives on"


def test_a_missing_stream_is_named(nats, tmp_path):
    target = stream(nats.url)
    path = count_job(tmp_path, nats.url, "NoSuchStream", target)
    killed(onyx("run", str(path), timeout=120), "task 'read'", "'NoSuchStream'", "does not exist")


def test_an_undecodable_message_kills_the_job_naming_where_it_is(nats, tmp_path):
    source, target = stream(nats.url), stream(nats.url)
    publish(nats.url, f"{source}.e", [{"user": "a", "ts": 1}, b"{not json", {"user": "b", "ts": 2}])
    path = count_job(tmp_path, nats.url, source, target)
    killed(onyx("run", str(path), timeout=120), "task 'read'",
           f"stream {source!r} sequence 2", "cannot decode")  # fmt: skip
    assert messages(nats.url, target) == [], "nothing of a killed job is published"
    assert nats.proc.process.poll() is None, "the server lives on"


def test_an_undecodable_message_goes_to_the_dead_letter_subject(nats, tmp_path):
    source, target, dead = stream(nats.url), stream(nats.url), stream(nats.url)
    publish(nats.url, f"{source}.e", [{"user": "a", "ts": 1}, b"[1, 2]", {"user": "b", "ts": 2}])
    path = count_job(tmp_path, nats.url, source, target,
                     reading={"dead_letter_subject": f"{dead}.letters"})  # fmt: skip
    result = onyx("run", str(path), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(values(nats.url, target)) == 2
    ((subject, data, headers),) = messages(nats.url, dead)
    assert (subject, data) == (f"{dead}.letters", b"[1, 2]")
    assert headers["Onyx-Source"] == f"{source}/2"
    assert "list is not an object" in headers["Onyx-Error"]


def test_a_subject_no_stream_captures_is_named_when_the_job_starts(nats, tmp_path):
    source = stream(nats.url)
    publish(nats.url, f"{source}.e", events(10))
    path = count_job(tmp_path, nats.url, source, "NoSuchTarget")
    killed(onyx("run", str(path), timeout=120), "task 'write'", "'NoSuchTarget.counts'")


@pytest.mark.parametrize(
    ("task_name", "params", "words"),
    [("read", {"url": "nats://x:1"}, ["stream", "required"]),
     ("read", {"url": "nats://x:1", "stream": "a.b"}, ["stream", "'a.b'"]),
     ("read", {"url": "nats://x:1", "stream": "s", "subject": "a..b"}, ["subject", "empty token"]),
     ("read", {"url": "nats://x:1", "stream": "s", "start": "middle"}, ["start"]),
     ("read", {"url": "http://x:1", "stream": "s"}, ["url", "http://x:1"]),
     ("read", {"url": "nats://x:1", "stream": "s", "secrets": {"password": "P"}}, ["user"]),
     ("write", {"url": "nats://x:1", "subject": "a", "staging": "/tmp/s"}, ["msg_id_prefix"]),
     ("write", {"url": "nats://x:1", "subject": "a.*", "staging": "/tmp/s",
                "msg_id_prefix": "j"}, ["subject", "wildcard"]),
     ("write", {"url": "nats://x:1", "subject_field": "to", "staging": "/tmp/s",
                "msg_id_prefix": "j"}, ["subject_field needs stream"])],
)  # fmt: skip
def test_bad_params_are_refused_at_submit_naming_the_param(tmp_path, task_name, params, words):
    good_read = {"url": "nats://x:1", "stream": "s"}
    good_write = {"url": "nats://x:1", "subject": "a", "staging": "/tmp/s", "msg_id_prefix": "j"}
    doc = {"workflow": [["read", "write"]], "catalog": [
        {"name": "read", "kind": "input", "plugin": "peer.plugins.nats:input",
         "params": params if task_name == "read" else good_read},
        {"name": "write", "kind": "output", "plugin": "peer.plugins.nats:exactly_once_output",
         "params": params if task_name == "write" else good_write}]}  # fmt: skip
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = onyx("run", str(path))
    assert result.returncode != 0
    message = result.stderr.strip()
    assert f"task {task_name!r}" in message, message
    assert "Traceback" not in message, message
    for word in words:
        assert word in message, message
