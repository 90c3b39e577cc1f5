"""JSON lines: the input's split, seeks and messages; the output's files, bytes and appends."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
from collections import Counter

import pytest

from peer.plugins import PluginError
from peer.plugins.jsonl import input as jsonl_input
from peer.plugins.jsonl import output as jsonl_output
from peer.plugins.splits import Splits
from tests.unit.plugins.plugin_fixtures import EPOCH, append_lines, drain, recovery, task

READ = "task 'read', plugin 'peer.plugins.jsonl:input'"
WRITE = "task 'write', plugin 'peer.plugins.jsonl:output'"


def reader(path, slot=0, slots=1, checkpoint=None, total=None):
    """Slot ``slot`` of ``slots`` of an input whose lines are in ``total`` splits (as many as
    slots unless said: then line i is slot i % slots's)."""
    splits = Splits.of(slot, slots, total or slots)
    spec = task("peer.plugins.jsonl:input", name="read", path=str(path))
    plugin = jsonl_input(spec, slot, slots, splits=splits)
    plugin.recover(recovery(checkpoint))
    return plugin


def writer(path, slot=0, slots=1, checkpoint=None):
    spec = task("peer.plugins.jsonl:output", "output", "write", path=str(path))
    plugin = jsonl_output(spec, slot, slots)
    plugin.recover(recovery(checkpoint))
    return plugin


@pytest.fixture
def numbers(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text("".join(f'{{"n": {i}}}\n' for i in range(10)))
    return path


def test_reads_every_line_in_order(numbers):
    plugin = reader(numbers)
    assert plugin.poll(3) == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert drain(plugin) == [{"n": i} for i in range(3, 10)]
    assert plugin.poll(5) == []
    plugin.close()


def test_slots_split_the_lines_disjointly_and_completely(numbers):
    shares = [drain(reader(numbers, slot, 3)) for slot in range(3)]
    assert shares == [[{"n": i} for i in range(slot, 10, 3)] for slot in range(3)]


def test_blank_lines_are_skipped_but_counted(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text("1\n\n   \n2\r\n3")
    assert drain(reader(path)) == [1, 2, 3]
    assert drain(reader(path, 0, 2)) == [1, 3]
    assert drain(reader(path, 1, 2)) == [2]


def test_completed_as_soon_as_the_last_line_is_read(numbers):
    plugin = reader(numbers)
    plugin.poll(10)
    assert plugin.completed()
    assert plugin.checkpoint(EPOCH) == [[10, numbers.stat().st_size]]


def test_a_poll_scans_at_most_limit_times_slots_lines(numbers):
    plugin = reader(numbers, 1, 3)
    assert plugin.poll(1) == [{"n": 1}]
    assert plugin.checkpoint(EPOCH)[0][0] == 3


def test_an_empty_file_is_completed_at_once(tmp_path):
    (tmp_path / "empty.jsonl").touch()
    plugin = reader(tmp_path / "empty.jsonl")
    assert plugin.completed()
    assert plugin.poll(5) == []


def test_recover_seeks_without_reading_again(numbers):
    first = reader(numbers, 1, 2)
    assert first.poll(2) == [{"n": 1}, {"n": 3}]
    checkpoint = json.loads(json.dumps(first.checkpoint(EPOCH)))
    first.close()
    [[lines, offset]] = checkpoint
    assert lines == 4
    with numbers.open("r+b") as f:  # what was already read is now garbage: it must not be read
        f.write(b"#" * offset)
    assert drain(reader(numbers, 1, 2, checkpoint)) == [{"n": 5}, {"n": 7}, {"n": 9}]


def test_slots_own_contiguous_ranges_of_splits(numbers):
    """Lines 0..9 in 4 splits, on 3 slots owning splits 0-1, 2 and 3."""
    shares = [drain(reader(numbers, slot, 3, total=4)) for slot in range(3)]
    assert shares == [[{"n": i} for i in range(10) if i % 4 in owned]
                      for owned in ({0, 1}, {2}, {3})]  # fmt: skip


def test_a_checkpoint_of_one_reader_from_before_lines_were_split_still_reads(numbers):
    """[byte offset, lines read], as the one reader of a file checkpointed it before."""
    first = reader(numbers, total=4)
    first.poll(3)
    [[lines, offset], *_] = checkpoint = first.checkpoint(EPOCH)
    assert checkpoint == [[3, offset]] * 4
    again = reader(numbers, 0, 1, [offset, lines], total=4)
    assert drain(again) == [{"n": i} for i in range(3, 10)]
    with pytest.raises(PluginError, match=r"restores only where one peer reads the whole file"):
        reader(numbers, 0, 2, [offset, lines], total=4)


def test_a_line_that_is_not_json_is_named_with_its_number(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"n": 0}\n{"n": 1}\n{"n": \n{"n": 3}\n')
    plugin = reader(path)
    assert plugin.poll(1) == [{"n": 0}]
    before = plugin.checkpoint(EPOCH)
    for _ in range(2):  # the poll moves nothing, so a retry fails the same way
        with pytest.raises(PluginError) as caught:
            plugin.poll(10)
        reason = "Expecting value at column 6"
        assert str(caught.value) == f"{READ}: {str(path)!r} line 3 is not JSON: {reason}"
        assert plugin.checkpoint(EPOCH) == before


def test_a_bad_line_in_another_slots_share_is_not_parsed(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("1\nnot json\n3\n")
    assert drain(reader(path, 0, 2)) == [1, 3]


def test_bytes_that_are_not_utf8_are_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'"ok"\n"\xff"\n')
    with pytest.raises(PluginError, match=r"line 2 is not JSON: 'utf-8' codec can't decode"):
        drain(reader(path))


def test_a_missing_file_is_named(tmp_path):
    path = tmp_path / "absent.jsonl"
    with pytest.raises(PluginError) as caught:
        reader(path)
    assert str(caught.value) == f"{READ}: cannot open {str(path)!r}: No such file or directory"


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({}, "params.path is required (a file path string)"),
        ({"path": ""}, "params.path must be a file path string, got ''"),
        ({"path": 3}, "params.path must be a file path string, got 3"),
    ],
)
def test_bad_params_are_named(params, reason):
    """The input reads an object store's files too; the appending output writes local ones."""
    for factory, kind, name, where, what in (
        (jsonl_input, "input", "read", READ, "a file path string or an fsspec URL"),
        (jsonl_output, "output", "write", WRITE, "a file path string"),
    ):
        extra = {"splits": Splits.of(0, 1, 1)} if kind == "input" else {}
        with pytest.raises(PluginError) as caught:
            factory(task(f"peer.plugins.jsonl:{kind}", kind, name, **params), 0, 1, **extra)
        assert str(caught.value) == f"{where}: {reason.replace('a file path string', what)}"


@pytest.mark.parametrize(
    ("checkpoint", "reason"),
    [
        ([1], "checkpoint: the position of split 0 must be [index, resume] (ints >= 0), got 1"),
        ([[1, -1]], "checkpoint: the position of split 0 must be [index, resume] (ints >= 0)"),
        (
            [-1, 0],
            "checkpoint must hold one [index, resume] position for each of the 1 splits "
            "0..0 (of 1), got [-1, 0]",
        ),
        (
            {"offset": 0},
            "checkpoint must hold one [index, resume] position for each of the 1 "
            "splits 0..0 (of 1), got {'offset': 0}",
        ),
        ([[3, 10_000]], "checkpoint offset 10000 is past the end of "),
        ([10_000, 3], "checkpoint offset 10000 is past the end of "),
    ],
)
def test_a_bad_checkpoint_is_refused(numbers, checkpoint, reason):
    with pytest.raises(PluginError) as caught:
        reader(numbers, checkpoint=checkpoint)
    assert str(caught.value).startswith(f"{READ}: {reason}")


def test_writes_compact_lines_and_counts_bytes(tmp_path):
    path = tmp_path / "out" / "deeper" / "all.jsonl"
    plugin = writer(path)
    plugin.prepare([{"a": 1, "b": [1, 2]}, "é", None])
    assert not path.read_bytes()
    assert plugin.write()
    assert plugin.synced()
    expected = '{"a":1,"b":[1,2]}\n"é"\nnull\n'.encode()
    assert path.read_bytes() == expected
    assert plugin.checkpoint(EPOCH) == len(expected)
    plugin.close()
    plugin.close()
    assert drain(reader(path)) == [{"a": 1, "b": [1, 2]}, "é", None]


def test_write_with_nothing_staged_is_done():
    plugin = writer(os.devnull)
    assert plugin.write()
    assert plugin.synced()
    assert plugin.checkpoint(EPOCH) == 0


def test_the_checkpoint_counts_on_from_recovery(tmp_path):
    plugin = writer(tmp_path / "o.jsonl", checkpoint=100)
    plugin.prepare([1])
    plugin.write()
    assert plugin.checkpoint(EPOCH) == 102


def test_a_slot_in_the_path_gives_each_peer_its_own_file(tmp_path):
    path = tmp_path / "part-{slot}.jsonl"
    for slot in range(2):
        plugin = writer(path, slot, 2)
        plugin.prepare([slot])
        plugin.write()
        plugin.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part-0.jsonl", "part-1.jsonl"]
    assert (tmp_path / "part-1.jsonl").read_text() == "1\n"


def test_peers_sharing_a_path_append_to_it(tmp_path):
    path = tmp_path / "shared.jsonl"
    path.write_text("0\n")
    plugins = [writer(path, slot, 2) for slot in range(2)]
    for slot, plugin in enumerate(plugins):
        plugin.prepare([slot + 1])
        plugin.write()
    assert path.read_text() == "0\n1\n2\n"


def overwriting(path, slot: int = 0, slots: int = 1):
    return jsonl_output(
        task("peer.plugins.jsonl:output", "output", path=str(path), overwrite=True), slot, slots
    )


def test_overwrite_empties_the_file_when_the_task_starts_from_the_beginning(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text("old\n")
    plugin = overwriting(path)
    plugin.recover(recovery())
    plugin.prepare([1])
    plugin.write()
    resumed = overwriting(path)
    resumed.recover(recovery(plugin.checkpoint(EPOCH), EPOCH, 2))
    resumed.prepare([2])
    resumed.write()
    assert path.read_text() == "1\n2\n"


def test_overwrite_needs_one_writer_per_file(tmp_path):
    with pytest.raises(PluginError, match=r"params.overwrite needs one writer per file"):
        overwriting(tmp_path / "shared.jsonl", 0, 2)
    assert overwriting(tmp_path / "part-{slot}.jsonl", 1, 2) is not None


def test_batches_from_several_processes_never_interleave(tmp_path):
    path = str(tmp_path / "shared.jsonl")
    batches, size = 40, 50
    context = multiprocessing.get_context("spawn")
    children = [
        context.Process(target=append_lines, args=(path, w, batches, size)) for w in range(4)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join(60)
        assert child.exitcode == 0
    with open(path, "rb") as f:
        lines = [json.loads(line) for line in f]
    assert Counter(line["w"] for line in lines) == dict.fromkeys(range(4), batches * size)
    for start in range(0, len(lines), size):
        batch = lines[start : start + size]
        assert [(line["w"], line["b"], line["i"]) for line in batch] == [
            (batch[0]["w"], batch[0]["b"], i) for i in range(size)
        ]


def test_a_short_write_keeps_the_rest_staged(tmp_path, monkeypatch):
    path = tmp_path / "o.jsonl"
    plugin = writer(path)
    plugin.prepare(["abc", "def"])
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, data[:3]))
    assert not plugin.write()
    assert plugin.checkpoint(EPOCH) == 3
    monkeypatch.undo()
    assert plugin.write()
    assert path.read_text() == '"abc"\n"def"\n'
    assert plugin.checkpoint(EPOCH) == 12


def test_a_failed_write_is_named(tmp_path, monkeypatch):
    path = tmp_path / "o.jsonl"
    plugin = writer(path)
    plugin.prepare([1])

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(PluginError) as caught:
        plugin.write()
    reason = f"writing {str(path)!r} failed: No space left on device"
    assert str(caught.value) == f"{WRITE}: {reason}"


def test_a_path_that_cannot_be_opened_is_named(tmp_path):
    with pytest.raises(PluginError) as caught:
        writer(tmp_path)
    reason = f"cannot open {str(tmp_path)!r} for appending: Is a directory"
    assert str(caught.value) == f"{WRITE}: {reason}"


@pytest.mark.parametrize(
    ("segment", "reason"),
    [
        ({1, 2}, "segment {1, 2} is not JSON-serialisable: Object of type set "),
        (float("nan"), "segment nan is not JSON-serialisable: Out of range float values "),
    ],
)
def test_a_segment_that_is_not_json_is_named(tmp_path, segment, reason):
    plugin = writer(tmp_path / "o.jsonl")
    with pytest.raises(PluginError) as caught:
        plugin.prepare([1, segment])
    assert str(caught.value).startswith(f"{WRITE}: {reason}")
    assert plugin.write()
    assert plugin.checkpoint(EPOCH) == 0


def test_commits_change_nothing_for_the_input_and_the_appending_output(numbers, tmp_path):
    plugin = reader(numbers)
    plugin.poll(2)
    before = plugin.checkpoint(EPOCH)
    plugin.committed(EPOCH)
    assert plugin.checkpoint(EPOCH) == before
    assert plugin.poll(1) == [{"n": 2}]
    sink = writer(tmp_path / "o.jsonl")
    sink.prepare([1])
    sink.write()
    sink.committed(EPOCH)
    assert (tmp_path / "o.jsonl").read_text() == "1\n"
    assert sink.checkpoint(EPOCH) == 2
