"""The exactly-once Parquet table sink, without Spark: staged per epoch under ``_staging``, where
no reader looks, published on commit into Hive partitions, settled on recovery, so that whatever
fails, the table holds each row once."""

from __future__ import annotations

import contextlib
import datetime
import itertools
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.job.spec import Task
from peer.plugins import PluginError, Recovery, load, parquet
from peer.plugins.parquet import ParquetTableOutput, output
from peer.plugins.staged import stem
from peer.values.epoch import Epoch
from tests.unit.plugins.two_phase import Coordinator, Sink, run

PLUGIN = "peer.plugins.parquet:output"
WHERE = f"task 'write', plugin {PLUGIN!r}"
SCHEMA = {"id": "bigint", "k": "string"}
KEYS = ("a", "b", None)
EXAMPLES = settings(max_examples=200, deadline=None)


def table_task(directory: Path, schema: Any = SCHEMA, **params: Any) -> Task:
    params.setdefault("partition_by", ["k"])
    return Task(
        "write", "output", plugin=PLUGIN, schema=schema, params={"path": str(directory), **params}
    )


def sink(
    directory: Path,
    slot: int = 0,
    committed: Epoch | None = None,
    version: int = 1,
    checkpoint: Any = None,
    **params: Any,
) -> ParquetTableOutput:
    """Slot ``slot`` of two, started in allocation ``version`` after ``committed``."""
    plugin = output(table_task(directory, **params), slot, 2)
    plugin.recover(Recovery(checkpoint, committed, Epoch(version, 1)))
    return plugin


def row(number: int) -> dict[str, Any]:
    return {"id": number, "k": KEYS[number % len(KEYS)]}


def write(plugin: ParquetTableOutput, *rows: dict[str, Any]) -> None:
    plugin.prepare(list(rows))
    assert plugin.write()


def put(plugin: ParquetTableOutput, *numbers: int) -> None:
    write(plugin, *map(row, numbers))


def seal(plugin: ParquetTableOutput, epoch: Epoch) -> Any:
    """Seal ``epoch`` and wait until it is durable, as a peer does before acknowledging it: the
    position."""
    sealing = plugin.checkpoint(epoch)
    sealing.durable.result()
    return sealing.position


def commit(plugin: ParquetTableOutput, epoch: Epoch) -> None:
    """Publish up to ``epoch`` and wait until that is done."""
    plugin.committed(epoch)
    plugin.drained().result()


def name(version: int, number: int, slot: int = 0) -> str:
    return stem(Epoch(version, number), slot)


def published(directory: Path) -> list[str]:
    """The table's files, as a reader lists them: nothing under ``_staging``."""
    return sorted(
        str(path.relative_to(directory))
        for path in directory.rglob("*")
        if path.is_file() and not path.relative_to(directory).parts[0].startswith("_")
    )


def staged(directory: Path) -> list[str]:
    return sorted(os.listdir(directory / "_staging"))


def read(directory: Path) -> list[dict[str, Any]]:
    """What a reader of the table sees, with the partition column back, in id order."""
    partitioning = ds.partitioning(pa.schema([("k", pa.string())]), flavor="hive")
    table = ds.dataset(str(directory), format="parquet", partitioning=partitioning).to_table()
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def ids(directory: Path) -> list[int]:
    return [r["id"] for r in read(directory)]


def test_an_epoch_is_staged_until_committed(tmp_path):
    plugin = sink(tmp_path)
    put(plugin, 1, 2)
    assert staged(tmp_path) == []
    seal(plugin, Epoch(1, 1))
    put(plugin, 3)
    seal(plugin, Epoch(1, 2))
    put(plugin, 4)
    assert staged(tmp_path) == [name(1, 1), name(1, 2)]
    assert published(tmp_path) == []
    assert read(tmp_path) == []
    commit(plugin, Epoch(1, 1))
    assert read(tmp_path) == [row(1), row(2)]
    commit(plugin, Epoch(1, 2))
    assert ids(tmp_path) == [1, 2, 3]
    assert staged(tmp_path) == []


