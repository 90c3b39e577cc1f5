"""Fixtures of the rollout tests: real test hosts built on this machine (tests/infra/rig.py), and
the cluster rolled out to them (tests/infra/cluster.py)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from tests.infra.cluster import (
    BIN,
    DEPLOY,
    Rollout,
    run_groups_of_an_earlier_release,
    write_inventory,
)
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


@pytest.fixture(scope="session")
def rollout(rig: Rig, request: pytest.FixtureRequest) -> Iterator[Rollout]:
    """The cluster rolled out once (site.yml) for the rollout tests: test_rollout.py checks the
    deployment, test_rollout_jobs.py runs jobs on it."""
    directory = rig.run_dir / "rollout"
    env = rig.ansible_env()
    env.update(
        ANSIBLE_CONFIG=str(DEPLOY / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    result = Rollout(rig, directory, write_inventory(rig, directory), env)
    run_groups_of_an_earlier_release(rig, rig.hosts[-1])
    with result.phase("site.yml (first run)"):
        result.site("site-first-run")
    yield result
    for host in rig.hosts:  # the hosts' own logs outlive them, beside the rig's (last-run-logs)
        journal = rig.ssh(host, "journalctl --no-pager -o short-precise -u 'onyx-*'", check=False)
        (rig.logs_dir / f"{host.name}-journal.txt").write_text(journal.stdout)
    # A peer member whose whole ZooKeeper ensemble is gone blocks in ZooKeeper calls and ignores
    # SIGTERM until systemd kills it (TimeoutStopSec, 50 s): that is what powering every host off
    # at once would do. Stop the members first, while ZooKeeper still answers.
    for host in rig.hosts:
        rig.ssh(host, "systemctl stop onyx-peer.service", check=False, timeout=90)
    timings = {**{f"rig {k}": v for k, v in rig.timings.items()}, **result.timings}
    summary = "rollout timings (s): " + ", ".join(f"{k} {v}" for k, v in timings.items())
    (rig.logs_dir / "rollout-timings.txt").write_text(f"{summary}\n")  # kept with the logs
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        print(f"\n{summary}", flush=True)
