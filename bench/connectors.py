"""The connectors: Kafka to a keyed running count to Kafka, exactly once, on the engine against
Quix Streams and Bytewax 0.21 in the same run, on one Tansu broker; and the PostgreSQL output
against a plain COPY.

The computation, the same on every side: JSON events ``{"user", "ts"}`` from an input topic of
four partitions, keyed by user; each user's running count kept in keyed state; one record
``{"user", "ts", "count"}`` per event written to an output topic, keyed by user. Not a count
per fixed event-time window: Quix closes a window only when a later record of the same
partition passes its end (it never closes the last ones at the end of a bounded input), and
Bytewax's event clock also moves with the system clock, so windows would not close alike on the
three; a running count per record they all do identically, and it checks every record.

- The engine: ``onyx run`` of a job (peer.plugins.kafka:input, ``RunningCount`` below grouped
  by user, peer.plugins.kafka:exactly_once_output with a transactional id and a staging
  directory), its barrier period --commit-interval, its checkpoints in a directory
  (``--checkpoints``), as Bytewax's SQLite file and Quix's RocksDB are on disk.
- Quix Streams (bench/connectors_quix.py): ``processing_guarantee="exactly-once"``, its state
  in RocksDB with a changelog topic, committing every --commit-interval.
- Bytewax (bench/connectors_bytewax.py): its KafkaSource and KafkaSink, SQLite recovery at an
  epoch interval of --commit-interval. Its guarantee is at least once: its sink produces
  outside transactions, and a resume writes the resumed epoch's records again.

Throughput: --events events are produced to one input topic before any side runs (not timed:
every side reads the same topic); each run reads it from its start into a fresh output topic,
bounded (the engine's input ``stop_at_end``, Quix's ``run(count=N)``, Bytewax's
``tail=False``), in a process of its own, nothing else running meanwhile. A run's time is from
starting its process to its exit, which is when its output is complete; its CPU seconds are the
process's own and its children's (``os.wait4``). The figure is events per CPU second (per core),
events per wall second beside it; --repeat runs a side, the sides taking turns, medians and
ranges given. The broker runs throughout and serves all: its CPU is counted for nobody (the
transactional sides make it do more than Bytewax's plain produce does). Every run's output is
read back by a read_committed consumer and must be exactly the oracle's (each event's count,
computed here), or the bench fails: a fast wrong answer does not count. Quix's wall time holds
about 23 s of joining its consumer group on Tansu (a bare librdkafka consumer's ``subscribe``
takes as long there; the engine and Bytewax assign partitions and join no group), so its
events per wall second say little; waiting costs no CPU, so its events per core hold.

Latency: each side again, unbounded, on a fresh pair of topics, at half the engine's median
events per wall second: a paced producer writes events whose ``ts`` is their produce time
(microseconds), a read_committed consumer notes when each output record arrives; p50 and p99
of arrival less ``ts`` over --latency-seconds of paced events. Before them, a trickle (an
event each 50 ms) until the side's first output, then until it has answered every one, then a
second more: its start-up (Quix's group join) is over and nothing is queued when the clock
starts; the trickle's records are checked, not timed. The same-run baseline is the broker's
floor: no side, a consumer with librdkafka's defaults (as each side's input has them) reading
the paced input topic; Tansu holds a fetch that finds nothing for a while even when records
come meanwhile, so its default 500 ms ``fetch.wait.max.ms`` alone costs about 100 ms at p50
(the measuring consumers ask for 10 ms). A transactional sink's records are visible at its
commit, so the engine's and Quix's latencies include their commit interval
(--commit-interval, the same on all three); Bytewax's sink is not transactional, so its
records are visible as produced.

Topics are made with ``retention.ms`` set (to -1, which a broker keeping its log in memory
does anyway): Tansu describes only the settings a topic was made with, and Quix reads the
input's to make its changelog topic.

PostgreSQL: ``peer.plugins.postgres:output`` (exactly once, append mode) writing
--postgres-rows rows (--events unless given) from the memory input (``bid_row`` makes each a
bid of five columns) into a table of a ``peer.local_servers.Postgres`` server through ``onyx
run``, against psycopg's COPY of the same rows into a table in one transaction, each from its
process's start to its exit (the engine's start-up, about 1 s, included), in rows per wall
second; each table is then checked to hold exactly the rows.

Run: .venv-bench/bin/python bench/connectors.py [--events 200000] [--repeat 3] [--users 1000]
     [--commit-interval 1] [--latency-seconds 10] [--postgres-rows N] [--quick]
--quick: 20,000 events, one run of each, 3 s paced; about a minute and a half.
The last line of output is one JSON document holding every figure.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
"""The interpreter's venv: every side runs on it (`.venv-bench`, where Bytewax installs)."""
SIDES = ("engine", "quixstreams", "bytewax")
PARTITIONS = 4
STRIDE = 7919
"""Event i's user is ``u{(i * STRIDE) % users}``: a prime that divides no user count used here,
so the users come round evenly."""


