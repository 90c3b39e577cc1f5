"""The type check of peer/: the checker, at the strictness pyproject.toml's ``[tool.mypy]``
states, finds no error. Run here rather than as a step of its own, so that the one test command
covers it; its cache lives under the repository (.mypy_cache), so a second run checks only what
changed."""

from __future__ import annotations

from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parents[2]


def test_peer_type_checks() -> None:
    report, errors, status = api.run(["--config-file", str(ROOT / "pyproject.toml"),
                                      "--cache-dir", str(ROOT / ".mypy_cache"),
                                      str(ROOT / "peer")])  # fmt: skip
    assert status == 0, f"the type check of peer/ failed:\n{report}{errors}"
