"""Dotted paths: both spellings reach the same object, and failures say why."""

from __future__ import annotations

import pytest

from peer.job.imports import ImportPathError, resolve, split
from tests.unit.job import fixtures_fns


def test_colon_and_dot_spellings():
    assert resolve("tests.unit.job.fixtures_fns:split") is fixtures_fns.split
    assert resolve("tests.unit.job.fixtures_fns.split") is fixtures_fns.split


def test_colon_spelling_reaches_nested_attributes():
    assert split("os.path:join") == ("os.path", ("join",))
    assert split("json:JSONDecoder.decode") == ("json", ("JSONDecoder", "decode"))
    assert resolve("json:JSONDecoder.decode").__name__ == "decode"


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("json:nope", "module 'json' has no attribute 'nope'"),
        ("json:JSONDecoder.nope", "object 'json.JSONDecoder' has no attribute 'nope'"),
        ("no_such_pkg.mod:f", "no module named 'no_such_pkg'"),
        ("split", "is not 'package.module:attribute' or 'package.module.attribute'"),
        ("json:", "is not 'package.module:attribute' or 'package.module.attribute'"),
        ("a-b:c", "is not 'package.module:attribute' or 'package.module.attribute'"),
    ],
)
def test_failures_say_why(path, reason):
    with pytest.raises(ImportPathError) as caught:
        resolve(path)
    assert str(caught.value) == reason
