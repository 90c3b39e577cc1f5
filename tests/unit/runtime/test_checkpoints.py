"""Checkpoints without a cluster: snapshots in fsspec's memory filesystem and in a local
directory, commit records in the embedded store, where claims and commits can be interleaved
at will to play out the races between coordinators."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import fsspec
import pytest

from peer import metrics
from peer import storage as storage_module
from peer.log.store import path_component
from peer.log.stores.memory import MemoryLog
from peer.runtime import checkpoints as checkpoints_module
from peer.runtime.checkpoints import (
    HISTORY,
    PREFIX,
    STOPPED,
    CheckpointError,
    CheckpointStorage,
    CommitRecord,
    Commits,
    Savepoint,
    committed_epochs,
)
from peer.runtime.snapshot import Restored, SnapshotError, StoredParts, TaskSnapshot
from peer.state.forked import PackingFailed
from peer.storage import StorageError
from peer.values.epoch import Epoch
from tests.support import header_first, wait_for

JOB = "job-1"


@pytest.fixture(params=["memory", "local"])
def storage(request, tmp_path, tenancy) -> Iterator[CheckpointStorage]:
    url = "memory://checkpoints" if request.param == "memory" else str(tmp_path / "checkpoints")
    s = CheckpointStorage(url, tenancy)
    yield s
    s.close()
    if request.param == "memory":
        s.fs.rm(s.root, recursive=True)


def files(storage: CheckpointStorage) -> list[str]:
    return sorted(p.removeprefix(storage.root.rstrip("/")) for p in storage.fs.find(storage.root))


# -- epochs ---------------------------------------------------------------------------------------


def test_a_later_allocation_s_epochs_come_after_every_earlier_one():
    assert Epoch(1, 99) < Epoch(2, 1) < Epoch(2, 2)
    assert sorted([Epoch(3, 1), Epoch(1, 7), Epoch(2, 1), Epoch(1, 2)]) == [
        Epoch(1, 2),
        Epoch(1, 7),
        Epoch(2, 1),
        Epoch(3, 1),
    ]


# -- commit records -------------------------------------------------------------------------------


def test_a_record_survives_encoding():
    for record in [
        CommitRecord(None, 1, {}),
        CommitRecord(Epoch(3, 12), 4, {"in": 2, "count": 3, "out": 1}),
        CommitRecord(
            Epoch(3, 12),
            4,
            {"in": 2},
            (Epoch(3, 12),),
            ("next",),
            {"kept": Savepoint(Epoch(3, 11), {"in": 2})},
        ),
        CommitRecord(
            Epoch(3, 12),
            4,
            {"in": 2, "count": 3},
            savepoints={"kept": Savepoint(Epoch(3, 11), {"count": 3}, {"count": 64})},
            groups={"count": 64},
        ),
    ]:
        assert CommitRecord.decode(record.encode()) == record


def test_a_record_encodes_compactly():
    record = CommitRecord(Epoch(3, 12), 4, {"in": 2})
    assert record.encode() == b'{"committed":[3,12],"history":[],"owner":4,"slots":{"in":2}}'


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\xff\xfe", "not JSON"),
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not an object with committed, owner, slots"),
        (b'{"committed": null, "owner": 1}', "not an object with committed, owner, slots"),
        (b'{"committed": [1], "owner": 1, "slots": {}}', "committed is neither null nor"),
        (b'{"committed": [1, "2"], "owner": 1, "slots": {}}', "committed is neither null nor"),
        (b'{"committed": null, "owner": true, "slots": {}}', "owner is not an integer"),
        (b'{"committed": null, "owner": 1, "slots": {"a": 1.5}}', "slots is not an object of"),
        (b'{"committed": null, "owner": 1, "slots": []}', "slots is not an object of"),
        (b'{"committed": null, "owner": 1, "slots": {}, "requested": [1]}', "requested is not"),
        (b'{"committed": null, "owner": 1, "slots": {}, "savepoints": []}', "savepoints is not"),
        (
            b'{"committed": null, "owner": 1, "slots": {}, "savepoints": {"a": {"epoch": [1]}}}',
            "savepoint 'a' is not an epoch with its slots",
        ),
        (b'{"committed": null, "owner": 1, "slots": {}, "groups": [4]}', "groups is not an"),
    ],
)
def test_a_record_that_does_not_decode_says_why(data, why):
    with pytest.raises(CheckpointError, match=f"commit record .* does not decode: .*{why}"):
        CommitRecord.decode(data)


def test_a_bad_record_in_the_store_names_its_job():
    store = MemoryLog().session()
    store.write_commit(JOB, b"garbage", -1)
    with pytest.raises(CheckpointError, match=f"job '{JOB}': commit record b'garbage'"):
        Commits(store, JOB).read()


# -- the store's compare-and-set ------------------------------------------------------------------


def test_commit_records_are_compare_and_set_across_sessions():
    log = MemoryLog()
    one, two = log.session(), log.session()
    assert one.read_commit(JOB) == (None, -1)
    assert one.write_commit(JOB, b"a", -1) == 0
    assert two.write_commit(JOB, b"b", -1) is None
    assert two.read_commit(JOB) == (b"a", 0)
    assert two.write_commit(JOB, b"b", 0) == 1
    assert one.write_commit(JOB, b"c", 0) is None
    assert one.read_commit(JOB) == (b"b", 1)
    one.delete_commit(JOB)
    two.delete_commit(JOB)
    assert two.read_commit(JOB) == (None, -1)
    assert two.write_commit(JOB, b"d", 1) is None
    assert two.write_commit(JOB, b"d", -1) == 0


# -- claims and commits ---------------------------------------------------------------------------


class Interleaved:
    """A store session that runs ``meanwhile`` just before its first commit write, so another
    coordinator's step lands between this one's read and its compare-and-set."""

    def __init__(self, store, meanwhile: Callable[[], object]) -> None:
        self.store, self.meanwhile = store, meanwhile

    def read_commit(self, job):
        return self.store.read_commit(job)

    def write_commit(self, job, data, expected):
        meanwhile, self.meanwhile = self.meanwhile, lambda: None
        meanwhile()
        return self.store.write_commit(job, data, expected)


class LostReplies:
    """A store session whose writes go through but report the race as lost, as a write does
    whose reply a disconnection swallowed and whose retry then finds its own change."""

    def __init__(self, store) -> None:
        self.store = store

    def read_commit(self, job):
        return self.store.read_commit(job)

    def write_commit(self, job, data, expected):
        self.store.write_commit(job, data, expected)


def test_the_first_claim_creates_the_record():
    commits = Commits(MemoryLog().session(), JOB)
    assert commits.read() == (None, -1)
    assert commits.claim(1) == CommitRecord(None, 1, {})
    assert commits.read() == (CommitRecord(None, 1, {}), 0)


def test_a_claim_keeps_what_is_committed():
    commits = Commits(MemoryLog().session(), JOB)
    commits.claim(1)
    assert commits.commit(1, Epoch(1, 3), {"in": 2})
    claimed = CommitRecord(Epoch(1, 3), 2, {"in": 2}, (Epoch(1, 3),), floor=Epoch(1, 3))
    assert commits.claim(2) == claimed


def test_claiming_again_for_the_same_version_writes_nothing():
    commits = Commits(MemoryLog().session(), JOB)
    claimed = commits.claim(1)
    assert commits.claim(1) == claimed
    assert commits.read()[1] == 0


def test_commits_advance_the_record():
    commits = Commits(MemoryLog().session(), JOB)
    commits.claim(1)
    assert commits.commit(1, Epoch(1, 1), {"in": 1})
    assert commits.commit(1, Epoch(1, 2), {"in": 1})
    history = (Epoch(1, 1), Epoch(1, 2))
    assert commits.read()[0] == CommitRecord(Epoch(1, 2), 1, {"in": 1}, history, floor=Epoch(1, 1))


def test_the_floor_is_where_the_chains_of_the_commit_before_the_last_start():
    """Storage keeps what a restore from either of the last two commits reads: the epochs from
    the older's chains' start on."""
    commits = Commits(MemoryLog().session(), JOB)
    commits.claim(1)
    assert commits.commit(1, Epoch(1, 1), {"in": 1}, since=1).floor == Epoch(1, 1)
    assert commits.commit(1, Epoch(1, 2), {"in": 1}, since=1).floor == Epoch(1, 1)
    assert commits.commit(1, Epoch(1, 5), {"in": 1}, since=4).floor == Epoch(1, 1)
    written = commits.commit(1, Epoch(1, 6), {"in": 1}, since=4)
    assert (written.since, written.floor) == (4, Epoch(1, 4))
    commits.claim(2)
    moved = commits.commit(2, Epoch(2, 1), {"in": 1}, since=1)
    assert moved.floor == Epoch(1, 4), "the previous allocation's last chain"
    assert [moved.retains(Epoch(1, n)) for n in (3, 4, 6)] == [False, True, True]


def test_the_history_keeps_the_last_commits():
    commits = Commits(MemoryLog().session(), JOB)
    commits.claim(1)
    for number in range(1, HISTORY + 3):
        commits.commit(1, Epoch(1, number), {"in": 1})
    assert commits.read()[0].history == tuple(Epoch(1, n) for n in range(3, HISTORY + 3))


def test_a_commit_keeps_the_key_groups_and_so_does_its_savepoint():
    commits = Commits(MemoryLog().session(), JOB)
    commits.claim(1)
    commits.request_savepoint("kept")
    written = commits.commit(1, Epoch(1, 1), {"count": 2}, groups={"count": 32})
    assert written.groups == {"count": 32}
    assert written.savepoints["kept"] == Savepoint(Epoch(1, 1), {"count": 2}, {"count": 32})
    assert commits.claim(2).groups == {"count": 32}


def test_a_requested_savepoint_is_the_next_committed_epoch():
    commits = Commits(MemoryLog().session(), JOB)
    commits.claim(1)
    commits.commit(1, Epoch(1, 1), {"in": 2})
    commits.request_savepoint("before-upgrade")
    assert commits.read()[0].requested == ("before-upgrade",)
    written = commits.commit(1, Epoch(1, 2), {"in": 2})
    assert written.savepoints == {"before-upgrade": Savepoint(Epoch(1, 2), {"in": 2})}
    assert written.requested == ()
    commits.commit(1, Epoch(1, 3), {"in": 1})
    commits.commit(1, Epoch(1, 4), {"in": 1})
    later = commits.claim(2)
    assert later.savepoints == written.savepoints
    assert [later.retains(Epoch(1, n)) for n in (1, 2, 3, 4)] == [False, True, True, True]


def test_a_savepoint_keeps_its_chains():
    commits = Commits(MemoryLog().session(), JOB)
    commits.claim(1)
    commits.request_savepoint("kept")
    commits.commit(1, Epoch(1, 7), {"in": 1}, since=5)
    for number in (8, 9, 10):
        written = commits.commit(1, Epoch(1, number), {"in": 1}, since=9)
    assert written.savepoints["kept"] == Savepoint(Epoch(1, 7), {"in": 1}, since=5)
    kept = [n for n in range(1, 11) if written.retains(Epoch(1, n))]
    assert kept == [5, 6, 7, 9, 10]
    assert CommitRecord.decode(written.encode()) == written


def test_a_savepoint_asked_for_before_the_first_claim_waits_for_the_first_commit():
    commits = Commits(MemoryLog().session(), JOB)
    commits.request_savepoint("early")
    assert commits.claim(1) == CommitRecord(None, 1, {}, requested=("early",))
    assert commits.commit(1, Epoch(1, 1), {"in": 1}).savepoints == {
        "early": Savepoint(Epoch(1, 1), {"in": 1})
    }


@pytest.mark.parametrize(("name", "why"), [("taken", "already has"), ("a/b", "not letters")])
def test_a_savepoint_name_is_refused_when_taken_or_not_plain(name, why):
    commits = Commits(MemoryLog().session(), JOB)
    commits.request_savepoint("taken")
    with pytest.raises(CheckpointError, match=f"job 'job-1'.*{why}"):
        commits.request_savepoint(name)


def test_disposing_of_a_savepoint_forgets_it():
    commits = Commits(MemoryLog().session(), JOB)
    commits.claim(1)
    commits.request_savepoint("kept")
    commits.commit(1, Epoch(1, 1), {"in": 1})
    gone, record = commits.dispose_savepoint("kept")
    assert gone == Savepoint(Epoch(1, 1), {"in": 1})
    assert record.savepoints == {}
    assert commits.read()[0] == record
    with pytest.raises(CheckpointError, match="job 'job-1' has no savepoint 'kept'"):
        commits.dispose_savepoint("kept")


def test_a_newer_claim_makes_an_older_coordinator_stale():
    log = MemoryLog()
    old, new = Commits(log.session(), JOB), Commits(log.session(), JOB)
    old.claim(1)
    assert old.commit(1, Epoch(1, 1), {"in": 1})
    new.claim(2)
    assert not old.commit(1, Epoch(1, 2), {"in": 1})
    assert old.claim(1) is None
    claimed = CommitRecord(Epoch(1, 1), 2, {"in": 1}, (Epoch(1, 1),), floor=Epoch(1, 1))
    assert new.read()[0] == claimed


def test_a_claim_between_a_commit_s_read_and_its_write_wins():
    log = MemoryLog()
    new = Commits(log.session(), JOB)
    old = Commits(Interleaved(log.session(), lambda: new.claim(2)), JOB)
    Commits(log.session(), JOB).claim(1)
    assert not old.commit(1, Epoch(1, 1), {"in": 1})
    assert new.read()[0] == CommitRecord(None, 2, {})


def test_a_commit_before_the_claim_is_refused():
    assert not Commits(MemoryLog().session(), JOB).commit(1, Epoch(1, 1), {"in": 1})


def test_an_epoch_before_the_committed_one_is_refused():
    commits = Commits(MemoryLog().session(), JOB)
    commits.claim(1)
    commits.commit(1, Epoch(1, 2), {"in": 1})
    with pytest.raises(ValueError, match="cannot commit epoch 1 of allocation 1, epoch 2 of"):
        commits.commit(1, Epoch(1, 1), {"in": 1})
    record = CommitRecord(Epoch(1, 2), 1, {"in": 1}, (Epoch(1, 2),), floor=Epoch(1, 2))
    assert commits.read() == (record, 1)


def test_committing_the_committed_epoch_again_writes_nothing():
    commits = Commits(MemoryLog().session(), JOB)
    commits.claim(1)
    commits.commit(1, Epoch(1, 2), {"in": 1})
    assert commits.commit(1, Epoch(1, 2), {"in": 1})
    assert commits.read()[1] == 1


def test_a_write_whose_reply_was_lost_is_recognised_as_done():
    log = MemoryLog()
    commits = Commits(LostReplies(log.session()), JOB)
    assert commits.claim(1) == CommitRecord(None, 1, {})
    assert commits.commit(1, Epoch(1, 1), {"in": 1})
    recorded = CommitRecord(Epoch(1, 1), 1, {"in": 1}, (Epoch(1, 1),), floor=Epoch(1, 1))
    assert Commits(log.session(), JOB).read() == (recorded, 1)


def test_an_older_claim_that_loses_the_race_to_a_newer_one_is_stale():
    log = MemoryLog()
    new = Commits(log.session(), JOB)
    old = Commits(Interleaved(log.session(), lambda: new.claim(2)), JOB)
    assert old.claim(1) is None
    assert new.read()[0] == CommitRecord(None, 2, {})


def test_a_newer_claim_that_loses_the_race_to_an_older_one_retries_and_wins():
    log = MemoryLog()
    old = Commits(log.session(), JOB)
    new = Commits(Interleaved(log.session(), lambda: old.claim(1)), JOB)
    assert new.claim(2) == CommitRecord(None, 2, {})
    assert not old.commit(1, Epoch(1, 1), {"in": 1})
    assert new.commit(2, Epoch(2, 1), {"in": 1})


def test_of_many_racing_claims_the_newest_owns_the_record():
    log = MemoryLog()
    start = threading.Barrier(8)
    results: dict[int, CommitRecord | None] = {}

    def claim(version: int) -> None:
        commits = Commits(log.session(), JOB)
        start.wait()
        results[version] = commits.claim(version)

    threads = [threading.Thread(target=claim, args=(v,)) for v in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results[8] == CommitRecord(None, 8, {})
    assert all(r is None or r.owner == v for v, r in results.items())
    assert Commits(log.session(), JOB).read()[0] == CommitRecord(None, 8, {})


# -- snapshots ------------------------------------------------------------------------------------


def test_a_snapshot_comes_back_as_it_was_put(storage):
    blob = bytes(range(256)) * 100
    storage.put(JOB, Epoch(1, 1), "count", 0, blob).result()
    storage.put(JOB, Epoch(1, 1), "count", 1, b"").result()
    assert storage.get(JOB, Epoch(1, 1), "count", 0) == blob
    assert storage.get(JOB, Epoch(1, 1), "count", 1) == b""


def stored(storage, number: int, parts: dict[int, bytes], chain: tuple[int, ...] = ()) -> None:
    """Snapshot ``number`` of slot 0 of ``count`` holding ``parts``, adding to ``chain``."""
    blob = TaskSnapshot(number, None, None, False, chain=chain).to_bytes(parts)
    storage.put(JOB, Epoch(1, number), "count", 0, blob).result()


def test_a_restore_reads_the_chain_oldest_first(storage):
    stored(storage, 1, {0: b"a", 5: b"b", 9: b"c"})
    stored(storage, 2, {5: b"d"}, chain=(1,))
    stored(storage, 3, {9: b"e"}, chain=(1, 2))
    restored = storage.restore(JOB, Epoch(1, 3), "count", 0).result()
    assert restored.snapshot.plugin == 3
    assert restored.layers == [{0: b"a", 5: b"b", 9: b"c"}, {5: b"d"}, {9: b"e"}]
    some = storage.restore(JOB, Epoch(1, 3), "count", 0, range(4, 9)).result()
    assert some.layers == [{5: b"b"}, {5: b"d"}, {}]


def test_a_restore_lent_an_earlier_one_of_its_chain_reads_only_the_new_links(storage):
    """A standby that holds epoch 2 (whole 1, then 2) reads only 3 for epoch 3, whose chain
    goes on from 2, and everything again for 4, which starts a chain of its own."""
    stored(storage, 1, {0: b"a" * 5000, 5: b"b"})
    stored(storage, 2, {5: b"d"}, chain=(1,))
    stored(storage, 3, {9: b"e"}, chain=(1, 2))
    stored(storage, 4, {0: b"f"})
    two = storage.restore(JOB, Epoch(1, 2), "count", 0).result()
    meter = metrics.RESTORE_READ_BYTES.labels(JOB, "count")
    before = meter._value.get()
    three = storage.restore(JOB, Epoch(1, 3), "count", 0, held=(Epoch(1, 2), two)).result()
    assert 0 < meter._value.get() - before < 5000, "snapshot 1 was not read again"
    assert three.layers == storage.restore(JOB, Epoch(1, 3), "count", 0).result().layers
    four = storage.restore(JOB, Epoch(1, 4), "count", 0, held=(Epoch(1, 3), three)).result()
    assert four.layers == [{0: b"f"}]
    other = (Epoch(2, 2), Restored(two.snapshot, [{0: b"x"}, {5: b"y"}]))
    elsewhere = storage.restore(JOB, Epoch(1, 3), "count", 0, held=other).result()
    assert elsewhere.layers == three.layers, "another allocation's epoch 2 lends nothing"


@contextlib.contextmanager
def counted_reads(storage) -> Iterator[list[int]]:
    """The length of each read of storage made meanwhile."""
    reads: list[int] = []
    cat_file = storage.fs.cat_file

    def counted(path, *, start=None, end=None, **kwargs):
        data = cat_file(path, start=start, end=end, **kwargs)
        reads.append(len(data))
        return data

    storage.fs.cat_file = counted
    try:
        yield reads
    finally:
        del storage.fs.cat_file


@pytest.mark.parametrize("layout", ["header last", "header first"])
def test_a_restore_of_some_key_groups_reads_the_header_and_their_range_alone(storage, layout):
    """A slot that gained key groups 40 to 59 of an old slot reads those parts, not the old
    slot's others: its reads add up to far less than the snapshot, of today's layout or the
    one before."""
    parts = {g: bytes([g]) * 20_000 for g in range(0, 64)}
    if layout == "header last":
        stored(storage, 1, parts)
    else:
        blob = header_first(TaskSnapshot(1, None, None, False), parts)
        storage.put(JOB, Epoch(1, 1), "count", 0, blob).result()
    with counted_reads(storage) as reads:
        restored = storage.restore(JOB, Epoch(1, 1), "count", 0, range(40, 60)).result()
    assert restored.layers == [{g: parts[g] for g in range(40, 60)}]
    tails = 1 if layout == "header last" else 2  # the tail, then (header first) the head
    assert len(reads) == tails + 1, "the header, then one range"
    assert sum(reads) < 20 * 20_000 + tails * PREFIX + 1000


@pytest.mark.parametrize("groups", [None, range(10, 60)])
def test_a_snapshot_too_large_to_hold_is_read_as_its_parts_are_taken(storage, monkeypatch, groups):
    """Past HOLD bytes of parts a restore reads the header alone, then each run of parts as
    the keyed state takes them, so that it never holds the snapshot whole."""
    monkeypatch.setattr(checkpoints_module, "HOLD", 50_000)
    monkeypatch.setattr(StoredParts, "RUN", 45_000)
    parts = {g: bytes([g]) * 20_000 for g in range(0, 64)}
    stored(storage, 1, parts)
    with counted_reads(storage) as reads:
        restored = storage.restore(JOB, Epoch(1, 1), "count", 0, groups).result()
        assert len(reads) == 1, "only the tail, with the header, before the parts are taken"
        (layer,) = restored.layers
        wanted = [g for g in parts if groups is None or g in groups]
        taken = list(layer.items())
    assert taken == [(g, parts[g]) for g in wanted]
    assert max(reads[1:]) <= 45_000, "a run at a time"
    assert len(reads) == 1 + len(wanted) // 2, "two parts of 20,000 bytes to a run"
    assert layer == {g: parts[g] for g in wanted}


def test_a_snapshot_cut_short_after_its_restore_began_fails_it_naming_the_snapshot(
    storage, monkeypatch
):
    """Parts read as they are taken come from a file that may have changed since its header
    was read: a short read names the snapshot, as a fetch's errors do."""
    monkeypatch.setattr(checkpoints_module, "HOLD", 50_000)
    parts = {g: bytes([g]) * 20_000 for g in range(0, 8)}
    stored(storage, 1, parts)
    (layer,) = storage.restore(JOB, Epoch(1, 1), "count", 0).result().layers
    path = storage._path(JOB, Epoch(1, 1), "count", 0)
    storage.fs.pipe_file(path, storage.fs.cat_file(path)[:100_000])
    says = r"the snapshot of job .* slot 0 is not a task's snapshot: its parts end at byte"
    with pytest.raises(SnapshotError, match=says):
        list(layer.items())


