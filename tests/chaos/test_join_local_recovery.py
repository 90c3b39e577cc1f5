"""A stream join recovered locally under kill -9: Nexmark's q8 (a window join) with local
recovery on seven `onyx peer start` members, each task on a fixed number of peers (one each:
six tasks) and the join's with a standby on another member. The member running the join is
killed mid-run; the standby takes its seat over and replays it, taking its two sides' batches in
the order the seat took them, and nothing else restores. The published answer must equal
DuckDB's over the same events."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from dataclasses import replace

import pytest

from examples.nexmark import oracle, q8
from peer import api
from peer.nexmark.config import NexmarkConfig
from peer.runtime.checkpoints import Commits
from tests.chaos.test_exactly_once import progressed
from tests.chaos.test_local_recovery import cluster, kill  # noqa: F401 (the fixture)
from tests.integration.test_metrics import Scrape

pytestmark = pytest.mark.integration

EVENTS = 24_000
SETTINGS = {"seed": 9, "out_of_order_group_size": 7, "rate": 4_000.0}
"""Paced at 4,000 events a second: about 6 s of run."""
JOIN = "new-users"


def test_a_killed_join_is_taken_over_and_its_answer_stays_exact(cluster, tmp_path):  # noqa: F811
    groups, ports, store = cluster
    out = tmp_path / "answer"
    job = q8.flow(EVENTS, str(out), barrier_period=0.5, paced=True, **SETTINGS).job()
    fixed = tuple(replace(t, n_peers=1 if t.kind == "input" else t.n_peers or 1,
                          standby=t.name == JOIN or None)
                  for t in job.catalog)  # fmt: skip
    job = replace(job, local_recovery=True, catalog=fixed)
    job_id = api.submit(store, job.to_dict())
    progressed(store, Commits(store, job_id), job_id)
    time.sleep(random.uniform(0, 1))  # a random moment of the run, not a wait for anything
    before = api.replica(store)
    (seat,) = before.allocations[job_id][JOIN]
    assert seat in before.standbys[job_id], "the join has a standby on another member"
    killed = kill(groups, before, seat)
    final = api.wait(store, job_id, 300)
    assert final.state == "completed"
    written = [json.loads(line) for path in sorted(out.glob("*.jsonl"))
               for line in path.read_text().splitlines()]  # fmt: skip
    expected = oracle.answer(q8.SQL, NexmarkConfig(**SETTINGS), EVENTS)
    assert expected, "the oracle answers something"
    assert Counter(oracle.rows(written, q8.COLUMNS)) == Counter(expected)
    survivors = [Scrape(port) for i, port in enumerate(ports) if i != killed]
    scopes = {scope: sum(s.total("onyx_task_restores_total", onyx_job=job_id, scope=scope)
                         for s in survivors) for scope in ("global", "local")}  # fmt: skip
    assert scopes == {"global": 0, "local": 1}, "only the join's replacement restored"