# -- the engine's code, imported by `onyx run` ----------------------------------------------------


class RunningCount:
    """Each event with its user's running count, in keyed state the engine keeps."""

    def open(self, state: Any) -> None:
        self.count = state.value_state("count", default=0)

    def __call__(self, event: dict[str, Any]) -> dict[str, Any]:
        count = self.count.get() + 1
        self.count.set(count)
        return {"user": event["user"], "ts": event["ts"], "count": count}


def bid_row(segment: dict[str, Any]) -> dict[str, Any]:
    """The PostgreSQL bench's row ``n``: a bid, as Nexmark's have them (the baseline makes the
    very same rows)."""
    n = segment["n"]
    return {"id": n, "auction": 1000 + n % 997, "bidder": 2000 + n % 9973,
            "price": 100 + (n * 31) % 100_000, "channel": CHANNELS[n % len(CHANNELS)]}  # fmt: skip


CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
TABLE_COLUMNS = "id bigint, auction bigint, bidder bigint, price bigint, channel text"


# -- Kafka --------------------------------------------------------------------------------------


def new_topic(bootstrap: str, prefix: str, partitions: int = PARTITIONS) -> str:
    """A topic of its own for one run, its ``retention.ms`` set (see the module's docstring)."""
    from confluent_kafka.admin import AdminClient, NewTopic  # noqa: PLC0415

    name = f"{prefix}-{time.monotonic_ns()}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    made = NewTopic(name, partitions, 1, config={"retention.ms": "-1"})
    for future in admin.create_topics([made]).values():
        future.result(30)
    return name


def producer(bootstrap: str, **config: Any) -> Any:
    """An idempotent producer: each partition keeps the order events were produced in, which
    the oracle's counts rely on."""
    from confluent_kafka import Producer  # noqa: PLC0415

    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **config})


def send(out: Any, topic: str, event: dict[str, Any]) -> None:
    while True:
        try:
            out.produce(topic, json.dumps(event).encode(), event["user"].encode())
            return
        except BufferError:
            out.poll(0.05)


def produce_events(bootstrap: str, topic: str, events: Iterable[dict[str, Any]]) -> None:
    out = producer(bootstrap, **{"linger.ms": 20})
    for event in events:
        send(out, topic, event)
    if out.flush(120) != 0:
        raise RuntimeError(f"events left unacknowledged on {topic}")


def event(i: int, users: int) -> dict[str, Any]:
    return {"user": f"u{(i * STRIDE) % users}", "ts": i}


Answer = tuple[str, int, int]
"""An output record: user, ts, count."""


def oracle(events: Iterable[tuple[str, int]]) -> collections.Counter[Answer]:
    """Every output record due for these events, in produce order: each with the count of its
    user's events up to it (each user's events are in one partition, in that order)."""
    counts: collections.Counter[str] = collections.Counter()
    due: collections.Counter[Answer] = collections.Counter()
    for user, ts in events:
        counts[user] += 1
        due[(user, ts, counts[user])] += 1
    return due


def answer(value: bytes) -> Answer:
    row = json.loads(value)
    return row["user"], row["ts"], row["count"]


def checked(side: str, got: collections.Counter[Answer], due: collections.Counter[Answer]) -> None:
    """The output is exactly the oracle's: none missing, none twice, none wrong."""
    if got == due:
        return
    missing, extra = due - got, got - due
    raise RuntimeError(f"{side} answered wrong: {sum(missing.values())} records missing, "
                       f"{sum(extra.values())} extra or wrong (e.g. "
                       f"{next(iter(extra), next(iter(missing), None))})")  # fmt: skip