def test_the_bytes_a_restore_reads_are_counted_for_its_job_and_task(storage):
    parts = {g: bytes([g]) * 20_000 for g in range(0, 64)}
    stored(storage, 1, parts)
    meter = metrics.RESTORE_READ_BYTES.labels(JOB, "count")
    before = meter._value.get()
    storage.restore(JOB, Epoch(1, 1), "count", 0, range(40, 60)).result()
    ranged = meter._value.get() - before
    storage.restore(JOB, Epoch(1, 1), "count", 0).result()
    whole = meter._value.get() - before - ranged
    assert whole == storage.fs.size(storage._path(JOB, Epoch(1, 1), "count", 0))
    assert 20 * 20_000 <= ranged < 20 * 20_000 + PREFIX + 1000


def test_bytes_that_are_not_a_snapshot_fail_the_restore_naming_it(storage):
    storage.put(JOB, Epoch(1, 1), "count", 0, b"\xc1SN2\x00").result()
    says = r"the snapshot of job .* task 'count' slot 0 is not a task's snapshot: it ends after 5"
    with pytest.raises(SnapshotError, match=says):
        storage.restore(JOB, Epoch(1, 1), "count", 0).result()


def test_snapshots_are_laid_out_by_job_epoch_task_and_slot(storage):
    storage.put(JOB, Epoch(3, 7), "count", 2, b"x").result()
    assert files(storage) == [f"/{JOB}/000000000003-00000007/count/2.snap"]


