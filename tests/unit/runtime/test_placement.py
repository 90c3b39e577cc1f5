"""Placement: a job's topology under one allocation, as every group derives it, agrees with the
allocation for any job and any allocation, and is rebuilt only when the allocation changes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from pyrsistent import pmap, pset

from peer.job.spec import Job, Task
from peer.log.replica import Replica
from peer.runtime.placement import Downstream, place, placements


def job(workflow, kinds: dict[str, str]) -> Job:
    plugins = {"input": "peer.plugins.memory:input", "output": "peer.plugins.null:output"}
    catalog = tuple(Task(name, kind, plugin=plugins.get(kind)) for name, kind in kinds.items())
    return Job(workflow=tuple(workflow), catalog=catalog, id="j")


def test_a_placement_reads_the_allocation_once_for_every_part_of_the_runtime():
    j = job(
        [("in", "f"), ("f", "out")],
        {"in": "input", "f": "function", "out": "output"},
    )
    allocation = {"in": ("i2", "i1"), "f": ("f1",), "out": ("o2", "o1")}
    short_ids = {"j": 9, "i1": 1, "i2": 2, "f1": 3, "o1": 4, "o2": 5, "elsewhere": 6}
    groups = {"i1": "a", "i2": "b", "f1": "a", "o1": "b", "o2": "b", "elsewhere": "c"}
    p = place(j, 7, allocation, short_ids, groups)
    assert p.peers == allocation  # in slot order, the allocation's
    assert p.slots == {"i2": 0, "i1": 1, "f1": 0, "o2": 0, "o1": 1}
    assert p.upstream == {"f": ("i1", "i2"), "out": ("f1",)}
    assert p.downstream == {
        "in": (Downstream("f", ("f1",)),),
        "f": (Downstream("out", ("o2", "o1")),),
    }
    assert (p.coordinator, p.job_short, p.version) == ("i2", 9, 7)
    assert "elsewhere" not in p.short_ids
    assert "elsewhere" not in p.groups
    assert p.upstream_ids("f") == {1, 2}
    assert p.upstream_ids("in") == frozenset()
    assert p.peers_of_kind("output") == ("o1", "o2")
    assert p.task_slots() == {"f": 1, "in": 2, "out": 2}
    assert p.members == ("f1", "i1", "i2", "o1", "o2")


def test_a_job_whose_first_input_has_no_peers_has_no_coordinator():
    j = job([("in", "out")], {"in": "input", "out": "output"})
    assert place(j, 1, {"in": (), "out": ("o",)}, {"j": 0, "o": 1}, {}).coordinator is None


@st.composite
def jobs_and_allocations(draw):
    """A connected workflow of 2..6 tasks (sources are inputs, sinks outputs), and an
    allocation of distinct peers, in any order, some tasks without any."""
    n = draw(st.integers(2, 6))
    names = [f"t{i}" for i in range(n)]
    edges = {(draw(st.integers(0, i - 1)), i) for i in range(1, n)}
    edges |= draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))))
    workflow = sorted((names[a], names[b]) for a, b in edges if a < b)
    parents = {b for _, b in workflow}
    children = {a for a, _ in workflow}
    kinds = {
        name: "input" if name not in parents else "function" if name in children else "output"
        for name in names
    }
    pool = draw(st.permutations([f"p{i}" for i in range(3 * n)]))
    counts = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    allocation, start = {}, 0
    for name, count in zip(names, counts, strict=True):
        allocation[name] = tuple(pool[start : start + count])
        start += count
    ids = draw(st.permutations(range(len(pool) + 1)))
    short_ids = {"j": ids[0], **dict(zip(pool, ids[1:], strict=True))}
    groups = {p: draw(st.sampled_from(["g0", "g1", "g2"])) for p in pool}
    return job(workflow, kinds), allocation, short_ids, groups


@given(jobs_and_allocations(), st.integers(0, 1000))
def test_a_placement_agrees_with_its_allocation(case, version):
    j, allocation, short_ids, groups = case
    p = place(j, version, allocation, short_ids, groups)
    allocated = sorted(peer for ps in allocation.values() for peer in ps)
    assert p.members == tuple(allocated)
    assert p.short_ids == {k: short_ids[k] for k in ["j", *allocated]}
    assert p.groups == {peer: groups[peer] for peer in allocated}
    for task, peers in allocation.items():
        assert p.peers[task] == tuple(peers)
        for peer in peers:
            assert (p.tasks[peer], p.slots[peer]) == (task, list(peers).index(peer))
        ups = {peer for a, b in j.workflow if b == task for peer in allocation[a]}
        assert p.upstream.get(task, ()) == tuple(sorted(ups))
        assert p.upstream_ids(task) == {short_ids[peer] for peer in ups}
        downs = sorted(b for a, b in j.workflow if a == task)
        expected = tuple(Downstream(b, tuple(allocation[b])) for b in downs)
        assert p.downstream.get(task, ()) == expected
    first_input = next(t for t in j.sorted_tasks() if j.task(t).kind == "input")
    leaders = allocation[first_input]
    assert p.coordinator == (leaders[0] if leaders else None)
    inputs = sorted(
        peer for t, ps in allocation.items() if j.task(t).kind == "input" for peer in ps
    )
    assert p.peers_of_kind("input") == tuple(inputs)


def replica(version: int, allocation: dict[str, tuple[str, ...]]) -> Replica:
    j = job([("in", "out")], {"in": "input", "out": "output"})
    peers = sorted(p for ps in allocation.values() for p in ps)
    return Replica().evolve(
        jobs=pmap({"j": j}),
        allocations=pmap({"j": pmap(allocation)}),
        allocation_versions=pmap({"j": version}),
        short_ids=pmap({"j": 0, **{p: i + 1 for i, p in enumerate(peers)}}),
        group_peers=pmap({"g": frozenset(peers)}),
    )


def test_placements_are_rebuilt_only_when_the_allocation_version_changes():
    first = placements(replica(3, {"in": ("a",), "out": ("b",)}), {})
    assert first["j"].groups == {"a": "g", "b": "g"}
    same = placements(replica(3, {"in": ("a",), "out": ("b",)}), first)
    assert same["j"] is first["j"]
    moved = placements(replica(5, {"in": ("a",), "out": ("c",)}), first)
    assert (moved["j"].version, moved["j"].peers["out"]) == (5, ("c",))
    assert placements(Replica(), moved) == {}


def test_a_peer_that_took_over_sits_in_the_failed_peers_seat():
    """The takeover put zz in the allocation where f0 was (peer.log.takeover)."""
    j = job(
        [("in", "f"), ("f", "out")],
        {"in": "input", "f": "function", "out": "output"},
    )
    allocation = {"in": ("i1",), "f": ("zz", "f1", "f2"), "out": ("o1",)}
    short_ids = {"j": 0, "i1": 1, "f1": 2, "f2": 3, "zz": 4, "o1": 5}
    groups = dict.fromkeys(short_ids, "g")
    p = place(
        j, 7, allocation, short_ids, groups,
        takeovers=pmap({"zz": "f0"}), standbys=pmap({"f1": "s1"}), recovering=pset(["zz"]),
    )  # fmt: skip
    assert p.peers["f"] == ("zz", "f1", "f2")
    assert p.slots["zz"] == 0
    assert p.origin == {"i1": "i1", "f1": "f1", "f2": "f2", "zz": "f0", "o1": "o1"}
    assert p.standbys == {"f1": "s1"}
    assert p.recovering == frozenset({"zz"})
    assert p.seats == {"zz": 0, "f1": 1, "f2": 2, "i1": 3, "o1": 4}
    assert p.seat_peers == {0: "zz", 1: "f1", 2: "f2", 3: "i1", 4: "o1"}
    assert p.upstream["out"] == ("f1", "f2", "zz")


@given(jobs_and_allocations(), st.data())
def test_seats_follow_the_original_peers(case, data):
    j, allocation, short_ids, groups = case
    allocated = sorted(peer for ps in allocation.values() for peer in ps)
    moved = data.draw(st.lists(st.sampled_from(allocated), unique=True)) if allocated else []
    takeovers = {peer: f"{peer}-old" for peer in moved}
    p = place(j, 1, allocation, short_ids, groups, takeovers=pmap(takeovers))
    plain = place(j, 1, allocation, short_ids, groups)
    renamed = {p.origin[peer]: peer for peer in allocated}
    original = {
        task: [takeovers.get(peer, peer) for peer in peers] for task, peers in allocation.items()
    }
    again = place(j, 1, original, short_ids | {v: short_ids[k] for k, v in takeovers.items()},
                  groups | {v: groups[k] for k, v in takeovers.items()})  # fmt: skip
    for task, peers in again.peers.items():
        assert p.peers[task] == tuple(renamed[peer] for peer in peers)
    assert {again.origin[peer]: s for peer, s in again.seats.items()} == {
        p.origin[peer]: s for peer, s in p.seats.items()
    }
    assert sorted(p.seat_peers.values()) == allocated
    assert all(p.seat_peers[s] == peer for peer, s in p.seats.items())
    assert sorted(plain.seats.values()) == list(range(len(allocated)))
    names = sorted(allocation)
    ordered = [(t, i) for t in names for i in range(len(allocation[t]))]
    assert all(ordered[s] == (p.tasks[peer], p.slots[peer]) for peer, s in p.seats.items())


def test_placements_are_rebuilt_when_the_takeovers_standbys_or_recovering_change():
    base = replica(3, {"in": ("a",), "out": ("b",)})
    first = placements(base, {})
    assert placements(base, first)["j"] is first["j"]
    for key, value in (
        ("takeovers", pmap({"j": pmap({"b": "x"})})),
        ("standbys", pmap({"j": pmap({"a": "s"})})),
        ("recovering", pmap({"j": pset(["b"])})),
    ):
        changed = base.evolve(**{key: value})
        rebuilt = placements(changed, first)["j"]
        assert rebuilt is not first["j"]
        assert placements(changed, {"j": rebuilt})["j"] is rebuilt
    taken = placements(base.evolve(takeovers=pmap({"j": pmap({"b": "x"})})), first)["j"]
    assert taken.origin["b"] == "x"