def test_a_commit_publishes_every_earlier_epoch_and_an_empty_epoch_leaves_nothing(tmp_path):
    plugin = sink(tmp_path)
    put(plugin, 1)
    seal(plugin, Epoch(1, 1))
    seal(plugin, Epoch(1, 2))
    plugin.prepare([])
    put(plugin, 3)
    seal(plugin, Epoch(1, 3))
    assert staged(tmp_path) == [name(1, 1), name(1, 3)]
    commit(plugin, Epoch(1, 3))
    commit(plugin, Epoch(1, 3))
    assert published(tmp_path) == [f"k=a/{name(1, 3)}-0.parquet", f"k=b/{name(1, 1)}-0.parquet"]
    assert ids(tmp_path) == [1, 3]
    assert staged(tmp_path) == []


def test_rows_go_to_hive_partitions_and_leave_the_partition_field_out_of_the_files(tmp_path):
    plugin = sink(tmp_path)
    put(plugin, 0, 1, 2, 3)
    seal(plugin, Epoch(1, 1))
    commit(plugin, Epoch(1, 1))
    stem = name(1, 1)
    assert published(tmp_path) == [
        f"k=__HIVE_DEFAULT_PARTITION__/{stem}-0.parquet",
        f"k=a/{stem}-0.parquet",
        f"k=b/{stem}-0.parquet",
    ]
    assert pq.read_table(tmp_path / "k=a" / f"{stem}-0.parquet").to_pylist() == [
        {"id": 0},
        {"id": 3},
    ]
    assert read(tmp_path) == [row(0), row(1), row(2), row(3)]


def test_several_partition_fields_nest_in_order(tmp_path):
    schema = {"id": "bigint", "k": "string", "day": "date"}
    plugin = sink(tmp_path, schema=schema, partition_by=["day", "k"])
    write(plugin, {"id": 1, "k": "a b/c", "day": "2024-05-01"})
    seal(plugin, Epoch(1, 1))
    commit(plugin, Epoch(1, 1))
    assert published(tmp_path) == [f"day=2024-05-01/k=a%20b%2Fc/{name(1, 1)}-0.parquet"]


def test_without_partitions_the_files_sit_in_the_table_directory(tmp_path):
    plugin = sink(tmp_path, partition_by=[])
    put(plugin, 1, 2)
    seal(plugin, Epoch(1, 1))
    commit(plugin, Epoch(1, 1))
    assert published(tmp_path) == [f"{name(1, 1)}-0.parquet"]
    assert pq.read_table(tmp_path / published(tmp_path)[0]).to_pylist() == [row(1), row(2)]


def test_timestamps_are_written_as_utc_timestamps(tmp_path):
    plugin = sink(tmp_path, schema={"id": "bigint", "k": "string", "ts": "timestamp"})
    write(plugin, {"id": 1, "k": "a", "ts": 1_700_000_000.25})
    seal(plugin, Epoch(1, 1))
    commit(plugin, Epoch(1, 1))
    table = pq.read_table(tmp_path / published(tmp_path)[0])
    assert table.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    expected = datetime.datetime(2023, 11, 14, 22, 13, 20, 250000, tzinfo=datetime.UTC)
    assert table.column("ts").to_pylist() == [expected]


def test_a_checkpoint_syncs_every_file_and_directory_before_sealing(tmp_path, monkeypatch):
    synced: list[str] = []
    renamed: list[str] = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def rename(source: Any, target: Any) -> None:
        renamed.append(str(source))
        real_rename(source, target)

    plugin = sink(tmp_path)
    put(plugin, 0, 1)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    seal(plugin, Epoch(1, 1))
    temp = tmp_path / "_staging" / f"{name(1, 1)}.tmp"
    assert renamed == [str(temp)]
    files = [str(temp / f"k={k}" / f"{name(1, 1)}-0.parquet") for k in "ab"]
    directories = [str(temp / "k=a"), str(temp / "k=b"), str(temp)]
    assert synced == [*files, *directories, str(tmp_path / "_staging")]


def test_a_commit_syncs_the_partition_directories_staging_and_the_table(tmp_path, monkeypatch):
    plugin = sink(tmp_path)
    put(plugin, 1)
    seal(plugin, Epoch(1, 1))
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    commit(plugin, Epoch(1, 1))
    assert synced == [str(tmp_path / "k=b"), str(tmp_path), str(tmp_path / "_staging")]


