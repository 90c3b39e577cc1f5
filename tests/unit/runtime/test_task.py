"""The task state machine, driven step by step with a context that records what it sends."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from peer.job.spec import Job, Lifecycle, Task
from peer.runtime.routing import Route, Router
from peer.runtime.task import TaskContext, TaskFailed, TaskRunner
from tests.unit.runtime import runtime_fns

FNS = "tests.unit.runtime.runtime_fns"


@dataclass
class World:
    sent: list[tuple[str, list]] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    completed: int = 0
    congested: bool = False


def runner(task: Task, world: World, *, upstream=(), lifecycles=(), batch=None) -> TaskRunner:
    if batch is not None:
        task = Task(
            **{**{f: getattr(task, f) for f in task.__dataclass_fields__}, "batch_size": batch}
        )
    job = Job(workflow=(("x", "y"),), catalog=(task,), lifecycles=tuple(lifecycles), id="j")
    downstream = () if task.kind == "output" else (Route("next", ("d1", "d2")),)

    def complete() -> None:
        world.completed += 1

    return TaskRunner(
        TaskContext(
            job=job, task=task, peer="p", version=7, slot=0, slots=1,
            upstream=frozenset(upstream), router=Router(downstream),
            send=lambda to, segments: world.sent.append((to, list(segments))),
            send_done=world.done.append, congested=lambda: world.congested, complete=complete,
        )
    )  # fmt: skip


def run(r: TaskRunner, steps: int = 50) -> None:
    for _ in range(steps):
        r.step()


def memory(count: int) -> Task:
    return Task("in", "input", plugin="peer.plugins.memory:input", params={"count": count})


def test_an_input_sends_its_batches_in_turn_then_the_end_marker_to_every_peer():
    world = World()
    r = runner(memory(5), world, batch=2)
    run(r)
    assert world.sent == [
        ("d1", [{"n": 0}, {"n": 1}]),
        ("d2", [{"n": 2}, {"n": 3}]),
        ("d1", [{"n": 4}]),
    ]
    assert world.done == ["d1", "d2"]
    assert r.state == "finished"


def test_a_congested_group_reads_nothing_more():
    world = World(congested=True)
    r = runner(memory(5), world)
    run(r)
    assert world.sent == []
    assert r.state == "run"


@pytest.mark.parametrize(
    ("fn", "out"),
    [("double", [{"n": 1}, {"n": 1}, {"n": 2}, {"n": 2}]), ("drop_odd", [{"n": 2}])],
)
def test_a_function_may_return_several_segments_or_none(fn, out):
    world = World()
    r = runner(Task("f", "function", fn=f"{FNS}:{fn}"), world, upstream={1})
    r.deliver([{"n": 1}, {"n": 2}])
    run(r)
    assert world.sent == [("d1", out)]


def test_a_function_finishes_only_once_every_upstream_peer_has():
    world = World()
    r = runner(Task("f", "function", fn=f"{FNS}:Total"), world, upstream={1, 2})
    r.deliver([{"n": 1}, {"n": 2}])
    r.deliver_done(1)
    run(r)
    assert (world.sent, world.done) == ([], [])
    r.deliver([{"n": 4}])
    r.deliver_done(2)
    run(r)
    assert world.sent == [("d1", [{"total": 7}])]
    assert world.done == ["d1", "d2"]


def test_an_output_completes_once_its_inputs_are_done_and_synced():
    world = World()
    r = runner(Task("out", "output", plugin="peer.plugins.null:output"), world, upstream={1})
    r.deliver([{"n": 1}])
    run(r)
    assert (r.plugin.written, world.completed) == (1, 0)
    r.deliver_done(1)
    run(r)
    assert world.completed == 1
    assert r.state == "finished"


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
    r.deliver([{"n": 1}])
    r.step()
    with pytest.raises(TaskFailed, match=r"^job 'j': task 'f' on peer p: ZeroDivisionError: no$"):
        r.step()


def test_an_input_ends_only_once_its_source_is_synced():
    world = World()
    r = runner(Task("in", "input", plugin=f"{FNS}:slow_to_sync"), world)
    for _ in range(3):
        r.step()
    assert (world.sent, world.done) == ([("d1", [{"n": 1}])], [])
    run(r)
    assert world.done == ["d1", "d2"]
    assert r.plugin.asks == 3
