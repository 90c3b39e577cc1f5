"""The task state machine, driven step by step with a context that records what it sends:
batches, the end, and with checkpoints the recovery, barriers, acks and the final commit."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from peer import code_marks
from peer.job.spec import Job, Lifecycle, Task, Trigger, Window
from peer.messaging.messages import END, Barrier, Batch, Recover, RestorePoint, Watermark
from peer.runtime import task as task_module
from peer.runtime.checkpoints import CheckpointError, CheckpointStorage
from peer.runtime.emit import WINDOW
from peer.runtime.phases import Phase
from peer.runtime.placement import place
from peer.runtime.routing import Router, routes
from peer.runtime.snapshot import read
from peer.runtime.task import TaskContext, TaskFailed, TaskRunner
from peer.values.epoch import Epoch
from tests.support import reported, wait_for
from tests.unit.runtime import runtime_fns

FNS = "tests.unit.runtime.runtime_fns"


@dataclass
class World:
    sent: list[tuple[str, Any]] = field(default_factory=list)
    reports: list[tuple[str, int]] = field(default_factory=list)
    grants: list[tuple[int, int]] = field(default_factory=list)
    completed: int = 0
    congested: bool = False

    def batches(self) -> list[tuple[str, list]]:
        return [(to, item) for to, item in self.sent if isinstance(item, list)]

    def markers(self) -> list[tuple[str, Any]]:
        return [(to, item) for to, item in self.sent if not isinstance(item, list)]


@pytest.fixture
def storage():
    store = CheckpointStorage("memory://task-tests", uuid.uuid4().hex)
    yield store
    store.close()


def runner(
    task: Task,
    world: World,
    *,
    upstream=(),
    lifecycles=(),
    batch=None,
    storage=None,
    windows=(),
    triggers=(),
    debloat=None,
    key_of=None,
) -> TaskRunner:
    """A runner of ``task`` on peer p (allocation version 7), after the peers whose short ids
    are ``upstream`` and before d1 and d2 (unless it is an output). The world gives no credit
    back, so the job keeps fixed windows unless ``debloat`` sets its target."""
    if batch is not None:
        task = replace(task, batch_size=batch)
    ups = {f"u{n}": n for n in upstream}
    workflow = ((("up", task.name),) if ups else ()) + (
        () if task.kind == "output" else ((task.name, "next"),)
    )
    job = Job(
        workflow=workflow,
        catalog=(
            task,
            Task("up", "input", plugin="peer.plugins.memory:input"),
            Task("next", "output", plugin="peer.plugins.null:output"),
        ),
        lifecycles=tuple(lifecycles),
        windows=tuple(windows),
        triggers=tuple(triggers),
        debloat_target=debloat,
        id="j",
    )
    allocation = {task.name: ("p",), "up": tuple(ups), "next": ("d1", "d2")}
    short_ids = {"j": 100, "p": 0, "d1": 50, "d2": 51, **ups}
    placement = place(job, 7, allocation, short_ids, {})

    def complete() -> None:
        world.completed += 1

    return TaskRunner(
        TaskContext(
            placement=placement, peer="p", router=Router(routes(placement, task.name)),
            send=lambda to, item: world.sent.append((to, item)),
            report=lambda m: world.reports.append(reported(m)),
            grant=lambda source, batches, rows: world.grants.append((source, batches)),
            congested=lambda: world.congested, complete=complete, storage=storage,
            fetch=lambda job_id, epoch, slot, groups: storage.restore(
                job_id, epoch, task.name, slot, groups
            ),
            key_of=key_of,
        )
    )  # fmt: skip


def run(r: TaskRunner, steps: int = 50) -> None:
    for _ in range(steps):
        r.step()


def run_until(r: TaskRunner, done) -> None:
    """Step until ``done()`` holds; uploads and fetches finish in the storage's own threads."""

    def stepped() -> bool:
        r.step()
        return done()

    wait_for(stepped, 10, "the runner to get there", interval=0)


def memory(count: int) -> Task:
    return Task("in", "input", plugin="peer.plugins.memory:input", params={"count": count})


def test_an_input_sends_its_batches_in_turn_then_the_end_marker_to_every_peer():
    world = World()
    r = runner(memory(5), world, batch=2)
    run(r)
    assert world.batches() == [
        ("d1", [{"n": 0}, {"n": 1}]),
        ("d2", [{"n": 2}, {"n": 3}]),
        ("d1", [{"n": 4}]),
    ]
    assert world.markers() == [("d1", END), ("d2", END)]


def test_a_congested_group_reads_nothing_more():
    world = World(congested=True)
    run(runner(memory(5), world))
    assert world.sent == []