def test_a_crash_keeps_what_was_committed_and_deletes_what_was_not(tmp_path):
    first = sink(tmp_path)
    put(first, 1, 2)
    seal(first, Epoch(1, 1))
    put(first, 3)
    seal(first, Epoch(1, 2))
    put(first, 4)
    seal(first, Epoch(1, 3))
    put(first, 5)
    commit(first, Epoch(1, 1))
    first.close()  # the coordinator committed epoch 2, then the peer died
    second = sink(tmp_path, committed=Epoch(1, 2), version=2)
    assert ids(tmp_path) == [1, 2, 3]
    assert staged(tmp_path) == []
    put(second, 4, 5)
    seal(second, Epoch(2, 1))
    commit(second, Epoch(2, 1))
    assert ids(tmp_path) == [1, 2, 3, 4, 5]


def test_recovery_publishes_an_epoch_whose_commit_the_sink_never_heard(tmp_path):
    first = sink(tmp_path)
    put(first, 1, 2)
    seal(first, Epoch(1, 1))
    first.close()
    sink(tmp_path, committed=Epoch(1, 1), version=2)
    assert ids(tmp_path) == [1, 2]
    assert staged(tmp_path) == []


def test_recovery_finishes_an_epoch_a_crash_left_half_published(tmp_path):
    first = sink(tmp_path)
    put(first, 1, 2)
    seal(first, Epoch(1, 1))
    first.close()
    half = f"k=b/{name(1, 1)}-0.parquet"  # the peer died after moving this one file
    (tmp_path / "k=b").mkdir()
    os.rename(tmp_path / "_staging" / name(1, 1) / half, tmp_path / half)
    assert ids(tmp_path) == [1]
    sink(tmp_path, committed=Epoch(1, 1), version=2)
    assert ids(tmp_path) == [1, 2]
    assert staged(tmp_path) == []


def test_with_nothing_committed_every_older_allocations_epoch_goes(tmp_path):
    first = sink(tmp_path)
    put(first, 1)
    seal(first, Epoch(1, 1))
    put(first, 2)
    first.close()
    sink(tmp_path, version=2)
    assert published(tmp_path) == []
    assert staged(tmp_path) == []


def test_newer_and_current_allocations_epochs_are_left_alone(tmp_path):
    newer = sink(tmp_path, 0, version=3)
    put(newer, 1)
    seal(newer, Epoch(3, 1))
    current = sink(tmp_path, 1, version=2)
    put(current, 2)
    seal(current, Epoch(2, 1))
    sink(tmp_path, 0, version=2)  # a peer that has not yet heard of allocation 3
    assert staged(tmp_path) == [name(2, 1, 1), name(3, 1)]
    commit(newer, Epoch(3, 1))
    assert ids(tmp_path) == [1]


def test_a_crash_in_the_middle_of_phase_one_leaves_a_temp_directory_recovery_cleans(
    tmp_path, monkeypatch
):
    first = sink(tmp_path)
    put(first, 1)

    def crash(source: Any, target: Any) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "rename", crash)
    with pytest.raises(PluginError) as caught:
        seal(first, Epoch(1, 1))
    monkeypatch.undo()
    temp = tmp_path / "_staging" / f"{name(1, 1)}.tmp"
    assert str(caught.value) == f"{WHERE}: cannot seal {str(temp)!r}: Input/output error"
    torn = tmp_path / "_staging" / f"{name(1, 4, 1)}.tmp" / "k=a"
    torn.mkdir(parents=True)
    (torn / f"{name(1, 4, 1)}-0.parquet").write_bytes(b"PAR1\x00")  # a torn write
    current = tmp_path / "_staging" / f"{name(2, 1, 1)}.tmp"
    current.mkdir()  # slot 1 of allocation 2 writing its first epoch now
    sink(tmp_path, committed=None, version=2)
    assert staged(tmp_path) == [f"{name(2, 1, 1)}.tmp"]
    assert published(tmp_path) == []


def test_two_slots_recovering_one_after_the_other_keep_each_others_epochs(tmp_path):
    for slot in range(2):
        plugin = sink(tmp_path, slot)
        put(plugin, 10 + slot)
        seal(plugin, Epoch(1, 1))
        put(plugin, 90 + slot)
        seal(plugin, Epoch(1, 2))
        plugin.close()
    zero = sink(tmp_path, 0, Epoch(1, 1), 2)
    put(zero, 20)
    seal(zero, Epoch(2, 1))
    one = sink(tmp_path, 1, Epoch(1, 1), 2)
    put(one, 21)
    seal(one, Epoch(2, 1))
    assert staged(tmp_path) == [name(2, 1, 0), name(2, 1, 1)]
    for plugin in (zero, one):
        commit(plugin, Epoch(2, 1))
    assert ids(tmp_path) == [10, 11, 20, 21]


