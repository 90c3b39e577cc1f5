"""Routing: grouped segments always reach the same peer, whatever batch they travel in;
ungrouped batches go whole to one peer in turn; flow conditions guard the tasks they name."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from peer.job.spec import FlowCondition, Job, Task
from peer.runtime.placement import place
from peer.runtime.routing import Route, Router, conditions, router_for, routes
from peer.state.key_groups import groups_of, key_group
from peer.values.columnar import Late

FNS = "tests.unit.runtime.runtime_fns"


def job(*conditions: FlowCondition, group_by: str | None = "word") -> Job:
    return Job(
        workflow=(("in", "a"), ("in", "b")),
        catalog=(
            Task("in", "input", plugin="peer.plugins.memory:input"),
            Task("a", "output", plugin="peer.plugins.null:output", group_by_key=group_by),
            Task("b", "output", plugin="peer.plugins.null:output"),
        ),
        flow_conditions=conditions,
        id="j",
    )


def placed(j: Job, allocation: dict[str, tuple[str, ...]]):
    return place(j, 1, {"in": ("i",), **allocation}, {}, {})


def router_of(j: Job, allocation: dict[str, tuple[str, ...]]) -> Router:
    placement = placed(j, allocation)
    return Router(routes(placement, "in"), conditions(placement, "in"))


def test_routes_list_downstream_tasks_with_their_peers_in_slot_order():
    found = routes(placed(job(), {"a": ("p2", "p1"), "b": ("p3",)}), "in")
    assert [(r.task, r.peers) for r in found] == [("a", ("p2", "p1")), ("b", ("p3",))]
    assert found[0].key({"word": "x"}) == "x"
    assert found[1].key is None


@given(st.lists(st.sampled_from("abcdefgh"), min_size=1), st.integers(1, 6))
def test_a_key_reaches_the_same_peer_in_any_batch(words, peers):
    route = Route("a", tuple(f"p{i}" for i in range(peers)), lambda s: s["word"])
    whole = Router([route]).split([{"word": w} for w in words])
    owner = {s["word"]: peer for peer, batch in whole.items() for s in batch}
    for word in words:
        alone = Router([route]).split([{"word": word}])
        assert list(alone) == [owner[word]]


def test_ungrouped_batches_go_whole_to_one_peer_in_turn():
    router = Router([Route("b", ("p1", "p2"))])
    batch = [{"n": 1}, {"n": 2}]
    assert [router.split(batch) for _ in range(3)] == [
        {"p1": batch},
        {"p2": batch},
        {"p1": batch},
    ]


def test_flow_conditions_guard_only_the_tasks_they_name():
    j = job(FlowCondition("in", ("a",), f"{FNS}:is_long"), group_by=None)
    router = router_of(j, {"a": ("pa",), "b": ("pb",)})
    out = router.split([{"word": "hello"}, {"word": "hi"}])
    assert out == {"pa": [{"word": "hello"}], "pb": [{"word": "hello"}, {"word": "hi"}]}


def test_a_short_circuit_condition_that_holds_ends_the_evaluation():
    j = job(
        FlowCondition("in", ("b",), f"{FNS}:is_long", short_circuit=True),
        FlowCondition("in", ("a",), f"{FNS}:always"),
        group_by=None,
    )
    router = router_of(j, {"a": ("pa",), "b": ("pb",)})
    out = router.split([{"word": "hello"}, {"word": "hi"}])
    assert out == {"pa": [{"word": "hi"}], "pb": [{"word": "hello"}]}


def test_all_names_every_child_and_tasks_without_peers_are_skipped():
    j = job(FlowCondition("in", "all", f"{FNS}:is_long"), group_by=None)
    router = router_of(j, {"a": (), "b": ("pb",)})
    assert router.split([{"word": "hello"}, {"word": "hi"}]) == {"pb": [{"word": "hello"}]}
    assert router.peers() == ["pb"]


KEYS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.floats(-2, 2), st.sampled_from([0.0, -0.0]),
    st.text(max_size=2), st.lists(st.integers(0, 2), max_size=2),
)  # fmt: skip


@given(st.lists(KEYS, max_size=30), st.integers(1, 4), st.sampled_from([4, 7, 128]))
def test_a_segment_goes_to_its_key_groups_owner_however_often_the_key_recurs(keys, n, groups):
    """Keys hashed once per batch (strs and ints) go exactly where hashing each would send them:
    1, 1.0 and True, or 0.0 and -0.0, are equal in Python but not the same key."""
    peers = tuple(f"p{i}" for i in range(n))
    router = Router([Route("a", peers, lambda s: s["k"], groups=groups)])
    segments = [{"k": k, "i": i} for i, k in enumerate(keys)]
    for peer, batch in router.split(segments).items():
        slot = peers.index(peer)
        assert all(key_group(s["k"], groups) in groups_of(slot, n, groups) for s in batch)
    assert sorted(s["i"] for b in router.split(segments).values() for s in b) == list(
        range(len(keys))
    )


def test_an_ungrouped_batch_is_never_shared_by_two_receivers():
    router = Router([Route("a", ("pa",)), Route("b", ("pb",))])
    batch = [{"n": 1}]
    out = router.split(batch)
    assert out["pa"] == out["pb"] == batch
    assert out["pa"] is not out["pb"]


def test_late_rows_go_to_their_side_output_alone_and_the_rest_elsewhere():
    placement = placed(job(), {"a": ("p1", "p2"), "b": ("p3",)})
    router = router_for(routes(placement, "in"), conditions(placement, "in"), frozenset({"b"}))
    out = router.split([{"word": "x"}, Late("b", {"word": "late"}), {"word": "y"}])
    assert out.pop("p3") == [{"word": "late"}]
    assert sorted(s["word"] for batch in out.values() for s in batch) == ["x", "y"]
    assert router.peers() == ["p1", "p2", "p3"]


def test_a_task_without_side_outputs_gets_the_plain_router():
    placement = placed(job(), {"a": ("p1",), "b": ("p3",)})
    assert type(router_for(routes(placement, "in"), (), frozenset())) is Router
