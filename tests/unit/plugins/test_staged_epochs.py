"""What the staged-epoch commit adds to what both sinks' tests show: sealing runs off the
caller's thread and a close does not wait for it; an older allocation's entry that appears
after a recovery is never published; what a recovery publishes and collects, whatever a listing
shows; and the futures a peer acknowledges an epoch by."""

from __future__ import annotations

import os
import threading
from concurrent.futures import CancelledError, Future
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from peer.plugins import Recovery, Sealing, joined, position
from peer.plugins.places import STAGING
from peer.plugins.staged import StagedEpochs, epoch_of, settle, staged_epochs, stem
from peer.values.epoch import Epoch
from tests.unit.plugins.plugin_fixtures import task

PLUGIN = "peer.plugins.jsonl:exactly_once_output"


def epochs(directory: Path, committed: Epoch | None = None, version: int = 1) -> StagedEpochs:
    staged = staged_epochs(task(PLUGIN, "output", "write", path=str(directory)), 0)
    staged.recover(Recovery(None, committed, Epoch(version, 1)))
    return staged


def writes(text: str):
    """A format's finish: one file of ``text``."""

    def finish(temp: Path, name: str) -> None:
        temp.mkdir(parents=True, exist_ok=True)
        (temp / f"{name}.txt").write_text(text)

    return finish


def visible(directory: Path) -> list[str]:
    return sorted(p.read_text() for p in directory.glob("*.txt"))


def staged(directory: Path) -> list[str]:
    return sorted(os.listdir(directory / STAGING))


def test_names_are_stems_that_sort_in_epoch_order_and_parse_back():
    assert stem(Epoch(3, 12), 5) == "000000000003-00000012-0005"
    assert epoch_of("000000000003-00000012-0005") == Epoch(3, 12)
    assert epoch_of("000000000003-00000012-0005.jsonl", ".jsonl") == Epoch(3, 12)
    assert epoch_of("000000000003-00000012-0005.tmp") is None
    assert epoch_of("notes.txt") is None


def test_a_close_does_not_wait_for_a_seal_and_its_late_entry_is_never_published(tmp_path):
    """A seal still running when its task closes lands after the next allocation recovered;
    once that allocation has committed, a later recovery deletes the entry as a stray."""
    first = epochs(tmp_path)
    started, release = threading.Event(), threading.Event()

    def slow(temp: Path, name: str) -> None:
        started.set()
        release.wait()
        writes("late")(temp, name)

    sealing = first.seal(Epoch(1, 1), slow)
    started.wait()
    first.close()  # returns while the seal runs
    second = epochs(tmp_path, committed=None, version=2)
    release.set()
    sealing.result()
    assert staged(tmp_path) == [stem(Epoch(1, 1), 0)]
    second.seal(Epoch(2, 1), writes("kept")).result()
    second.committed(Epoch(2, 1))
    second.drained().result()
    epochs(tmp_path, committed=Epoch(2, 1), version=3)
    assert visible(tmp_path) == ["kept"]
    assert staged(tmp_path) == []


def test_the_committed_allocation_s_entries_up_to_the_commit_are_published(tmp_path):
    first = epochs(tmp_path)
    for number in (1, 2):
        first.seal(Epoch(1, number), writes(f"e{number}")).result()
    first.close()
    epochs(tmp_path, committed=Epoch(1, 1), version=3)
    assert visible(tmp_path) == ["e1"]
    assert staged(tmp_path) == []


# -- settling: what a recovery publishes and collects ------------------------------------------

epoch_values = st.builds(Epoch, st.integers(1, 4), st.integers(1, 6))
stems = st.builds(stem, epoch_values, st.integers(0, 2))
listings = st.lists(st.tuples(stems | st.sampled_from(["notes.txt", "x.tmp"]), st.booleans()))


RECOVERIES = settings(max_examples=500, deadline=None)(
    given(
        committed=st.none() | epoch_values,
        start_version=st.integers(1, 6),
        drawn=st.lists(stems),
        listed=listings,
    )
)
"""A recovery: the commit, the allocation starting, the stems drawn, what a listing shows."""