def test_two_slots_settling_the_same_epochs_at_once_do_not_fail(tmp_path, monkeypatch):
    for slot in range(2):
        plugin = sink(tmp_path, slot)
        put(plugin, 0, 1, 2, slot + 3)
        seal(plugin, Epoch(1, 1))
        put(plugin, 90 + slot)
        seal(plugin, Epoch(1, 2))
        plugin.close()
    seen = staged(tmp_path)
    sink(tmp_path, 0, Epoch(1, 1), 2)
    monkeypatch.setattr(os, "listdir", lambda path: list(seen))  # listed before zero settled
    sink(tmp_path, 1, Epoch(1, 1), 2)
    monkeypatch.undo()
    assert ids(tmp_path) == [0, 0, 1, 1, 2, 2, 3, 4]
    assert staged(tmp_path) == []


def test_a_commit_after_recovery_already_published_the_epoch_is_no_error(tmp_path):
    old = sink(tmp_path, 0)
    put(old, 1, 2)
    seal(old, Epoch(1, 1))
    sink(tmp_path, 1, Epoch(1, 1), 2)  # slot 1 restarts and publishes slot 0's epoch
    commit(old, Epoch(1, 1))  # slot 0, not yet replaced, hears the commit late
    assert ids(tmp_path) == [1, 2]


def test_a_new_start_of_the_same_epoch_replaces_what_the_earlier_one_sealed(tmp_path):
    first = sink(tmp_path)
    put(first, 1)
    seal(first, Epoch(1, 1))
    put(first, 2)
    seal(first, Epoch(1, 2))
    first.close()
    second = sink(tmp_path)
    put(second, 3)
    seal(second, Epoch(1, 1))
    seal(second, Epoch(1, 2))  # nothing this time: the earlier start's epoch 2 goes
    commit(second, Epoch(1, 2))
    assert ids(tmp_path) == [3]
    assert staged(tmp_path) == []


def test_entries_it_never_makes_are_left_alone(tmp_path):
    (tmp_path / "_staging").mkdir(parents=True)
    (tmp_path / "_staging" / "notes.txt").write_text("mine")
    sink(tmp_path, version=2)
    assert staged(tmp_path) == ["notes.txt"]


def test_a_checkpoint_for_another_epoch_is_refused(tmp_path):
    plugin = sink(tmp_path)
    seal(plugin, Epoch(1, 1))
    with pytest.raises(PluginError) as caught:
        seal(plugin, Epoch(1, 3))
    reason = "checkpoint at epoch 3 of allocation 1 while writing epoch 2 of allocation 1"
    assert str(caught.value) == f"{WHERE}: {reason}"


def test_a_checkpoint_with_rows_not_yet_written_is_refused(tmp_path):
    plugin = sink(tmp_path)
    plugin.prepare([row(1), row(2)])
    with pytest.raises(PluginError, match=r"with 2 rows prepared but not written: write\(\)"):
        seal(plugin, Epoch(1, 1))


def test_writing_before_recover_is_refused(tmp_path):
    plugin = output(table_task(tmp_path), 0, 1)
    put(plugin, 1)
    with pytest.raises(PluginError) as caught:
        seal(plugin, Epoch(1, 1))
    reason = "used before recover(): there is no epoch to write to"
    assert str(caught.value) == f"{WHERE}: {reason}"


def test_a_sealed_file_that_vanished_is_named_when_published(tmp_path):
    plugin = sink(tmp_path)
    put(plugin, 1)
    seal(plugin, Epoch(1, 1))
    path = tmp_path / "_staging" / name(1, 1) / "k=b" / f"{name(1, 1)}-0.parquet"
    path.unlink()
    commit(plugin, Epoch(1, 1))
    with pytest.raises(PluginError) as caught:
        plugin.synced()
    reason = "it is neither staged nor published: was it deleted as uncommitted?"
    assert str(caught.value) == f"{WHERE}: cannot publish {str(path)!r}: {reason}"


