"""The word count's code, tested as a user tests a job: run in this process through peer.testing
on lines the test gives, its counts read back from the output task."""

from __future__ import annotations

from pathlib import Path

from peer.testing import run_job

JOB = Path(__file__).with_name("job.yaml")


def test_words_are_counted_whatever_their_case_and_punctuation():
    lines = [{"line": "The cat, the hat."}, {"line": "A cat!"}, {"line": ""}]
    outputs = run_job(JOB, inputs={"read": lines}, timeout=60)
    counts = sorted(outputs["write"], key=lambda c: c["word"])
    assert counts == [
        {"word": "a", "count": 1},
        {"word": "cat", "count": 2},
        {"word": "hat", "count": 1},
        {"word": "the", "count": 2},
    ]