def test_unsafe_names_stay_inside_their_own_directory(storage):
    storage.put("../escape", Epoch(1, 1), "a/b", 0, b"x").result()
    storage.put("..", Epoch(1, 1), "..", 0, b"y").result()
    assert files(storage) == [
        "/%2E.%2Fescape/000000000001-00000001/a%2Fb/0.snap",
        "/%2E./000000000001-00000001/%2E./0.snap",
    ]
    assert storage.get("../escape", Epoch(1, 1), "a/b", 0) == b"x"
    assert storage.get("..", Epoch(1, 1), "..", 0) == b"y"


def test_a_path_component_is_never_empty():
    with pytest.raises(ValueError, match="empty name"):
        path_component("")


@pytest.mark.parametrize("storage", ["local"], indirect=True)
def test_a_snapshot_is_not_under_its_final_name_until_it_is_whole(storage):
    blob = b"snapshot" * 1000
    seen = []
    move = storage.fs.mv

    def watched_move(source, destination, **kwargs):
        seen.append((storage.fs.exists(destination), storage.fs.cat_file(source)))
        move(source, destination, **kwargs)

    storage.fs.mv = watched_move
    try:
        storage.put(JOB, Epoch(1, 1), "count", 0, blob).result()
    finally:
        del storage.fs.mv
    assert seen == [(False, blob)]
    assert files(storage) == [f"/{JOB}/000000000001-00000001/count/0.snap"]


