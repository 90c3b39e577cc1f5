"""What a keyed task's slot fetches to restore: its own snapshot alone when the task runs on as
many slots as took the checkpoint, with its keys in as many key groups; after a change of
slots, the old slots that held key groups it owns now, and of their keyed state those key
groups alone, chains included; and a change of key groups kills the task, saying so."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from peer.job.spec import Job, Task
from peer.messaging.messages import Batch, Recover, RestorePoint
from peer.runtime.checkpoints import CheckpointStorage
from peer.runtime.phases import Phase
from peer.runtime.placement import place
from peer.runtime.routing import Router, routes
from peer.runtime.snapshot import TaskSnapshot
from peer.runtime.task import TaskContext, TaskFailed, TaskRunner
from peer.state.key_groups import groups_of, key_group
from peer.state.keyed import KeyedState
from peer.values.epoch import Epoch
from tests.support import wait_for

FNS = "tests.unit.runtime.runtime_fns"
WORDS = [f"w{i}" for i in range(60)]
TAKEN = Epoch(3, 2)


@pytest.fixture
def storage() -> Iterator[CheckpointStorage]:
    store = CheckpointStorage("memory://keyed-restore", uuid.uuid4().hex)
    yield store
    store.close()


def job(groups: int = 128, fn: str = "Counts") -> Job:
    return Job(
        workflow=(("in", "count"), ("count", "out")),
        catalog=(
            Task("in", "input", plugin="peer.plugins.memory:input"),
            Task("count", "function", fn=f"{FNS}:{fn}", group_by_key="word"),
            Task("out", "output", plugin="peer.plugins.null:output"),
        ),
        max_parallelism=groups,
        id="j",
    )


def owned(words: list[str], slot: int, slots: int, groups: int = 128) -> dict[str, int]:
    return {w: 1 for w in words if key_group(w, groups) in groups_of(slot, slots, groups)}


def checkpoint(storage: CheckpointStorage, slots: int) -> None:
    """The epoch TAKEN of ``count`` as ``slots`` slots left it: each slot counted its own words
    once (and, to show what a slot reads, every slot also holds a word of nobody's, "stray")."""
    for slot in range(slots):
        state = {**owned(WORDS, slot, slots), "stray": slot}
        blob = TaskSnapshot(None, None, state, False).to_bytes()
        storage.put("j", TAKEN, "count", slot, blob).result(10)


def holding(slot: int, slots: int, before: int) -> list[int]:
    """The old slots, of ``before``, that held key groups slot ``slot`` of ``slots`` owns."""
    mine = set(groups_of(slot, slots, 128))
    return [old for old in range(before) if mine & set(groups_of(old, before, 128))]


def restored(
    storage: CheckpointStorage, slot: int, slots: int, point: RestorePoint, *,
    groups: int = 128, fn: str = "Counts", sent: list | None = None,
) -> tuple[TaskRunner, list[int]]:  # fmt: skip
    """Slot ``slot`` of ``slots`` of ``count`` (its fn ``fn``) restored from ``point``, and the
    old slots it fetched; what it sends goes to ``sent``."""
    peers = tuple(f"p{i}" for i in range(slots))
    short_ids = {"j": 100, "i": 90, "o": 91, **{p: n for n, p in enumerate(peers)}}
    allocation = {"in": ("i",), "count": peers, "out": ("o",)}
    placement = place(job(groups, fn), 9, allocation, short_ids, {})
    out = [] if sent is None else sent
    fetched: list[int] = []

    def fetch(job_id: str, epoch: Epoch, old: int, key_groups: range | None):
        fetched.append(old)
        return storage.restore(job_id, epoch, "count", old, key_groups)

    runner = TaskRunner(
        TaskContext(
            placement=placement, peer=peers[slot], router=Router(routes(placement, "count")),
            send=lambda to, item: out.append(item), report=lambda m: None,
            grant=lambda source, batches, rows: None, congested=lambda: False,
            complete=lambda: None, storage=storage, fetch=fetch, key_of=lambda s: s["word"],
        )
    )  # fmt: skip
    runner.recover_from(Recover(point))

    def running() -> bool:
        runner.step()
        return runner.phase is Phase.RUN

    wait_for(running, 10, "the slot to restore and run", interval=0)
    return runner, fetched


def point(slots: int, groups: dict[str, int]) -> RestorePoint:
    return RestorePoint("j", TAKEN.version, TAKEN.number, {"count": slots}, "global", groups)


def counts(runner: TaskRunner) -> dict[str, int]:
    return runner.apply.fn.counts  # type: ignore[attr-defined]


def test_as_many_slots_and_key_groups_read_the_slots_own_snapshot_alone(storage):
    checkpoint(storage, 3)
    runner, fetched = restored(storage, 1, 3, point(3, {"count": 128}))
    assert fetched == [1]
    assert counts(runner) == {**owned(WORDS, 1, 3), "stray": 1}


@pytest.mark.parametrize(("before", "after"), [(3, 2), (2, 3), (1, 2)])
def test_after_a_change_of_slots_each_reads_the_old_slots_that_held_its_key_groups(
    storage, before, after
):
    checkpoint(storage, before)
    for slot in range(after):
        runner, fetched = restored(storage, slot, after, point(before, {"count": 128}))
        assert fetched == holding(slot, after, before)
        mine = owned(WORDS, slot, after)
        if key_group("stray", 128) in groups_of(slot, after, 128):
            mine["stray"] = fetched[-1]  # each old slot's "stray": the last one read stays
        assert counts(runner) == mine


def test_a_checkpoint_from_before_key_groups_is_read_whole_by_every_slot(storage):
    checkpoint(storage, 2)
    runner, fetched = restored(storage, 0, 2, point(2, {}))
    assert fetched == [0, 1]
    assert counts(runner) == owned(WORDS, 0, 2)


def test_a_change_of_key_groups_kills_the_task_saying_so(storage):
    checkpoint(storage, 2)
    with pytest.raises(TaskFailed) as failed:
        restored(storage, 0, 2, point(2, {"count": 128}), groups=64)
    assert str(failed.value) == (
        "job 'j': task 'count' on peer p0: ValueError: its checkpoint split its keys into 128 key "
        "groups and it now has 64: a keyed task keeps its max_parallelism for the life of its "
        "state, in the jobs resumed from it too"
    )


def keyed_checkpoint(storage: CheckpointStorage, slots: int) -> None:
    """The epoch TAKEN of ``count`` as ``slots`` slots of StateCounts left it, in the keyed
    state the engine keeps: each word counted as many times as its number. Its snapshots add
    to those of the epoch before, whole, where every word counted 1000 and a word "gone" was
    counted, since cleared."""
    before = Epoch(TAKEN.version, TAKEN.number - 1)
    for slot in range(slots):
        state = KeyedState(128)
        count = state.value_state("count")
        for word in [*owned(WORDS, slot, slots), "gone"]:
            state.at(word)
            count.set(1000)
        blob = TaskSnapshot(None, None, None, False).to_bytes(state.snapshot(whole=True))
        storage.put("j", before, "count", slot, blob).result(10)
        for word in owned(WORDS, slot, slots):
            state.at(word)
            count.set(int(word[1:]))
        state.at("gone")
        count.clear()
        changes = TaskSnapshot(None, None, None, False, chain=(before.number,))
        blob = changes.to_bytes(state.snapshot(whole=False))
        storage.put("j", TAKEN, "count", slot, blob).result(10)


@pytest.mark.parametrize(("before", "after"), [(2, 2), (2, 3), (3, 1)])
def test_keyed_state_the_engine_keeps_moves_with_its_key_groups(storage, before, after):
    """Every word's next count follows its restored one, on whichever slot owns it now."""
    keyed_checkpoint(storage, before)
    counted = {}
    for slot in range(after):
        sent: list = []
        runner, _ = restored(storage, slot, after, point(before, {"count": 128}),
                             fn="StateCounts", sent=sent)  # fmt: skip
        words = [w for w in [*WORDS, "gone"] if key_group(w, 128) in groups_of(slot, after, 128)]
        runner.deliver(90, Batch([{"word": w} for w in words]))
        wait_for(lambda r=runner, s=sent: r.step() or s, 10, "the counts", interval=0)
        counted.update({s["word"]: s["count"] for item in sent for s in item})
    assert counted == {"gone": 1, **{w: int(w[1:]) + 1 for w in WORDS}}
