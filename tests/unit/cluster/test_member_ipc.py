"""What a member and its workers exchange, without processes: a worker fed a Reset at any
position and the entries after it reaches the very replica its member computes; a message of
no known kind is dropped; the member answers only the commit-record calls, and a store that
fails answers with a Failure naming the call instead of ending the member's thread."""

from __future__ import annotations

import threading
import time
from multiprocessing import Pipe

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.cluster.ipc import Answer, ApplyEntries, Assign, Call, Ended, Failure, Reset
from peer.cluster.member import RESTART_BACK_OFF, Workers
from peer.cluster.model import ClusterModel
from peer.cluster.worker import StoreCalls, Worker, WorkerSpec
from peer.log.apply import apply_entry
from peer.log.replica import Replica
from peer.log.store import StoreError
from peer.log.stores.memory import MemoryLog

SPEC = WorkerSpec(slot=0, tenancy="t", checkpoints="/nonexistent")


def played_log(starts: int, seed: int) -> ClusterModel:
    """A real log: groups join, one dies, the rest settle."""
    model = ClusterModel()
    for i in range(starts):
        model.start(vpeers=1 + (seed + i) % 3)
    model.settle()
    model.kill(sorted(model.groups)[seed % starts])
    model.settle()
    return model


def worker() -> Worker:
    return Worker(SPEC, None, None, None, None)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(0, 100), st.data())
def test_a_worker_reaches_its_members_replica_from_any_reset(starts, seed, data):
    log = played_log(starts, seed).log
    replicas = [Replica()]
    for entry in log:
        replicas.append(apply_entry(replicas[-1], entry).new)
    cut = data.draw(st.integers(0, len(log)))
    w = worker()
    w.inbox.put(Reset("m", replicas[cut].to_json(), ("p1",)))
    for at in range(cut, len(log), 3):
        w.inbox.put(ApplyEntries(tuple(log[at : at + 3])))
    w.inbox.put(Assign(("p2",)))
    w._take()
    assert w.replica == replicas[-1]
    assert (w.member, w.peers) == ("m", ("p2",))


def test_a_message_of_no_known_kind_is_dropped_and_the_worker_goes_on(caplog):
    w = worker()
    w.inbox.put("junk")
    w.inbox.put(Assign(("p1",)))
    w._take()
    assert w.peers == ("p1",)
    assert "worker 0 dropped a message it does not know: 'junk'" in caplog.text


class Failing:
    def read_commit(self, job: str):
        raise StoreError(f"ZooKeeper is unreachable reading the commit of {job}")


def test_the_member_answers_commit_calls_and_nothing_else():
    workers = Workers(1, SPEC, MemoryLog().session())
    assert workers._answer(0, Call("write_commit", ("j", b"x", -1))) == Answer(0)
    assert workers._answer(0, Call("read_commit", ("j",))) == Answer((b"x", 0))
    refused = workers._answer(0, Call("append", ("anything",)))
    assert isinstance(refused, Failure)
    assert "not Call(method='append'" in refused.message
    assert isinstance(workers._answer(0, "junk"), Failure)


def test_a_failing_store_call_reaches_the_worker_as_a_store_error():
    member, child = Pipe()
    serving = threading.Thread(target=Workers(1, SPEC, Failing())._serve, args=(0, member))
    serving.start()
    calls = StoreCalls(child)
    with pytest.raises(StoreError, match="read_commit for worker 0: StoreError: ZooKeeper is"):
        calls.read_commit("j")
    child.close()
    serving.join(5)
    assert not serving.is_alive()


class Counted(Workers):
    """Workers whose starts are only counted."""

    def spawn(self, slot: int) -> None:
        state = self.slots[slot]
        state.generation += 1
        state.due, state.started = None, time.monotonic()


def test_a_worker_that_dies_as_it_starts_is_started_again_only_after_a_back_off():
    """Meanwhile it counts as not listening, so the member sends it nothing."""
    workers = Counted(2, SPEC, MemoryLog().session())
    workers.spawn(0)
    workers.slots[0].site = "127.0.0.1:1"
    workers.restart(0)
    assert workers.slots[0].generation == 1
    assert workers.ready() == []
    assert not workers.send(0, Assign(()))
    waiting = workers.restart_due()
    assert waiting is not None
    assert 0 < waiting <= RESTART_BACK_OFF
    workers.slots[0].started -= RESTART_BACK_OFF
    workers.slots[0].due -= RESTART_BACK_OFF
    assert workers.restart_due() is None
    assert workers.slots[0].generation == 2
    workers.restart(1)
    workers.restart_due()
    assert workers.slots[1].generation == 1


def test_an_ended_identity_closes_its_peers_and_only_its_own():
    """Its peers stop at once, not when the next identity's Reset comes; an Ended of another
    identity (one the worker has already left behind) changes nothing."""
    w = worker()
    w.inbox.put(Reset("m", Replica().to_json(), ("p1",)))
    w.inbox.put(Ended("earlier"))
    w._take()
    assert w.switchboard is not None
    assert (w.member, w.peers) == ("m", ("p1",))
    w.inbox.put(Ended("m"))
    w._take()
    assert (w.switchboard, w.member, w.peers) == (None, None, ())
    w.inbox.put(Reset("m2", Replica().to_json(), ("p2",)))
    w._take()
    assert (w.switchboard.group, w.peers) == ("m2", ("p2",))
