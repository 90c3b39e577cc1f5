"""The shelf of unpacked code archives: what it removes of the cache it shares."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from peer.runtime.shipped_code import CodeShelf


def shelf(cache: Path) -> CodeShelf:
    return CodeShelf(cache, None, ThreadPoolExecutor(1), lambda: None)


def archives(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir())


def test_what_an_earlier_run_left_goes_once_no_job_uses_it(tmp_path):
    """A member killed, or one that left while its job ran on elsewhere, left archives in the
    cache: the next run's shelf removes each once no job uses it; a staging directory (a dot
    name) and what another member unpacked since are not its to remove."""
    for name in ("a" * 64, "b" * 64, ".staging-1"):
        (tmp_path / name).mkdir()
    codes = shelf(tmp_path)
    (tmp_path / ("c" * 64)).mkdir()  # another member's, unpacked after this shelf was made
    codes.keep_only(["b" * 64])
    assert archives(tmp_path) == [".staging-1", "b" * 64, "c" * 64]
    codes.keep_only([])
    assert archives(tmp_path) == [".staging-1", "c" * 64]


def test_a_missing_cache_is_an_empty_one(tmp_path):
    codes = shelf(tmp_path / "not-yet")
    codes.keep_only([])
    assert not (tmp_path / "not-yet").exists()
