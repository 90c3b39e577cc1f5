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
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path
from typing import NoReturn

from prometheus_client import REGISTRY

from peer import __version__, api, config, endpoints, local_servers, log_output, metrics, systemd
from peer.cluster import member
from peer.cluster.coordination import Coordination
from peer.cluster.group import GroupConfig, Incarnation, PeerGroup, new_id
from peer.cluster.local import LocalCluster, peers_for, tags_for
from peer.cluster.modes import CoordinationModes
from peer.cluster.worker import WorkerSpec
from peer.deploy.inventory import InventoryError, convert, read_output
from peer.job.code import CodeError, pack
from peer.job.spec import JobError, Task
from peer.log.replica import Replica, ring_cycle
from peer.log.store import StoreError, StoreUnreachable
from peer.log.stores.zookeeper import TENANCY_PATTERN
from peer.membership.agent import MembershipSettings
from peer.membership.members import MemberError, lifecycle
from peer.membership.seeds import parse_seed_nodes, parse_site
from peer.messaging.aeron import MAX_MTU, MIN_MTU, AeronTransport, TransportError, run_media_driver
from peer.messaging.counters import serve_driver_metrics
from peer.metrics import MetricsError
from peer.runtime.checkpoints import (
    CheckpointError,
    CheckpointStorage,
    Commits,
    Savepoint,
    committed_epochs,
)
from peer.runtime.dataplane import DataPlaneConfig
from peer.scheduling import server as scheduling_server
from peer.spark import report as spark_report
from peer.spark import session as spark_session

PROGRESS_PERIOD = 2.0
"""Seconds between progress lines while ``onyx run`` waits for its job."""
LOOPBACK_MTU = 8192
"""Groups in one process talk over loopback, whose own MTU is far larger than Aeron's default."""
RING_TIMEOUT = 60.0
"""How long ``onyx run`` waits for its local groups to form a ring, or to read a kill back."""
EXIT_TIMED_OUT = 3
EXIT_UNREACHABLE = 4
EXIT_INTERRUPTED = 130
"""What a shell reports for a command that SIGINT ended: 128 + the signal's number."""
HOST_PORT = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:(\d{1,5})$")
MAX_SECONDS = 365 * 24 * 3600
"""The longest timeout an option takes: a year (an infinite one overflows the clock)."""
EXAMPLES = """\
examples:
  onyx media-driver --dir /dev/shm/onyx-aeron
  onyx peer start --zookeeper zk1:2181 --tenancy prod --vpeers 4 --aeron-dir /dev/shm/onyx-aeron
  onyx peer start --config /etc/onyx/peer-0.toml
  onyx scheduler serve --listen 0.0.0.0:7070
  onyx job submit job.yaml --zookeeper zk1:2181 --tenancy prod
  ONYX_CONFIG=/etc/onyx/peer-0.toml onyx replica --json
  onyx config show peer start --config /etc/onyx/peer-0.toml
  onyx run examples/wordcount/job.yaml

Every option may also come from the environment (ONYX_<OPTION>, e.g. ONYX_ZOOKEEPER) or a TOML
config file (--config PATH or ONYX_CONFIG; keys named as the options, tables per command such as
[peer.start]): the command line wins over the environment, the environment over the file.
"""


class Parser(argparse.ArgumentParser):
    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", config.HelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"onyx: error: {message}\n")


def zookeeper_address(value: str) -> str:
    for part in value.split(","):
        match = HOST_PORT.match(part)
        if not match or not 0 < int(match.group(1)) < 65536:
            raise argparse.ArgumentTypeError(f"{value!r} is not HOST:PORT[,HOST:PORT...]")
    return value


def seed_nodes(value: str) -> list[str]:
    """HOST:PORT[,HOST:PORT...]: each a site of a running member."""
    try:
        return list(parse_seed_nodes(value))
    except ValueError as e:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not HOST:PORT[,HOST:PORT...]: {e}"
        ) from None


def scheduler_servers(value: str) -> list[str]:
    """HOST:PORT[,HOST:PORT...]: each a running `onyx scheduler serve`."""
    try:
        return list(parse_seed_nodes(value))
    except ValueError as e:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not HOST:PORT[,HOST:PORT...]: {e}"
        ) from None


def listen_address(value: str) -> str:
    """HOST:PORT to listen on."""
    try:
        return parse_site(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{value!r} is not HOST:PORT: {e}") from None


def tenancy_name(value: str) -> str:
    if not TENANCY_PATTERN.match(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a tenancy name (letters, digits, '_', '.', '-')"
        )
    return value


def _number[N: (int, float)](
    parse: Callable[[str], N], what: str, accepts: Callable[[N], bool]
) -> Callable[[str], N]:
    """An option type for the numbers ``accepts`` takes; any other text is refused, quoted, with
    ``what`` it should be. Every number an option takes is bounded: a value a few digits too
    long, from a file or the environment as much as from the command line, is refused rather
    than run with (a member asked for 10^20 virtual peers never joins), and NaN, which no
    comparison accepts, is refused with the infinities."""

    def check(value: str) -> N:
        try:
            number: N | None = parse(value)
        except ValueError:
            number = None
        if number is None or not accepts(number):
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}")
        return number

    return check


def whole_numbers(least: int, most: int, what: str = "") -> Callable[[str], int]:
    """An option type for a whole number from ``least`` to ``most``."""
    what = what or f"a whole number of at least {least} and at most {most}"
    return _number(int, what, lambda number: least <= number <= most)


def credentials(value: str) -> str:
    user, sep, password = value.partition(":")
    if not (sep and user and password):
        raise argparse.ArgumentTypeError("credentials must be USER:PASSWORD")
    return value


def spark_setting(value: str) -> str:
    """A Spark setting, KEY=VALUE, with the key stripped."""
    key, sep, setting = value.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{value!r} is not KEY=VALUE")
    return f"{key.strip()}={setting}"


MAX_VPEERS = 10_000
"""The most virtual peers a group runs: far more than one machine's worth."""
MAX_LOCAL_GROUPS = 100
"""The most peer groups `onyx run` starts in its one process."""
MAX_MEMBERS = 10_000
"""Bounds what counts members: the monitors of each, the members an entry is gossiped to and
its rounds (a round reaches one member at the least)."""
MAX_HELD = 1_000_000
"""The most log entries a member holds ahead, or answers a scheduling server keeps."""
MAX_REQUEST = 1024 * 1024 * 1024
"""The largest request body a scheduling server may be told to take."""
MAX_WORKERS = 1024