@pytest.mark.parametrize(
    ("fn", "out"),
    [("double", [{"n": 1}, {"n": 1}, {"n": 2}, {"n": 2}]), ("drop_odd", [{"n": 2}])],
)
def test_a_function_may_return_several_segments_or_none(fn, out):
    world = World()
    r = runner(Task("f", "function", fn=f"{FNS}:{fn}"), world, upstream={1})
    r.deliver(1, Batch([{"n": 1}, {"n": 2}]))
    run(r)
    assert world.batches() == [("d1", out)]


def test_a_function_finishes_only_once_every_upstream_peer_has():
    world = World()
    r = runner(Task("f", "function", fn=f"{FNS}:Total"), world, upstream={1, 2})
    r.deliver(1, Batch([{"n": 1}, {"n": 2}]))
    r.deliver(1, END)
    run(r)
    assert world.sent == []
    r.deliver(2, Batch([{"n": 4}]))
    r.deliver(2, END)
    run(r)
    assert world.batches() == [("d1", [{"total": 7}])]
    assert world.markers() == [("d1", END), ("d2", END)]


def test_a_function_restored_from_after_its_end_does_not_flush_again():
    """Its flush went out before the barrier, into the epoch it is restored from: after a
    reallocation the end comes again, and the flushed totals must not go out twice."""
    storage = CheckpointStorage("memory://flushed-tests", uuid.uuid4().hex)
    first, total = World(), Task("f", "function", fn=f"{FNS}:Total")
    r = runner(total, first, upstream={1}, storage=storage)
    r.recover_from(Recover(None))
    r.deliver(1, Batch([{"n": 3}]))
    r.deliver(1, END)
    run_until(r, lambda: r.phase is Phase.ENDED)
    r.deliver(1, Barrier(1))
    run_until(r, lambda: first.reports)
    assert first.batches() == [("d1", [{"total": 3}])]
    again = World()
    restored = runner(total, again, upstream={1}, storage=storage)
    restored.recover_from(Recover(RestorePoint("j", 7, 1, {"f": 1})))
    run_until(restored, lambda: restored.phase is Phase.RUN)
    restored.deliver(1, END)
    run(restored)
    assert again.batches() == []
    assert again.markers() == [("d1", END), ("d2", END)]
    storage.close()


def test_an_output_completes_once_its_inputs_are_done_and_synced():
    world = World()
    r = runner(Task("out", "output", plugin="peer.plugins.null:output"), world, upstream={1})
    r.deliver(1, Batch([{"n": 1}]))
    run(r)
    assert (r.plugin.written, world.completed) == (1, 0)
    r.deliver(1, END)
    run(r)
    assert world.completed == 1


def test_lifecycle_hooks_see_job_task_and_peer():
    runtime_fns.EVENTS.clear()
    hooks = Lifecycle("all", before_task=f"{FNS}:before_task", after_task=f"{FNS}:after_task")
    batches = Lifecycle("in", after_batch=f"{FNS}:after_batch")
    run(runner(memory(1), World(), lifecycles=[hooks, batches]))
    event = {"job": "j", "task": "in", "peer": "p"}
    assert [
        ("before_task", event),
        ("after_batch", event),
        ("after_task", event),
    ] == runtime_fns.EVENTS


def test_code_that_raises_fails_the_task_naming_job_task_and_peer():
    r = runner(Task("f", "function", fn=f"{FNS}:explode"), World(), upstream={1})
    r.deliver(1, Batch([{"n": 1}]))
    r.step()
    with pytest.raises(TaskFailed, match=r"^job 'j': task 'f' on peer p: ZeroDivisionError: no$"):
        r.step()


@pytest.mark.parametrize(
    ("fn", "raised"),
    [
        ("exits", "SystemExit: 3"),
        ("interrupts", "KeyboardInterrupt"),
        ("closes", "GeneratorExit"),
    ],
)
def test_code_that_would_end_its_process_fails_the_task_like_any_error(fn, raised):
    """The exception goes no further than the runner: its group, and the process, go on."""
    r = runner(Task("f", "function", fn=f"{FNS}:{fn}"), World(), upstream={1})
    r.deliver(1, Batch([{"n": 1}]))
    r.step()
    with pytest.raises(TaskFailed) as failed:
        r.step()
    assert str(failed.value) == (
        f"job 'j': task 'f' on peer p: {raised} (a task's code may not end its process)"
    )
    assert r.phase is Phase.FAILED


def test_a_runner_in_a_worker_marks_its_code_while_it_runs_and_only_then(monkeypatch):
    """The mark names the job by its short id and the task by its place in the catalog."""
    word = (code_marks.WORD * 1)()
    monkeypatch.setattr(code_marks._PROCESS, "word", word)
    monkeypatch.setattr(runtime_fns, "WORD", [word])
    runtime_fns.MARKS.clear()
    r = runner(Task("f", "function", fn=f"{FNS}:note_mark"), World(), upstream={1})
    r.deliver(1, Batch([{"n": 1}, {"n": 2}]))
    run(r, 5)
    assert [code_marks.number(100, 0)] * 2 == runtime_fns.MARKS
    assert word[0] == 0


