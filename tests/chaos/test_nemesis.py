"""Generative chaos: seeded sequences of faults (a worker or a member killed -9, a member
stopped for seconds, downed, or leaving, ZooKeeper killed -9 and restarted on its data) against
three `onyx peer start` members running a keyed, windowed job with local recovery into two
exactly-once sinks (tests/chaos/nemesis.py). Whatever the sequence, the published output equals
a failure-free run's, no member logs a traceback, and, where the job has a checkpoint timeout,
the job never goes longer without a commit than its abandoned epochs and a recovery explain.

These are the short runs; bench/nemesis.py runs long ones. A failure prints its seed, its
sequence and the line that replays it: ``NEMESIS_SEED=S NEMESIS_FAULTS=N NEMESIS_MODES=M pytest
tests/chaos/test_nemesis.py``."""

from __future__ import annotations

import os

import pytest

from tests.chaos import nemesis

pytestmark = pytest.mark.integration

EVENTS = 100_000
"""A hundred seconds of input at the held pace: the faults land long before it ends."""
FAULTS = 4
RUNS = [(1, "classic"), (2, "scale"), (7, "classic")]
"""Seeds whose sequences, together, draw every kind of fault, in both coordination modes."""


def runs() -> list[tuple[int, str]]:
    """The runs above, or the one ``NEMESIS_SEED`` names (in ``NEMESIS_MODES``, else both)."""
    if "NEMESIS_SEED" not in os.environ:
        return RUNS
    seed = int(os.environ["NEMESIS_SEED"])
    modes = os.environ.get("NEMESIS_MODES")
    return [(seed, m) for m in ([modes] if modes else nemesis.MODES)]


@pytest.fixture(scope="module")
def expected(tmp_path_factory) -> nemesis.Expected:
    return nemesis.reference(tmp_path_factory.mktemp("reference"), EVENTS)


@pytest.mark.timeout(1200)
@pytest.mark.parametrize(("seed", "modes"), runs())
def test_a_sequence_of_faults_changes_nothing_in_the_published_output(
    seed, modes, expected, tmp_path
):
    faults = int(os.environ.get("NEMESIS_FAULTS", FAULTS))
    paced = os.environ.get("NEMESIS_PACED", "input")
    outcome = nemesis.run(
        seed, faults, modes=modes, events=EVENTS, base=tmp_path, expected=expected, paced=paced
    )
    assert not outcome.problems, outcome.describe()
    assert len(outcome.landed) == faults, outcome.describe()
    assert (outcome.lost, outcome.duplicated) == (0, 0), outcome.describe()