def consumer(bootstrap: str, topic: str, **config: Any) -> Any:
    """A read_committed consumer of every partition of ``topic`` from its start."""
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                       "enable.auto.commit": False, "isolation.level": "read_committed",
                       **config})  # fmt: skip
    partitions = reader.list_topics(topic, timeout=10).topics[topic].partitions
    reader.assign([TopicPartition(topic, p, 0) for p in partitions])
    return reader


def read_output(bootstrap: str, topic: str, timeout: float = 120) -> collections.Counter[Answer]:
    """Every record of ``topic`` a read_committed reader sees, each partition read to the end a
    fetch finds."""
    from confluent_kafka import KafkaError  # noqa: PLC0415

    reader = consumer(bootstrap, topic, **{"enable.partition.eof": True})
    left = set(range(len(reader.assignment())))
    got: collections.Counter[Answer] = collections.Counter()
    deadline = time.monotonic() + timeout
    try:
        while left:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic} not read to its end in {timeout:g} s")
            for message in reader.consume(10_000, 0.2):
                failure = message.error()
                if failure is None:
                    got[answer(message.value())] += 1
                elif failure.code() == KafkaError._PARTITION_EOF:
                    left.discard(message.partition())
                else:
                    raise RuntimeError(f"reading {topic}: {failure}")
    finally:
        reader.close()
    return got


# -- the sides ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """What a side's process is given."""

    bootstrap: str
    source: str
    target: str
    events: int
    """Events to read before it ends; 0: it runs until stopped."""
    interval: float
    scratch: Path


def engine_argv(s: Setting) -> list[str]:
    """``onyx run`` of the job, written into the scratch directory."""
    reading = {"bootstrap": s.bootstrap, "topic": s.source, "stop_at_end": s.events > 0}
    writing = {
        "bootstrap": s.bootstrap,
        "topic": s.target,
        "key": "user",
        "transactional_id": f"tx-{s.target}",
        "staging": str(s.scratch / "staging"),
    }
    job = {
        "workflow": [["read", "count"], ["count", "write"]],
        "catalog": [
            {"name": "read", "kind": "input", "plugin": "peer.plugins.kafka:input",
             "params": reading, "n_peers": 1, "batch_size": BATCH},
            {"name": "count", "kind": "function", "fn": "bench.connectors:RunningCount",
             "group_by_key": "user", "n_peers": 1, "batch_size": BATCH},
            {"name": "write", "kind": "output",
             "plugin": "peer.plugins.kafka:exactly_once_output", "params": writing,
             "n_peers": 1, "batch_size": BATCH},
        ],
        "barrier_period": s.interval,
    }  # fmt: skip
    path = s.scratch / "job.json"
    path.write_text(json.dumps(job))
    return [str(BIN / "onyx"), "run", str(path), "--checkpoints", str(s.scratch / "checkpoints")]


BATCH = 1000
"""The engine's tasks' batch size (Bytewax's KafkaSource reads 1,000 a batch too; Quix takes
one record at a time)."""


def quix_argv(s: Setting) -> list[str]:
    return [str(BIN / "python"), str(REPO / "bench" / "connectors_quix.py"),
            "--bootstrap", s.bootstrap, "--input", s.source, "--output", s.target,
            "--group", f"g-{s.target}", "--state-dir", str(s.scratch / "quix-state"),
            "--events", str(s.events), "--commit-interval", str(s.interval)]  # fmt: skip


def bytewax_argv(s: Setting) -> list[str]:
    return [str(BIN / "python"), str(REPO / "bench" / "connectors_bytewax.py"),
            "--bootstrap", s.bootstrap, "--input", s.source, "--output", s.target,
            "--recovery", str(s.scratch / "recovery"), "--events", str(s.events),
            "--commit-interval", str(s.interval)]  # fmt: skip


ARGV: dict[str, Callable[[Setting], list[str]]] = {
    "engine": engine_argv, "quixstreams": quix_argv, "bytewax": bytewax_argv}  # fmt: skip
STOP = {"engine": signal.SIGINT, "quixstreams": signal.SIGTERM, "bytewax": signal.SIGINT}
"""How each side is asked to stop when it runs unbounded."""


