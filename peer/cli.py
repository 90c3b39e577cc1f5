"""`onyx`: run a peer group, submit and follow jobs, inspect and tend a cluster, or run a job on
a whole cluster inside this process.

Every mistake in the arguments or in a job, and every server that cannot be reached, ends in
one line on stderr naming what is wrong and a non-zero exit, never a traceback. Dotted paths in
jobs resolve against the installed packages and the directory the command runs in.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path
from typing import NoReturn

from peer import __version__, api, metrics
from peer.cluster.group import GroupConfig, PeerGroup, new_id
from peer.cluster.local import LocalCluster
from peer.deploy.inventory import InventoryError, convert, read_output
from peer.job.spec import JobError, Task
from peer.log.replica import Replica, ring_cycle
from peer.log.store import StoreError
from peer.log.stores.zookeeper import TENANCY_PATTERN
from peer.messaging.aeron import AeronTransport, TransportError, run_media_driver
from peer.messaging.counters import serve_driver_metrics
from peer.metrics import MetricsError
from peer.runtime.checkpoints import (
    CheckpointError,
    CheckpointStorage,
    Commits,
    committed_epochs,
)
from peer.runtime.dataplane import DataPlaneConfig
from peer.spark import report as spark_report
from peer.spark import session as spark_session

PROGRESS_PERIOD = 2.0
"""Seconds between progress lines while ``onyx run`` waits for its job."""
LOOPBACK_MTU = 8192
"""Groups in one process talk over loopback, whose own MTU is far larger than Aeron's default."""
HOST_PORT = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:(\d{1,5})$")


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"onyx: error: {message}\n")


def zookeeper_address(value: str) -> str:
    for part in value.split(","):
        match = HOST_PORT.match(part)
        if not match or not 0 < int(match.group(1)) < 65536:
            raise argparse.ArgumentTypeError(f"{value!r} is not HOST:PORT[,HOST:PORT...]")
    return value


def tenancy_name(value: str) -> str:
    if not TENANCY_PATTERN.match(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a tenancy name (letters, digits, '_', '.', '-')"
        )
    return value


def _positive[N: (int, float)](parse: Callable[[str], N], what: str) -> Callable[[str], N]:
    def check(value: str) -> N:
        try:
            number = parse(value)
        except ValueError:
            number = parse("0")
        if not number > 0:
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}")
        return number

    return check


def spark_setting(value: str) -> tuple[str, str]:
    key, sep, setting = value.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{value!r} is not KEY=VALUE")
    return key.strip(), setting


positive_int = _positive(int, "a whole number of at least 1")
positive_seconds = _positive(float, "a positive number of seconds")


def _cluster_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--zookeeper", required=True, type=zookeeper_address, metavar="HOST:PORT")
    parser.add_argument("--tenancy", required=True, type=tenancy_name, metavar="NAME")
    parser.add_argument("--connect-timeout", type=positive_seconds, default=10.0, metavar="S")


def _checkpoints_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkpoints",
        default=str(Path("~/.onyx/checkpoints").expanduser()),
        metavar="URL",
        help="checkpoint storage: a directory or fsspec URL that every group of the cluster "
        "reaches (default: ~/.onyx/checkpoints, which suits one machine)",
    )


def _spark_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--spark-master",
        default=spark_session.DEFAULT_MASTER,
        metavar="URL",
        help="where Spark tasks run: local[*] (default), local[N] or spark://HOST:7077",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        type=spark_setting,
        metavar="KEY=VALUE",
        help="a Spark setting for this group's session; may be repeated",
    )


def _metrics_args(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--metrics-port",
        type=positive_int,
        metavar="PORT",
        help=f"serve Prometheus metrics of {what} on /metrics at this port (default: none)",
    )
    parser.add_argument(
        "--metrics-address",
        default="0.0.0.0",
        metavar="HOST",
        help="the address the metrics port listens on (default: every interface)",
    )


def _serve_metrics(args: argparse.Namespace, state: Callable[[], object] | None = None) -> None:
    if args.metrics_port is not None:
        metrics.serve(args.metrics_port, args.metrics_address, state)


def _configure_spark(args: argparse.Namespace, stack: ExitStack) -> None:
    """The group's Spark session starts at its first Spark task, and stops with the group."""
    spark_session.configure(args.spark_master, dict(args.spark_conf))
    stack.callback(spark_session.stop)


