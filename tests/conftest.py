from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

from peer.spark import session
from tests.support import ObjectStore, PeerProcess, ZooKeeperServer

_tenancies = itertools.count()


RIG = "tests/infra/"
"""The tests on the rig's test hosts (tests/infra/README.md): they share one rig, which only one
process on the machine can hold at a time."""


class RigFirst(LoadScopeScheduling):
    """The suite's schedule under ``pytest -n``: tests one by one to whichever worker frees up,
    except the rig's, which go to one worker together, first (they are first in the collection:
    ``pytest_collection_modifyitems``). Together they take longer than any other worker's share,
    and the other workers run the rest of the suite meanwhile. (xdist's own ``loadgroup`` cannot
    do this under this pytest: the group it puts in a test's node id no longer reaches it.)"""

    def _split_scope(self, nodeid: str) -> str:
        return RIG if nodeid.startswith(RIG) else nodeid


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> RigFirst:
    return RigFirst(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not item.nodeid.startswith(RIG))  # stable: the rest keep order


# Property tests assert what holds, never how fast: a deadline or a too-slow check would fail
# them on a loaded machine (or beside other tests under ``pytest -n``) for no fault of the code.
settings.register_profile("untimed", deadline=None, suppress_health_check=(HealthCheck.too_slow,))
settings.load_profile("untimed")


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def object_store() -> Iterator[ObjectStore]:
    """A real S3 server for the session, its credentials in this process's environment (as the
    peer role's environment file puts them in a member's), so that every s3:// URL reaches it."""
    server = ObjectStore().start()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in server.env.items():
            patch.setenv(name, value)
        yield server
    server.stop()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The test session's SparkSession on local[2], the one every Spark task and plugin in this
    process uses; built once, since a JVM takes seconds to start."""
    warehouse = str(tmp_path_factory.mktemp("spark-warehouse"))
    session.configure(
        "local[2]", {"spark.ui.enabled": "false", "spark.sql.warehouse.dir": warehouse}
    )
    yield session.session()
    session.stop()


@pytest.fixture
def tenancy(request: pytest.FixtureRequest) -> str:
    return f"{request.node.name[:40].replace('[', '-').replace(']', '')}-{next(_tenancies)}"


@pytest.fixture
def start_peer(
    zookeeper: ZooKeeperServer, tenancy: str, tmp_path: Path
) -> Iterator[Callable[..., PeerProcess]]:
    """A factory of `onyx peer start` processes on this test's tenancy; all die at the end."""
    started: list[PeerProcess] = []

    def start(**options: object) -> PeerProcess:
        peer = PeerProcess(zookeeper.address, tenancy, tmp_path, **options)
        started.append(peer)
        return peer

    yield start
    for peer in started:
        peer.kill()