def environment() -> dict[str, str]:
    """The sides' environment: the repository importable (the engine's job names
    ``bench.connectors``), a secret for the PostgreSQL output."""
    return {**os.environ, "PYTHONPATH": str(REPO), "ONYX_SECRET_BENCH_PG": "onyx",
            "PYTHONWARNINGS": "ignore"}  # fmt: skip


@dataclass
class Process:
    """A side's process: started, and when it ends its wall and CPU seconds."""

    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes] = field(init=False)
    started: float = field(init=False)
    wall_s: float = 0.0
    cpu_s: float = 0.0
    code: int | None = None

    def __post_init__(self) -> None:
        with self.log.open("wb") as out:
            self.started = time.perf_counter()
            self.popen = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, cwd=REPO,
                                          env=environment())  # fmt: skip

    def wait(self) -> int:
        """Its exit status, with the CPU seconds it and the children it reaped used."""
        _, status, usage = os.wait4(self.popen.pid, 0)
        self.wall_s = time.perf_counter() - self.started
        self.cpu_s = usage.ru_utime + usage.ru_stime
        self.code = os.waitstatus_to_exitcode(status)
        self.popen.returncode = self.code
        return self.code

    def running(self) -> bool:
        if self.code is not None:
            return False
        pid, status, _ = os.wait4(self.popen.pid, os.WNOHANG)
        if pid == 0:
            return True
        self.code = os.waitstatus_to_exitcode(status)
        self.popen.returncode = self.code
        return False

    def stop(self, number: int) -> None:
        """Asked to stop with ``number``; killed if it has not within 30 s."""
        if not self.running():
            return
        self.popen.send_signal(number)
        deadline = time.monotonic() + 30
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.running():
            self.popen.kill()
            self.wait()

    def failed(self, side: str) -> RuntimeError:
        tail = self.log.read_text(errors="replace")[-3000:]
        return RuntimeError(f"{side} exited {self.code}; the end of its output:\n{tail}")


@dataclass(frozen=True)
class Run:
    events: int
    cpu_s: float
    wall_s: float

    @property
    def per_core(self) -> float:
        return self.events / self.cpu_s

    @property
    def per_wall_s(self) -> float:
        return self.events / self.wall_s


def throughput_run(side: str, bootstrap: str, source: str, *, events: int, interval: float,
                   due: collections.Counter[Answer], scratch: Path) -> Run:  # fmt: skip
    """The side over the pre-filled ``source`` into a fresh output topic, its output checked."""
    target = new_topic(bootstrap, f"out-{side}")
    place = Path(tempfile.mkdtemp(prefix=f"{side}-", dir=scratch))
    process = Process(ARGV[side](Setting(bootstrap, source, target, events, interval, place)),
                      place / "log.txt")  # fmt: skip
    if process.wait() != 0:
        raise process.failed(side)
    checked(side, read_output(bootstrap, target), due)
    return Run(events, process.cpu_s, process.wall_s)


# -- latency --------------------------------------------------------------------------------------


class Arrivals:
    """A read_committed consumer in a thread of its own, noting when each record of ``topic``
    comes: ``consume`` with no wait, 1 ms naps when nothing has, so an arrival is stamped within
    about a millisecond of librdkafka having it. ``config`` adds to librdkafka's defaults."""

    def __init__(self, bootstrap: str, topic: str, parse: Callable[[bytes], Answer],
                 **config: Any) -> None:  # fmt: skip
        self.reader = consumer(bootstrap, topic, **config)
        self.parse = parse
        self.got: list[tuple[Answer, float]] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while not self.done.is_set():
            messages = self.reader.consume(10_000, 0)
            now = time.time()
            if not messages:
                time.sleep(0.001)
                continue
            self.got += [(self.parse(m.value()), now) for m in messages if m.error() is None]

    def close(self) -> None:
        self.done.set()
        self.thread.join()
        self.reader.close()


def micros() -> int:
    return time.time_ns() // 1000


def as_read(value: bytes) -> Answer:
    """An input event as the broker floor's reader has it: no count."""
    row = json.loads(value)
    return row["user"], row["ts"], 0


FLOOR = "broker"
"""The latency baseline's name: no side, a plain consumer of the paced input topic."""