def test_a_runner_outside_a_worker_marks_nothing():
    assert runner(Task("f", "function", fn=f"{FNS}:double"), World()).mark is code_marks.NO_MARK


def test_an_input_ends_only_once_its_source_is_synced():
    world = World()
    r = runner(Task("in", "input", plugin=f"{FNS}:slow_to_sync"), world)
    for _ in range(3):
        r.step()
    assert (world.batches(), world.markers()) == ([("d1", [{"n": 1}])], [])
    run(r)
    assert world.markers() == [("d1", END), ("d2", END)]
    assert r.plugin.asks == 3


# -- with checkpoints ---------------------------------------------------------------------------


def test_a_checkpointed_task_waits_for_its_coordinator_before_reading(storage):
    world = World()
    r = runner(memory(5), world, storage=storage)
    run(r)
    assert world.sent == []
    r.recover_from(Recover(None))
    run(r)
    assert len(world.batches()) == 1


def test_an_input_snapshots_at_a_barrier_passes_it_on_and_acks_once_stored(storage):
    world = World()
    r = runner(memory(6), world, batch=2, storage=storage)
    r.recover_from(Recover(None))
    run(r, 3)
    r.deliver(0, Barrier(1))
    run_until(r, lambda: world.reports)
    assert world.reports == [("ack", 1)]
    assert [m for m in world.markers() if m[1] != END] == [("d1", Barrier(1)), ("d2", Barrier(1))]
    stored, _ = read(storage.get("j", Epoch(7, 1), "in", 0))
    assert stored.plugin == 2 * len(world.batches()[: world.sent.index(("d1", Barrier(1)))])


def test_a_function_aligns_barriers_from_every_upstream_peer(storage):
    world = World()
    r = runner(Task("f", "function", fn=f"{FNS}:double"), world, upstream={1, 2}, storage=storage)
    r.recover_from(Recover(None))
    r.deliver(1, Batch([{"n": 1}]))
    r.deliver(1, Barrier(1))
    r.deliver(1, Batch([{"n": 2}]))
    run(r)
    assert world.batches() == [("d1", [{"n": 1}, {"n": 1}])]
    assert world.markers() == []
    r.deliver(2, Barrier(1))
    run_until(r, lambda: world.reports)
    assert world.markers() == [("d1", Barrier(1)), ("d2", Barrier(1))]
    assert world.batches()[-1] == ("d2", [{"n": 2}, {"n": 2}])


def test_an_output_completes_only_after_the_final_epoch_is_committed(storage, tmp_path):
    world = World()
    sink = Task(
        "out", "output", plugin="peer.plugins.jsonl:exactly_once_output",
        params={"path": str(tmp_path)},
    )  # fmt: skip
    r = runner(sink, world, upstream={1}, storage=storage)
    r.recover_from(Recover(None))
    r.deliver(1, Batch([{"n": 1}]))
    r.deliver(1, END)
    run(r)
    assert world.reports == [("drained", 0)]
    r.deliver(1, Barrier(1, final=True))
    run_until(r, lambda: ("ack", 1) in world.reports)
    assert world.completed == 0
    assert not list(tmp_path.glob("*.jsonl"))
    r.committed(1)
    run_until(r, lambda: world.completed)  # once the epoch is published, in the background
    assert world.completed == 1
    assert [p.read_text() for p in tmp_path.glob("*.jsonl")] == ['{"n":1}\n']


def test_an_epoch_is_acknowledged_only_once_its_output_is_sealed(storage):
    world = World()
    sink = Task("out", "output", plugin="tests.unit.runtime.runtime_fns:seals_later")
    r = runner(sink, world, upstream={1}, storage=storage)
    r.recover_from(Recover(None))
    runtime_fns.SEALS.clear()
    r.deliver(1, Barrier(1))
    run_until(r, lambda: runtime_fns.SEALS)

    def stored() -> bool:
        try:
            return bool(storage.get("j", Epoch(7, 1), "out", 0))
        except CheckpointError:
            return False

    wait_for(stored, 10, "the snapshot to be stored")
    run(r)
    assert world.reports == []  # the snapshot is stored, the epoch's output not yet durable
    runtime_fns.SEALS[0].set_result(None)
    run_until(r, lambda: world.reports)
    assert world.reports == [("ack", 1)]