@pytest.mark.parametrize("storage", ["memory"], indirect=True)
def test_on_a_store_a_snapshot_is_one_whole_write_and_nothing_is_moved(storage):
    """An object store's write is whole by itself; it has no rename to make it so."""
    storage.fs.mv = lambda *args, **kwargs: pytest.fail("nothing is moved on a store")
    try:
        storage.put(JOB, Epoch(1, 1), "count", 0, b"snapshot").result()
    finally:
        del storage.fs.mv
    assert files(storage) == [f"/{JOB}/000000000001-00000001/count/0.snap"]


@pytest.mark.parametrize("storage", ["local"], indirect=True)
def test_an_upload_cut_short_leaves_nothing_behind(storage):
    """A snapshot written as it is packed that fails half-way (a full disk) leaves nothing
    under either name."""

    def chunks():
        yield b"snapshot" * 500
        raise OSError("the disk is full")

    storage.put(JOB, Epoch(1, 1), "count", 0, b"first").result()
    upload = storage.put(JOB, Epoch(1, 1), "count", 1, chunks)
    with pytest.raises(CheckpointError, match=r"cannot store the snapshot .* disk is full"):
        upload.result()
    assert files(storage) == [f"/{JOB}/000000000001-00000001/count/0.snap"]


def test_a_large_snapshot_goes_to_a_store_from_a_temporary_file_packed_again_on_each_try(
    tenancy, monkeypatch
):
    """Past SPOOL bytes a snapshot's chunks are gathered on disk, not in memory, for one PUT;
    a try that failed packs them again."""
    monkeypatch.setattr(checkpoints_module, "SPOOL", 10)
    monkeypatch.setattr(storage_module, "FIRST_PAUSE", 0.01)
    fs = fsspec.filesystem("memory")
    packed, sent = [], []

    def chunks():
        packed.append(True)
        yield from (b"0123456789", b"abcdef", b"!")

    def put_file(local, path, **kwargs):
        sent.append(path)
        if len(sent) == 1:
            raise ConnectionError("the store is restarting")
        fs.__class__.put_file(fs, local, path)

    monkeypatch.setattr(fs, "put_file", put_file)
    s = CheckpointStorage("memory://spooled", tenancy)
    try:
        assert s.put(JOB, Epoch(1, 1), "count", 0, chunks).result() == 17
        assert s.get(JOB, Epoch(1, 1), "count", 0) == b"0123456789abcdef!"
        assert len(packed) == len(sent) == 2
    finally:
        s.close()
        fs.rm("/spooled", recursive=True)