# -- schema ---------------------------------------------------------------------------------------


def test_a_field_the_declared_schema_lacks_is_named(tmp_path):
    plugin = sink(tmp_path)
    with pytest.raises(PluginError) as caught:
        plugin.prepare([row(1), {"id": 2, "k": "a", "extra": 1}])
    assert str(caught.value) == f"{WHERE}: field 'extra' is not in the schema (id, k)"
    assert plugin.write()
    seal(plugin, Epoch(1, 1))
    assert staged(tmp_path) == []


def test_a_value_of_the_wrong_type_is_named(tmp_path):
    plugin = sink(tmp_path)
    with pytest.raises(PluginError) as caught:
        plugin.prepare([{"id": "one", "k": "a"}])
    assert str(caught.value).startswith(f"{WHERE}: field 'id' must hold bigint values")


def test_an_inferred_schema_is_kept_for_later_batches(tmp_path):
    plugin = sink(tmp_path, schema=None)
    put(plugin, 1)
    with pytest.raises(PluginError) as caught:
        plugin.prepare([{"id": 2, "k": "a", "extra": 1}])
    assert str(caught.value) == f"{WHERE}: field 'extra' is not in the schema (id, k)"
    with pytest.raises(PluginError, match=f"^{WHERE}: field 'id' must hold bigint values"):
        plugin.prepare([{"id": "two", "k": "a"}])


def test_an_inferred_schema_is_kept_across_a_restart_in_the_checkpoint(tmp_path):
    first = sink(tmp_path, schema=None)
    assert seal(first, Epoch(1, 1)) is None
    put(first, 1)
    checkpoint = seal(first, Epoch(1, 2))
    kept = [["id", "bigint"], ["k", "string"]]
    assert checkpoint == {"schema": kept, "unpublished": [name(1, 2)]}
    commit(first, Epoch(1, 2))
    second = sink(tmp_path, committed=Epoch(1, 2), version=2, checkpoint=checkpoint, schema=None)
    assert read(tmp_path) == [row(1)]
    with pytest.raises(PluginError, match=f"^{WHERE}: field 'id' must hold bigint values"):
        second.prepare([{"id": "two", "k": "a"}])
    put(second, 2)
    assert seal(second, Epoch(2, 1)) == {"schema": kept, "unpublished": [name(2, 1)]}


def test_a_declared_schema_is_not_in_the_checkpoint(tmp_path):
    plugin = sink(tmp_path)
    put(plugin, 1)
    assert seal(plugin, Epoch(1, 1)) == {"unpublished": [name(1, 1)]}


def test_a_checkpoint_that_is_not_a_kept_schema_is_named(tmp_path):
    with pytest.raises(PluginError) as caught:
        sink(tmp_path, schema=None, checkpoint=[1, 2])
    reason = "checkpoint must be {'schema': pairs, ...}, got [1, 2]"
    assert str(caught.value) == f"{WHERE}: {reason}"


def test_the_checkpoint_names_the_epochs_sealed_until_they_are_published(tmp_path):
    """An empty epoch is never named; a sealed one is until its publishing has finished."""
    plugin = sink(tmp_path)
    assert seal(plugin, Epoch(1, 1)) is None
    put(plugin, 1)
    assert seal(plugin, Epoch(1, 2)) == {"unpublished": [name(1, 2)]}
    put(plugin, 2)
    assert seal(plugin, Epoch(1, 3)) == {"unpublished": [name(1, 2), name(1, 3)]}
    commit(plugin, Epoch(1, 2))
    put(plugin, 3)
    assert seal(plugin, Epoch(1, 4)) == {"unpublished": [name(1, 3), name(1, 4)]}
    commit(plugin, Epoch(1, 4))
    assert seal(plugin, Epoch(1, 5)) is None


def test_recovery_publishes_the_epochs_its_checkpoint_names_once(tmp_path):
    """Sealed, committed, and the slot died before publishing: the recovery publishes them from
    its checkpoint, and a recovery from the same checkpoint again adds nothing."""
    first = sink(tmp_path)
    put(first, 1, 2)
    seal(first, Epoch(1, 1))
    put(first, 3)
    checkpoint = seal(first, Epoch(1, 2))
    first.close()
    for version in (2, 3):
        sink(tmp_path, committed=Epoch(1, 2), version=version, checkpoint=checkpoint).close()
        assert read(tmp_path) == [row(1), row(2), row(3)]
        assert staged(tmp_path) == []