def _peer_parser(commands: argparse._SubParsersAction) -> None:
    peer = commands.add_parser("peer", help="peer group commands")
    peer_commands = peer.add_subparsers(dest="peer_command", required=True, parser_class=Parser)
    start = peer_commands.add_parser("start", help="run a peer group until SIGTERM")
    _cluster_args(start)
    start.add_argument("--vpeers", type=positive_int, default=1, metavar="N")
    start.add_argument("--session-timeout", type=positive_seconds, default=10.0, metavar="S")
    start.add_argument("--join-back-off", type=positive_seconds, default=0.5, metavar="S")
    start.add_argument(
        "--aeron-dir", metavar="DIR", help="attach to this media driver (default: embed one)"
    )
    start.add_argument("--bind", default="127.0.0.1", metavar="HOST", help="address for segments")
    start.add_argument("--port", type=positive_int, metavar="PORT", help="default: a free port")
    start.add_argument("--tags", default="", metavar="A,B", help="tags this group's peers offer")
    start.add_argument(
        "--mtu",
        type=positive_int,
        metavar="BYTES",
        help="Aeron MTU for outgoing segments (default 1408; 8192 on one machine or jumbo frames)",
    )
    _checkpoints_arg(start)
    start.add_argument(
        "--peer-timeout",
        type=positive_seconds,
        default=1.0,
        metavar="S",
        help="report a connected group's peers after this long without a heartbeat",
    )
    _spark_args(start)
    _metrics_args(start, "this peer group")
    start.set_defaults(handler=peer_start)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="onyx", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"onyx {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    _peer_parser(commands)

    driver = commands.add_parser("media-driver", help="run a standalone Aeron media driver")
    driver.add_argument("--dir", required=True, metavar="DIR")
    _metrics_args(driver, "this media driver (its Aeron counters)")
    driver.set_defaults(handler=media_driver)

    job = commands.add_parser("job", help="submit, follow and kill jobs")
    job_commands = job.add_subparsers(dest="job_command", required=True, parser_class=Parser)
    submit = job_commands.add_parser("submit", help="submit a job file; prints its id")
    submit.add_argument("file", type=Path, metavar="FILE")
    submit.add_argument("--id", metavar="ID", help="the job's id (default: a fresh one)")
    _cluster_args(submit)
    submit.set_defaults(handler=job_submit)
    for name, handler, text in (
        ("status", job_status, "show a job's state and its peers"),
        ("wait", job_wait, "wait until a job has completed or was killed"),
        ("kill", job_kill, "kill a job"),
        ("checkpoints", job_checkpoints, "list a job's committed checkpoints still stored"),
    ):
        command = job_commands.add_parser(name, help=text)
        command.add_argument("id", metavar="ID")
        _cluster_args(command)
        command.set_defaults(handler=handler)
        if name == "wait":
            command.add_argument("--timeout", type=positive_seconds, default=3600.0, metavar="S")
        if name == "checkpoints":
            _checkpoints_arg(command)

    show = commands.add_parser("replica", help="print the cluster's current replica")
    _cluster_args(show)
    show.add_argument("--json", action="store_true", help="the whole replica as JSON")
    show.set_defaults(handler=replica)

    gc = commands.add_parser("gc", help="compress the replica into the origin and trim the log")
    _cluster_args(gc)
    gc.set_defaults(handler=collect_garbage)

    run = commands.add_parser(
        "run", help="run a job (or, without FILE, form a ring) on a local cluster"
    )
    run.add_argument("file", type=Path, nargs="?", metavar="FILE")
    run.add_argument("--groups", type=positive_int, default=None, metavar="N")
    run.add_argument("--vpeers", type=positive_int, default=None, metavar="N")
    run.add_argument("--timeout", type=positive_seconds, default=60.0, metavar="S")
    _spark_args(run)
    run.set_defaults(handler=run_local)

    inventory = commands.add_parser(
        "inventory", help="turn `terraform output -json` into the Ansible YAML inventory"
    )
    inventory.add_argument(
        "output",
        nargs="?",
        default="-",
        metavar="FILE",
        help="the JSON that `terraform output -json` printed (default: stdin)",
    )
    inventory.set_defaults(handler=ansible_inventory)
    return parser


def short(group: str) -> str:
    return group[:8]


def describe(replica: Replica) -> str:
    """The ring as a person reads it: the cycle, then each group with whom it watches."""
    cycle = ring_cycle(replica)
    lines = [
        f"log position {replica.version}: {len(replica.groups)} groups in the ring, "
        f"{len(replica.peers)} virtual peers",
    ]
    if cycle is None:
        lines.append("  ring: incomplete (a join or repair is in flight)")
    else:
        lines.append("  ring: " + " -> ".join(short(g) for g in [*cycle, cycle[0]]))
    for group in sorted(replica.groups):
        watched = replica.pairs.get(group)
        peers = ", ".join(short(p) for p in sorted(replica.group_peers.get(group, ())))
        target = short(watched) if watched else "nobody (alone)"
        lines.append(f"  group {short(group)} watches {target}; virtual peers: {peers}")
    for joiner, watcher in sorted(replica.joining().items()):
        lines.append(f"  joining: {short(joiner)} (to be watched by {short(watcher)})")
    return "\n".join(lines)