vpeer_count = whole_numbers(1, MAX_VPEERS)
group_count = whole_numbers(1, MAX_LOCAL_GROUPS)
member_count = whole_numbers(1, MAX_MEMBERS)
fanout = whole_numbers(0, MAX_MEMBERS)
held_count = whole_numbers(1, MAX_HELD)
request_bytes = whole_numbers(1, MAX_REQUEST)
port_number = whole_numbers(1, 65535, "a port number from 1 to 65535")
mtu_bytes = _number(
    int,
    f"a multiple of 32 from {MIN_MTU} to {MAX_MTU}",
    lambda mtu: MIN_MTU <= mtu <= MAX_MTU and mtu % 32 == 0,
)
positive_seconds = _number(
    float,
    f"a positive, finite number of seconds (at most {MAX_SECONDS}, a year)",
    lambda seconds: 0 < seconds <= MAX_SECONDS,
)


AUTO_WORKERS = "auto"
"""The default of --workers: one worker per core, but no more than the member has peers."""


_worker_number = whole_numbers(
    0, MAX_WORKERS, f"{AUTO_WORKERS!r} nor a number from 0 to {MAX_WORKERS}"
)


def worker_count(value: str) -> int | str:
    """0 (the peers run in the member's own process) up to MAX_WORKERS, or "auto"."""
    if value.strip() == AUTO_WORKERS:
        return AUTO_WORKERS
    return _worker_number(value)


def workers_of(args: argparse.Namespace) -> int:
    """How many workers `peer start` runs: as many as asked, or for "auto" one per core but
    never more than the member's virtual peers (a worker without a peer would idle)."""
    if args.workers == AUTO_WORKERS:
        return min(os.cpu_count() or 1, args.vpeers)
    return args.workers


def _cluster_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--zookeeper",
        required=True,
        type=zookeeper_address,
        metavar="HOST:PORT",
        help="the cluster's ZooKeeper ensemble, HOST:PORT[,HOST:PORT...]",
    )
    parser.add_argument(
        "--tenancy",
        required=True,
        type=tenancy_name,
        metavar="NAME",
        help="the cluster's name in ZooKeeper",
    )
    parser.add_argument(
        "--connect-timeout",
        type=positive_seconds,
        default=10.0,
        metavar="S",
        help="seconds to wait for a ZooKeeper server to answer",
    )
    parser.add_argument(
        "--zookeeper-auth",
        type=credentials,
        metavar="USER:PASSWORD",
        help="the tenancy's ZooKeeper digest credentials, where /onyx is protected by an ACL "
        "(better from the environment or a config file: a command line is seen by every user)",
    )


def _checkpoints_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkpoints",
        default=str(Path("~/.onyx/checkpoints").expanduser()),
        metavar="URL",
        help="checkpoint storage: a directory or fsspec URL that every group of the cluster "
        "reaches, such as s3://BUCKET/PATH (endpoint and credentials from AWS_ENDPOINT_URL, "
        "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or ~/.aws); the default suits one machine",
    )


def _log_args(parser: argparse.ArgumentParser, level: str) -> None:
    parser.add_argument(
        "--log-level",
        default=level,
        type=str.lower,
        choices=log_output.LEVELS,
        help="the least severe log records written to stderr",
    )
    parser.add_argument(
        "--log-format",
        default="text",
        type=str.lower,
        choices=log_output.FORMATS,
        help="text lines (without timestamps under journald), or one JSON object a line",
    )


def _spark_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--spark-master",
        default=spark_session.DEFAULT_MASTER,
        metavar="URL",
        help="where Spark tasks run: local[*], local[N] or spark://HOST:7077",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        type=spark_setting,
        metavar="KEY=VALUE",
        help="a Spark setting for this group's session; may be repeated",
    )


def _metrics_args(parser: argparse.ArgumentParser, what: str, extra: str = "") -> None:
    parser.add_argument(
        "--metrics-port",
        type=port_number,
        metavar="PORT",
        help=f"serve Prometheus metrics of {what} on /metrics{extra} at this port",
    )
    parser.add_argument(
        "--metrics-address",
        default="0.0.0.0",
        metavar="HOST",
        help="the address the metrics port listens on; 0.0.0.0 is every interface",
    )


def _configure_spark(args: argparse.Namespace, stack: ExitStack) -> None:
    """The group's Spark session starts at its first Spark task, and stops with the group."""
    settings = dict(setting.split("=", 1) for setting in args.spark_conf)
    spark_session.configure(args.spark_master, settings)
    stack.callback(spark_session.stop)


