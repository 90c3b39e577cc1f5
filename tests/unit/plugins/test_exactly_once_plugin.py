"""The exactly-once JSON-lines sink: staged per epoch, published on commit, settled on recovery,
so that whatever fails, the published files hold each segment once."""

from __future__ import annotations

import errno
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.plugins import PluginError, Recovery
from peer.plugins.jsonl import ExactlyOnceOutput, exactly_once_output, file_name
from peer.plugins.places import STAGING, DirectoryPlace
from peer.plugins.staged import StagedEpochs, stem
from peer.values.epoch import Epoch
from tests.unit.plugins.plugin_fixtures import json_values, task
from tests.unit.plugins.two_phase import Coordinator, Sink, Unlisted, run

PLUGIN = "peer.plugins.jsonl:exactly_once_output"
WHERE = f"task 'write', plugin {PLUGIN!r}"
EXAMPLES = settings(max_examples=200, deadline=None)


def sink(
    directory: Path,
    slot: int = 0,
    committed: Epoch | None = None,
    version: int = 1,
    checkpoint: Any = None,
) -> ExactlyOnceOutput:
    """Slot ``slot`` of two, started in allocation ``version`` after ``committed``."""
    plugin = exactly_once_output(task(PLUGIN, "output", "write", path=str(directory)), slot, 2)
    plugin.recover(Recovery(checkpoint, committed, Epoch(version, 1)))
    return plugin


def unlisted_sink(
    directory: Path, slot: int, committed: Epoch | None, version: int, checkpoint: Any,
    *,
    adopted: tuple[Any, ...] = (),
) -> ExactlyOnceOutput:  # fmt: skip
    """``sink``, on a place whose listing shows nothing."""
    write = task(PLUGIN, "output", "write", path=str(directory))
    place = Unlisted(DirectoryPlace(write, directory))
    plugin = ExactlyOnceOutput(write, StagedEpochs(write, place, slot))
    plugin.recover(Recovery(checkpoint, committed, Epoch(version, 1), adopted))
    return plugin


def put(plugin: ExactlyOnceOutput, *segments: Any) -> None:
    plugin.prepare(list(segments))
    assert plugin.write()


def seal(plugin: ExactlyOnceOutput, epoch: Epoch) -> Any:
    """Seal ``epoch`` and wait until it is durable, as a peer does before acknowledging it: the
    position."""
    sealing = plugin.checkpoint(epoch)
    sealing.durable.result()
    return sealing.position


def commit(plugin: ExactlyOnceOutput, epoch: Epoch) -> None:
    """Publish up to ``epoch`` and wait until that is done."""
    plugin.committed(epoch)
    plugin.drained().result()


def name(version: int, number: int, slot: int = 0) -> str:
    return file_name(Epoch(version, number), slot)


def entry(version: int, number: int, slot: int = 0, temp: bool = False) -> str:
    """A staged entry's name: an epoch's directory, sealed or still open."""
    return stem(Epoch(version, number), slot) + (".tmp" if temp else "")


def published(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("*.jsonl"))


def staged(directory: Path) -> list[str]:
    return sorted(os.listdir(directory / STAGING))


def lines(directory: Path) -> list[Any]:
    """What a reader sees: every published file, in name order."""
    return [
        json.loads(line)
        for file in published(directory)
        for line in (directory / file).read_bytes().splitlines()
    ]


def test_an_epoch_is_staged_until_committed(tmp_path):
    plugin = sink(tmp_path)
    put(plugin, 1, 2)
    assert staged(tmp_path) == ["000000000001-00000001-0000.tmp"]
    seal(plugin, Epoch(1, 1))
    put(plugin, 3)
    seal(plugin, Epoch(1, 2))
    put(plugin, 4)
    assert staged(tmp_path) == [entry(1, 1), entry(1, 2), entry(1, 3, temp=True)]
    assert published(tmp_path) == []
    commit(plugin, Epoch(1, 1))
    assert published(tmp_path) == [name(1, 1)]
    assert lines(tmp_path) == [1, 2]
    commit(plugin, Epoch(1, 2))
    assert lines(tmp_path) == [1, 2, 3]
    assert staged(tmp_path) == [entry(1, 3, temp=True)]


def test_a_commit_publishes_every_earlier_epoch_and_an_empty_epoch_leaves_no_file(tmp_path):
    plugin = sink(tmp_path)
    put(plugin, 1)
    seal(plugin, Epoch(1, 1))
    seal(plugin, Epoch(1, 2))
    put(plugin, 2)
    seal(plugin, Epoch(1, 3))
    commit(plugin, Epoch(1, 3))
    commit(plugin, Epoch(1, 3))
    assert published(tmp_path) == [name(1, 1), name(1, 3)]
    assert lines(tmp_path) == [1, 2]
    assert staged(tmp_path) == []


