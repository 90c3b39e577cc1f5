"""Checkpoints, shipped code and the exactly-once sinks' staged epochs on a real S3 server
(SeaweedFS, as the distribution's object store role runs it): what is written is whole when it
is seen, nothing is renamed, a seal cut short is never published, a committed epoch is published
by name though no listing shows it, bad endpoints, buckets and credentials are refused in one
line, and a store out of reach for a while is waited for."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow.dataset as ds
import pytest
import s3fs

from peer import metrics, storage
from peer.job.spec import Task
from peer.plugins import PluginError, Recovery
from peer.plugins.jsonl import ExactlyOnceOutput, exactly_once_output
from peer.plugins.jsonl import input as jsonl_input
from peer.plugins.parquet import output as parquet_output
from peer.plugins.places import STAGING, StorePlace
from peer.plugins.splits import Splits
from peer.plugins.staged import StagedEpochs, staged_epochs, stem
from peer.runtime import checkpoints as checkpoints_module
from peer.runtime.checkpoints import (
    CheckpointError,
    CheckpointStorage,
    CommitRecord,
    Savepoint,
)
from peer.runtime.snapshot import StoredParts, TaskSnapshot
from peer.storage import StorageError, open_url
from peer.values.epoch import Epoch
from tests.support import ObjectStore, assert_one_line_error, onyx, wait_for
from tests.unit.plugins.plugin_fixtures import task

pytestmark = pytest.mark.integration

ONE_READER = Splits.of(0, 1, 128)
"""What the file input's one reader owns: every split."""

PLUGIN = "peer.plugins.jsonl:exactly_once_output"


@pytest.fixture(autouse=True)
def fresh_clients() -> Iterator[None]:
    """A client reads its endpoint and credentials when it is made, and fsspec keeps one per
    set of options for the process: each test makes its own, from the environment it sets."""
    s3fs.S3FileSystem.clear_instance_cache()
    yield
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def checkpoints(prefix: str):
    storage_ = CheckpointStorage(f"s3://{prefix}", "tenancy")
    yield storage_
    storage_.close()


def keys(object_store: ObjectStore, path: str) -> list[str]:
    """Every object under ``path``, relative to it."""
    fs = object_store.filesystem()
    return sorted(p.removeprefix(f"{path}/") for p in fs.find(path))


def failures(operation: str) -> float:
    return metrics.STORAGE_FAILURES.labels(operation)._value.get()


# -- checkpoints ---------------------------------------------------------------------------------


def test_snapshots_are_stored_read_listed_and_collected_without_a_temporary_name(
    object_store, prefix, checkpoints
):
    for number in (1, 2, 3):
        checkpoints.put("job", Epoch(1, number), "count", 0, b"state %d" % number).result()
    assert checkpoints.get("job", Epoch(1, 2), "count", 0) == b"state 2"
    assert checkpoints.epochs("job") == [Epoch(1, 1), Epoch(1, 2), Epoch(1, 3)]
    assert not any(".tmp" in k for k in keys(object_store, prefix))
    kept = {"kept": Savepoint(Epoch(1, 1), {"count": 1})}
    record = CommitRecord(Epoch(1, 3), 1, {"count": 1}, floor=Epoch(1, 3), savepoints=kept)
    assert checkpoints.collect("job", record.retains) == 1
    assert checkpoints.epochs("job") == [Epoch(1, 1), Epoch(1, 3)]


def test_a_restore_reads_a_chain_and_a_range_of_key_groups_from_the_store(checkpoints):
    """Ranged reads of the store: a slot that owns key groups 4 and 5 reads those parts of
    each snapshot of the chain."""
    parts = {g: bytes([g]) * 30_000 for g in range(8)}
    whole = TaskSnapshot(1, None, None, False).to_bytes(parts)
    checkpoints.put("job", Epoch(1, 1), "count", 0, whole).result()
    changes = TaskSnapshot(2, None, None, False, chain=(1,)).to_bytes({5: b"new", 7: b"x"})
    checkpoints.put("job", Epoch(1, 2), "count", 0, changes).result()
    restored = checkpoints.restore("job", Epoch(1, 2), "count", 0, range(4, 6)).result()
    assert restored.snapshot.plugin == 2
    assert restored.layers == [{4: parts[4], 5: parts[5]}, {5: b"new"}]