def test_a_store_that_fails_for_a_while_is_retried_then_a_storage_error(tenancy, monkeypatch):
    """Each failed try is counted; a store that keeps failing past the retries is out of reach
    (a StorageError, which rolls a job back), one that comes back is written to."""
    monkeypatch.setattr(storage_module, "RETRY_SECONDS", 0.5)
    monkeypatch.setattr(storage_module, "FIRST_PAUSE", 0.01)
    fs = fsspec.filesystem("memory")
    tries = []

    def failing(path, value, **kwargs):
        tries.append(path)
        if len(tries) < 3:
            raise ConnectionError("the store is restarting")
        fs.__class__.pipe_file(fs, path, value)

    def failing_for_good() -> None:
        raise OSError("down")

    monkeypatch.setattr(fs, "pipe_file", failing)
    s = CheckpointStorage("memory://retried", tenancy)
    before = metrics.STORAGE_FAILURES.labels("upload")._value.get()
    try:
        s.put(JOB, Epoch(1, 1), "count", 0, b"x").result()
        assert s.get(JOB, Epoch(1, 1), "count", 0) == b"x"
        assert metrics.STORAGE_FAILURES.labels("upload")._value.get() == before + 2
        monkeypatch.setattr(fs, "pipe_file", lambda *args, **kwargs: failing_for_good())
        with pytest.raises(
            StorageError, match=r"cannot store the snapshot .* for 0.5 s: OSError: down"
        ):
            s.put(JOB, Epoch(1, 2), "count", 0, b"y").result()
    finally:
        s.close()
        fs.rm("/retried", recursive=True)


