"""Nexmark's stateful queries under kill -9: q3 and q8 (joins), q5 and q7 (windows) on `onyx
peer start` processes over a real ZooKeeper and Aeron, their input paced so that the run
outlasts the kills, a working peer group killed twice at random moments and replaced. The
published answer must equal DuckDB's over the same events."""

from __future__ import annotations

import dataclasses
import importlib
import json
import random
from collections import Counter

import pytest

from examples.nexmark import oracle
from peer import api
from peer.job.spec import Job
from peer.nexmark.config import NexmarkConfig
from tests.chaos.test_exactly_once import kill_members

pytestmark = pytest.mark.integration

EVENTS = 24_000
SETTINGS = {"seed": 3, "out_of_order_group_size": 11, "rate": 4_000.0}
"""Paced at 4,000 events a second: about 6 s of run."""


def one_input_peer(job: Job) -> Job:
    """The query with its input on one peer, so that each fits the three groups' six peers."""
    catalog = tuple(dataclasses.replace(t, n_peers=1, min_peers=1, max_peers=1)
                    if t.kind == "input" else t for t in job.catalog)  # fmt: skip
    return dataclasses.replace(job, catalog=catalog)


@pytest.mark.parametrize("query", ["q3", "q5", "q7", "q8"])
def test_two_kills_change_nothing_in_the_answer(query, cluster, *, tmp_path):
    store = cluster[2]
    module = importlib.import_module(f"examples.nexmark.{query}")
    out = tmp_path / "answer"
    job = module.flow(EVENTS, str(out), barrier_period=0.5, paced=True, **SETTINGS).job()
    job_id = api.submit(store, one_input_peer(job).to_dict())
    seed = random.randrange(1 << 30)
    kill_members(cluster, job_id, 2, random.Random(seed), seed)
    final = api.wait(store, job_id, 300)
    assert final.state == "completed", f"seed {seed}"
    written = [json.loads(line) for path in sorted(out.glob("*.jsonl"))
               for line in path.read_text().splitlines()]  # fmt: skip
    expected = oracle.answer(module.SQL, NexmarkConfig(**SETTINGS), EVENTS)
    assert expected, "the oracle answers something"
    assert Counter(oracle.rows(written, module.COLUMNS)) == Counter(expected), f"seed {seed}"