def test_a_seal_syncs_the_file_and_both_directories_off_the_callers_thread(tmp_path, monkeypatch):
    synced: list[tuple[str, str]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append((os.readlink(f"/proc/self/fd/{fd}"), threading.current_thread().name))
        real_fsync(fd)

    plugin = sink(tmp_path)
    put(plugin, 1)
    monkeypatch.setattr(os, "fsync", fsync)
    seal(plugin, Epoch(1, 1))
    temp = tmp_path / STAGING / entry(1, 1, temp=True)
    paths = [str(temp / name(1, 1)), str(temp), str(tmp_path / STAGING)]
    assert [path for path, _ in synced] == paths
    assert threading.current_thread().name not in {thread for _, thread in synced}
    assert plugin.synced()
    assert len(synced) == 3


def test_the_open_epoch_is_not_synced_before_its_seal(tmp_path, monkeypatch):
    plugin = sink(tmp_path)
    put(plugin, 1)
    calls: list[int] = []
    monkeypatch.setattr(os, "fsync", calls.append)
    assert plugin.synced()
    assert calls == []


def test_a_seal_that_fails_fails_its_sealing_and_the_next_call(tmp_path, monkeypatch):
    plugin = sink(tmp_path)
    put(plugin, 1)

    def broken(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", broken)
    sealing = plugin.checkpoint(Epoch(1, 1))
    path = str(tmp_path / STAGING / entry(1, 1, temp=True) / name(1, 1))
    reason = f"{WHERE}: syncing {path!r} failed: Input/output error"
    with pytest.raises(PluginError) as caught:
        sealing.durable.result()
    assert str(caught.value) == reason
    with pytest.raises(PluginError) as caught:
        plugin.checkpoint(Epoch(1, 2))
    assert str(caught.value) == reason


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
    assert published(tmp_path) == [name(1, 1), name(1, 2)]
    assert staged(tmp_path) == []
    put(second, 4, 5)
    seal(second, Epoch(2, 1))
    commit(second, Epoch(2, 1))
    assert lines(tmp_path) == [1, 2, 3, 4, 5]


def test_the_checkpoint_names_the_sealed_epochs_not_yet_published(tmp_path):
    plugin = sink(tmp_path)
    assert seal(plugin, Epoch(1, 1)) is None
    put(plugin, 1)
    assert seal(plugin, Epoch(1, 2)) == {"unpublished": [entry(1, 2)]}
    put(plugin, 2)
    assert seal(plugin, Epoch(1, 3)) == {"unpublished": [entry(1, 2), entry(1, 3)]}
    commit(plugin, Epoch(1, 3))
    assert seal(plugin, Epoch(1, 4)) is None


def test_recovery_publishes_what_its_checkpoint_names_though_no_listing_shows_it(tmp_path):
    """The slot died having sealed two epochs, one half published; the coordinator committed
    both. A recovery from that checkpoint publishes the rest by name, and so may another
    recovery from it, adding nothing."""
    first = sink(tmp_path)
    put(first, 1, 2)
    seal(first, Epoch(1, 1))
    put(first, 3)
    checkpoint = seal(first, Epoch(1, 2))
    first.close()
    os.rename(tmp_path / STAGING / entry(1, 1) / name(1, 1), tmp_path / name(1, 1))
    for version in (2, 3):
        unlisted_sink(tmp_path, 0, Epoch(1, 2), version, checkpoint).close()
        assert lines(tmp_path) == [1, 2, 3]
        assert staged(tmp_path) == []


def test_a_slot_publishes_what_the_old_slots_it_adopts_named(tmp_path):
    """Two slots sealed an epoch each, committed; the task then runs on one slot, which adopts
    the old second slot's checkpoint and publishes its epoch too, though no listing shows it."""
    checkpoints = []
    for slot, value in ((0, 1), (1, 2)):
        plugin = sink(tmp_path, slot=slot)
        put(plugin, value)
        checkpoints.append(seal(plugin, Epoch(1, 1)))
        plugin.close()
    unlisted_sink(tmp_path, 0, Epoch(1, 1), 2, checkpoints[0], adopted=(checkpoints[1],)).close()
    assert lines(tmp_path) == [1, 2]
    assert staged(tmp_path) == []


@pytest.mark.parametrize(
    ("checkpoint", "reason"),
    [
        ([1], "checkpoint must be a mapping ({'unpublished': names}), got [1]"),
        ({"unpublished": "x"}, "checkpoint unpublished must be a list of staged epochs' names, "
                               "got 'x'"),
        ({"unpublished": ["notes"]}, "checkpoint unpublished must be a list of staged epochs' "
                                     "names, got ['notes']"),
        ({"unpublished": [entry(1, 3)]}, f"checkpoint unpublished names {entry(1, 3)!r}, which "
                                         "epoch 2 of allocation 1 does not cover"),
    ],
)  # fmt: skip
def test_a_bad_checkpoint_is_named(tmp_path, checkpoint, reason):
    with pytest.raises(PluginError) as caught:
        sink(tmp_path, committed=Epoch(1, 2), version=2, checkpoint=checkpoint)
    assert str(caught.value) == f"{WHERE}: {reason}"


def test_recovery_publishes_an_epoch_whose_commit_the_sink_never_heard(tmp_path):
    first = sink(tmp_path)
    put(first, 1)
    seal(first, Epoch(1, 1))
    first.close()
    sink(tmp_path, committed=Epoch(1, 1), version=2)
    assert published(tmp_path) == [name(1, 1)]
    assert lines(tmp_path) == [1]


def test_with_nothing_committed_every_older_allocations_file_goes(tmp_path):
    first = sink(tmp_path)
    put(first, 1)
    seal(first, Epoch(1, 1))
    put(first, 2)
    first.close()
    sink(tmp_path, version=2)
    assert published(tmp_path) == []
    assert staged(tmp_path) == []


def test_newer_and_current_allocations_files_are_left_alone(tmp_path):
    old = sink(tmp_path, 1)
    put(old, "old")
    old.close()
    newer = sink(tmp_path, 0, version=3)
    put(newer, "sealed")
    seal(newer, Epoch(3, 1))
    put(newer, "open")
    current = sink(tmp_path, 1, version=2)
    put(current, "current")
    sink(tmp_path, 0, version=2)  # a peer that has not yet heard of allocation 3
    assert staged(tmp_path) == [entry(2, 1, 1, temp=True), entry(3, 1), entry(3, 2, temp=True)]
    commit(newer, Epoch(3, 1))
    assert lines(tmp_path) == ["sealed"]


def test_two_slots_recovering_one_after_the_other_keep_each_others_files(tmp_path):
    for slot in range(2):
        plugin = sink(tmp_path, slot)
        put(plugin, f"a{slot}")
        seal(plugin, Epoch(1, 1))
        put(plugin, f"lost{slot}")
        plugin.close()
    zero = sink(tmp_path, 0, Epoch(1, 1), 2)
    put(zero, "b0")
    one = sink(tmp_path, 1, Epoch(1, 1), 2)
    put(one, "b1")
    assert staged(tmp_path) == [entry(2, 1, 0, temp=True), entry(2, 1, 1, temp=True)]
    for slot, plugin in enumerate((zero, one)):
        put(plugin, f"c{slot}")
        seal(plugin, Epoch(2, 1))
        commit(plugin, Epoch(2, 1))
    assert lines(tmp_path) == ["a0", "a1", "b0", "c0", "b1", "c1"]


def test_two_slots_settling_the_same_files_at_once_do_not_fail(tmp_path, monkeypatch):
    for slot in range(2):
        plugin = sink(tmp_path, slot)
        put(plugin, f"a{slot}")
        seal(plugin, Epoch(1, 1))
        put(plugin, f"lost{slot}")
        plugin.close()
    seen = staged(tmp_path)
    zero = sink(tmp_path, 0, Epoch(1, 1), 2)
    put(zero, "b0")
    monkeypatch.setattr(os, "listdir", lambda path: list(seen))  # listed before zero settled
    sink(tmp_path, 1, Epoch(1, 1), 2)
    monkeypatch.undo()
    assert published(tmp_path) == [name(1, 1, 0), name(1, 1, 1)]
    assert staged(tmp_path) == [entry(2, 1, 0, temp=True)]


def test_a_new_start_of_the_same_epoch_rewrites_its_file(tmp_path):
    first = sink(tmp_path)
    put(first, "void")
    first.close()
    second = sink(tmp_path)
    put(second, "kept")
    seal(second, Epoch(1, 1))
    commit(second, Epoch(1, 1))
    assert lines(tmp_path) == ["kept"]


def test_files_it_never_makes_are_left_alone(tmp_path):
    (tmp_path / STAGING).mkdir(parents=True)
    (tmp_path / STAGING / "notes.txt").write_text("mine")
    sink(tmp_path, version=2)
    assert staged(tmp_path) == ["notes.txt"]


def test_a_checkpoint_for_another_epoch_is_refused(tmp_path):
    plugin = sink(tmp_path)
    seal(plugin, Epoch(1, 1))
    with pytest.raises(PluginError) as caught:
        seal(plugin, Epoch(1, 3))
    reason = "checkpoint at epoch 3 of allocation 1 while writing epoch 2 of allocation 1"
    assert str(caught.value) == f"{WHERE}: {reason}"


def test_a_checkpoint_with_segments_not_yet_written_is_refused(tmp_path):
    plugin = sink(tmp_path)
    plugin.prepare([1])
    with pytest.raises(PluginError, match=r"with 2 bytes prepared but not written: write\(\)"):
        seal(plugin, Epoch(1, 1))


def test_writing_before_recover_is_refused(tmp_path):
    plugin = exactly_once_output(task(PLUGIN, "output", "write", path=str(tmp_path)), 0, 1)
    plugin.prepare([1])
    with pytest.raises(PluginError) as caught:
        plugin.write()
    reason = "used before recover(): there is no epoch to write to"
    assert str(caught.value) == f"{WHERE}: {reason}"


def test_a_sealed_file_that_vanished_is_named_when_published(tmp_path):
    plugin = sink(tmp_path)
    put(plugin, 1)
    seal(plugin, Epoch(1, 1))
    path = tmp_path / STAGING / entry(1, 1) / name(1, 1)
    path.unlink()
    commit(plugin, Epoch(1, 1))
    with pytest.raises(PluginError) as caught:
        plugin.synced()
    reason = "it is neither staged nor published: was it deleted as uncommitted?"
    assert str(caught.value) == f"{WHERE}: cannot publish {str(path)!r}: {reason}"


def test_a_short_write_keeps_the_rest_staged(tmp_path, monkeypatch):
    plugin = sink(tmp_path)
    plugin.prepare(["abc", "def"])
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, data[:3]))
    assert not plugin.write()
    monkeypatch.undo()
    assert plugin.write()
    seal(plugin, Epoch(1, 1))
    commit(plugin, Epoch(1, 1))
    assert lines(tmp_path) == ["abc", "def"]