def test_a_restarted_input_resumes_from_its_committed_position(storage):
    first = World()
    r = runner(memory(6), first, batch=2, storage=storage)
    r.recover_from(Recover(None))
    run(r, 2)
    r.deliver(0, Barrier(1))
    run_until(r, lambda: first.reports)
    done = sum(len(b) for _, b in first.batches()[: first.sent.index(("d1", Barrier(1)))])
    again = World()
    restarted = runner(memory(6), again, batch=2, storage=storage)
    restarted.recover_from(Recover(RestorePoint("j", 7, 1, {"in": 1})))
    run_until(restarted, lambda: (("d1", END)) in again.sent)
    resumed = [s["n"] for _, b in again.batches() for s in b]
    assert resumed == list(range(done, 6))


def test_a_windowed_task_sends_on_only_what_its_triggers_emit(storage):
    world = World()
    window = Window("w", "f", "global", "count")
    every_two = Trigger("w", "segment", threshold=2)
    at_the_end = Trigger("w", "watermark")
    task = Task("f", "function", fn=f"{FNS}:double")
    r = runner(task, world, upstream={1}, windows=[window], triggers=[every_two, at_the_end])
    r.deliver(1, Batch([{"n": 1}]))
    r.deliver(1, END)
    run(r)
    emitted = [s for _, b in world.batches() for s in b]
    assert [s["value"] for s in emitted] == [2, 2]


def test_an_input_assigns_watermarks_and_a_windowed_task_fires_on_them():
    source = replace(memory(10), assign_watermark_fn=f"{FNS}:event_time")
    world = World()
    run(runner(source, world, batch=5))
    assert [m for _, m in world.markers() if isinstance(m, Watermark)][:2] == [
        Watermark(4.0),
        Watermark(4.0),
    ]
    window = Window("w", "f", "fixed", "count", key="n", range=5)
    task = Task("f", "function", fn=f"{FNS}:double")
    fired = World()
    r = runner(task, fired, upstream={1}, windows=[window], triggers=[Trigger("w", "watermark")])
    r.deliver(1, Batch([{"n": 1}, {"n": 6}]))
    r.deliver(1, Watermark(5.0))
    run(r)
    assert [(s["start"], s["value"]) for _, b in fired.batches() for s in b] == [(0.0, 2)]


def test_a_watermark_that_closes_many_keys_spreads_them_over_steps_and_goes_on_after(
    monkeypatch,
):
    """A close of windows emits what it fires for CLOSE_SLICE seconds a step (none here: one
    key a step), so a watermark that closes a large state's keys never holds its group's loop
    for long; the watermark goes on once every key it closed has, and the end once the end's
    close is through, and what comes meanwhile waits."""
    monkeypatch.setattr(task_module, "CLOSE_SLICE", 0.0)
    window = Window("w", "f", "fixed", "count", key="n", range=5)
    task = Task("f", "function", fn=f"{FNS}:tag_set", group_by_key="k")
    world = World()
    r = runner(task, world, upstream={1}, windows=[window], triggers=[Trigger("w", "watermark")],
               key_of=lambda segment: segment["k"])  # fmt: skip
    r.deliver(1, Batch([{"k": k, "n": 1} for k in "edcba"]))
    r.deliver(1, Watermark(5.0))
    r.deliver(1, Batch([{"k": "a", "n": 6}]))
    r.deliver(1, END)
    closing = 0
    for _ in range(50):
        r.step()
        closing += r.closing is not None
    assert closing >= 4, "the five keys' close took fewer steps than keys"
    fired = [(m["key"], m["start"]) if isinstance(m, dict) else m
             for _, item in world.sent for m in (item if isinstance(item, list) else [item])
             if isinstance(m, dict) or m in (Watermark(5.0), END)]  # fmt: skip
    assert fired[:5] == [(k, 0.0) for k in "abcde"]
    assert fired[5:7] == [Watermark(5.0), Watermark(5.0)]  # to d1 and d2
    assert fired[7:] == [("a", 5.0), END, END]


def test_a_peer_sends_a_window_of_batches_then_waits_for_credit():
    """Batches alternate between d1 and d2; the peer stops once one of them has a window in
    flight, whichever the next batch would have gone to."""
    world = World()
    r = runner(memory(10 * WINDOW), world, batch=1)
    run(r, 4 * WINDOW)
    assert len(world.batches()) == 2 * WINDOW - 1
    assert r.emitter.credits == {"d1": 0, "d2": 1}
    r.credit("d1", 2)
    r.credit("d2", 2)
    run(r, 4 * WINDOW)
    assert len(world.batches()) == 2 * WINDOW + 3
    assert r.emitter.credits == {"d1": 0, "d2": 1}


def test_a_receiver_gives_credit_back_as_it_takes_batches():
    world = World()
    r = runner(Task("f", "function", fn=f"{FNS}:double"), world, upstream={1, 2}, batch=1)
    for n in range(WINDOW):
        r.deliver(1, Batch([{"n": n}]))
    run(r, 2 * WINDOW)
    assert world.grants == [(1, WINDOW // 2), (1, WINDOW // 2)]
