"""Routing of a colocated job: its ungrouped batches stay among the downstream peers of the
sender's own group (round-robin) when it has any, so a pipeline never leaves its process; its
grouped segments, and every other job's batches, go where they went before."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from peer.job.spec import Job, Task
from peer.runtime.placement import place
from peer.runtime.routing import Router, routes


def job(scheduler: str, group_by: str | None = None) -> Job:
    return Job(
        workflow=(("in", "out"),),
        catalog=(
            Task("in", "input", plugin="peer.plugins.memory:input"),
            Task("out", "output", plugin="peer.plugins.null:output", group_by_key=group_by),
        ),
        task_scheduler=scheduler,
        id="j",
    )


GROUPS = st.dictionaries(
    st.sampled_from([f"p{i}" for i in range(8)]), st.sampled_from(["g0", "g1", "g2"]), min_size=1
)
"""The downstream peers and the group of each; the sender is in g0."""
BATCH = [{"word": "a"}, {"word": "b"}]


def router(j: Job, groups: dict[str, str], sender: str | None = "in-0") -> Router:
    placement = place(j, 1, {"in": ("in-0",), "out": tuple(sorted(groups))}, {},
                      {"in-0": "g0", **groups})  # fmt: skip
    return Router(routes(placement, "in", sender))


def destinations(r: Router, batches: int) -> list[str]:
    return [peer for _ in range(batches) for peer in r.split(BATCH)]


@given(GROUPS, st.integers(1, 12))
def test_colocated_batches_take_turns_among_the_local_peers_when_there_are_any(groups, batches):
    r = router(job("colocated"), groups)
    among = sorted(p for p, g in groups.items() if g == "g0") or sorted(groups)
    assert destinations(r, batches) == [among[i % len(among)] for i in range(batches)]
    assert r.peers() == sorted(groups)  # end and barriers still reach every peer


@given(GROUPS, st.integers(1, 12))
def test_colocated_arrow_batches_keep_to_the_local_peers_too(groups, batches):
    arrow = Router(router(job("colocated"), groups).routes)
    rows = router(job("colocated"), groups)
    batch = pa.RecordBatch.from_pylist(BATCH)
    for _ in range(batches):
        assert list(arrow.split(batch)) == list(rows.split(BATCH))


@given(GROUPS, st.integers(1, 12))
def test_other_schedulers_and_unknown_senders_ignore_the_group(groups, batches):
    everywhere = destinations(router(job("balanced"), groups, sender=None), batches)
    assert destinations(router(job("balanced"), groups), batches) == everywhere
    assert destinations(router(job("colocated"), groups, sender=None), batches) == everywhere


@given(GROUPS)
def test_grouped_segments_of_a_colocated_job_reach_their_key_owner(groups):
    near = router(job("colocated", group_by="word"), groups)
    anywhere = router(job("colocated", group_by="word"), groups, sender=None)
    assert near.split(BATCH) == anywhere.split(BATCH)


def test_a_colocated_sender_keeps_to_its_own_group():
    placement = place(job("colocated"), 1, {"in": ("a0",), "out": ("b1", "a1", "a2")}, {},
                      {"a0": "a", "a1": "a", "a2": "a", "b1": "b"})  # fmt: skip
    found = routes(placement, "in", "a0")
    assert [(r.peers, r.local) for r in found] == [(("b1", "a1", "a2"), ("a1", "a2"))]
