"""Nexmark's queries as jobs, each run with ``onyx run`` over out-of-order events with
checkpoints, their answers equal to DuckDB's over the same events, row for row."""

from __future__ import annotations

import importlib
import json
from collections import Counter

import pytest

from examples.nexmark import oracle
from peer.nexmark.config import NexmarkConfig
from tests.support import onyx

EVENTS = 5_000
SETTINGS = {"seed": 5, "out_of_order_group_size": 13, "rate": 1000.0}


@pytest.mark.parametrize("query", ["q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8"])
def test_a_query_s_answer_is_the_oracle_s(tmp_path, query):
    module = importlib.import_module(f"examples.nexmark.{query}")
    out = tmp_path / "answer"
    job = tmp_path / f"{query}.yaml"
    job.write_text(module.flow(EVENTS, str(out), barrier_period=0.2, **SETTINGS).to_yaml())
    result = onyx("run", str(job), timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    written = [json.loads(line) for path in sorted(out.glob("*.jsonl"))
               for line in path.read_text().splitlines()]  # fmt: skip
    expected = oracle.answer(module.SQL, NexmarkConfig(**SETTINGS), EVENTS)
    assert expected, "the oracle answers something"
    assert Counter(oracle.rows(written, module.COLUMNS)) == Counter(expected)