def test_a_snapshot_that_cannot_be_packed_fails_its_upload_at_once_naming_why(tenancy):
    """On an object store, whose failures are tried again: not one of what was to be stored,
    which fails the job (a CheckpointError) rather than rolling it back as a store out of
    reach would."""
    tries = []

    def chunks() -> Iterator[bytes]:
        tries.append(1)
        raise PackingFailed("a snapshot of the keyed state failed: key group 3, state 'v'")
        yield b""

    s = CheckpointStorage("memory://unpacked", tenancy)
    try:
        with pytest.raises(CheckpointError, match="PackingFailed: a snapshot of the keyed state"):
            s.put(JOB, Epoch(1, 1), "count", 0, chunks).result()
        assert tries == [1]
    finally:
        s.close()


def test_a_missing_snapshot_names_what_is_missing_and_where(storage):
    storage.put(JOB, Epoch(1, 1), "count", 0, b"x").result()
    message = (
        f"the snapshot of job '{JOB}' epoch 2 of allocation 1 task 'count' slot 0 "
        f"is not at .*/{JOB}/000000000001-00000002/count/0.snap"
    )
    with pytest.raises(CheckpointError, match=message):
        storage.get(JOB, Epoch(1, 2), "count", 0)
    with pytest.raises(CheckpointError, match="task 'count' slot 3 is not at"):
        storage.restore(JOB, Epoch(1, 1), "count", 3).result()


