"""How `onyx job list` shows a job's age."""

from __future__ import annotations

import pytest

from peer.cli import age_of


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(-5, "0s"), (0, "0s"), (59.9, "59s"), (60, "1m"), (3599, "59m"), (3600, "1h"),
     (86399, "23h"), (86400 * 12 + 5, "12d")],
)  # fmt: skip
def test_an_age_reads_in_its_largest_whole_unit(seconds, shown):
    assert age_of(seconds) == shown
