"""`onyx`: run a peer group, inspect and tend a cluster, or run a whole cluster locally.

Every mistake in the arguments, and every server that cannot be reached, ends in one line on
stderr naming what is wrong and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import signal
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from peer import __version__, api
from peer.cluster.group import GroupConfig, PeerGroup, new_id
from peer.cluster.local import LocalCluster
from peer.log.replica import Replica, ring_cycle
from peer.log.store import StoreError
from peer.log.stores.zookeeper import TENANCY_PATTERN

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


positive_int = _positive(int, "a whole number of at least 1")
positive_seconds = _positive(float, "a positive number of seconds")


def _cluster_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--zookeeper", required=True, type=zookeeper_address, metavar="HOST:PORT")
    parser.add_argument("--tenancy", required=True, type=tenancy_name, metavar="NAME")
    parser.add_argument("--connect-timeout", type=positive_seconds, default=10.0, metavar="S")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="onyx", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"onyx {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    peer = commands.add_parser("peer", help="peer group commands")
    peer_commands = peer.add_subparsers(dest="peer_command", required=True, parser_class=Parser)
    start = peer_commands.add_parser("start", help="run a peer group until SIGTERM")
    _cluster_args(start)
    start.add_argument("--vpeers", type=positive_int, default=1, metavar="N")
    start.add_argument("--session-timeout", type=positive_seconds, default=10.0, metavar="S")
    start.add_argument("--join-back-off", type=positive_seconds, default=0.5, metavar="S")
    start.set_defaults(handler=peer_start)

    show = commands.add_parser("replica", help="print the cluster's current replica")
    _cluster_args(show)
    show.add_argument("--json", action="store_true", help="the whole replica as JSON")
    show.set_defaults(handler=replica)

    gc = commands.add_parser("gc", help="compress the replica into the origin and trim the log")
    _cluster_args(gc)
    gc.set_defaults(handler=collect_garbage)

    run = commands.add_parser("run", help="run a local cluster on the embedded log")
    run.add_argument("--groups", type=positive_int, default=3, metavar="N")
    run.add_argument("--vpeers", type=positive_int, default=2, metavar="N")
    run.add_argument("--timeout", type=positive_seconds, default=30.0, metavar="S")
    run.set_defaults(handler=run_local)
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
        vpeers=args.vpeers, join_back_off=args.join_back_off, leave_timeout=args.session_timeout
    )
    group = PeerGroup(store, config)
    signal.signal(signal.SIGTERM, lambda *_: group.stop())
    signal.signal(signal.SIGINT, lambda *_: group.stop())
    try:
        group.run()
    finally:
        store.close()
    return 0


def replica(args: argparse.Namespace) -> int:
    _logging(logging.WARNING)
    store = api.connect(args.zookeeper, args.tenancy, connect_timeout=args.connect_timeout)
    try:
        current = api.replica(store)
    finally:
        store.close()
    print(json.dumps(current.to_json(), indent=2) if args.json else describe(current))
    return 0


def collect_garbage(args: argparse.Namespace) -> int:
    _logging(logging.WARNING)
    store = api.connect(args.zookeeper, args.tenancy, connect_timeout=args.connect_timeout)
    try:
        result = api.gc(store, caller=f"gc-{new_id()}")
    finally:
        store.close()
    print(f"origin stored at log position {result.position}; {result.deleted} entries trimmed")
    return 0


def run_local(args: argparse.Namespace) -> int:
    _logging(logging.WARNING)
    print(f"local cluster: {args.groups} peer groups x {args.vpeers} virtual peers, embedded log")
    cluster = LocalCluster(args.groups, args.vpeers)
    cluster.start()
    try:
        formed = cluster.await_ring(args.timeout)
        print("the ring has formed:")
        print(describe(formed))
    finally:
        final = cluster.stop()
    print(f"every group left gracefully; the log ends at position {final.version}")
    return 0


def _logging(level: int) -> None:
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("kazoo").setLevel(max(level, logging.ERROR))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except (StoreError, TimeoutError) as e:
        print(f"onyx: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