def test_a_partition_field_the_declared_schema_lacks_fails_the_factory(tmp_path):
    with pytest.raises(PluginError) as caught:
        output(table_task(tmp_path, partition_by=["country"]), 0, 1)
    reason = "params.partition_by field 'country' is not in the schema (id, k)"
    assert str(caught.value) == f"{WHERE}: {reason}"


def test_a_partition_field_the_inferred_schema_lacks_fails_the_first_batch(tmp_path):
    plugin = sink(tmp_path, schema=None, partition_by=["country"])
    with pytest.raises(PluginError) as caught:
        plugin.prepare([row(1)])
    reason = "params.partition_by field 'country' is not in the schema (id, k)"
    assert str(caught.value) == f"{WHERE}: {reason}"


def test_partitioning_by_every_field_is_refused(tmp_path):
    with pytest.raises(PluginError) as caught:
        output(table_task(tmp_path, partition_by=["k", "id"]), 0, 1)
    reason = "params.partition_by names every field: one must stay in the files"
    assert str(caught.value) == f"{WHERE}: {reason}"


def test_a_first_batch_whose_schema_cannot_be_inferred_is_named(tmp_path):
    plugin = sink(tmp_path, schema=None)
    with pytest.raises(PluginError) as caught:
        plugin.prepare([{"id": 1, "k": None}])
    assert str(caught.value).startswith(f"{WHERE}: field 'k' is null in every row")


@pytest.mark.parametrize(
    ("params", "schema", "reason"),
    [
        ({"path": None}, SCHEMA, "params.path is required (a directory path or an fsspec URL)"),
        ({"path": ""}, SCHEMA, "params.path must be a directory path or an fsspec URL, got ''"),
        (
            {"partition_by": "k"},
            SCHEMA,
            "params.partition_by must be a list of distinct field names, got 'k'",
        ),
        (
            {"partition_by": ["k", "k"]},
            SCHEMA,
            "params.partition_by must be a list of distinct field names, got pvector(['k', 'k'])",
        ),
        ({}, {"id": "decimal"}, "schema field 'id' has type 'decimal'; known types: "),
    ],
)
def test_bad_params_and_schemas_are_named(tmp_path, params, schema, reason):
    params = {"path": str(tmp_path), **params}
    if params["path"] is None:
        del params["path"]
    doc = Task("write", "output", plugin=PLUGIN, schema=schema, params=params)
    with pytest.raises(PluginError) as caught:
        output(doc, 0, 1)
    assert str(caught.value).startswith(f"{WHERE}: {reason}")


def test_a_directory_that_cannot_be_made_is_named(tmp_path):
    (tmp_path / "file").touch()
    with pytest.raises(PluginError) as caught:
        sink(tmp_path / "file")
    path = str(tmp_path / "file" / "_staging")
    assert str(caught.value) == f"{WHERE}: cannot make {path!r}: Not a directory"


def test_load_finds_an_output(tmp_path):
    plugin = load(table_task(tmp_path), 0, 1)
    assert isinstance(plugin, ParquetTableOutput)


# -- generative: crashes anywhere -----------------------------------------------------------------


class Crashing(Coordinator):
    """A Parquet sink has two more places to die in."""

    def crash(self, plugin: ParquetTableOutput, epoch: Epoch, version: int) -> None:
        """Die between batches, or halfway through sealing the open epoch (its files written,
        never renamed sealed), or halfway through publishing the last committed one."""
        how = self.data.draw(st.sampled_from(["idle", "sealing", "publishing"]), label="crash")
        if how == "sealing":
            with failing_renames(0), contextlib.suppress(PluginError):
                plugin.checkpoint(epoch).durable.result()
        elif how == "publishing" and self.committed and self.committed.version == version:
            renames = self.data.draw(st.integers(0, 3), label="files published before the crash")
            with failing_renames(renames), contextlib.suppress(PluginError):
                commit(plugin, self.committed)