def test_a_snapshot_written_as_it_is_packed_reaches_the_store_whole_and_reads_as_it_goes(
    checkpoints, monkeypatch
):
    """A snapshot larger than what is gathered in memory goes to the store from a temporary
    file, in one object; a restore of more parts than it holds reads them a run at a time."""
    monkeypatch.setattr(checkpoints_module, "SPOOL", 100_000)
    monkeypatch.setattr(checkpoints_module, "HOLD", 100_000)
    parts = {g: bytes([g]) * 30_000 for g in range(16)}
    snapshot = TaskSnapshot(1, None, None, False)
    packed = []

    def chunks():
        packed.append(True)
        return snapshot.chunks(sorted(parts.items()))

    size = checkpoints.put("job", Epoch(1, 1), "count", 0, chunks).result()
    assert size == len(snapshot.to_bytes(parts)) > 100_000
    assert packed == [True]
    assert checkpoints.get("job", Epoch(1, 1), "count", 0) == snapshot.to_bytes(parts)
    restored = checkpoints.restore("job", Epoch(1, 1), "count", 0, range(2, 12)).result()
    (layer,) = restored.layers
    assert isinstance(layer, StoredParts), "past HOLD bytes, read as taken"
    assert list(layer.items()) == [(g, parts[g]) for g in range(2, 12)]


def test_a_missing_snapshot_is_named_and_not_retried(checkpoints):
    before = failures("read")
    with pytest.raises(CheckpointError, match=r"the snapshot of job 'job' .* is not at s3://"):
        checkpoints.get("job", Epoch(4, 1), "count", 0)
    assert failures("read") == before


def test_shipped_code_goes_to_the_store_and_is_deleted_with_its_job(checkpoints):
    where = checkpoints.put_code("job", "abc", b"PK archive")
    assert where.startswith("s3://")
    assert where.endswith("/code/abc.zip")
    assert checkpoints.get_code("job", "abc") == b"PK archive"
    assert checkpoints.delete_code("job") == 1


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [
        ("AWS_SECRET_ACCESS_KEY", "wrong", "signature"),
        ("AWS_ACCESS_KEY_ID", "nobody", "access key"),
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:9", "Could not connect"),
    ],
)
def test_a_wrong_credential_or_endpoint_is_refused_at_the_start_in_one_line(
    prefix, monkeypatch, variable, value, words
):
    monkeypatch.setenv(variable, value)
    opened = CheckpointStorage(f"s3://{prefix}", "tenancy")
    try:
        with pytest.raises(CheckpointError) as refused:
            opened.check_writable()
    finally:
        opened.close()
    message = str(refused.value)
    assert message.startswith(f"checkpoint storage s3://{prefix} cannot be written")
    assert words.lower() in message.lower()
    assert "\n" not in message


