"""The Nexmark input in a job: ``onyx run`` of its events over two input peers with
checkpoints writes each event once, as the generator makes it."""

from __future__ import annotations

import json
from collections import Counter

import yaml

from peer.nexmark.config import NexmarkConfig
from peer.nexmark.events import event
from tests.support import onyx

EVENTS = 3_000


def test_a_run_writes_every_event_once_as_the_generator_makes_it(tmp_path):
    settings = {"events": EVENTS, "seed": 11, "out_of_order_group_size": 7, "rate": 1000.0}
    sink = tmp_path / "out"
    doc = {
        "workflow": [["events", "write"]],
        "catalog": [
            {"name": "events", "kind": "input", "plugin": "peer.plugins.nexmark:input",
             "params": settings, "n_peers": 2, "batch_size": 100},
            {"name": "write", "kind": "output", "plugin": "peer.plugins.jsonl:exactly_once_output",
             "params": {"path": str(sink)}, "n_peers": 1},
        ],
        "barrier_period": 0.2,
    }  # fmt: skip
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(doc))
    result = onyx("run", str(job), timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    written = [json.loads(line) for path in sorted(sink.glob("*.jsonl"))
               for line in path.read_text().splitlines()]  # fmt: skip
    config = NexmarkConfig(**settings)
    expected = [event(config, n) for n in range(EVENTS)]
    assert Counter(map(repr, map(sorted, map(dict.items, written)))) == Counter(
        map(repr, map(sorted, map(dict.items, expected)))
    )
