"""The peer group's one SparkSession, made on first use from the group's configuration.

A group that never runs a Spark task never starts a JVM, so the session is built lazily, inside
the Spark pool: its first build takes seconds, and the group's thread must keep driving its other
peers and heartbeats meanwhile. Spark runs the jobs of several threads at once, so the pool has a
few workers; a batch's DataFrame work spends its time in the JVM, not under Python's GIL.

pyspark is an optional extra (``onyx-peer[spark]``), imported only when the session is built:
the CLI, the peer and pure-Python jobs run without it, and a job that needs it is refused at
submit (``peer.job.validate``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
"""Spark's JVM logs warnings and errors only, and none of its start-up chatter."""
WORKERS = 4
"""Threads that may run Spark work at once: one group's Spark tasks and sources."""

_DEFAULTS = {
    "spark.sql.warehouse.dir": str(Path("~/.onyx/spark-warehouse").expanduser()),
    "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG_CONFIG}",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
}


@dataclass
class _Group:
    """What one process holds: its settings, and the session and pool once started."""

    master: str = DEFAULT_MASTER
    conf: dict[str, str] = field(default_factory=dict)
    app: str = "onyx"
    session: SparkSession | None = None
    pool: ThreadPoolExecutor | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


_group = _Group()


def configure(
    master: str = DEFAULT_MASTER, conf: Mapping[str, str] | None = None, app: str = "onyx"
) -> None:
    """Where the group's session will run (``local[*]``, ``spark://HOST:7077``) and any Spark
    settings; takes effect at the session's first use, so call it before any Spark task runs."""
    with _group.lock:
        if _group.session is not None:
            raise RuntimeError("the Spark session is already running: configure it first")
        _group.master, _group.conf, _group.app = master, dict(conf or {}), app


def session() -> SparkSession:
    """The group's session, built now if this is its first use. Blocks for seconds the first
    time: call it from the Spark pool, never from a group's thread."""
    with _group.lock:
        if _group.session is None:
            if _group.master.startswith("local"):
                os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            from pyspark.sql import SparkSession  # noqa: PLC0415 (optional: onyx-peer[spark])

            builder = SparkSession.builder.master(_group.master).appName(_group.app)
            for key, value in {**_DEFAULTS, **_group.conf}.items():
                builder = builder.config(key, value)
            _group.session = builder.getOrCreate()
            _group.session.sparkContext.setLogLevel("ERROR")
        return _group.session


def submit(work: Callable[..., Any], *args: Any) -> Future[Any]:
    """Run ``work(*args)`` in the group's Spark pool."""
    with _group.lock:
        if _group.pool is None:
            _group.pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="spark")
        pool = _group.pool
    return pool.submit(work, *args)


def stop() -> None:
    """Stop the session and the pool, if they were ever started."""
    with _group.lock:
        session, pool = _group.session, _group.pool
        _group.session = _group.pool = None
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)
    if session is not None:
        session.stop()