def covered(name: str, committed: Epoch | None) -> bool:
    epoch = epoch_of(name)
    return committed is not None and epoch.version == committed.version and epoch <= committed


@RECOVERIES
def test_a_recovery_publishes_what_its_checkpoint_names_whatever_a_listing_shows(
    committed, start_version, drawn, listed
):
    """The restored checkpoint's stems are published first and alike with any listing or none;
    the listing adds only the sealed entries the commit covers; nothing is published twice."""
    assume(committed is None or start_version > committed.version)
    start = Epoch(start_version, 1)
    named = [n for n in drawn if committed is not None and epoch_of(n) <= committed]
    plan = settle(named, listed, committed, start)
    alone = settle(named, [], committed, start)
    assert alone.collect == ()
    assert sorted(alone.publish) == sorted(set(named))
    assert plan.publish[: len(alone.publish)] == alone.publish
    assert [epoch_of(n) for n in alone.publish] == sorted(epoch_of(n) for n in alone.publish)
    found = {n for n, sealed in listed if sealed and epoch_of(n) and covered(n, committed)}
    assert set(plan.publish) == set(named) | found
    assert len(plan.publish) == len(set(plan.publish))


@RECOVERIES
def test_a_recovery_collects_exactly_the_listed_leftovers_never_committed(
    committed, start_version, drawn, listed
):
    """Collected: a listed entry of an older allocation that the commit does not cover and no
    checkpoint names, sealed or not. Never a committed one, whether it looks sealed or not (a
    lagging listing may show an epoch's files before its manifest), nor a current or newer
    allocation's, nor a name the protocol never makes."""
    assume(committed is None or start_version > committed.version)
    start = Epoch(start_version, 1)
    named = [n for n in drawn if committed is not None and epoch_of(n) <= committed]
    plan = settle(named, listed, committed, start)
    leftovers = {
        (n, sealed)
        for n, sealed in listed
        if epoch_of(n) is not None
        and epoch_of(n).version < start.version
        and not covered(n, committed)
        and n not in named
    }
    assert set(plan.collect) == leftovers
    assert not {n for n, _ in plan.collect} & set(plan.publish)


def test_a_committed_entry_a_listing_shows_unsealed_is_left_for_its_slot_to_publish():
    committed = Epoch(2, 3)
    name = stem(Epoch(2, 2), 1)
    plan = settle([], [(name, False)], committed, Epoch(3, 1))
    assert plan == settle([], [], committed, Epoch(3, 1))


def test_sealing_runs_off_the_caller_s_thread(tmp_path):
    threads: list[str] = []

    def finish(temp: Path, name: str) -> None:
        threads.append(threading.current_thread().name)
        writes("x")(temp, name)

    plugin = epochs(tmp_path)
    plugin.seal(Epoch(1, 1), finish).result()
    assert len(threads) == 1
    assert threads[0] != threading.current_thread().name
    plugin.close()


def test_a_position_comes_with_the_future_its_epoch_is_durable_by():
    durable: Future[None] = Future()
    assert position(Sealing({"schema": []}, durable)) == ({"schema": []}, durable)
    assert position([3, 4]) == ([3, 4], None)


def test_joined_is_done_once_both_are_with_the_first_s_result():
    stored, durable = Future(), Future()
    both = joined(stored, durable)
    stored.set_result("stored")
    assert not both.done()
    durable.set_result(None)
    assert both.result() == "stored"
    alone: Future[str] = Future()
    assert joined(alone, None) is alone


def test_joined_fails_with_the_first_failure_without_waiting_for_the_other():
    stored, durable = Future(), Future()
    both = joined(stored, durable)
    durable.set_exception(OSError("disk gone"))
    with pytest.raises(OSError, match="disk gone"):
        both.result()
    stored.set_result("stored")
    cancelled = Future()
    cancelled.cancel()
    with pytest.raises(CancelledError):
        joined(Future(), cancelled).result(timeout=0)