def test_a_missing_bucket_is_refused_at_the_start(object_store):
    opened = CheckpointStorage(f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/checkpoints", "t")
    try:
        with pytest.raises(CheckpointError, match=r"cannot be written.*(bucket|NoSuchBucket)"):
            opened.check_writable()
    finally:
        opened.close()


def test_an_upload_waits_for_a_store_that_stops_answering_for_a_while(
    object_store, checkpoints, monkeypatch
):
    """SIGSTOP holds the server as a hung host would: the upload fails, is counted and tried
    again, and lands once the server answers again."""
    monkeypatch.setattr(storage, "RETRY_SECONDS", 120.0)
    monkeypatch.setattr(storage, "ATTEMPT_SECONDS", 2.0)
    opened = CheckpointStorage(checkpoints.url, "tenancy")
    before = failures("upload")
    object_store.pause()
    try:
        upload = opened.put("job", Epoch(1, 1), "count", 0, b"state")
        wait_for(lambda: failures("upload") > before, 60, "the upload's first failure")
        assert not upload.done()
    finally:
        object_store.resume()
    upload.result(timeout=120)
    opened.close()
    assert failures("upload") > before
    assert checkpoints.get("job", Epoch(1, 1), "count", 0) == b"state"


def test_a_store_out_of_reach_past_the_retries_is_a_storage_error(
    object_store, prefix, monkeypatch
):
    monkeypatch.setattr(storage, "RETRY_SECONDS", 1.0)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    opened = CheckpointStorage(f"s3://{prefix}", "tenancy")
    try:
        with pytest.raises(StorageError, match=r"cannot store the snapshot .* for 1 s"):
            opened.put("job", Epoch(1, 1), "count", 0, b"state").result()
    finally:
        opened.close()


# -- the exactly-once sinks' staged epochs --------------------------------------------------------


def epochs(prefix: str, committed: Epoch | None = None, version: int = 1) -> StagedEpochs:
    staged = staged_epochs(task(PLUGIN, "output", "write", path=f"s3://{prefix}"), 0)
    staged.recover(Recovery(None, committed, Epoch(version, 1)))
    return staged


def writes(text: str, name_suffix: str = ".txt"):
    def finish(temp, name):
        temp.mkdir(parents=True, exist_ok=True)
        (temp / "part").mkdir(exist_ok=True)
        (temp / "part" / f"{name}{name_suffix}").write_text(text)

    return finish


def published(object_store: ObjectStore, prefix: str) -> list[str]:
    fs = object_store.filesystem()
    found = [p for p in fs.find(prefix) if f"/{STAGING}/" not in p]
    return sorted(fs.cat_file(p).decode() for p in found)


def test_an_epoch_is_staged_with_its_manifest_and_published_at_commit(object_store, prefix):
    slot = epochs(prefix)
    slot.seal(Epoch(1, 1), writes("one")).result()
    name = stem(Epoch(1, 1), 0)
    assert keys(object_store, prefix) == [
        f"{STAGING}/{name}.sealed",
        f"{STAGING}/{name}/part/{name}.txt",
    ]
    assert published(object_store, prefix) == []
    slot.committed(Epoch(1, 1))
    slot.drained().result()
    assert published(object_store, prefix) == ["one"]
    assert [k for k in keys(object_store, prefix) if k.startswith(STAGING)] == []
    slot.close()


def test_recovery_publishes_what_was_committed_and_deletes_what_was_not(object_store, prefix):
    """A slot that sealed two epochs and died before hearing of the first's commit: the next
    allocation publishes the committed one and deletes the other, and a seal cut short (files
    without a manifest) is deleted unseen."""
    first = epochs(prefix)
    first.seal(Epoch(1, 1), writes("committed")).result()
    first.seal(Epoch(1, 2), writes("not committed")).result()
    first.close()
    fs = object_store.filesystem()
    cut = stem(Epoch(1, 3), 0)
    fs.pipe_file(f"{prefix}/{STAGING}/{cut}/part/{cut}.txt", b"cut short")
    epochs(prefix, committed=Epoch(1, 1), version=2).close()
    assert published(object_store, prefix) == ["committed"]
    assert [k for k in keys(object_store, prefix) if k.startswith(STAGING)] == []


def test_two_slots_publishing_one_epoch_at_once_publish_it_once(object_store, prefix):
    first = epochs(prefix)
    first.seal(Epoch(1, 1), writes("once")).result()
    first.close()
    settling = [epochs(prefix, committed=Epoch(1, 1), version=2) for _ in range(2)]
    for slot in settling:
        slot.close()
    assert published(object_store, prefix) == ["once"]


def test_a_manifest_that_is_not_a_list_of_names_is_named(object_store, prefix):
    name = stem(Epoch(1, 1), 0)
    object_store.filesystem().pipe_file(f"{prefix}/{STAGING}/{name}.sealed", b'{"not": 1}')
    with pytest.raises(PluginError, match=r"task 'write'.*manifest s3://.*is not a list"):
        epochs(prefix, committed=Epoch(1, 1), version=2)


def publish_one_epoch(sink, rows) -> None:
    """A sink's first epoch as a peer runs it: recover, write ``rows``, seal, publish, close."""
    sink.recover(Recovery(None, None, Epoch(1, 1)))
    sink.prepare(rows)
    assert sink.write()
    sink.checkpoint(Epoch(1, 1)).durable.result()
    sink.committed(Epoch(1, 1))
    sink.drained().result()
    sink.close()


def test_the_exactly_once_jsonl_sink_publishes_its_file_to_the_store(object_store, prefix):
    sink = exactly_once_output(task(PLUGIN, "output", "write", path=f"s3://{prefix}"), 0, 1)
    publish_one_epoch(sink, [{"user": "u1", "n": 1}, {"user": "u2", "n": 2}])
    fs = object_store.filesystem()
    files = fs.glob(f"{prefix}/*.jsonl")
    assert [p.rsplit("/", 1)[-1] for p in files] == [f"{stem(Epoch(1, 1), 0)}.jsonl"]
    rows = [json.loads(line) for line in fs.cat_file(files[0]).decode().splitlines()]
    assert rows == [{"user": "u1", "n": 1}, {"user": "u2", "n": 2}]


class Unlisting:
    """The store's client, except that a listing of the staging area shows nothing, as a
    store's listing may while it lags behind what was written. Everything else, reads by key
    included, is the real client's."""

    def __init__(self, fs: Any) -> None:
        self._fs = fs
        self.hidden = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)

    def ls(self, path: str, *args: Any, **kwargs: Any) -> Any:
        return self._hide(path) if STAGING in path else self._fs.ls(path, *args, **kwargs)

    def find(self, path: str, *args: Any, **kwargs: Any) -> Any:
        return self._hide(path) if STAGING in path else self._fs.find(path, *args, **kwargs)

    def glob(self, path: str, *args: Any, **kwargs: Any) -> Any:
        return self._hide(path) if STAGING in path else self._fs.glob(path, *args, **kwargs)

    def _hide(self, path: str) -> list[str]:
        self.hidden += 1
        return []


