"""A group's data plane against a loopback transport: frames ahead of the log wait for it,
stale frames are dropped, refused offers stay queued in order."""

from __future__ import annotations

import json
import threading
import uuid
from collections import defaultdict, deque
from dataclasses import dataclass

import msgpack
import pytest
from pyrsistent import pset

from peer.job.spec import DEFAULT_DEBLOAT_TARGET as TARGET
from peer.log.apply import apply_entry
from peer.log.entries.jobs import KILL_JOB, SUBMIT_JOB
from peer.log.entries.join import PREPARE_JOIN
from peer.log.entries.join_direct import JOIN_DIRECT
from peer.log.entries.virtual_peers import ADD_VIRTUAL_PEER, announce
from peer.log.replica import Replica
from peer.log.store import StoreError
from peer.log.stores.memory import MemoryLog
from peer.messaging.fragments import MAX_SEGMENT
from peer.messaging.frame import HEADER, Header, MessageType, decode_header, encode
from peer.messaging.messages import Batch, Recover, RestorePoint
from peer.runtime import coordinator
from peer.runtime.checkpoints import CheckpointStorage, Commits
from peer.runtime.dataplane import DataPlane, DataPlaneConfig
from peer.runtime.debloat import first_credit
from peer.runtime.emit import WINDOW
from peer.runtime.snapshot import read
from tests.support import wait_for
from tests.unit.log import local_recovery as lr


class Loopback:
    """Frames offered to an address wait in its mailbox; ``open`` False refuses every offer."""

    boxes: dict[str, deque[bytes]] = defaultdict(deque)
    max_frame = 4096

    def __init__(self, address: str) -> None:
        self.address, self.open, self.offered = address, True, 0

    def offer(self, address: str, frame: bytes) -> bool:
        assert len(frame) <= self.max_frame
        if not self.open:
            return False
        self.offered += 1
        self.boxes[address].append(frame)
        return True

    def poll(self, handler, limit: int = 64) -> int:
        box = self.boxes[self.address]
        count = 0
        while box and count < limit:
            handler(box.popleft())
            count += 1
        return count

    def forget(self, address: str) -> None:
        self.boxes.pop(address, None)

    def beacon(self) -> Loopback:
        return self


class Plane(DataPlane):
    """A data plane driven as its group's switchboard drives it (peer.cluster.switchboard):
    each round takes in what has arrived first."""

    def step(self) -> bool:
        polled = self.transport is not None and self.transport.poll(self.receive) > 0
        return super().step() or polled


@dataclass
class Record:
    committed: object = None


def play(replica: Replica, *entries) -> Replica:
    for entry in entries:
        replica = apply_entry(replica, entry.at(replica.version + 1)).new
    return replica


FNS = "tests.unit.runtime.runtime_fns"

JOB = {
    "workflow": [["in", "out"]],
    "catalog": [
        {"name": "in", "kind": "input", "plugin": "peer.plugins.memory:input",
         "params": {"count": 1000}, "batch_size": 10, "required_tags": ["a"], "n_peers": 1},
        {"name": "out", "kind": "output", "plugin": "peer.plugins.null:output",
         "required_tags": ["b"]},
    ],
    "barrier_period": None,
}  # fmt: skip


def cluster() -> Replica:
    """Group a (site A, peer a1) reads, group b (site B, peer b1) writes."""
    return play(
        Replica(),
        PREPARE_JOIN.entry(joiner="a"),
        ADD_VIRTUAL_PEER.entry(id="a1", group="a", site="A", tags=["a"]),
        ADD_VIRTUAL_PEER.entry(id="b1", group="b", site="B", tags=["b"]),
    ).evolve(groups=Replica().groups.update(["a", "b"]))


OPEN: list[Plane] = []


@pytest.fixture(autouse=True)
def _close_planes():
    """Each plane's heartbeat thread beats into the shared mailboxes until it is closed: one
    left running would speak for its group in the next test."""
    yield
    while OPEN:
        OPEN.pop().close()


def planes(config: DataPlaneConfig | None = None):
    Loopback.boxes.clear()
    written: dict[str, list] = {"a": [], "b": []}
    a = Plane("a", Loopback("A"), written["a"].append, config)
    b = Plane("b", Loopback("B"), written["b"].append, config)
    OPEN.extend((a, b))
    return a, b, written