def test_a_failed_write_is_named(tmp_path, monkeypatch):
    plugin = sink(tmp_path)
    plugin.prepare([1])

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(PluginError) as caught:
        plugin.write()
    path = str(tmp_path / STAGING / entry(1, 1, temp=True) / name(1, 1))
    assert str(caught.value) == f"{WHERE}: writing {path!r} failed: No space left on device"


def test_a_segment_that_is_not_json_is_named(tmp_path):
    plugin = sink(tmp_path)
    with pytest.raises(PluginError) as caught:
        plugin.prepare([1, {1, 2}])
    assert str(caught.value).startswith(f"{WHERE}: segment {{1, 2}} is not JSON-serialisable")
    assert plugin.write()
    assert staged(tmp_path) == []


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({}, "params.path is required (a directory path or an fsspec URL)"),
        ({"path": ""}, "params.path must be a directory path or an fsspec URL, got ''"),
    ],
)
def test_bad_params_are_named(params, reason):
    with pytest.raises(PluginError) as caught:
        exactly_once_output(task(PLUGIN, "output", "write", **params), 0, 1)
    assert str(caught.value) == f"{WHERE}: {reason}"


def test_a_directory_that_cannot_be_made_is_named(tmp_path):
    (tmp_path / "file").touch()
    with pytest.raises(PluginError) as caught:
        sink(tmp_path / "file")
    path = str(tmp_path / "file" / STAGING)
    assert str(caught.value) == f"{WHERE}: cannot make {path!r}: Not a directory"


