"""The runner's phases: only the transitions of the table are allowed, and each allowed one is
what a real runner does in some situation (loading, recovering, running, ending, completing,
failing, being closed)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from peer.causal.determinants import BARRIER as BARRIER_EVENT
from peer.causal.determinants import END as END_EVENT
from peer.job.spec import Lifecycle, Task
from peer.messaging.messages import END, Barrier, Batch, Recover, RestorePoint
from peer.runtime import task as task_module
from peer.runtime.checkpoints import CheckpointStorage
from peer.runtime.phases import TRANSITIONS, Phase, PhaseError, advance
from peer.runtime.task import TaskFailed, TaskRunner
from tests.unit.runtime.seat_world import SeatWorld, committed_epoch, recover_body, step_until
from tests.unit.runtime.seat_world import job as seat_job
from tests.unit.runtime.test_task import FNS, World, memory, run, run_until, runner

P = Phase


@pytest.fixture
def storage():
    store = CheckpointStorage("memory://phase-tests", uuid.uuid4().hex)
    yield store
    store.close()


@pytest.mark.parametrize("current", list(Phase))
@pytest.mark.parametrize("to", list(Phase))
def test_only_the_transitions_of_the_table_are_allowed(current, to):
    if to in TRANSITIONS[current]:
        assert advance(current, to) is to
    else:
        with pytest.raises(PhaseError, match=f"phase {current.value!r} cannot go to {to.value!r}"):
            advance(current, to)


def test_every_phase_is_reached_from_load_and_every_phase_can_be_closed():
    reached, frontier = {P.LOAD}, [P.LOAD]
    while frontier:
        for to in TRANSITIONS[frontier.pop()] - reached:
            reached.add(to)
            frontier.append(to)
    assert reached == set(Phase)
    assert all(P.CLOSED in TRANSITIONS[p] for p in Phase if p is not P.CLOSED)


# -- what a runner does, one situation per transition ------------------------------------------


def output(world: World, **kwargs) -> TaskRunner:
    return runner(Task("out", "output", plugin="peer.plugins.null:output"), world, **kwargs)


def fails(r: TaskRunner, steps: int = 50) -> None:
    with pytest.raises(TaskFailed):
        run(r, steps)


def completes(storage) -> TaskRunner:
    """An output without checkpoints: loads, runs, ends and completes."""
    world = World()
    r = output(world, upstream={1})
    r.deliver(1, Batch([{"n": 1}]))
    r.deliver(1, END)
    run(r)
    assert world.completed == 1
    return r


def awaits(storage) -> TaskRunner:
    r = output(World(), upstream={1}, storage=storage)
    run(r)
    return r


def starts_afresh(storage) -> TaskRunner:
    r = awaits(storage)
    r.recover_from(Recover(None))
    run(r)
    return r


def restoring(storage) -> TaskRunner:
    """A function told to restore from an epoch: it fetches the snapshot (which is not there)."""
    r = runner(Task("f", "function", fn=f"{FNS}:double"), World(), upstream={1}, storage=storage)
    r.recover_from(Recover(RestorePoint("j", 7, 5, {"f": 1})))
    run(r, 2)
    return r


def restores(storage) -> TaskRunner:
    first = World()
    r = runner(memory(4), first, batch=2, storage=storage)
    r.recover_from(Recover(None))
    run(r, 2)
    r.deliver(0, Barrier(1))
    run_until(r, lambda: first.reports)
    again = runner(memory(4), World(), batch=2, storage=storage)
    again.recover_from(Recover(RestorePoint("j", 7, 1, {"in": 1})))
    run_until(again, lambda: again.phase is P.RUN)
    return again


def ends(storage) -> TaskRunner:
    """An input that has read everything: it stays ended, passing barriers."""
    r = runner(memory(2), World())
    run(r)
    return r


def broken(storage) -> TaskRunner:
    r = output(World(), upstream={1})
    r.broken = ValueError("its group-by fn does not resolve")
    fails(r, 1)
    return r


def cannot_restore_its_positions(storage) -> TaskRunner:
    r = runner(memory(4), World(), storage=storage)
    r.recover_from(Recover(RestorePoint("j", 7, 1, {"in": 2})))
    fails(r)
    return r


def cannot_fetch(storage) -> TaskRunner:
    r = restoring(storage)
    with pytest.raises(TaskFailed, match="CheckpointError"):
        run_until(r, lambda: False)
    return r


def raises_in_its_fn(storage) -> TaskRunner:
    r = runner(Task("f", "function", fn=f"{FNS}:explode"), World(), upstream={1})
    r.deliver(1, Batch([{"n": 1}]))
    fails(r)
    return r


def raises_after_its_input_ended(storage) -> TaskRunner:
    hook = Lifecycle("in", after_task=f"{FNS}:explode")
    r = runner(memory(1), World(), lifecycles=[hook])
    fails(r)
    return r


def closed(situation: Callable[[CheckpointStorage], TaskRunner]):
    def close(storage) -> TaskRunner:
        r = situation(storage)
        r.close()
        return r

    return close


def fresh(storage) -> TaskRunner:
    return output(World())


def taken_over(storage, *, commit: bool = True, ended: bool = False) -> tuple[SeatWorld, Any]:
    """A function's first peer ran (and ended, if ``ended``); a replacement recalls."""
    world = SeatWorld(storage=storage)
    first = world.runner("f0", seat_job())
    first.recover_from(Recover(None))
    step_until(first, lambda: first.phase is P.RUN, "the first peer to run")
    world.batch(first, "a0", [1, 2])
    if commit:
        world.deliver(first, "a0", Barrier(1))
        world.deliver(first, "b0", Barrier(1))
        committed_epoch(world, first, 1)
    world.batch(first, "b0", [3])
    if ended:
        world.deliver(first, "a0", END)
        world.deliver(first, "b0", END)
        step_until(first, lambda: first.phase is P.ENDED, "the first peer to end")
        world.deliver(first, "a0", Barrier(2))  # passed after the end: the replay ends first
        world.deliver(first, "b0", Barrier(2))
    run(first, 5)
    again = world.runner("s0", seat_job())
    again.recover_from(recover_body(1 if commit else None))
    step_until(again, lambda: again.phase is P.RECALL, "the replacement to recall")
    return world, (first, again)