def drive(until, *planes, what: str):
    """Step the planes (or switchboards) round after round until ``until()`` holds."""

    def round_then_check():
        for plane in planes:
            plane.step()
        return until()

    return wait_for(round_then_check, 10, what, interval=0)


def test_segments_cross_groups_and_the_output_completes():
    a, b, written = planes()
    replica = play(cluster(), SUBMIT_JOB.entry(id="j", job=JOB))
    a.sync(replica, ["a1"])
    b.sync(replica, ["b1"])
    drive(lambda: written["b"], a, b, what="the output to complete")
    (entry,) = written["b"]
    assert entry.fn == "complete-job"
    assert dict(entry.args) == {"id": "j", "peer": "b1", "version": replica.version}


def test_frames_ahead_of_the_log_wait_for_it():
    a, b, written = planes()
    replica = play(cluster(), SUBMIT_JOB.entry(id="j", job=JOB))
    a.sync(replica, ["a1"])
    b.sync(cluster(), ["b1"])
    reader = next(iter(a.runners.values()))
    drive(lambda: not any(reader.emitter.credits.values()), a, what="the input to use its credit")
    while Loopback.boxes["B"]:
        b.step()
    assert sum(len(frames) for frames in b.waiting.values()) == first_credit(WINDOW, TARGET)
    b.sync(replica, ["b1"])
    assert not b.waiting
    drive(lambda: written["b"], a, b, what="the output to complete")


def test_frames_of_a_stale_allocation_are_dropped():
    _a, b, _written = planes()
    replica = play(cluster(), SUBMIT_JOB.entry(id="j", job=JOB))
    b.sync(replica, ["b1"])
    stale = Header(MessageType.END, replica.version - 1, replica.short_ids["a1"],
                   replica.short_ids["b1"], 0, replica.short_ids["j"])  # fmt: skip
    Loopback.boxes["B"].append(encode(stale))
    b.step()
    assert not next(iter(b.runners.values())).intake.inbox.ended


def test_refused_offers_stay_queued_and_stop_the_producer():
    """With fixed windows of 64 batches, the queue's limit stops the input first."""
    a, b, written = planes(DataPlaneConfig(max_queued=5))
    fixed = {**JOB, "debloat_target": None}
    replica = play(cluster(), SUBMIT_JOB.entry(id="j", job=fixed))
    a.sync(replica, ["a1"])
    b.sync(replica, ["b1"])
    a.transport.open = False
    for _ in range(20):
        a.step()
    assert len(a.queues["B"]) == 5
    a.transport.open = True
    drive(lambda: written["b"], a, b, what="the output to complete")
    assert next(iter(b.runners.values())).plugin.written == 1000


def batch_frames(frames) -> int:
    return sum(decode_header(frame).type is MessageType.BATCH for frame in frames)


def test_the_transport_holds_no_more_batches_than_the_receiver_gives_credit_for():
    """A batch takes its credit as it is queued for the transport: what waits in the sender's
    queue, in the transport and in the receiver's inbox together is never more than the
    receiver's ledger has in flight, which a debloated receiver keeps to its window; and a
    transport that refuses offers for a while holds up nothing once it takes them again."""
    a, b, written = planes()
    replica = play(cluster(), SUBMIT_JOB.entry(id="j", job=JOB))
    a.sync(replica, ["a1"])
    b.sync(replica, ["b1"])
    receiver = next(iter(b.runners.values()))
    intake, source = receiver.intake, replica.short_ids["a1"]
    for turn in range(300):
        a.transport.open = turn % 7 != 0
        a.step()
        if turn % 3 == 0:
            b.step()
        waiting = batch_frames(a.queues.get("B", ())) + batch_frames(Loopback.boxes["B"])
        inbox = sum(type(item) is Batch for item in intake.inbox.queues[source])
        assert waiting + inbox <= intake.ledger.in_flight[source] - intake.inbox.consumed[source]
        assert intake.ledger.in_flight[source] <= WINDOW
    a.transport.open = True
    drive(lambda: written["b"], a, b, what="the output to complete")
    assert receiver.plugin.written == 1000


def test_a_task_whose_code_fails_kills_its_job():
    a, _b, written = planes()
    job = {**JOB, "catalog": [{**JOB["catalog"][0], "params": {}}, JOB["catalog"][1]]}
    replica = play(cluster(), SUBMIT_JOB.entry(id="j", job=job))
    a.sync(replica, ["a1"])
    a.step()
    reason = (
        "job 'j': task 'in' on peer a1: PluginError: task 'in', plugin 'peer.plugins.memory:input':"
        " set exactly one of params.segments and params.count"
    )
    assert [(e.fn, dict(e.args)) for e in written["a"]] == [
        ("kill-job", {"id": "j", "reason": reason})
    ]
    assert not a.runners