@dataclass
class Paced:
    """A paced run's producer: events whose ``ts`` is their produce time in microseconds
    (strictly increasing, so each names one event), and what it sent."""

    bootstrap: str
    topic: str
    users: int
    answered: Callable[[], bool]
    """Whether the first answer has come."""
    out: Any = field(init=False)
    sent: list[tuple[str, int]] = field(default_factory=list)
    last: int = 0

    def __post_init__(self) -> None:
        self.out = producer(self.bootstrap, **{"linger.ms": 0})

    def emit(self) -> None:
        self.last = max(micros(), self.last + 1)
        user = f"u{(len(self.sent) * STRIDE) % self.users}"
        send(self.out, self.topic, {"user": user, "ts": self.last})
        self.sent.append((user, self.last))

    def trickle(self, until: Callable[[], bool], seconds: float = 180) -> None:
        """An event every 50 ms until the first answer, then none until ``until()``."""
        deadline = time.monotonic() + seconds
        while not until():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the first {len(self.sent)} events not answered in "
                                   f"{seconds:g} s")  # fmt: skip
            if not self.answered():
                self.emit()
            self.out.poll(0)
            time.sleep(0.05)

    def paced(self, rate: float, count: int) -> int:
        """``count`` events at ``rate`` a second, each at its due time; the ts they start at."""
        start, since = time.perf_counter(), micros()
        for i in range(count):
            while (wait := start + i / rate - time.perf_counter()) > 0:
                self.out.poll(min(wait, 0.001))
            self.emit()
        if self.out.flush(60) != 0:
            raise RuntimeError(f"paced events left unacknowledged on {self.topic}")
        return since


def latency_run(side: str, bootstrap: str, *, rate: float, seconds: float, users: int,
                interval: float, scratch: Path) -> dict[str, Any]:  # fmt: skip
    """The side unbounded on a fresh pair of topics: a trickle of events (one each 50 ms) until
    its first output comes, then until it has answered them all, then a second more of the
    trickle; then ``rate`` events a second for ``seconds``. The latencies of those paced events'
    records; every record, the trickle's too, checked against the oracle. The broker floor
    (``FLOOR``) runs no side: a consumer with librdkafka's defaults, as every side's input has
    them, reads the input topic."""
    source = new_topic(bootstrap, f"in-{side}")
    if side == FLOOR:
        arrivals, process = Arrivals(bootstrap, source, as_read), None
    else:
        target = new_topic(bootstrap, f"out-{side}")
        place = Path(tempfile.mkdtemp(prefix=f"{side}-paced-", dir=scratch))
        arrivals = Arrivals(bootstrap, target, answer, **{"fetch.wait.max.ms": 10})
        process = Process(ARGV[side](Setting(bootstrap, source, target, 0, interval, place)),
                          place / "log.txt")  # fmt: skip
    producing = Paced(bootstrap, source, users, lambda: bool(arrivals.got))

    def caught_up() -> bool:
        if process is not None and not process.running():
            raise process.failed(side)
        return bool(producing.sent) and len(arrivals.got) >= len(producing.sent)

    try:
        producing.trickle(caught_up)
        settle = time.monotonic() + 1.0
        while time.monotonic() < settle:
            producing.emit()
            producing.out.poll(0)
            time.sleep(0.05)
        count = int(rate * seconds)
        since = producing.paced(rate, count)
        deadline = time.monotonic() + 60 + 2 * interval
        while not caught_up() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        if process is not None:
            process.stop(STOP[side])
        arrivals.close()
    due = (oracle(producing.sent) if process is not None else
           collections.Counter((user, ts, 0) for user, ts in producing.sent))  # fmt: skip
    checked(f"{side} (paced)", collections.Counter(a for a, _ in arrivals.got), due)
    lags = [(at * 1e6 - ts) / 1000 for (_, ts, _), at in arrivals.got if ts >= since]
    cuts = statistics.quantiles(lags, n=100)
    return {"p50_ms": cuts[49], "p99_ms": cuts[98], "max_ms": max(lags), "events": count}


# -- PostgreSQL -----------------------------------------------------------------------------------


