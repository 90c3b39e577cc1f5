"""What the chaos tests share: a cluster of three peer groups on `onyx peer start` processes,
with the coordination modes a test asks for, and the pace of the paced job's count."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from peer import api
from tests.integration.test_scheduler_servers import SchedulerProcess
from tests.support import wait_for

SCALE_MODES = ["--join-direct", "--epidemic-log", "--async-allocation", "--workers", "2"]
"""The coordination modes built for large clusters (peer.cluster.modes), besides scheduling
servers, which need a server to ask: each group is a member running its peers in two worker
processes, as on a machine of two cores."""


@pytest.fixture(params=["classic"])
def modes(request, tmp_path) -> Iterator[list[str]]:
    """The coordination options of the cluster's groups. "at scale" is every mode built for
    large clusters, with a scheduling server of their own: the replacements of killed groups
    join directly, every group learns the log by gossip, and a kill takes a member with its
    workers."""
    if request.param == "classic":
        yield []
        return
    server = SchedulerProcess(tmp_path)
    yield [*SCALE_MODES, "--scheduler-servers", server.address]
    server.kill()


@pytest.fixture
def pace() -> float:
    """Seconds the job's count task sleeps every hundred events (tests.chaos.pacing)."""
    return 0.02


@pytest.fixture
def paced(pace, monkeypatch) -> None:
    """The pace, for the peers started after it."""
    monkeypatch.setenv("ONYX_TEST_PACE", str(pace))


@pytest.fixture
def cluster(modes, paced, start_peer, zookeeper, tenancy, *, tmp_path):
    """Three groups of two peers with a paced job's code, and a client on their log."""
    extra = ["--auto-down-unreachable-after", "1", "--state-dir", str(tmp_path / "state")]
    options = {"vpeers": 2, "extra": [*extra, *modes]}
    groups = [start_peer(**options) for _ in range(3)]
    store = api.connect(zookeeper.address, tenancy, create=True)
    wait_for(lambda: len(api.replica(store).peers) >= 6, 60, "6 peers")
    yield groups, lambda: groups.append(start_peer(**options)), store
    store.close()