def test_a_peer_with_nowhere_to_send_to_fails_its_job_instead_of_dropping():
    a, _b, written = planes()
    siteless = cluster().evolve(sites=cluster().sites.discard("b"))
    replica = play(siteless, SUBMIT_JOB.entry(id="j", job=JOB))
    a.sync(replica, ["a1"])
    a.step()
    a.step()
    reason = (
        "job 'j': task 'in' on peer a1: RuntimeError: peer b1 is in a group that announced no "
        "site to send to"
    )
    assert [(e.fn, dict(e.args)) for e in written["a"]] == [
        ("kill-job", {"id": "j", "reason": reason})
    ]


def test_frames_of_a_finished_job_are_not_kept():
    _a, b, _written = planes()
    replica = play(cluster(), SUBMIT_JOB.entry(id="j", job=JOB))
    ahead = Header(MessageType.END, replica.version, replica.short_ids["a1"],
                   replica.short_ids["b1"], 0, replica.short_ids["j"])  # fmt: skip
    Loopback.boxes["B"].append(encode(ahead))
    b.step()
    assert b.waiting
    b.sync(play(replica, KILL_JOB.entry(id="j")), ["b1"])
    assert not b.waiting


def checkpointed(tmp_path, count: int = 1000) -> dict:
    """JOB with checkpoints every 10 ms into the exactly-once sink."""
    source = {**JOB["catalog"][0], "params": {"count": count}}
    sink = {**JOB["catalog"][1], "plugin": "peer.plugins.jsonl:exactly_once_output",
            "params": {"path": str(tmp_path / "out")}}  # fmt: skip
    return {**JOB, "catalog": [source, sink], "barrier_period": 0.01}


def published(tmp_path) -> list[dict]:
    return [json.loads(line) for f in sorted((tmp_path / "out").glob("*.jsonl"))
            for line in f.read_text().splitlines()]  # fmt: skip


@pytest.fixture
def abs_planes(tmp_path):
    """Planes of groups a and b sharing one in-memory log and one checkpoint storage."""
    log, storage, made = MemoryLog(), CheckpointStorage("memory://dp", uuid.uuid4().hex), []

    def make(config: DataPlaneConfig | None = None):
        Loopback.boxes.clear()
        written: dict[str, list] = {"a": [], "b": []}
        pair = [
            Plane(g, Loopback(g.upper()), written[g].append, config,
                      store=log.session(), storage=storage)
            for g in ("a", "b")
        ]  # fmt: skip
        made.extend(pair)
        return (*pair, written)

    yield make
    for plane in made:
        plane.close()
    storage.close()


def until_a_commit(abs_planes, replica: Replica) -> int:
    """Run job j on fresh planes until it commits an epoch, then stop them dead; the input's
    position at that commit."""
    a, b, _written = abs_planes()
    a.sync(replica, ["a1"])
    b.sync(replica, ["b1"])
    commits = Commits(a.store, "j")
    drive(lambda: (commits.read()[0] or Record()).committed, a, b, what="a commit of job j")
    committed = commits.read()[0].committed
    a.close()
    b.close()
    return read(a.storage.get("j", committed, "in", 0))[0].plugin


def until_complete(abs_planes, replica: Replica) -> None:
    a, b, written = abs_planes()
    a.sync(replica, ["a1"])
    b.sync(replica, ["b1"])
    drive(lambda: written["b"], a, b, what="the job to complete")


def test_a_checkpointed_job_commits_epochs_and_completes_after_the_final_one(abs_planes, tmp_path):
    a, b, written = abs_planes()
    replica = play(cluster(), SUBMIT_JOB.entry(id="j", job=checkpointed(tmp_path)))
    a.sync(replica, ["a1"])
    b.sync(replica, ["b1"])
    drive(lambda: written["b"], a, b, what="the job to complete")
    assert [e.fn for e in written["b"]] == ["complete-job"]
    assert sorted(s["n"] for s in published(tmp_path)) == list(range(1000))
    record, _ = Commits(a.store, "j").read()
    assert record.committed.version == replica.version
    assert record.committed.number >= 1


