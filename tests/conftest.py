from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from peer.local_servers import S3, KafkaBroker, Nats, Postgres
from peer.spark import session
from tests.postgres_support import SECRET, Database
from tests.support import ObjectStore, PeerProcess, ZooKeeperServer

_tenancies = itertools.count()

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
def kafka() -> Iterator[KafkaBroker]:
    """A Kafka-protocol broker for the session, its log in memory (tests that restart it make
    their own, with ``kafka_on_s3``)."""
    broker = KafkaBroker().start()
    yield broker
    broker.stop()


@pytest.fixture
def kafka_on_s3(object_store: ObjectStore) -> Iterator[KafkaBroker]:
    """A broker of its own whose log is in the session's object store, so that a kill -9 and
    a start keep it."""
    bucket = f"kafka-{next(_tenancies)}"
    object_store.filesystem().mkdir(bucket)
    s3 = S3(object_store.endpoint, object_store.ACCESS_KEY, object_store.SECRET_KEY, bucket)
    broker = KafkaBroker(s3=s3).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """A PostgreSQL server for the session; each test makes its own tables (or database)."""
    server = Postgres().start()
    yield server
    server.stop()


@pytest.fixture
def db(postgres: Postgres, monkeypatch: pytest.MonkeyPatch) -> Iterator[Database]:
    """Tables and replication slots of the test's own on the session's PostgreSQL, its
    password's secret in this process's environment (and so in the members' it starts)."""
    monkeypatch.setenv(f"ONYX_SECRET_{SECRET}", Postgres.PASSWORD)
    database = Database(postgres)
    yield database
    database.close()


@pytest.fixture(scope="session")
def nats() -> Iterator[Nats]:
    """A NATS server with JetStream for the session; each test makes its own streams."""
    server = Nats().start()
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