def test_epochs_lists_the_epochs_with_snapshots_in_order(storage):
    assert storage.epochs(JOB) == []
    for epoch in [Epoch(2, 1), Epoch(1, 10), Epoch(1, 9), Epoch(10, 1)]:
        storage.put(JOB, epoch, "count", 0, b"x").result()
    storage.put(JOB, Epoch(1, 9), "count", 1, b"x").result()
    storage.put("other", Epoch(5, 5), "count", 0, b"x").result()
    assert storage.epochs(JOB) == [Epoch(1, 9), Epoch(1, 10), Epoch(2, 1), Epoch(10, 1)]


def floor(epoch: Epoch, **savepoints: Savepoint) -> Callable[[Epoch], bool]:
    """What a commit record whose floor is ``epoch`` keeps."""
    return CommitRecord(epoch, 1, {}, floor=epoch, savepoints=savepoints).retains


def test_collect_deletes_every_epoch_before_the_floor(storage):
    assert storage.collect(JOB, floor(Epoch(1, 1))) == 0
    for epoch in [Epoch(1, 1), Epoch(1, 2), Epoch(2, 1), Epoch(2, 2)]:
        for slot in range(2):
            storage.put(JOB, epoch, "count", slot, b"x").result()
    storage.put("other", Epoch(1, 1), "count", 0, b"x").result()
    assert storage.collect(JOB, floor(Epoch(2, 1))) == 2
    assert storage.epochs(JOB) == [Epoch(2, 1), Epoch(2, 2)]
    assert storage.collect_later(JOB, floor(Epoch(2, 2))).result() == 1
    assert storage.epochs(JOB) == [Epoch(2, 2)]
    assert storage.epochs("other") == [Epoch(1, 1)]