def test_a_new_allocation_recovers_from_the_last_commit_and_publishes_each_record_once(
    abs_planes, tmp_path
):
    """The first allocation stops dead once something is committed; the next one starts from
    that commit. Together they publish every record exactly once."""
    replica = play(cluster(), SUBMIT_JOB.entry(id="j", job=checkpointed(tmp_path, 20_000)))
    position = until_a_commit(abs_planes, replica)
    assert 0 < position < 20_000, "the first allocation should stop mid-job"
    moved = replica.evolve(
        version=replica.version + 1,
        allocation_versions=replica.allocation_versions.set("j", replica.version + 1),
    )
    until_complete(abs_planes, moved)
    assert sorted(s["n"] for s in published(tmp_path)) == list(range(20_000))


def test_a_new_job_resumes_from_the_last_commit_of_the_job_it_names(abs_planes, tmp_path):
    first = play(cluster(), SUBMIT_JOB.entry(id="j", job=checkpointed(tmp_path / "j", 20_000)))
    position = until_a_commit(abs_planes, first)
    second = {**checkpointed(tmp_path / "k", 20_000), "resume_from": "j"}
    until_complete(
        abs_planes, play(first, KILL_JOB.entry(id="j"), SUBMIT_JOB.entry(id="k", job=second))
    )
    assert sorted(s["n"] for s in published(tmp_path / "k")) == list(range(position, 20_000))


def sized(tmp_path, sizes: list[int], batch_size: int = 10) -> dict:
    """JOB with segments of these sizes (in b's inflate) written to a file by group a."""
    source = {**JOB["catalog"][0], "params": {"segments": [{"n": n, "size": s}
                                                           for n, s in enumerate(sizes)]},
              "batch_size": batch_size, "required_tags": ["b"]}  # fmt: skip
    sink = {**JOB["catalog"][1], "plugin": "peer.plugins.jsonl:output",
            "params": {"path": str(tmp_path / "out.jsonl")}, "required_tags": ["a"]}  # fmt: skip
    inflate = {"name": "inflate", "kind": "function", "required_tags": ["b"],
               "fn": f"{FNS}:inflate", "batch_size": batch_size}  # fmt: skip
    return {**JOB, "workflow": [["in", "inflate"], ["inflate", "out"]],
            "catalog": [source, inflate, sink]}  # fmt: skip


def two_peers_of_b() -> Replica:
    return play(cluster(), ADD_VIRTUAL_PEER.entry(id="b2", group="b", site="B", tags=["b"]))


def test_segments_and_batches_over_one_message_cross_groups_whole(tmp_path):
    """Loopback takes frames of 4 KiB at most: larger batches are split, larger segments go in
    fragments, and the output gets each segment once, whole."""
    a, b, written = planes()
    sizes = [0, 5000, 100, 20_000, 3000, 3000, 3000, 9000, 1, 4100] * 3
    replica = play(two_peers_of_b(), SUBMIT_JOB.entry(id="j", job=sized(tmp_path, sizes)))
    a.sync(replica, ["a1"])
    b.sync(replica, ["b1", "b2"])
    drive(lambda: written["a"], a, b, what="the output to complete")
    assert [e.fn for e in written["a"]] == ["complete-job"]
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sorted((d["n"], d["blob"]) for d in out) == [(n, "x" * s) for n, s in enumerate(sizes)]
    assert a.assembly.held() == 0


def test_a_job_that_recovers_locally_keeps_batches_packed_across_groups_and_they_arrive_whole(
    abs_planes, tmp_path
):
    """The input and the fn share group b (what goes between them is handed over and not
    kept); the fn's batches for the output in group a are packed into frames as they are made,
    or split when over 4 KiB. Every segment arrives once, whole, as the rows it was."""
    a, b, written = abs_planes()
    sizes = [0, 5000, 100, 20_000, 3000, 1, 4100, 7, 700, 10, 20, 30, 1, 2, 3] * 3
    job = {**sized(tmp_path, sizes, batch_size=3), "barrier_period": 0.01, "local_recovery": True}
    replica = play(two_peers_of_b(), SUBMIT_JOB.entry(id="j", job=job))
    a.sync(replica, ["a1"])
    b.sync(replica, ["b1", "b2"])
    inflate = next(r for r in b.runners.values() if r.ctx.task.name == "inflate")
    assert inflate.local.on, "the fn logs: its job recovers locally"
    drive(lambda: written["a"], a, b, what="the output to complete")
    assert [e.fn for e in written["a"]] == ["complete-job"]
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sorted((d["n"], d["blob"]) for d in out) == [(n, "x" * s) for n, s in enumerate(sizes)]