def peer_start(args: argparse.Namespace) -> int:
    _logging(logging.INFO)
    store = api.connect(
        args.zookeeper,
        args.tenancy,
        create=True,
        session_timeout=args.session_timeout,
        connect_timeout=args.connect_timeout,
    )
    config = GroupConfig(
        vpeers=args.vpeers,
        join_back_off=args.join_back_off,
        leave_timeout=args.session_timeout,
        tags=tuple(t for t in args.tags.split(",") if t),
        dataplane=DataPlaneConfig(peer_timeout=args.peer_timeout),
    )
    with ExitStack() as stack:
        stack.callback(store.close)
        _configure_spark(args, stack)
        transport = AeronTransport(
            aeron_dir=args.aeron_dir, host=args.bind, port=args.port, mtu=args.mtu
        )
        stack.callback(transport.close)
        storage = CheckpointStorage(args.checkpoints, args.tenancy)
        stack.callback(storage.close)
        group = PeerGroup(store, config, transport, storage)
        _serve_metrics(args, lambda: group.current)
        stop = _stopper(store, group)
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        group.run()
    return 0


def _stopper(store: api.ZooKeeperStore, group: PeerGroup) -> Callable[..., None]:
    """A signal handler: leave the ring gracefully, or, with ZooKeeper out of reach, exit at once.
    Then the leave could never be written, and the group's thread may be blocked on a request
    that waits for a server, as would any cleanup that touches ZooKeeper; the group's pulse goes
    when its session expires, and its embedded driver's directory is removed by the next group
    that starts on this machine."""

    def stop(*_: object) -> None:
        if not store.connected:
            logging.getLogger(__name__).warning(
                "ZooKeeper at %s is unreachable: stopping without leaving the ring", store.hosts
            )
            os._exit(1)
        group.stop()

    return stop


def media_driver(args: argparse.Namespace) -> int:
    _logging(logging.INFO)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if args.metrics_port is not None:
        serve_driver_metrics(
            args.metrics_port, args.dir, metrics.driver_registry(), args.metrics_address
        )
    run_media_driver(args.dir, stop)
    return 0


@contextmanager
def _client(args: argparse.Namespace) -> Iterator[api.ZooKeeperStore]:
    """A session on the cluster's log for one command, closed however the command ends."""
    _logging(logging.WARNING)
    store = api.connect(args.zookeeper, args.tenancy, connect_timeout=args.connect_timeout)
    try:
        yield store
    finally:
        store.close()


def job_submit(args: argparse.Namespace) -> int:
    job = api.load(args.file)
    with _client(args) as store:
        print(api.submit(store, job, args.id))
    return 0


def describe_job(status: api.JobStatus) -> str:
    named = f" ({status.name})" if status.name else ""
    line = f"job {status.id}{named}: {status.state}"
    if status.reason:
        line += f": {status.reason}"
    if status.state == "waiting":
        line += f" for peers (needs at least {status.needs})"
    if status.state == "running":
        line += f" (allocation version {status.allocation_version})"
        tasks = [f"  {t}: {', '.join(short(p) for p in ps)}" for t, ps in status.allocation.items()]
        line = "\n".join([line, *tasks])
    return line


def _known_status(store: api.ZooKeeperStore, job_id: str) -> api.JobStatus:
    status = api.status(api.replica(store), job_id)
    if status.state == "unknown":
        raise JobError(f"job {job_id!r}: no such job in this tenancy")
    return status


def job_status(args: argparse.Namespace) -> int:
    with _client(args) as store:
        print(describe_job(_known_status(store, args.id)))
    return 0


def job_wait(args: argparse.Namespace) -> int:
    with _client(args) as store:
        _known_status(store, args.id)
        final = api.wait(store, args.id, args.timeout)
    print(describe_job(final))
    return 0 if final.state == "completed" else 1


def job_checkpoints(args: argparse.Namespace) -> int:
    with (
        _client(args) as store,
        closing(CheckpointStorage(args.checkpoints, args.tenancy)) as storage,
    ):
        _known_status(store, args.id)
        record, _ = Commits(store, args.id).read()
        epochs = committed_epochs(storage, args.id, record)
    if not epochs:
        print(f"job {args.id}: no committed checkpoint")
    for epoch in epochs:
        mark = "  (latest: recovery starts here)" if record and epoch == record.committed else ""
        print(f"job {args.id}: allocation {epoch.version} epoch {epoch.number}{mark}")
    return 0