def jsonl_sink(prefix: str, client: Any = None) -> ExactlyOnceOutput:
    """Slot 0 of the exactly-once JSON-lines sink at ``prefix``, through ``client`` if given."""
    write = task(PLUGIN, "output", "write", path=f"s3://{prefix}")
    fs, root = open_url(f"s3://{prefix}")
    place = StorePlace(write, fs if client is None else client, root.rstrip("/"))
    return ExactlyOnceOutput(write, StagedEpochs(write, place, 0))


def written(object_store: ObjectStore, prefix: str) -> list[int]:
    """What a reader of the sink sees: every published file's rows, in name order."""
    fs = object_store.filesystem()
    return [json.loads(line)["n"] for path in sorted(fs.glob(f"{prefix}/*.jsonl"))
            for line in fs.cat_file(path).decode().splitlines()]  # fmt: skip


def test_a_committed_epoch_is_published_by_name_though_no_listing_shows_it(object_store, prefix):
    """A slot sealed three epochs and died before hearing that the first two were committed,
    its publishing of the first cut short after its copy. The next allocations list the staging
    area and see nothing: each publishes the committed epochs from the checkpoint all the same,
    every row once, and leaves the uncommitted one unseen. A later recovery whose listing shows
    it collects it."""
    first = jsonl_sink(prefix)
    first.recover(Recovery(None, None, Epoch(1, 1)))
    positions = {}
    for number, rows in ((1, [1, 2]), (2, [3]), (3, [4])):
        first.prepare([{"n": n} for n in rows])
        assert first.write()
        sealing = first.checkpoint(Epoch(1, number))
        sealing.durable.result()
        positions[number] = json.loads(json.dumps(sealing.position))  # as a snapshot keeps it
    first.close()
    one, two, three = (stem(Epoch(1, n), 0) for n in (1, 2, 3))
    checkpoint = positions[2]
    assert checkpoint == {"unpublished": [one, two]}
    fs = object_store.filesystem()
    fs.cp_file(f"{prefix}/{STAGING}/{one}/{one}.jsonl", f"{prefix}/{one}.jsonl")
    fs.rm_file(f"{prefix}/{STAGING}/{one}/{one}.jsonl")
    for version in (2, 3):
        listing = Unlisting(open_url(f"s3://{prefix}")[0])
        sink = jsonl_sink(prefix, listing)
        sink.recover(Recovery(checkpoint, Epoch(1, 2), Epoch(version, 1)))
        sink.close()
        assert listing.hidden > 0
        assert written(object_store, prefix) == [1, 2, 3]
        staged = [k for k in keys(object_store, prefix) if k.startswith(STAGING)]
        assert staged == [f"{STAGING}/{three}.sealed", f"{STAGING}/{three}/{three}.jsonl"]
    listed = jsonl_sink(prefix)
    listed.recover(Recovery(checkpoint, Epoch(1, 2), Epoch(4, 1)))
    listed.close()
    assert written(object_store, prefix) == [1, 2, 3]
    assert [k for k in keys(object_store, prefix) if k.startswith(STAGING)] == []