def test_a_segment_over_the_limit_kills_its_job_naming_it_and_the_group_goes_on(tmp_path, caplog):
    a, b, written = planes()
    job = sized(tmp_path, [MAX_SEGMENT + 1])
    replica = play(two_peers_of_b(), SUBMIT_JOB.entry(id="j", job=job))
    a.sync(replica, ["a1"])
    b.sync(replica, ["b1", "b2"])
    drive(lambda: written["b"], a, b, what="job j to be killed")
    assert [(e.fn, dict(e.args)["id"]) for e in written["b"]] == [("kill-job", "j")]
    [message] = [r.getMessage() for r in caplog.records if "killing the job" in r.getMessage()]
    assert "job 'j': task 'inflate'" in message
    assert f"over the {MAX_SEGMENT:,}-byte limit" in message
    assert not (tmp_path / "out.jsonl").exists() or not (tmp_path / "out.jsonl").read_text()


def test_a_segment_that_cannot_travel_kills_its_job_naming_task_and_field(tmp_path, caplog):
    a, b, written = planes()
    job = sized(tmp_path, [10, 20, 30])
    job["catalog"][1] = {**job["catalog"][1], "fn": f"{FNS}:tag_set"}
    replica = play(two_peers_of_b(), SUBMIT_JOB.entry(id="j", job=job))
    a.sync(replica, ["a1"])
    b.sync(replica, ["b1", "b2"])
    drive(lambda: written["b"], a, b, what="job j to be killed")
    [reason] = [dict(e.args)["reason"] for e in written["b"] if e.fn == "kill-job"]
    assert reason.startswith("job 'j': task 'inflate' on peer b")
    assert reason.endswith("segment 0, field 'meta.tags': value of type set cannot travel")


def test_a_body_no_peer_writes_kills_the_job_it_was_for(caplog):
    _a, b, written = planes()
    replica = play(cluster(), SUBMIT_JOB.entry(id="j", job=JOB))
    b.sync(replica, ["b1"])
    header = Header(MessageType.BATCH, replica.version, replica.short_ids["a1"],
                    replica.short_ids["b1"], 0, replica.short_ids["j"])  # fmt: skip
    Loopback.boxes["B"].append(encode(header)[: HEADER.size] + msgpack.packb([{"a": {1: 2}}]))
    b.step()
    [reason] = [dict(e.args)["reason"] for e in written["b"] if e.fn == "kill-job"]
    assert reason == (
        "job 'j': task 'out' on peer b1: a BATCH frame from peer a1 does not read: BodyError: "
        "segment 0, field 'a': key 1 of type int: dict keys must be strings"
    )


def test_an_unreadable_frame_is_dropped_with_a_short_warning(caplog):
    _a, b, _written = planes()
    Loopback.boxes["B"].append(bytes([99]) + b"x" * 100_000)
    b.step()
    [record] = [r for r in caplog.records if "unreadable frame" in r.getMessage()]
    assert "100001 bytes" in record.getMessage()
    assert len(record.getMessage()) < 300


def test_a_coordinator_that_fails_kills_its_job_and_the_group_goes_on(abs_planes, tmp_path):
    a, b, written = abs_planes()
    a.store.write_commit("j", b"not a commit record", -1)
    replica = play(cluster(), SUBMIT_JOB.entry(id="j", job=checkpointed(tmp_path)))
    a.sync(replica, ["a1"])
    b.sync(replica, ["b1"])
    drive(lambda: written["a"], a, b, what="job j to be killed")
    assert [(e.fn, dict(e.args)["id"]) for e in written["a"]] == [("kill-job", "j")]
    assert not a.coordinators


class Flaky:
    """A store that fails its first ``failures`` commit-record requests, as ZooKeeper does when
    it is away for longer than the client's retries."""

    def __init__(self, store, failures: int) -> None:
        self.store, self.failures = store, failures

    def __getattr__(self, name):
        return getattr(self.store, name)

    def _maybe_fail(self) -> None:
        if self.failures:
            self.failures -= 1
            raise StoreError("ZooKeeper at zk:2181 failed: ConnectionLoss")

    def read_commit(self, job):
        self._maybe_fail()
        return self.store.read_commit(job)