def engine_postgres_argv(
    rows: int, port: int, table: str, interval: float, place: Path
) -> list[str]:
    sink = {"dsn": f"postgresql://onyx@127.0.0.1:{port}/postgres",
            "secrets": {"password": "BENCH_PG"}, "table": table, "mode": "append",
            "staging": str(place / "staging")}  # fmt: skip
    job = {
        "workflow": [["read", "row"], ["row", "write"]],
        "catalog": [
            {"name": "read", "kind": "input", "plugin": "peer.plugins.memory:input",
             "params": {"count": rows}, "n_peers": 1, "batch_size": BATCH},
            {"name": "row", "kind": "function", "fn": "bench.connectors:bid_row",
             "n_peers": 1, "batch_size": BATCH},
            {"name": "write", "kind": "output", "plugin": "peer.plugins.postgres:output",
             "params": sink, "n_peers": 1, "batch_size": BATCH},
        ],
        "barrier_period": interval,
    }  # fmt: skip
    path = place / "job.json"
    path.write_text(json.dumps(job))
    return [str(BIN / "onyx"), "run", str(path)]


def copy_rows(dsn: str, table: str, rows: int) -> None:
    """The baseline, in a process of its own: the same rows made and copied into ``table`` with
    psycopg's COPY, in one transaction."""
    import psycopg  # noqa: PLC0415

    columns = ("id", "auction", "bidder", "price", "channel")
    with psycopg.connect(dsn) as db, db.cursor() as cursor:
        with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for n in range(rows):
                row = bid_row({"n": n})
                copy.write_row([row[c] for c in columns])
        db.commit()


def postgres_exported() -> bool:
    try:
        from peer.plugins import postgres  # noqa: PLC0415
    except ImportError:
        return False
    return callable(getattr(postgres, "output", None))


def postgres_runs(rows: int, repeat: int, interval: float, scratch: Path) -> dict[str, Any]:
    """The exactly-once output against COPY, each from its process's start to its exit, taking
    turns; each table then holds exactly the rows (their count and the sum of their ids)."""
    import psycopg  # noqa: PLC0415

    from peer.local_servers import Postgres  # noqa: PLC0415

    server = Postgres(Path(tempfile.mkdtemp(prefix="postgres-", dir=scratch))).start()
    runs: dict[str, list[Run]] = {"engine": [], "copy": []}
    try:
        for turn in range(repeat):
            for side, made in runs.items():
                table = f"bench_{side}_{turn}"
                with psycopg.connect(server.dsn, autocommit=True) as db:
                    db.execute(f"CREATE TABLE {table} ({TABLE_COLUMNS})")
                place = Path(tempfile.mkdtemp(prefix=f"pg-{side}-", dir=scratch))
                argv = (engine_postgres_argv(rows, server.port, table, interval, place)
                        if side == "engine" else
                        [str(BIN / "python"), str(Path(__file__).resolve()), "--copy-into",
                         server.dsn, table, str(rows)])  # fmt: skip
                process = Process(argv, place / "log.txt")
                if process.wait() != 0:
                    raise process.failed(f"PostgreSQL {side}")
                with psycopg.connect(server.dsn) as db:
                    count, ids = db.execute(f"SELECT count(*), sum(id) FROM {table}").fetchone()
                if (count, ids) != (rows, rows * (rows - 1) // 2):
                    raise RuntimeError(f"PostgreSQL {side}: {count} rows (ids summing to {ids}),"
                                       f" not {rows}")  # fmt: skip
                made.append(Run(rows, process.cpu_s, process.wall_s))
    finally:
        server.stop()
    return {side: spread([r.per_wall_s for r in made]) for side, made in runs.items()}


# -- the bench ------------------------------------------------------------------------------------


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


@contextmanager
def broker(scratch: Path) -> Iterator[str]:
    from peer.local_servers import KafkaBroker  # noqa: PLC0415

    kafka = KafkaBroker(scratch / "kafka").start()
    try:
        yield kafka.bootstrap
    finally:
        kafka.stop()


def available(side: str) -> str | None:
    """Why a side cannot run in this interpreter, or None."""
    module = {"engine": "confluent_kafka", "quixstreams": "quixstreams", "bytewax": "bytewax"}
    probe = subprocess.run([str(BIN / "python"), "-c", f"import {module[side]}"],
                           capture_output=True, check=False)  # fmt: skip
    if probe.returncode != 0:
        return f"{module[side]} is not installed in {BIN.parent}"
    return None


def measure(args: argparse.Namespace) -> dict[str, Any]:
    missing = {side: why for side in SIDES if (why := available(side)) is not None}
    if "engine" in missing:
        raise SystemExit(f"cannot run: {missing['engine']} (the connectors extra)")
    sides = [side for side in SIDES if side not in missing]
    figures: dict[str, Any] = {"events": args.events, "users": args.users,
                               "commit_interval_s": args.commit_interval,
                               "postgres_rows": args.postgres_rows, "not_run": missing}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="connectors-bench-") as directory:
        scratch = Path(directory)
        os.chmod(scratch, 0o755)  # PostgreSQL runs as its own user when this is root
        with broker(scratch) as bootstrap:
            figures["throughput"] = throughput(args, bootstrap, sides, scratch)
            rate = figures["throughput"]["engine"]["per_wall_s"]["median"] / 2
            figures["latency"] = latency(args, bootstrap, sides, rate, scratch)
        if postgres_exported():
            figures["postgres"] = postgres_runs(args.postgres_rows, args.repeat,
                                                args.commit_interval, scratch)  # fmt: skip
        else:
            figures["postgres"] = None
            figures["postgres_note"] = ("peer.plugins.postgres does not export output yet: "
                                        "not measured")  # fmt: skip
    figures |= headline(figures)
    return figures


