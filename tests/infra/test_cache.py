"""The rig's cache keeps what the current keys use and what other checkouts used lately, and
drops the rest: every change of the packages or pins would otherwise leave hundreds of MB."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.infra.rig import CACHE_KEEP_SECONDS, _cached


def artefact(cache: Path, name: str, *, complete: bool = True, age: float = 0) -> Path:
    directory = cache / name
    directory.mkdir()
    (directory / "payload").write_text(name)
    if complete:
        marker = directory / ".complete"
        marker.write_text("{}")
        then = time.time() - age
        os.utime(marker, (then, then))
    return directory


def test_old_and_broken_artefacts_of_the_kind_go_the_rest_stays(tmp_path):
    old = CACHE_KEEP_SECONDS + 3600
    current = artefact(tmp_path, "debs-trixie-aaaa", age=old)
    recent = artefact(tmp_path, "debs-trixie-bbbb", age=3600)
    unused = artefact(tmp_path, "debs-trixie-cccc", age=old)
    broken = artefact(tmp_path, "debs-trixie-dddd", complete=False)
    abandoned = artefact(tmp_path, "debs-trixie-eeee.tmp", complete=False)
    building = artefact(tmp_path, "debs-trixie-aaaa.tmp", complete=False)
    other_kind = artefact(tmp_path, "wheels-cp313-ffff", age=old)

    assert _cached(current)
    assert time.time() - (current / ".complete").stat().st_mtime < 60, "not marked used"
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {current.name, recent.name, building.name, other_kind.name}
    assert not {unused.name, broken.name, abandoned.name} & left


def test_a_missing_artefact_is_not_cached(tmp_path):
    assert not _cached(tmp_path / "base-trixie-0123")
    assert not _cached(artefact(tmp_path, "base-trixie-4567", complete=False))