def test_a_claim_or_commit_the_store_cannot_serve_is_tried_again(abs_planes, tmp_path, monkeypatch):
    monkeypatch.setattr(coordinator, "RETRY", 0.0)
    a, b, written = abs_planes()
    a.store = Flaky(a.store, failures=2)
    replica = play(cluster(), SUBMIT_JOB.entry(id="j", job=checkpointed(tmp_path, 100)))
    a.sync(replica, ["a1"])
    b.sync(replica, ["b1"])
    drive(lambda: written["b"], a, b, what="the job to complete")
    assert a.store.failures == 0
    assert [e.fn for e in written["a"] + written["b"]] == ["complete-job"]


def test_a_sink_that_fails_on_a_commit_kills_its_job(abs_planes, tmp_path):
    a, b, written = abs_planes()
    job = checkpointed(tmp_path)
    job["catalog"][1] = {
        **job["catalog"][1],
        "plugin": f"{FNS}:fails_at_commit",
    }
    replica = play(cluster(), SUBMIT_JOB.entry(id="j", job=job))
    a.sync(replica, ["a1"])
    b.sync(replica, ["b1"])
    drive(lambda: written["b"], a, b, what="job j to be killed")
    assert [(e.fn, dict(e.args)["id"]) for e in written["b"]] == [("kill-job", "j")]


def test_routing_code_that_does_not_resolve_here_kills_its_job_not_the_group():
    a, _b, written = planes()
    job = {**JOB, "flow_conditions": [{"from": "in", "to": ["out"],
                                       "predicate": f"{FNS}:no_such_predicate"}]}  # fmt: skip
    replica = play(cluster(), SUBMIT_JOB.entry(id="j", job=job))
    a.sync(replica, ["a1"])
    a.step()
    assert [(e.fn, dict(e.args)["id"]) for e in written["a"]] == [("kill-job", "j")]


class Unreachable(Loopback):
    """A transport that cannot open a publication to ``bad`` at all."""

    def __init__(self, address: str, bad: str) -> None:
        super().__init__(address)
        self.bad = bad

    def offer(self, address: str, frame: bytes) -> bool:
        if address == self.bad:
            raise RuntimeError(f"cannot open a publication to {address}")
        return super().offer(address, frame)


def test_frames_that_cannot_be_sent_at_all_kill_their_job_naming_the_site(caplog):
    Loopback.boxes.clear()
    written: list = []
    a = Plane("a", Unreachable("A", bad="B"), written.append)
    OPEN.append(a)
    replica = play(cluster(), SUBMIT_JOB.entry(id="j", job=JOB))
    a.sync(replica, ["a1"])
    drive(lambda: written, a, what="job j to be killed")
    assert [(e.fn, dict(e.args)["id"]) for e in written] == [("kill-job", "j")]
    assert "B" not in a.queues
    assert "job 'j': frames for the group at B cannot be sent" in caplog.text
    a.step()


class Stalled:
    """A store whose commit-record writes wait until ``release`` is set, as a commit does while
    ZooKeeper is away."""

    def __init__(self, store) -> None:
        self.store, self.release, self.writing = store, threading.Event(), threading.Event()

    def __getattr__(self, name):
        return getattr(self.store, name)

    def write_commit(self, job, data, expected):
        if expected != -1:  # the claim goes through; the first commit waits
            self.writing.set()
            if not self.release.wait(30):
                raise AssertionError("the commit was never released: did it block the group?")
        return self.store.write_commit(job, data, expected)


def test_segments_keep_moving_while_a_commit_waits_for_the_store(abs_planes, tmp_path):
    a, b, written = abs_planes()
    a.store = Stalled(a.store)
    job = {**JOB, "catalog": [{**JOB["catalog"][0], "params": {"count": 20_000}},
                              JOB["catalog"][1]], "barrier_period": 0.01}  # fmt: skip
    replica = play(cluster(), SUBMIT_JOB.entry(id="j", job=job))
    a.sync(replica, ["a1"])
    b.sync(replica, ["b1"])
    output = lambda: next(iter(b.runners.values())).plugin  # noqa: E731
    drive(lambda: a.store.writing.is_set() and output(), a, b, what="a commit to begin")
    before = output().written
    drive(lambda: output().written >= before + 1000, a, b, what="segments to move meanwhile")
    assert Commits(a.store.store, "j").read()[0].committed is None
    a.store.release.set()
    drive(lambda: written["b"], a, b, what="the job to complete")
    assert output().written == 20_000