def recalling(storage) -> TaskRunner:
    return taken_over(storage)[1][1]


def recalling_afresh(storage) -> TaskRunner:
    return taken_over(storage, commit=False)[1][1]


def replayed(storage, *, ended: bool = False) -> TaskRunner:
    world, (first, again) = taken_over(storage, ended=ended)
    own = first.local.causal.log
    world.replay_to(again, 0, (own.start, own.since(own.start)))
    step_until(again, lambda: world.recovered, "the replay")
    return again


def replay_ending(storage) -> TaskRunner:
    """The seat's log has its end, then a barrier: the replacement is past the one, not yet
    the other."""
    world, (first, again) = taken_over(storage, ended=True)
    own = first.local.causal.log
    world.replay_to(again, 0, (own.start, own.since(own.start)))
    step_until(again, lambda: again.phase is P.REPLAY_ENDED, "the replay to pass the end")
    return again


def diverges_after_its_end(storage) -> TaskRunner:
    """The log has the seat pass barrier 3 after its end; its upstream sends barrier 2 again."""
    world, (first, again) = taken_over(storage, ended=True)
    own = first.local.causal.log
    events = list(own.since(own.start))
    end = next(i for i, e in enumerate(events) if e[0] == END_EVENT)
    events[end:] = [(BARRIER_EVENT, 3) if e[0] == BARRIER_EVENT else e for e in events[end:]]
    world.replay_to(again, 0, (own.start, events))
    run(again, 50)
    return again


def replays(storage) -> TaskRunner:
    world, (first, again) = taken_over(storage)
    own = first.local.causal.log
    world.replay_to(again, 0, (own.start, own.since(own.start)))
    again.step()
    return again