def _peer_parser(commands: argparse._SubParsersAction) -> None:
    peer = commands.add_parser("peer", help="peer group commands")
    peer_commands = peer.add_subparsers(dest="peer_command", required=True, parser_class=Parser)
    start = peer_commands.add_parser(
        "start", help="run a peer group until SIGTERM", description="Run a peer group: join "
        "the ring, run the tasks the log gives its virtual peers,\nleave gracefully on SIGTERM "
        "(as `onyx leave`: its jobs commit their current epochs first).",
    )  # fmt: skip
    _cluster_args(start)
    start.add_argument(
        "--vpeers", type=vpeer_count, default=1, metavar="N", help="virtual peers of this group"
    )
    start.add_argument(
        "--workers",
        type=worker_count,
        default=AUTO_WORKERS,
        metavar="N",
        help="worker processes that run this member's virtual peers, each at a site of its "
        "own; auto is one per core, at most one per virtual peer; 0 runs them in the member's "
        "own process",
    )
    start.add_argument(
        "--session-timeout",
        type=positive_seconds,
        default=10.0,
        metavar="S",
        help="ZooKeeper session timeout; also how long a stopping group's graceful leave may "
        "take (its hand-over at most half of it)",
    )
    start.add_argument(
        "--join-back-off",
        type=positive_seconds,
        default=0.5,
        metavar="S",
        help="seconds before a failed join is tried again (randomized)",
    )
    start.add_argument(
        "--aeron-dir", metavar="DIR", help="attach to this media driver; none embeds one"
    )
    start.add_argument(
        "--bind",
        default="127.0.0.1",
        metavar="HOST",
        help="the address this group receives segments on, advertised to the others",
    )
    start.add_argument(
        "--port",
        type=port_number,
        metavar="PORT",
        help="the UDP port for segments; none picks a free one",
    )
    start.add_argument(
        "--worker-port-base",
        type=port_number,
        metavar="PORT",
        help="worker i receives segments on UDP port PORT + i; none picks free ports",
    )
    start.add_argument(
        "--worker-start-timeout",
        type=positive_seconds,
        default=member.START_TIMEOUT,
        metavar="S",
        help="how long a worker process may take to say it is ready before it is killed and "
        "started again, after a back-off that doubles while it keeps failing",
    )
    start.add_argument("--tags", default="", metavar="A,B", help="tags this group's peers offer")
    start.add_argument(
        "--mtu",
        type=mtu_bytes,
        metavar="BYTES",
        help="Aeron MTU for outgoing segments; none keeps Aeron's 1408 (8192 suits one machine "
        "or jumbo frames)",
    )
    _checkpoints_arg(start)
    membership = MembershipSettings()
    start.add_argument(
        "--heartbeat-interval",
        type=positive_seconds,
        default=membership.heartbeat_interval,
        metavar="S",
        help="how often this group asks the groups it monitors for a heartbeat",
    )
    start.add_argument(
        "--monitors",
        type=member_count,
        default=membership.monitors,
        metavar="N",
        help="how many groups monitor each group (its next N on a ring hashed by group id)",
    )
    start.add_argument(
        "--auto-down-unreachable-after",
        type=positive_seconds,
        default=membership.auto_down_unreachable_after,
        metavar="S",
        help="how long a member stays unreachable before the leader downs it and its work moves",
    )
    start.add_argument(
        "--seed-nodes",
        action="extend",
        type=seed_nodes,
        metavar="HOST:PORT[,HOST:PORT...]",
        help="sites of running members this group asks for the cluster as it starts; with "
        "none, or none answering, it learns the members from ZooKeeper alone",
    )
    start.add_argument(
        "--join-direct",
        action="store_true",
        help="join by asking a running member (a seed node, else one found by its pulse) to "
        "stitch this group in and send its replica, instead of replaying the whole log",
    )
    start.add_argument(
        "--join-direct-timeout",
        type=positive_seconds,
        default=CoordinationModes().join_direct_timeout,
        metavar="S",
        help="how long a joiner waits for a member's answer before it asks another",
    )
    start.add_argument(
        "--code-cache",
        type=Path,
        default=DataPlaneConfig().code_cache,
        metavar="DIR",
        help="where the code shipped with jobs is unpacked, one directory per archive",
    )
    _state_dir_arg(start)
    _scheduler_args(start)
    _epidemic_args(start)
    start.add_argument(
        "--async-allocation",
        action="store_true",
        help="compute allocations on a thread of their own, applying the log entries that do "
        "not read them meanwhile (the multi-versioned replica); off, the classic apply",
    )
    _spark_args(start)
    _metrics_args(start, "this peer group", " (and /healthz, /readyz, /replica, /jobs, /jobs/ID)")
    _log_args(start, "info")
    start.set_defaults(handler=peer_start)


def _scheduler_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scheduler-servers",
        action="extend",
        type=scheduler_servers,
        metavar="HOST:PORT[,HOST:PORT...]",
        help="scheduling servers (`onyx scheduler serve`) this group asks for allocations; "
        "with none, or none answering in time, it computes them itself (the same ones)",
    )
    parser.add_argument(
        "--scheduler-timeout",
        type=positive_seconds,
        default=CoordinationModes().scheduler_timeout,
        metavar="S",
        help="seconds the scheduling servers have, together, to answer one allocation",
    )


def _scheduler_parser(commands: argparse._SubParsersAction) -> None:
    scheduler = commands.add_parser("scheduler", help="scheduling server commands")
    scheduler_commands = scheduler.add_subparsers(
        dest="scheduler_command", required=True, parser_class=Parser
    )
    serve = scheduler_commands.add_parser(
        "serve",
        help="answer members' allocation requests over HTTP until SIGTERM",
        description="Run a stateless scheduling server: members started with "
        "--scheduler-servers\nsend it the scheduling subset of their replica and get the "
        "allocation back.",
    )
    serve.add_argument(
        "--listen", required=True, type=listen_address, metavar="HOST:PORT",
        help="where to answer POST /allocation, GET /metrics and GET /healthz",
    )  # fmt: skip
    serve.add_argument(
        "--cache",
        type=held_count,
        default=scheduling_server.CACHE_ANSWERS,
        metavar="N",
        help="answers kept, one per log position and request",
    )
    serve.add_argument(
        "--max-body",
        type=request_bytes,
        default=scheduling_server.MAX_BODY,
        metavar="BYTES",
        help="the largest request taken; a larger one is refused",
    )
    _log_args(serve, "info")
    serve.set_defaults(handler=scheduler_serve)


def _epidemic_args(start: argparse.ArgumentParser) -> None:
    modes = CoordinationModes()
    start.add_argument(
        "--epidemic-log",
        action="store_true",
        help="learn new log entries from their writers' gossip and read ZooKeeper by position "
        "only when it falls silent, instead of watching the log directory",
    )
    start.add_argument(
        "--gossip-fanout",
        type=fanout,
        default=modes.gossip_fanout,
        metavar="N",
        help="with --epidemic-log: members each copy of an entry goes to (0 gossips nothing)",
    )
    start.add_argument(
        "--gossip-rounds",
        type=member_count,
        metavar="N",
        help="with --epidemic-log: rounds an entry is passed on; none picks enough to reach "
        "every member",
    )
    start.add_argument(
        "--log-read-after",
        type=positive_seconds,
        default=modes.log_read_after,
        metavar="S",
        help="with --epidemic-log: seconds without a new entry before reading the next one "
        "from ZooKeeper",
    )
    start.add_argument(
        "--reorder-cache",
        type=held_count,
        default=modes.reorder_cache,
        metavar="N",
        help="with --epidemic-log: the most entries held ahead of the next one needed",
    )


def _timeout_arg(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        metavar="S",
        help=f"{what} after this long, exit 3; none waits as long as it takes",
    )