def test_segments_cross_between_the_worker_processes_of_one_member():
    """One member (group m, site M) whose peers live in two workers, each at a site of its own:
    the frames go to the peer's site, not the member's."""
    Loopback.boxes.clear()
    replica = play(
        Replica(),
        PREPARE_JOIN.entry(joiner="m"),
        ADD_VIRTUAL_PEER.entry(id="a1", group="m", site="M", peer_site="W1"),
        ADD_VIRTUAL_PEER.entry(id="b1", group="m", site="M", peer_site="W2"),
    ).evolve(groups=Replica().groups.update(["m"]))
    untagged = {**JOB, "catalog": [{**t, "required_tags": []} for t in JOB["catalog"]]}
    replica = play(replica, SUBMIT_JOB.entry(id="j", job=untagged))
    (reader,) = replica.allocations["j"]["in"]
    written: list = []
    one = Plane("m", Loopback("W1"), written.append)
    two = Plane("m", Loopback("W2"), written.append)
    OPEN.extend((one, two))
    one.sync(replica, [reader])
    two.sync(replica, sorted({"a1", "b1"} - {reader}))
    drive(lambda: written, one, two, what="the output to complete")
    assert [e.fn for e in written] == ["complete-job"]
    assert not Loopback.boxes["M"]


def test_the_peer_index_is_rebuilt_only_when_groups_sites_or_peers_change():
    """Most entries change none of them (the index took tens of milliseconds at 10,000 peers);
    one that adds a group's peers and site is seen at once."""
    plane = Plane("a", Loopback("site-a"), lambda _entry: None)
    try:
        one = announce(Replica().evolve(groups=pset(["a"])), "a", ["pa"], "site-a", [])
        plane.sync(one, ["pa"])
        index = plane.peer_sites
        plane.sync(one.evolve(version=7), ["pa"])
        assert plane.peer_sites is index
        entry = JOIN_DIRECT.entry(joiner="b", aider="a", peers=["pb"], site="site-b")
        two = apply_entry(one.evolve(version=7), entry.at(8)).new
        plane.sync(two, ["pa"])
        assert plane.peer_sites == {"pa": "site-a", "pb": "site-b"}
        assert plane.short_peers == {two.short_ids["pa"]: "pa", two.short_ids["pb"]: "pb"}
    finally:
        plane.close()


@pytest.mark.parametrize("synced_before", [False, True])
@pytest.mark.parametrize("standby", [True, False])
def test_what_comes_for_a_peer_before_its_group_reads_its_takeover_waits_for_it(
    synced_before, standby
):
    """The coordinator tells the replacement where to restore from as soon as its own group
    reads the takeover; the replacement's group may read it later (a worker fed by its member
    lags). The message waits, whether the peer still stands by there or is free, and whatever
    other syncs come first, until the takeover makes the peer's runner."""
    Loopback.boxes.clear()
    doc = lr.job_doc(tasks={"f": {"fn": f"{FNS}:inflate"}}, standby=standby,
                  local_recovery=True, barrier_period=1.0)  # fmt: skip
    before = lr.cluster(doc, lr.singles(9))
    failed = lr.peer_of(before, "f")
    after = lr.down(before, failed)
    (replacement,) = after.recovering[lr.JOB]
    if standby:
        assert before.standbys[lr.JOB][failed] == replacement
    group = after.group_of(replacement)
    plane = Plane(group, Loopback(group.upper()), lambda entry: None,
                      storage=CheckpointStorage("memory://dp", uuid.uuid4().hex))  # fmt: skip
    OPEN.append(plane)
    plane.sync(before, [replacement])
    body = [lr.JOB, before.version, 1, {"f": 1}]
    ids = after.short_ids
    recover = Header(MessageType.RECOVER, after.allocation_versions[lr.JOB],
                     ids[lr.peer_of(after, "in")], ids[replacement], 0, ids[lr.JOB])  # fmt: skip
    Loopback.boxes[group.upper()].append(encode(recover, body))
    plane.step()
    if synced_before:
        plane.sync(before, [replacement])
    plane.sync(after, [replacement])
    runner = next(r for r in plane.runners.values() if r.ctx.peer == replacement)
    assert runner.recovery == Recover(RestorePoint(lr.JOB, before.version, 1, {"f": 1}))
