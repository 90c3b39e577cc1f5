"""What a job asks of the schedulers: a keyed task never more peers than it has key groups."""

from __future__ import annotations

from peer.job.demand import job_demand
from peer.job.load import from_dict
from tests.unit.job import wordcount


def asked(doc: dict) -> dict[str, int | None]:
    return {t.name: t.max_peers for t in job_demand(from_dict(doc)).tasks}


def test_a_keyed_task_asks_for_at_most_its_key_groups():
    doc = wordcount.document()
    count = next(t for t in doc["catalog"] if t["name"] == "count")
    del count["max_peers"]
    doc["max_parallelism"] = 8
    assert asked(doc) == {"read": 1, "split": 2, "count": 8, "write": None}
    count["max_peers"] = 5
    assert asked(doc)["count"] == 5


def test_an_input_whose_peers_may_vary_asks_for_at_most_its_splits():
    """In a checkpointed job, such an input splits its share (its plugin does: checked at
    submit), into max_parallelism splits."""
    doc = wordcount.document()
    read = next(t for t in doc["catalog"] if t["name"] == "read")
    read.update(plugin="peer.plugins.jsonl:input", params={"path": "in.jsonl"}, max_parallelism=6)
    del read["n_peers"]
    assert asked(doc)["read"] == 6
    doc["barrier_period"] = None  # no checkpoints: its share is never handed on
    assert asked(doc)["read"] is None