def _json_arg(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--json", action="store_true", help=f"{what} as JSON")


def _job_parser(commands: argparse._SubParsersAction) -> None:
    job = commands.add_parser("job", help="submit, list, follow and kill jobs")
    job_commands = job.add_subparsers(dest="job_command", required=True, parser_class=Parser)
    submit = job_commands.add_parser("submit", help="submit a job file; prints its id")
    submit.add_argument("file", type=Path, metavar="FILE", help="the job: YAML, JSON or .py")
    submit.add_argument(
        "--id", metavar="ID", help="the job's id; none takes the job's own, or a fresh one"
    )
    submit.add_argument(
        "--code",
        type=Path,
        metavar="PATH",
        help="ship the job's code with it: a wheel, or a directory whose packages and modules "
        "the job's paths name; uploaded to the checkpoint storage, run by no other job",
    )
    _cluster_args(submit)
    _checkpoints_arg(submit)
    _json_arg(submit, "the id")
    submit.set_defaults(handler=job_submit)
    listing = job_commands.add_parser(
        "list", help="every job: id, name, state, peers and last committed epoch"
    )
    _cluster_args(listing)
    _json_arg(listing, "the jobs")
    listing.set_defaults(handler=job_list)
    for name, handler, text in (
        ("status", job_status, "show a job's state, its peers and why it ended"),
        ("wait", job_wait, "wait until a job has completed (exit 0) or was killed (exit 1)"),
        ("kill", job_kill, "kill a job"),
        ("checkpoints", job_checkpoints, "list a job's committed checkpoints still stored"),
    ):
        command = job_commands.add_parser(name, help=text)
        command.add_argument("id", metavar="ID", help="the job's id")
        _cluster_args(command)
        _json_arg(command, "the answer")
        command.set_defaults(handler=handler)
    _timeout_arg(job_commands.choices["wait"], "give up")
    _checkpoints_arg(job_commands.choices["checkpoints"])
    _savepoint_parser(job_commands)
    _stop_parser(job_commands)


def _savepoint_parser(job_commands: argparse._SubParsersAction) -> None:
    savepoint = job_commands.add_parser(
        "savepoint",
        help="keep the job's next committed checkpoint as a savepoint until it is disposed of",
        description="A savepoint is a committed checkpoint kept until it is disposed of; a "
        "new job restores it with resume_from: {job: ID, savepoint: NAME}.",
    )
    savepoint.add_argument("id", metavar="ID", help="the job's id")
    savepoint.add_argument(
        "--name", metavar="NAME", help="the savepoint's name; none names it savepoint-<UTC time>"
    )
    savepoint.add_argument(
        "--dispose", metavar="NAME", help="delete savepoint NAME instead of taking one"
    )
    _timeout_arg(savepoint, "give up waiting for the commit")
    _cluster_args(savepoint)
    _checkpoints_arg(savepoint)
    _json_arg(savepoint, "the savepoint")
    savepoint.set_defaults(handler=job_savepoint)


STOP_TIMEOUT = 60.0
"""How long `onyx job stop` waits for its savepoint by default: a job commits an epoch within a
barrier period and a checkpoint, and one that cannot is better left running, and said so."""


def _stop_parser(job_commands: argparse._SubParsersAction) -> None:
    stop = job_commands.add_parser(
        "stop",
        help="stop a job with a final savepoint: its next committed epoch, nothing after it",
        description="Stop a running job with a final savepoint: its next committed epoch "
        "becomes savepoint NAME, nothing commits after it, and the job is killed. A new job "
        "resumes it with resume_from: {job: ID, savepoint: NAME}, writing to the same outputs.",
    )
    stop.add_argument("id", metavar="ID", help="the job's id")
    stop.add_argument(
        "--savepoint",
        metavar="NAME",
        help="the savepoint's name; none names it savepoint-<UTC time>",
    )
    stop.add_argument(
        "--timeout",
        type=positive_seconds,
        default=STOP_TIMEOUT,
        metavar="S",
        help="give up after this long without the savepoint, exit 3: the job goes on",
    )
    _cluster_args(stop)
    _json_arg(stop, "the savepoint")
    stop.set_defaults(handler=job_stop)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="onyx", description=__doc__.split("\n\n")[0], epilog=EXAMPLES)
    parser.add_argument("--version", action="version", version=f"onyx {__version__}")
    commands = parser.add_subparsers(
        dest="command", required=True, parser_class=Parser, title="commands", metavar="COMMAND"
    )

    _peer_parser(commands)

    driver = commands.add_parser(
        "media-driver", help="run a standalone Aeron media driver that peer groups attach to"
    )
    driver.add_argument(
        "--dir", required=True, metavar="DIR", help="the driver's directory (e.g. on /dev/shm)"
    )
    _metrics_args(driver, "this media driver (its Aeron counters)")
    _log_args(driver, "info")
    driver.set_defaults(handler=media_driver)

    _job_parser(commands)
    _scheduler_parser(commands)

    show = commands.add_parser("replica", help="print the cluster's current replica")
    _cluster_args(show)
    show.add_argument("--json", action="store_true", help="the whole replica as JSON")
    show.set_defaults(handler=replica)

    gc = commands.add_parser("gc", help="compress the replica into the origin and trim the log")
    _cluster_args(gc)
    gc.set_defaults(handler=collect_garbage)

    _member_command(
        commands, "down", down_member,
        "down a member (a peer group): its work moves to the others; a running one rejoins "
        "under a new id",
    )  # fmt: skip
    leave = _member_command(
        commands, "leave", leave_member,
        "make a member (a peer group) leave gracefully: its jobs commit their current epochs, "
        "its work moves to the others, and it exits",
    )  # fmt: skip
    leave.add_argument(
        "--wait",
        type=positive_seconds,
        metavar="SECONDS",
        help="wait up to SECONDS until the member has been removed",
    )
    _config_parser(commands)

    run = commands.add_parser(
        "run", help="run a job (or, without FILE, form a ring) on a local cluster"
    )
    run.add_argument(
        "file", type=Path, nargs="?", metavar="FILE", help="the job: YAML, JSON, .py (none: a ring)"
    )
    run.add_argument(
        "--groups",
        type=group_count,
        default=None,
        metavar="N",
        help="peer groups in this process; none runs 1 for a job, 3 for a ring",
    )
    run.add_argument(
        "--vpeers",
        type=vpeer_count,
        default=None,
        metavar="N",
        help="virtual peers per group; none gives enough for the job's tasks",
    )
    run.add_argument(
        "--timeout",
        type=positive_seconds,
        metavar="S",
        help="kill the job and stop after this long, exit 3; none runs until the job ends or "
        "Ctrl-C, which kills the job, lets the groups leave and exits 130",
    )
    run.add_argument(
        "--checkpoints",
        default="memory://onyx-checkpoints",
        metavar="URL",
        help="checkpoint storage: the process's memory by default, which a crash of the run "
        "loses with it; a directory or fsspec URL to keep them as a cluster would",
    )
    _state_dir_arg(run)
    _spark_args(run)
    _log_args(run, "warning")
    run.set_defaults(handler=run_local)

    servers = commands.add_parser(
        "servers",
        help="run Kafka, PostgreSQL and NATS on this machine, for trying the connectors",
        description="Run the servers the connectors reach, on 127.0.0.1, until Ctrl-C: a "
        "Kafka-protocol broker\n(its log in memory), PostgreSQL (user and password onyx) and "
        "NATS with JetStream.\nPostgreSQL's and JetStream's data stay in DIR for the next run.",
    )
    servers.add_argument(
        "names", nargs="*", type=server_name, metavar="SERVER",
        help=f"which to run, of {', '.join(SERVERS)} (default: all)",
    )  # fmt: skip
    servers.add_argument(
        "--dir", type=Path, default=Path(".onyx-servers"), metavar="DIR",
        help="where their data lives, a directory each",
    )  # fmt: skip
    for name, port in (("kafka", 9092), ("postgres", 5433), ("nats", 4222)):
        servers.add_argument(f"--{name}-port", type=port_number, default=port, metavar="PORT",
                             help=f"the port {name} listens on")  # fmt: skip
    servers.set_defaults(handler=run_servers)

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
    config.configurable(parser)
    return parser