def throughput(args: argparse.Namespace, bootstrap: str, sides: list[str],
               scratch: Path) -> dict[str, Any]:  # fmt: skip
    """--events events produced once, then every side over them --repeat times, taking turns
    so that a slow spell of the shared machine falls on all alike."""
    source = new_topic(bootstrap, "events")
    made = [event(i, args.users) for i in range(args.events)]
    produce_events(bootstrap, source, made)
    due = oracle((e["user"], e["ts"]) for e in made)
    runs: dict[str, list[Run]] = {side: [] for side in sides}
    for _ in range(args.repeat):
        for side in sides:
            run = throughput_run(side, bootstrap, source, events=args.events,
                                 interval=args.commit_interval, due=due,
                                 scratch=scratch)  # fmt: skip
            runs[side].append(run)
            print(f"  {side}: {run.per_core:,.0f} events/s per core, {run.wall_s:.1f} s",
                  file=sys.stderr, flush=True)  # fmt: skip
    return {
        side: {"per_core": spread([r.per_core for r in made]),
               "per_wall_s": spread([r.per_wall_s for r in made]),
               "runs_per_core": [round(r.per_core) for r in made],
               "cpu_s": [round(r.cpu_s, 2) for r in made],
               "wall_s": [round(r.wall_s, 2) for r in made]}
        for side, made in runs.items()
    }  # fmt: skip


def latency(args: argparse.Namespace, bootstrap: str, sides: list[str], rate: float,
            scratch: Path) -> dict[str, Any]:  # fmt: skip
    """Each side paced at ``rate``, --repeat times, the broker floor first."""
    found: dict[str, Any] = {}
    for side in (FLOOR, *sides):
        paced = [latency_run(side, bootstrap, rate=rate, seconds=args.latency_seconds,
                             users=args.users, interval=args.commit_interval, scratch=scratch)
                 for _ in range(args.repeat)]  # fmt: skip
        found[side] = {key: spread([p[key] for p in paced])
                       for key in ("p50_ms", "p99_ms", "max_ms")}  # fmt: skip
        print(f"  {side} paced: p99 {found[side]['p99_ms']['median']:.1f} ms", file=sys.stderr,
              flush=True)  # fmt: skip
    return {"rate": round(rate), "seconds": args.latency_seconds, "sides": found}


