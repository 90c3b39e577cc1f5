"""A keyed task's peers in a new allocation are put in the slots that keep most of the key
groups they held (peer.log.allocation), so a slot's state stays in its process across a change
of peers; every other task keeps the plan's order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from peer.job.spec import Job, Task
from peer.log.allocation import _heirs_in_place
from peer.state.key_groups import heir


def keyed_job(max_parallelism: int) -> Job:
    catalog = (
        Task("in", "input", plugin="peer.plugins.memory:input"),
        Task("count", "function", fn="tests.integration.pacing:RunningCount",
             group_by_key="user", max_parallelism=max_parallelism),
        Task("out", "output", plugin="peer.plugins.null:output"),
    )  # fmt: skip
    return Job(workflow=(("in", "count"), ("count", "out")), catalog=catalog, id="j")


def test_growing_from_2_to_4_puts_each_old_peer_in_its_heir_slot():
    """16 key groups: a held 0-7 and b 8-15; of 4 slots, slot 0 (0-3) and slot 2 (8-11) keep
    most of them."""
    ordered = _heirs_in_place(
        keyed_job(16),
        {"in": ("i",), "count": ("a", "b"), "out": ("o",)},
        {"in": ("i2", "i"), "count": ("a", "b", "c", "d"), "out": ("o",)},
    )
    assert ordered == {"in": ("i2", "i"), "count": ("a", "c", "b", "d"), "out": ("o",)}


PEERS = [f"p{i}" for i in range(8)]


@given(st.integers(4, 16), st.permutations(PEERS), st.integers(1, 4), st.permutations(PEERS),
       st.integers(1, 4))  # fmt: skip
def test_the_order_is_the_plan_s_peers_with_every_old_peer_that_stays_in_an_heir_slot(
    groups, old_pool, old_count, new_pool, new_count
):
    before = tuple(old_pool[:old_count])
    plan = tuple(sorted(new_pool[:new_count]))
    ordered = _heirs_in_place(keyed_job(groups), {"count": before}, {"count": plan})["count"]
    assert sorted(ordered) == sorted(plan)
    heirs = [heir(k, len(before), len(plan), groups) for k in range(len(before))]
    for k, peer in enumerate(before):
        first = all(heirs[j] != heirs[k] or before[j] not in plan for j in range(k))
        if peer in plan and first:
            assert ordered[heirs[k]] == peer