def _state_dir_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=DataPlaneConfig().state_dir,
        metavar="DIR",
        help="where jobs with state_backend: disk hold their keyed state, a directory per slot",
    )


def _config_parser(commands: argparse._SubParsersAction) -> None:
    group = commands.add_parser("config", help="show the configuration a command would run with")
    config_commands = group.add_subparsers(
        dest="config_command", required=True, parser_class=Parser
    )
    show = config_commands.add_parser(
        "show",
        help="print each option's effective value and where it came from",
        description="Print the configuration `onyx COMMAND ARGS...` would run with: each "
        "option's value\nand where it came from (default, file, env or command line). Without "
        "a COMMAND, every command's.",
    )
    show.add_argument("--json", action="store_true", help="as JSON")
    show.add_argument(
        "target",
        nargs=argparse.REMAINDER,
        metavar="COMMAND [ARGS...]",
        help="a command and its arguments, e.g. peer start --vpeers 4",
    )
    show.set_defaults(handler=config_show)


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
    elif not cycle:
        lines.append("  ring: empty (no group has joined)")
    else:
        lines.append("  ring: " + " -> ".join(short(g) for g in [*cycle, cycle[0]]))
    for group in sorted(replica.groups):
        watched = replica.pairs.get(group)
        peers = ", ".join(short(p) for p in sorted(replica.group_peers.get(group, ())))
        target = short(watched) if watched else "nobody (alone)"
        lines.append(f"  group {short(group)} watches {target}; virtual peers: {peers}")
    for joiner, watcher in sorted(replica.joining().items()):
        lines.append(f"  joining: {short(joiner)} (to be watched by {short(watcher)})")
    counts = Counter(status.value for status in lifecycle(replica).values())
    if counts:
        lines.append("  members: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return "\n".join(lines)


def _modes(args: argparse.Namespace) -> CoordinationModes:
    return CoordinationModes(
        scheduler_servers=tuple(dict.fromkeys(args.scheduler_servers)),
        scheduler_timeout=args.scheduler_timeout,
        join_direct=args.join_direct,
        join_direct_timeout=args.join_direct_timeout,
        epidemic_log=args.epidemic_log,
        gossip_fanout=args.gossip_fanout,
        gossip_rounds=args.gossip_rounds,
        log_read_after=args.log_read_after,
        reorder_cache=args.reorder_cache,
        async_allocation=args.async_allocation,
    )


def peer_start(args: argparse.Namespace) -> int:
    log_output.configure(args.log_level, args.log_format)
    modes = _modes(args)
    store = api.connect(
        args.zookeeper,
        args.tenancy,
        create=True,
        session_timeout=args.session_timeout,
        connect_timeout=args.connect_timeout,
        auth=args.zookeeper_auth,
        watch_log=Coordination(modes).watches_log,
    )
    settings = GroupConfig(
        vpeers=args.vpeers,
        join_back_off=args.join_back_off,
        leave_timeout=args.session_timeout,
        tags=tuple(t for t in args.tags.split(",") if t),
        dataplane=DataPlaneConfig(code_cache=args.code_cache, state_dir=args.state_dir),
        membership=MembershipSettings(
            heartbeat_interval=args.heartbeat_interval,
            monitors=args.monitors,
            auto_down_unreachable_after=args.auto_down_unreachable_after,
        ),
        seed_nodes=tuple(dict.fromkeys(args.seed_nodes)),
        modes=modes,
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
        storage.check_writable()
        incarnation: Callable[..., Incarnation] = Incarnation
        registry = REGISTRY
        if count := workers_of(args):
            workers = member.start(count, _worker_spec(args, settings), store,
                                   timeout=args.worker_start_timeout,
                                   send_timeout=args.session_timeout)  # fmt: skip
            stack.callback(workers.close)
            incarnation, registry = member.incarnations(workers), member.registry(workers)
        group = PeerGroup(
            store, settings, transport, storage, systemd.announce, incarnation=incarnation
        )
        if args.metrics_port is not None:
            endpoints.serve(
                args.metrics_port, args.metrics_address, lambda: group.current, registry
            )
        stop = _stopper(store, group)
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        group.run()
    return 0


def _worker_spec(args: argparse.Namespace, settings: GroupConfig) -> WorkerSpec:
    """What each worker process of this member starts with: the member's own settings."""
    return WorkerSpec(
        slot=0, tenancy=args.tenancy, checkpoints=args.checkpoints, bind=args.bind,
        port_base=args.worker_port_base, aeron_dir=args.aeron_dir, mtu=args.mtu,
        dataplane=settings.dataplane, idle_wait=settings.idle_wait, log_level=args.log_level,
        log_format=args.log_format,
        spark_master=args.spark_master,
        spark_conf=tuple(tuple(s.split("=", 1)) for s in args.spark_conf),
    )  # fmt: skip


RECONNECT_GRACE = 5.0
"""Seconds a stop waits for ZooKeeper before it gives up leaving: a loaded machine or a server
that restarts drops the connection for a moment, and a member that can still leave should."""


def _stopper(store: api.ZooKeeperStore, group: PeerGroup) -> Callable[..., None]:
    """A signal handler: leave the ring gracefully (the hand-over of `onyx leave`, within the
    group's leave_timeout: peer.cluster.handover.StopDeadlines), or, with ZooKeeper out of reach for
    RECONNECT_GRACE, exit. Then the leave could never be written, and the group's thread may be
    blocked on a request that waits for a server, as would any cleanup that touches ZooKeeper;
    the group's pulse goes when its session expires, and its embedded driver's directory is
    removed by the next group that starts on this machine."""

    def stop(*_: object) -> None:
        deadline = time.monotonic() + RECONNECT_GRACE
        while not store.connected and time.monotonic() < deadline:
            time.sleep(0.05)
        if not store.connected:
            logging.getLogger(__name__).warning(
                "ZooKeeper at %s is unreachable: stopping without leaving the ring", store.hosts
            )
            os._exit(1)
        group.stop()

    return stop


SERVERS = ("kafka", "postgres", "nats")


def server_name(text: str) -> str:
    if text not in SERVERS:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(SERVERS)}")
    return text


def run_servers(args: argparse.Namespace) -> int:
    """The servers asked for, each in ``--dir/<name>``, until SIGINT or SIGTERM; each line
    printed says where one answers."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    started: list[local_servers.LocalServer] = []
    try:
        for name in args.names or SERVERS:
            server = _local_server(name, args)
            started.append(server)
            print(f"{name}: {_address(server)}", flush=True)
        print("running until Ctrl-C", flush=True)
        stop.wait()
    except local_servers.LocalServerError as e:
        _error(str(e))
        return 1
    finally:
        for server in reversed(started):
            server.stop()
    return 0


def _local_server(name: str, args: argparse.Namespace) -> local_servers.LocalServer:
    where = args.dir.resolve() / name
    if name == "kafka":
        return local_servers.KafkaBroker(where, args.kafka_port).start()
    if name == "postgres":
        return local_servers.Postgres(where, args.postgres_port).start()
    return local_servers.Nats(where, args.nats_port).start()


def _address(server: local_servers.LocalServer) -> str:
    if isinstance(server, local_servers.KafkaBroker):
        return server.bootstrap
    if isinstance(server, local_servers.Postgres):
        return server.dsn
    assert isinstance(server, local_servers.Nats)
    return server.url


def media_driver(args: argparse.Namespace) -> int:
    log_output.configure(args.log_level, args.log_format)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if args.metrics_port is not None:
        serve_driver_metrics(
            args.metrics_port, args.dir, metrics.driver_registry(), args.metrics_address
        )
    run_media_driver(args.dir, stop)
    return 0


def scheduler_serve(args: argparse.Namespace) -> int:
    log_output.configure(args.log_level, args.log_format)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    host, _, port = args.listen.rpartition(":")
    scheduling_server.serve(
        host.strip("[]"), int(port), stop, capacity=args.cache, max_body=args.max_body
    )
    return 0


@contextmanager
def _client(args: argparse.Namespace) -> Iterator[api.ZooKeeperStore]:
    """A session on the cluster's log for one command, closed however the command ends."""
    log_output.configure()
    store = api.connect(
        args.zookeeper,
        args.tenancy,
        connect_timeout=args.connect_timeout,
        auth=args.zookeeper_auth,
    )
    try:
        yield store
    finally:
        store.close()


def job_submit(args: argparse.Namespace) -> int:
    """Without --code the job is checked before ZooKeeper is asked anything; with it, against
    its code, which goes to the checkpoint storage (opened only then)."""
    if args.code is None:
        job = api.load(args.file)
        with _client(args) as store:
            job_id = api.submit(store, job, args.id)
    else:
        code = pack(args.code)
        with _client(args) as store, closing(_storage(args)) as storage:
            job_id = api.submit(store, args.file, args.id, code=code, storage=storage)
    print(json.dumps({"id": job_id}) if args.json else job_id)
    return 0


def _storage(args: argparse.Namespace) -> CheckpointStorage:
    return CheckpointStorage(args.checkpoints, args.tenancy)


def describe_job(status: api.JobStatus) -> str:
    named = f" ({status.name})" if status.name else ""
    line = f"job {status.id}{named}: {status.state}"
    if status.reason:
        line += f": {status.reason}"
    if status.state == "waiting":
        line += f" for peers (needs at least {status.needs})"
    if status.state == "running":
        line += f" (allocation version {status.allocation_version})"
        if status.rolled_back:
            line += f"\n  last rolled back: {status.rolled_back}"
        if status.held_back:
            line += "\n  held back at its size: it grows once it stands still at a commit"
        tasks = [f"  {t}: {', '.join(_peer(status, p) for p in ps)}"
                 for t, ps in status.allocation.items()]  # fmt: skip
        line = "\n".join([line, *tasks])
    return line


def _peer(status: api.JobStatus, peer: str) -> str:
    """A running peer, with what local recovery says of it: the seat it took over (and
    whether it is still replaying it), its standby."""
    notes = []
    if peer in status.takeovers:
        replaying = ", replaying" if peer in status.recovering else ""
        notes.append(f"took over from {short(status.takeovers[peer])}{replaying}")
    if peer in status.standbys:
        notes.append(f"standby {short(status.standbys[peer])}")
    return short(peer) + (f" ({'; '.join(notes)})" if notes else "")


def _show_status(args: argparse.Namespace, status: api.JobStatus) -> None:
    print(json.dumps(status.to_json()) if args.json else describe_job(status))


def _known_status(store: api.ZooKeeperStore, job_id: str) -> api.JobStatus:
    status = api.status(api.replica(store), job_id)
    if status.state == "unknown":
        raise JobError(f"job {job_id!r}: no such job in this tenancy")
    return status


def job_status(args: argparse.Namespace) -> int:
    with _client(args) as store:
        _show_status(args, _known_status(store, args.id))
    return 0


def job_list(args: argparse.Namespace) -> int:
    with _client(args) as store:
        listed = [(s, api.last_committed(store, s.id)) for s in api.jobs(api.replica(store))]
    if args.json:
        print(json.dumps([status.to_json(epoch) for status, epoch in listed]))
        return 0
    rows = [("ID", "NAME", "STATE", "PEERS", "COMMITTED", "AGE")]
    now = time.time()
    for status, epoch in listed:
        committed = f"{epoch.version}/{epoch.number}" if epoch else "-"
        age = "-" if status.submitted is None else age_of(now - status.submitted)
        name, peers = status.name or "-", str(status.peers)
        rows.append((status.id, name, status.state, peers, committed, age))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        print("  ".join(cells).rstrip())
    return 0


def age_of(seconds: float) -> str:
    """An age as people read it: 42s, 7m, 3h, 12d (a clock behind the submitter's reads 0s)."""
    seconds = max(seconds, 0.0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def job_wait(args: argparse.Namespace) -> int:
    """Exit 0 once the job completed, 1 once it was killed, 3 when ``--timeout`` passed first,
    4 when the cluster cannot be reached."""
    try:
        with _client(args) as store:
            _known_status(store, args.id)
            final = api.wait(store, args.id, args.timeout)
    except TimeoutError as e:
        _error(f"job {args.id!r} has not finished: {e}")
        return EXIT_TIMED_OUT
    except StoreUnreachable as e:
        _error(str(e))
        return EXIT_UNREACHABLE
    _show_status(args, final)
    return 0 if final.state == "completed" else 1


def job_checkpoints(args: argparse.Namespace) -> int:
    with (
        _client(args) as store,
        closing(_storage(args)) as storage,
    ):
        _known_status(store, args.id)
        record, _ = Commits(store, args.id).read()
        epochs = committed_epochs(storage, args.id, record)
    latest = record.committed if record else None
    savepoints = sorted(record.savepoints.items()) if record else []
    if args.json:
        doc = {
            "checkpoints": [
                {"version": e.version, "epoch": e.number, "latest": e == latest} for e in epochs
            ],
            "savepoints": [
                {"name": n, "version": sp.epoch.version, "epoch": sp.epoch.number}
                for n, sp in savepoints
            ],
        }
        print(json.dumps(doc))
        return 0
    if not epochs:
        print(f"job {args.id}: no committed checkpoint")
    for epoch in epochs:
        mark = "  (latest: recovery starts here)" if epoch == latest else ""
        print(f"job {args.id}: allocation {epoch.version} epoch {epoch.number}{mark}")
    for name, kept in savepoints:
        print(f"job {args.id}: savepoint {name}: {kept.epoch.describe()}")
    return 0


def job_savepoint(args: argparse.Namespace) -> int:
    with _client(args) as store:
        if args.dispose is not None:
            with closing(_storage(args)) as storage:
                kept = api.dispose_savepoint(store, storage, args.id, args.dispose)
            name, what = args.dispose, "disposed of"
        else:
            name = _savepoint_name(args.name)
            try:
                kept = api.savepoint(store, args.id, name, args.timeout)
            except TimeoutError as e:
                _error(f"job {args.id!r}: savepoint {name!r} not committed yet: {e}")
                return EXIT_TIMED_OUT
            what = "taken"
    if args.json:
        print(json.dumps(_savepoint_doc(args.id, name, kept, what)))
    else:
        print(f"job {args.id}: savepoint {name} {what} ({kept.epoch.describe()})")
    return 0


def job_stop(args: argparse.Namespace) -> int:
    name = _savepoint_name(args.savepoint)
    with _client(args) as store:
        try:
            kept = api.stop(store, args.id, name, args.timeout)
        except TimeoutError as e:
            _error(f"job {args.id!r}: savepoint {name!r} not committed yet: {e}; the job goes on")
            return EXIT_TIMED_OUT
    if args.json:
        print(json.dumps(_savepoint_doc(args.id, name, kept, "stopped")))
    else:
        print(f"job {args.id}: stopped with savepoint {name} ({kept.epoch.describe()})")
    return 0


def _savepoint_name(name: str | None) -> str:
    return name or time.strftime("savepoint-%Y%m%dT%H%M%SZ", time.gmtime())


def _savepoint_doc(job_id: str, name: str, kept: Savepoint, state: str) -> dict[str, object]:
    epoch = {"version": kept.epoch.version, "epoch": kept.epoch.number}
    return {"job": job_id, "savepoint": name, **epoch, "state": state}


def job_kill(args: argparse.Namespace) -> int:
    with _client(args) as store:
        if not _known_status(store, args.id).finished:
            api.kill(store, args.id)
        _show_status(args, api.wait(store, args.id, args.connect_timeout))
    return 0


def replica(args: argparse.Namespace) -> int:
    with _client(args) as store:
        current = api.replica(store)
    print(json.dumps(current.to_json(), indent=2) if args.json else describe(current))
    return 0


def _member_command(
    commands: argparse._SubParsersAction,
    name: str,
    handler: Callable[[argparse.Namespace], int],
    help: str,
) -> argparse.ArgumentParser:
    """A command acting on one member, named as `onyx replica` prints it."""
    command = commands.add_parser(name, help=help)
    _cluster_args(command)
    command.add_argument("member", help="its id, or a prefix of it (as `onyx replica` prints)")
    command.set_defaults(handler=handler)
    return command


def down_member(args: argparse.Namespace) -> int:
    with _client(args) as store:
        member = api.down(store, args.member)
    print(f"member {member} is down: its peers' work moves to the other members")
    return 0


def leave_member(args: argparse.Namespace) -> int:
    with _client(args) as store:
        member = api.leave(store, args.member, args.wait)
    if args.wait is None:
        print(f"member {member} is leaving: it exits once its jobs commit their current epochs")
    else:
        print(f"member {member} has left: its work moved to the other members")
    return 0


def collect_garbage(args: argparse.Namespace) -> int:
    with _client(args) as store:
        result = api.gc(store, caller=f"gc-{new_id()}")
    print(f"origin stored at log position {result.position}; {result.deleted} entries trimmed")
    return 0


def run_local(args: argparse.Namespace) -> int:
    """One group by default for a job, with peers enough for it: they hand segments over in
    memory. With more groups, each embeds a media driver and segments between groups go over
    UDP. The peers offer every tag the job's tasks require (one machine is every host a tag
    names). Ctrl-C kills the job and stops the cluster as cleanly as the end of the job does;
    a second Ctrl-C while that runs exits at once."""
    log_output.configure(args.log_level, args.log_format)
    job = api.load(args.file) if args.file else None
    groups = args.groups or (1 if job else 3)
    vpeers = args.vpeers or (peers_for(job, groups) if job else 2)
    print(f"local cluster: {groups} peer group(s) x {vpeers} virtual peers, embedded log")
    with ExitStack() as stack:
        _configure_spark(args, stack)
        transports = None
        if job is not None and groups > 1:
            transports = [AeronTransport(mtu=LOOPBACK_MTU) for _ in range(groups)]
            for transport in transports:
                stack.callback(transport.close)
        cluster = LocalCluster(groups, vpeers, transports, tags_for(job) if job else (),
                               checkpoints=args.checkpoints, state_dir=args.state_dir)  # fmt: skip
        cluster.start()
        try:
            formed = cluster.await_ring(args.timeout or RING_TIMEOUT)
            outcome = _run_job(cluster, job, args.timeout) if job else _show_ring(formed)
        except KeyboardInterrupt:
            signal.signal(signal.SIGINT, lambda *_: os._exit(EXIT_INTERRUPTED))
            print("interrupted: stopping the local cluster", flush=True)
            outcome = EXIT_INTERRUPTED
        finally:
            final = cluster.stop()
    print(f"every group left gracefully; the log ends at position {final.version}")
    return outcome


def _show_ring(formed: Replica) -> int:
    print("the ring has formed:")
    print(describe(formed))
    return 0


def _run_job(cluster: LocalCluster, job: api.Job, timeout: float | None) -> int:
    job_id = api.submit(cluster.reader, job)
    current = cluster.replica()
    started = api.status(current, job_id)
    if started.state == "waiting":
        raise JobError(
            f"job {job_id!r} needs at least {started.needs} virtual peers and this local "
            f"cluster has {len(current.peers)}: raise --vpeers or --groups"
        )
    if not started.finished:
        # One that ended before this read is described once, below, as every finished job is.
        print(describe_job(started), flush=True)
    try:
        with _progress(cluster, job_id, job), _interrupts() as interrupted:
            final = api.wait(cluster.reader, job_id, timeout, stop=interrupted)
            if interrupted.is_set():
                raise KeyboardInterrupt
    except (KeyboardInterrupt, TimeoutError) as stopped:
        api.kill(cluster.reader, job_id)
        print(describe_job(api.wait(cluster.reader, job_id, RING_TIMEOUT)), flush=True)
        if isinstance(stopped, KeyboardInterrupt):
            raise
        _error(f"job {job_id!r} did not finish within {timeout:g} s")
        return EXIT_TIMED_OUT
    print(describe_job(final))
    if final.state == "completed":
        for name in job.output_tasks():
            _show_output(job.task(name))
    return 0 if final.state == "completed" else 1


@contextmanager
def _interrupts() -> Iterator[threading.Event]:
    """An event Ctrl-C sets while the job runs, instead of a KeyboardInterrupt raised wherever
    the main thread happens to be: one raised inside a ``with`` of a lock, or of a logging
    handler, can leave it held, and the threads of the groups wait for it for ever."""
    interrupted = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield interrupted
        return
    before = signal.signal(signal.SIGINT, lambda *_: interrupted.set())
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, before)


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


def config_show(args: argparse.Namespace) -> int:
    """The configuration of the command in ``args.target`` (parsed as `onyx` would parse it),
    or of every command; a required option given nowhere is shown unset, not refused."""
    parser = build_parser()
    if args.target:
        target = parser.parse_args(args.target)
        target.config = target.config or args.config
        words, _ = config.command_of(parser, target)
        shown = {words: config.settings(parser, words, target, os.environ)}
    else:
        shown = {}
        for words, leaf in config.commands(parser).items():
            target = config.unset_namespace(leaf)
            target.config = args.config
            shown[words] = config.settings(parser, words, target, os.environ)
    path = config.config_path(target, os.environ)
    print(config.to_json(shown) if args.json else config.describe(shown, path))
    return 0


def parse_args(argv: Sequence[str] | None, environ: Mapping[str, str]) -> argparse.Namespace:
    """The command line, then every option it left unset from ``environ``, the config file or
    its default; a bad value from any of them exits 2 with one line naming where it came from."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config.resolve(parser, args, environ)
    except config.ConfigError as e:
        parser.error(str(e))
    clash = _clash(args)
    if clash is not None:
        parser.error(clash)
    return args


def _clash(args: argparse.Namespace) -> str | None:
    """Options, however set, that do not go together, named."""
    return _too_many_workers(args) or _worker_ports_clash(args) or _modes_refused(args)


def _modes_refused(args: argparse.Namespace) -> str | None:
    """A member's coordination modes that cannot mean what they say (CoordinationModes.refusal)."""
    if getattr(args, "epidemic_log", None) is None:
        return None
    return _modes(args).refusal()


def _too_many_workers(args: argparse.Namespace) -> str | None:
    """A number of workers above the virtual peers would leave a worker without a peer. It is
    refused rather than lowered, as the operator who names a number means that many
    processes."""
    workers = getattr(args, "workers", None)
    if isinstance(workers, int) and workers > args.vpeers:
        return (
            f"--workers {workers} is more than --vpeers {args.vpeers}: every worker runs at "
            f"least one virtual peer (leave --workers at {AUTO_WORKERS} for one per core, "
            "at most one per peer)"
        )
    return None


def _worker_ports_clash(args: argparse.Namespace) -> str | None:
    """The workers' ports, PORT + i for each worker i, must all be ports, and not the
    member's own."""
    base = getattr(args, "worker_port_base", None)
    if base is None:
        return None
    count = workers_of(args)
    if base + count - 1 > 65535:
        return f"--worker-port-base {base} leaves no port for worker {65535 - base + 1} of {count}"
    if args.port is not None and base <= args.port < base + count:
        return (
            f"--port {args.port} is the port of worker {args.port - base} "
            f"(--worker-port-base {base}, {count} workers)"
        )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv, os.environ)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return args.handler(args)
    except config.ConfigError as e:
        print(f"onyx: error: {e}", file=sys.stderr)
        return 2
    except (
        StoreError,
        TimeoutError,
        JobError,
        TransportError,
        CheckpointError,
        MetricsError,
        InventoryError,
        CodeError,
        MemberError,
        scheduling_server.ServerError,
    ) as e:
        _error(str(e))
        return 1
    except KeyboardInterrupt:
        _error("interrupted")
        return EXIT_INTERRUPTED


def _error(message: str) -> None:
    print(f"onyx: error: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
