"""What a keyed task's slot fetches to restore: its own snapshot alone when the task runs on as
many slots as took the checkpoint, with its keys in as many key groups; every old slot's after a
change of slots, keeping the keys whose key group it now owns; and a change of key groups kills
the task, saying so."""

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

    def fetch(job_id: str, epoch: Epoch, old: int):
        fetched.append(old)
        return storage.fetch(job_id, epoch, "count", old)

    runner = TaskRunner(
        TaskContext(
            placement=placement, peer=peers[slot], router=Router(routes(placement, "count")),
            send=lambda to, item: out.append(item), report=lambda what, epoch: None,
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
def test_after_a_change_of_slots_each_reads_every_old_slot_and_keeps_its_key_groups(
    storage, before, after
):
    checkpoint(storage, before)
    for slot in range(after):
        runner, fetched = restored(storage, slot, after, point(before, {"count": 128}))
        assert fetched == list(range(before))
        mine = owned(WORDS, slot, after)
        if key_group("stray", 128) in groups_of(slot, after, 128):
            mine["stray"] = before - 1  # every old slot's "stray": the last one read stays
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
    state the engine keeps: each word counted as many times as its number."""
    for slot in range(slots):
        state = KeyedState(128)
        count = state.value_state("count")
        for word, n in owned(WORDS, slot, slots).items():
            state.at(word)
            count.set(int(word[1:]) * n)
        blob = TaskSnapshot(None, None, None, False, state=state.snapshot()).to_bytes()
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
        runner.deliver(90, Batch([{"word": w} for w in owned(WORDS, slot, after)]))
        wait_for(lambda r=runner, s=sent: r.step() or s, 10, "the counts", interval=0)
        counted.update({s["word"]: s["count"] for item in sent for s in item})
    assert counted == {w: int(w[1:]) + 1 for w in WORDS}