def cannot_replay(storage) -> TaskRunner:
    """The only downstream holds the seat's log from after where its snapshot stands."""
    world, (_, again) = taken_over(storage)
    world.replay_to(again, 0, (again.local.causal.log.end + 5, []))
    again.step()
    return again


def diverges(storage) -> TaskRunner:
    """The log says the seat drew a random number after its take; its fn reads the clock."""
    world, (first, again) = taken_over(storage)
    own = first.local.causal.log
    world.replay_to(again, 0, (own.start, [(0, ((1, 1),)), (2, 0.5)]))
    run(again, 5)
    return again


SITUATIONS: dict[tuple[Phase, Phase], Callable[[CheckpointStorage], TaskRunner]] = {
    (P.LOAD, P.RUN): completes,
    (P.LOAD, P.AWAIT_RECOVERY): awaits,
    (P.LOAD, P.FAILED): broken,
    (P.LOAD, P.CLOSED): closed(fresh),
    (P.AWAIT_RECOVERY, P.RUN): starts_afresh,
    (P.AWAIT_RECOVERY, P.RESTORE): restoring,
    (P.AWAIT_RECOVERY, P.FAILED): cannot_restore_its_positions,
    (P.AWAIT_RECOVERY, P.CLOSED): closed(awaits),
    (P.AWAIT_RECOVERY, P.RECALL): recalling_afresh,
    (P.RESTORE, P.RUN): restores,
    (P.RESTORE, P.RECALL): recalling,
    (P.RECALL, P.REPLAY): replays,
    (P.RECALL, P.FAILED): cannot_replay,
    (P.RECALL, P.CLOSED): closed(recalling),
    (P.REPLAY, P.RUN): replayed,
    (P.REPLAY, P.REPLAY_ENDED): replay_ending,
    (P.REPLAY_ENDED, P.ENDED): lambda storage: replayed(storage, ended=True),
    (P.REPLAY_ENDED, P.FAILED): diverges_after_its_end,
    (P.REPLAY_ENDED, P.CLOSED): closed(replay_ending),
    (P.REPLAY, P.FAILED): diverges,
    (P.REPLAY, P.CLOSED): closed(replays),
    (P.RESTORE, P.FAILED): cannot_fetch,
    (P.RESTORE, P.CLOSED): closed(restoring),
    (P.RUN, P.ENDED): completes,
    (P.RUN, P.FAILED): raises_in_its_fn,
    (P.RUN, P.CLOSED): closed(starts_afresh),
    (P.ENDED, P.COMPLETED): completes,
    (P.ENDED, P.FAILED): raises_after_its_input_ended,
    (P.ENDED, P.CLOSED): closed(ends),
    (P.COMPLETED, P.CLOSED): closed(completes),
    (P.FAILED, P.CLOSED): closed(raises_in_its_fn),
}


def test_every_allowed_transition_has_a_situation():
    assert set(SITUATIONS) == {(a, b) for a, tos in TRANSITIONS.items() for b in tos}


@pytest.mark.parametrize(("current", "to"), list(SITUATIONS), ids=lambda p: p.name)
def test_a_runner_makes_the_transition_in_its_situation(current, to, storage, monkeypatch):
    taken: list[tuple[Phase, Phase]] = []

    def recorded(a: Phase, b: Phase) -> Phase:
        taken.append((a, b))
        return advance(a, b)

    monkeypatch.setattr(task_module, "advance", recorded)
    r = SITUATIONS[(current, to)](storage)
    assert (current, to) in taken
    assert r.phase is taken[-1][1]


def test_a_closed_runner_stays_closed_and_does_nothing():
    r = output(World())
    r.close()
    r.close()
    assert (r.phase, r.step()) == (P.CLOSED, False)


def test_an_ended_input_still_passes_barriers(storage):
    world = World()
    r = runner(replace(memory(2), batch_size=5), world, storage=storage)
    r.recover_from(Recover(None))
    run(r)
    assert r.phase is P.ENDED
    r.deliver(0, Barrier(1, final=True))
    run_until(r, lambda: world.reports)
    assert world.markers()[-2:] == [("d1", Barrier(1, final=True)), ("d2", Barrier(1, final=True))]