@contextlib.contextmanager
def failing_renames(after: int) -> Iterator[None]:
    """``os.rename`` works ``after`` times, then fails as a dying disk would."""
    real_rename, calls = os.rename, itertools.count()

    def rename(source: Any, target: Any) -> None:
        if next(calls) >= after:
            raise OSError(5, "Input/output error")
        real_rename(source, target)

    with mock.patch.object(os, "rename", rename):
        yield


SINK = Sink(sink, ids, sorted, staged)


@EXAMPLES
@given(rows=st.lists(st.integers(0, 1000), max_size=30), data=st.data())
def test_crashes_anywhere_leave_what_a_failure_free_run_leaves(rows, data):
    crashes = data.draw(st.integers(0, 3), label="crashes")
    with tempfile.TemporaryDirectory() as clean, tempfile.TemporaryDirectory() as failing:
        run(Crashing(rows, data, put), SINK, Path(clean), 0)
        run(Crashing(rows, data, put), SINK, Path(failing), crashes)
        assert read(Path(failing)) == read(Path(clean)) == sorted(map(row, rows), key=_id)
        assert staged(Path(failing)) == []


def _id(value: dict[str, Any]) -> int:
    return value["id"]


# -- Arrow batches --------------------------------------------------------------------------------


def test_an_arrow_batch_is_written_as_arrow_without_rows(tmp_path, monkeypatch):
    plugin = sink(tmp_path)
    monkeypatch.setattr(parquet, "to_table", lambda *_: pytest.fail("made a table of rows"))
    batch = pa.record_batch({"k": ["b", None], "id": pa.array([1, 2], pa.int32())})
    plugin.prepare(batch)
    assert plugin.write()
    seal(plugin, Epoch(1, 1))
    commit(plugin, Epoch(1, 1))
    monkeypatch.undo()
    assert read(tmp_path) == [row(1), row(2)]


def test_an_arrow_batch_lacking_a_field_writes_nulls_and_numbers_become_timestamps(tmp_path):
    plugin = sink(tmp_path, schema={"id": "bigint", "k": "string", "ts": "timestamp"})
    plugin.prepare(pa.record_batch({"id": [1], "ts": [1_700_000_000.25]}))
    assert plugin.write()
    seal(plugin, Epoch(1, 1))
    commit(plugin, Epoch(1, 1))
    [file] = published(tmp_path)
    table = pq.read_table(tmp_path / file)
    expected = datetime.datetime(2023, 11, 14, 22, 13, 20, 250000, tzinfo=datetime.UTC)
    assert table.column("ts").to_pylist() == [expected]
    assert file.startswith("k=__HIVE_DEFAULT_PARTITION__/")


def test_an_arrow_batch_with_a_column_the_schema_lacks_is_named(tmp_path):
    plugin = sink(tmp_path)
    with pytest.raises(PluginError) as caught:
        plugin.prepare(pa.record_batch({"id": [1], "k": ["a"], "extra": [1]}))
    assert str(caught.value) == f"{WHERE}: field 'extra' is not in the schema (id, k)"


def test_an_arrow_column_that_does_not_cast_is_named(tmp_path):
    plugin = sink(tmp_path)
    with pytest.raises(PluginError) as caught:
        plugin.prepare(pa.record_batch({"id": ["one"], "k": ["a"]}))
    assert str(caught.value).startswith(f"{WHERE}: field 'id' must hold bigint values")


def test_an_arrow_batch_s_schema_is_inferred_and_kept_in_the_checkpoint(tmp_path):
    plugin = sink(tmp_path, schema=None)
    plugin.prepare(pa.record_batch({"id": pa.array([1], pa.int64()), "k": ["a"]}))
    assert plugin.write()
    kept = {"schema": [["id", "bigint"], ["k", "string"]], "unpublished": [name(1, 1)]}
    assert seal(plugin, Epoch(1, 1)) == kept
    with pytest.raises(PluginError, match=f"^{WHERE}: field 'id' must hold bigint values"):
        plugin.prepare([{"id": "two", "k": "a"}])


def test_an_arrow_field_without_a_spark_type_is_named(tmp_path):
    plugin = sink(tmp_path, schema=None, partition_by=[])
    with pytest.raises(PluginError) as caught:
        plugin.prepare(pa.record_batch({"id": [1], "tags": [["a"]]}))
    assert str(caught.value).startswith(f"{WHERE}: field 'tags': Arrow type list<item: string>")