# -- generative: crashes anywhere -----------------------------------------------------------------


SINK = Sink(sink, lines, list, staged)
UNLISTED = Sink(unlisted_sink, lines, list, lambda _: [])
"""A listing that shows nothing collects nothing: what is left staged is not looked at."""


@EXAMPLES
@given(segments=st.lists(json_values, max_size=30), data=st.data())
def test_crashes_anywhere_leave_what_a_failure_free_run_leaves(segments, data):
    crashes = data.draw(st.integers(0, 3), label="crashes")
    with tempfile.TemporaryDirectory() as clean, tempfile.TemporaryDirectory() as failing:
        run(Coordinator(segments, data, put), SINK, Path(clean), 0)
        run(Coordinator(segments, data, put), SINK, Path(failing), crashes)
        assert lines(Path(failing)) == lines(Path(clean)) == segments
        assert staged(Path(failing)) == []


@EXAMPLES
@given(segments=st.lists(json_values, max_size=30), data=st.data())
def test_crashes_anywhere_with_a_listing_that_shows_nothing_publish_every_committed_epoch(
    segments, data
):
    crashes = data.draw(st.integers(1, 3), label="crashes")
    with tempfile.TemporaryDirectory() as failing:
        run(Coordinator(segments, data, put), UNLISTED, Path(failing), crashes)
        assert lines(Path(failing)) == segments