def job_kill(args: argparse.Namespace) -> int:
    with _client(args) as store:
        if not _known_status(store, args.id).finished:
            api.kill(store, args.id)
        print(describe_job(api.wait(store, args.id, args.connect_timeout)))
    return 0


def replica(args: argparse.Namespace) -> int:
    with _client(args) as store:
        current = api.replica(store)
    print(json.dumps(current.to_json(), indent=2) if args.json else describe(current))
    return 0


def collect_garbage(args: argparse.Namespace) -> int:
    with _client(args) as store:
        result = api.gc(store, caller=f"gc-{new_id()}")
    print(f"origin stored at log position {result.position}; {result.deleted} entries trimmed")
    return 0


def run_local(args: argparse.Namespace) -> int:
    """One group by default for a job, with peers enough for it: they hand segments over in
    memory. With more groups, each embeds a media driver and segments between groups go over
    UDP."""
    _logging(logging.WARNING)
    job = api.load(args.file) if args.file else None
    groups = args.groups or (1 if job else 3)
    vpeers = args.vpeers or (_peers_for(job, groups) if job else 2)
    print(f"local cluster: {groups} peer group(s) x {vpeers} virtual peers, embedded log")
    with ExitStack() as stack:
        _configure_spark(args, stack)
        transports = None
        if job is not None and groups > 1:
            transports = [AeronTransport(mtu=LOOPBACK_MTU) for _ in range(groups)]
            for transport in transports:
                stack.callback(transport.close)
        cluster = LocalCluster(groups, vpeers, transports)
        cluster.start()
        try:
            formed = cluster.await_ring(args.timeout)
            outcome = _run_job(cluster, job, args.timeout) if job else _show_ring(formed)
        finally:
            final = cluster.stop()
    print(f"every group left gracefully; the log ends at position {final.version}")
    return outcome


def _peers_for(job: api.Job, groups: int) -> int:
    """Virtual peers per group so that the job gets every task's minimum (at least 4 in all)."""
    needed = max(4, sum(task.min_peers for task in job.catalog))
    return -(-needed // groups)


def _show_ring(formed: Replica) -> int:
    print("the ring has formed:")
    print(describe(formed))
    return 0


def _run_job(cluster: LocalCluster, job: api.Job, timeout: float) -> int:
    job_id = api.submit(cluster.reader, job)
    current = cluster.replica()
    started = api.status(current, job_id)
    if started.state == "waiting":
        raise JobError(
            f"job {job_id!r} needs at least {started.needs} virtual peers and this local "
            f"cluster has {len(current.peers)}: raise --vpeers or --groups"
        )
    print(describe_job(started))
    with _progress(cluster, job_id, job):
        final = api.wait(cluster.reader, job_id, timeout)
    print(describe_job(final))
    if final.state == "completed":
        for name in job.output_tasks():
            _show_output(job.task(name))
    return 0 if final.state == "completed" else 1


@contextmanager
def _progress(cluster: LocalCluster, job_id: str, job: api.Job) -> Iterator[None]:
    """A line every PROGRESS_PERIOD while the job runs, when something moved: segments its
    inputs read, and its latest committed epoch."""
    stop = threading.Event()
    commits = Commits(cluster.reader, job_id)

    def report() -> None:
        last = ""
        while not stop.wait(PROGRESS_PERIOD):
            read = sum(metrics.segments_in(job_id, name) for name in job.input_tasks())
            record, _ = commits.read()
            line = f"progress: {read:,.0f} segments read"
            if record is not None and record.committed is not None:
                epoch = record.committed
                line += f", epoch {epoch.number} of allocation {epoch.version} committed"
            if line != last:
                print(line, flush=True)
                last = line

    thread = threading.Thread(target=report, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _show_output(task: Task) -> None:
    path = task.params.get("path")
    if not path:
        return
    print(f"output of task {task.name!r}: {path}")
    if task.plugin == spark_report.SINK:
        query = spark_report.summary_query(task)
        print(f"spark sql> {query}")
        print(spark_report.show(query), end="")


def ansible_inventory(args: argparse.Namespace) -> int:
    sys.stdout.write(convert(read_output(args.output)))
    return 0


def _logging(level: int) -> None:
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("kazoo").setLevel(max(level, logging.ERROR))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return args.handler(args)
    except (
        StoreError,
        TimeoutError,
        JobError,
        TransportError,
        CheckpointError,
        MetricsError,
        InventoryError,
    ) as e:
        print(f"onyx: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