def test_collect_keeps_the_epochs_savepoints_hold_with_their_chains(storage):
    for number in range(1, 6):
        storage.put(JOB, Epoch(1, number), "count", 0, b"x").result()
    kept = Savepoint(Epoch(1, 3), {"count": 1}, since=2)
    assert storage.collect(JOB, floor(Epoch(1, 5), kept=kept)) == 2
    assert storage.epochs(JOB) == [Epoch(1, 2), Epoch(1, 3), Epoch(1, 5)]
    assert storage.delete_epoch(JOB, Epoch(1, 2))
    assert storage.delete_epoch(JOB, Epoch(1, 3))
    assert not storage.delete_epoch(JOB, Epoch(1, 3))
    assert storage.epochs(JOB) == [Epoch(1, 5)]


def test_collect_deletes_the_leftovers_of_an_upload_that_never_finished(storage):
    leftover = storage.fs.unstrip_protocol(f"{storage.root}/{JOB}/000000000001-00000001/count")
    with fsspec.open(f"{leftover}/0.snap.abc.tmp", "wb", auto_mkdir=True) as f:
        f.write(b"half")
    storage.put(JOB, Epoch(1, 2), "count", 0, b"x").result()
    assert storage.epochs(JOB) == [Epoch(1, 2)]
    assert storage.collect(JOB, floor(Epoch(1, 2))) == 1
    assert files(storage) == [f"/{JOB}/000000000001-00000002/count/0.snap"]


def test_a_failed_collection_in_the_background_is_logged(storage, caplog, monkeypatch):
    monkeypatch.setattr(storage_module, "RETRY_SECONDS", 0.3)
    storage.put(JOB, Epoch(1, 1), "count", 0, b"x").result()

    def refuse(path, **kwargs):
        raise PermissionError("read-only")

    storage.fs.rm = refuse
    try:
        with pytest.raises(CheckpointError, match=r"delete .*read-only"):
            storage.collect_later(JOB, floor(Epoch(1, 2))).result()
    finally:
        del storage.fs.rm
    logged = f"job {JOB}: deleting its epochs no longer needed failed"
    wait_for(lambda: logged in caplog.text, 10, "the failure to be logged")  # after result()


def test_committed_epochs_are_those_of_the_history_still_stored(storage):
    """(1, 3) was snapshotted but never committed; (1, 1) was committed but collected."""
    for epoch in [Epoch(1, 2), Epoch(1, 3), Epoch(2, 1)]:
        storage.put(JOB, epoch, "count", 0, b"x").result()
    assert committed_epochs(storage, JOB, None) == []
    assert committed_epochs(storage, JOB, CommitRecord(None, 2, {})) == []
    history = (Epoch(1, 1), Epoch(1, 2), Epoch(2, 1))
    record = CommitRecord(Epoch(2, 1), 2, {"count": 1}, history)
    assert committed_epochs(storage, JOB, record) == [Epoch(1, 2), Epoch(2, 1)]


def test_an_unknown_protocol_is_refused_by_name():
    with pytest.raises(CheckpointError, match="checkpoint storage 'bogus://x' cannot be opened"):
        CheckpointStorage("bogus://x", "t")


def test_writable_storage_passes_the_start_check_and_keeps_nothing_of_it(tmp_path, tenancy):
    storage = CheckpointStorage(str(tmp_path / "checkpoints"), tenancy)
    try:
        storage.check_writable()
    finally:
        storage.close()
    assert [p for p in (tmp_path / "checkpoints").rglob("*") if p.is_file()] == []


def test_storage_where_nothing_can_be_written_is_refused_naming_the_url(tmp_path, tenancy):
    (tmp_path / "a-file").write_text("")
    url = str(tmp_path / "a-file" / "checkpoints")
    storage = CheckpointStorage(url, tenancy)
    try:
        with pytest.raises(CheckpointError, match=f"checkpoint storage {url} cannot be written"):
            storage.check_writable()
    finally:
        storage.close()


def test_a_stop_s_savepoint_fences_the_record_in_its_commit_and_a_withdrawn_one_does_not():
    commits = Commits(MemoryLog().session(), JOB)
    commits.claim(3)
    commits.request_savepoint("first", stop=True)
    with pytest.raises(CheckpointError, match="is stopping already, with savepoint 'first'"):
        commits.request_savepoint("second", stop=True)
    assert commits.withdraw_stop("first") is None
    assert commits.read()[0].stop is None
    record = commits.commit(3, Epoch(3, 1), {"count": 1})
    assert record.owner == 3
    assert record.savepoints["first"].epoch == Epoch(3, 1)
    commits.request_savepoint("last", stop=True)
    record = commits.commit(3, Epoch(3, 2), {"count": 1})
    assert (record.owner, record.stop) == (STOPPED, None)
    assert CommitRecord.decode(record.encode()) == record
    assert commits.commit(3, Epoch(3, 3), {"count": 1}) is None
    assert commits.claim(4) is None
    assert commits.withdraw_stop("last") == record.savepoints["last"]