def test_the_jsonl_input_reads_a_file_on_the_store_from_its_checkpoint(object_store, prefix):
    path = f"{prefix}/events.jsonl"
    object_store.filesystem().pipe_file(path, b"".join(b'{"n": %d}\n' % n for n in range(10)))
    read = task("peer.plugins.jsonl:input", "input", "read", path=f"s3://{path}")
    first = jsonl_input(read, 0, 1, splits=ONE_READER)
    first.recover(Recovery(None, None, Epoch(1, 1)))
    assert first.poll(4) == [{"n": n} for n in range(4)]
    position = first.checkpoint(Epoch(1, 1))
    first.close()
    again = jsonl_input(read, 0, 1, splits=ONE_READER)
    again.recover(Recovery(position, Epoch(1, 1), Epoch(2, 1)))
    assert again.poll(100) == [{"n": n} for n in range(4, 10)]
    assert again.completed()
    again.close()


def test_a_missing_input_file_on_the_store_is_named(object_store, prefix):
    read = task("peer.plugins.jsonl:input", "input", "read", path=f"s3://{prefix}/absent.jsonl")
    with pytest.raises(PluginError, match=r"task 'read'.*cannot open 's3://.*absent.jsonl'"):
        jsonl_input(read, 0, 1, splits=ONE_READER)


def test_a_member_with_a_wrong_secret_is_refused_in_one_line_and_joins_nothing(
    object_store, prefix, zookeeper, tenancy, monkeypatch
):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    url = f"s3://{prefix}/checkpoints"
    result = onyx("peer", "start", "--zookeeper", zookeeper.address, "--tenancy", tenancy,
                  "--checkpoints", url, "--workers", "0")  # fmt: skip
    assert_one_line_error(result, 1, f"checkpoint storage {url} cannot be written", "signature")
    shown = onyx("replica", "--json", "--zookeeper", zookeeper.address, "--tenancy", tenancy)
    assert json.loads(shown.stdout)["groups"] == []


def test_the_parquet_sink_publishes_a_partitioned_table_to_the_store(object_store, prefix):
    """Two slots, one epoch each: the table on the store is the committed rows, Hive-partitioned,
    and pyarrow reads it back through the same client."""
    table = Task(
        "write", "output", plugin="peer.plugins.parquet:output",
        schema={"id": "bigint", "k": "string"},
        params={"path": f"s3://{prefix}/table", "partition_by": ["k"]},
    )  # fmt: skip
    for slot in (0, 1):
        rows = [{"id": slot * 10 + n, "k": "ab"[n % 2]} for n in range(4)]
        publish_one_epoch(parquet_output(table, slot, 2), rows)
    fs = object_store.filesystem()
    dataset = ds.dataset(
        f"{prefix}/table", filesystem=fs, format="parquet", partitioning="hive",
        exclude_invalid_files=True,
    )  # fmt: skip
    rows = sorted((r["id"], r["k"]) for r in dataset.to_table().to_pylist())
    assert rows == sorted((s * 10 + n, "ab"[n % 2]) for s in (0, 1) for n in range(4))
    assert not [p for p in fs.find(f"{prefix}/table") if STAGING in p]