def headline(figures: dict[str, Any]) -> dict[str, Any]:
    """The figures the issue names (medians), their spreads, and their same-run baselines."""
    core = {side: at["per_core"] for side, at in figures["throughput"].items()}
    lat = figures["latency"]["sides"]
    postgres = figures["postgres"] or {}
    engine = core["engine"]["median"]

    def ratio(side: str) -> float | None:
        return engine / core[side]["median"] if side in core else None

    names = {"engine": "kafka", "quixstreams": "quixstreams", "bytewax": "bytewax",
             FLOOR: "broker_floor"}  # fmt: skip
    spreads: dict[str, Any] = {f"{names[side]}_events_per_s_per_core": at
                               for side, at in core.items()}  # fmt: skip
    for side, at in lat.items():
        spreads[f"{names[side]}_p50_ms"] = at["p50_ms"]
        spreads[f"{names[side]}_p99_ms"] = at["p99_ms"]
    for side, name in (
        ("engine", "postgres_sink_rows_per_s"),
        ("copy", "postgres_copy_rows_per_s"),
    ):
        if side in postgres:
            spreads[name] = postgres[side]
    medians = {name: at["median"] for name, at in spreads.items()}
    return {
        "kafka_events_per_s_per_core": engine,
        "kafka_ratio_to_quixstreams": ratio("quixstreams"),
        "kafka_ratio_to_bytewax": ratio("bytewax"),
        "kafka_p99_ms": medians["kafka_p99_ms"],
        "quixstreams_p99_ms": medians.get("quixstreams_p99_ms"),
        "postgres_sink_rows_per_s": medians.get("postgres_sink_rows_per_s"),
        **{name: value for name, value in medians.items() if name not in (
            "kafka_events_per_s_per_core", "kafka_p99_ms", "quixstreams_p99_ms",
            "postgres_sink_rows_per_s")},
        "spreads": spreads,
    }  # fmt: skip


def report(figures: dict[str, Any]) -> None:
    print(f"\nKafka -> running count per user -> Kafka, {figures['events']:,} events over "
          f"{figures['users']:,} users, {PARTITIONS} partitions, commit interval "
          f"{figures['commit_interval_s']:g} s; from process start to exit:")  # fmt: skip
    for side, at in figures["throughput"].items():
        core, wall = at["per_core"], at["per_wall_s"]
        print(f"  {side:12} {core['median']:>9,.0f} events/s per core ({core['min']:,.0f} to "
              f"{core['max']:,.0f}); {wall['median']:>8,.0f} events/s wall ({wall['min']:,.0f} "
              f"to {wall['max']:,.0f}); CPU s {at['cpu_s']}")  # fmt: skip
    for side, why in figures["not_run"].items():
        print(f"  {side:12} not run: {why}")
    for name in ("quixstreams", "bytewax"):
        ratio = figures[f"kafka_ratio_to_{name}"]
        if ratio is not None:
            print(f"  engine / {name}: {ratio:.2f} per core")
    lat = figures["latency"]
    print(f"\nproduce to read_committed consume, paced at {lat['rate']:,} events/s (half the "
          f"engine's median wall rate) for {lat['seconds']:g} s:")  # fmt: skip
    for side, at in lat["sides"].items():
        p50, p99 = at["p50_ms"], at["p99_ms"]
        if side == FLOOR:
            print("  broker floor: a consumer of the input topic with librdkafka's defaults, "
                  "as each side's input reads it")  # fmt: skip
        print(f"  {side:12} p50 {p50['median']:7.1f} ms ({p50['min']:.1f} to {p50['max']:.1f}),"
              f" p99 {p99['median']:7.1f} ms ({p99['min']:.1f} to {p99['max']:.1f})")  # fmt: skip
    postgres = figures["postgres"]
    if postgres is None:
        print(f"\nPostgreSQL: {figures['postgres_note']}")
        return
    print(f"\nPostgreSQL, {figures['postgres_rows']:,} rows, from process start to exit:")
    for side, label in (("engine", "exactly-once output"), ("copy", "psycopg COPY, baseline")):
        at = postgres[side]
        print(f"  {label:24} {at['median']:>9,.0f} rows/s ({at['min']:,.0f} to "
              f"{at['max']:,.0f})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--commit-interval", type=float, default=1.0)
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--postgres-rows", type=int, default=None, help="default: --events")
    parser.add_argument("--quick", action="store_true", help="small: a smoke run")
    parser.add_argument(
        "--copy-into", nargs=3, metavar=("DSN", "TABLE", "ROWS"), help=argparse.SUPPRESS
    )  # the baseline's own process
    args = parser.parse_args()
    if args.copy_into:
        dsn, table, rows = args.copy_into
        copy_rows(dsn, table, int(rows))
        return
    if args.quick:
        args.events, args.repeat, args.latency_seconds = 20_000, 1, 3.0
    args.postgres_rows = args.postgres_rows or args.events
    sys.path.insert(0, str(REPO))
    figures = measure(args)
    report(figures)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
