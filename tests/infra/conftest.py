"""Fixtures of the rollout tests: real test hosts built on this machine (tests/infra/rig.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.infra.rig import Rig, RigError


@pytest.fixture(scope="session")
def rig() -> Iterator[Rig]:
    """Three booted Debian 13 test hosts, shared by the session (see tests/infra/README.md).

    Fails (never skips) the tests that use it when this machine cannot make test hosts, with the
    reason. Tests may call ``rig.down()`` then ``rig.up()`` to get fresh hosts."""
    hosts = Rig(count=3)
    reason = None
    try:
        hosts.up()
    except RigError as e:
        reason = str(e)
    if reason is not None:
        pytest.fail(f"cannot build the test hosts: {reason}", pytrace=False)
    yield hosts
    hosts.down()
