"""A job whose epochs stop being acknowledged does not wait for ever: `onyx run` of a job whose
exactly-once sink never makes its second epoch durable (as a sink whose storage hangs) abandons
that epoch and the next after its checkpoint_timeout, naming the task that did not acknowledge
them, rolls the job back to its last commit, and then completes with every line written once."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.support import onyx

pytestmark = pytest.mark.integration

LINES = 3000


def test_a_job_whose_epochs_stop_committing_rolls_back_and_completes_exactly_once(tmp_path):
    source, sink = tmp_path / "in.jsonl", tmp_path / "out"
    source.write_text("".join(json.dumps({"n": i}) + "\n" for i in range(LINES)))
    catalog = [
        {"name": "read", "kind": "input", "plugin": "peer.plugins.jsonl:input",
         "params": {"path": str(source)}, "n_peers": 1, "batch_size": 20},
        {"name": "step", "kind": "function", "fn": "tests.integration.pacing:pass_slowly"},
        {"name": "write", "kind": "output", "plugin": "tests.integration.stalling_sink:output",
         "params": {"path": str(sink)}, "n_peers": 1},
    ]  # fmt: skip
    doc = {
        "workflow": [["read", "step"], ["step", "write"]],
        "catalog": catalog,
        "barrier_period": 0.2,
        "checkpoint_timeout": 1.0,
        "tolerable_abandoned_epochs": 1,
    }
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(doc))
    result = onyx("run", str(job), timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    abandoned = [line for line in result.stderr.splitlines() if " abandoned: " in line]
    assert len(abandoned) >= 2, result.stderr
    assert "not acknowledged within 1 s by task 'write'" in abandoned[0]
    assert "2 epochs in a row abandoned" in result.stderr
    assert "rolling the job back to its last commit" in result.stderr
    written = [json.loads(line)["n"] for f in sorted(sink.glob("*.jsonl")) for line in
               f.read_text().splitlines()]  # fmt: skip
    assert sorted(written) == list(range(LINES))
