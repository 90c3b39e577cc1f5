"""The code base is lint-clean and formatted: CI fails otherwise."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import REPO


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]])
def test_ruff(command):
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command],
        capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
