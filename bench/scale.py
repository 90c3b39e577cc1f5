"""Coordination at scale: ZooKeeper's load, join time and entry spread of a cluster of a thousand
members, classic protocol and the new modes side by side, on this machine against one real
ZooKeeper.

The simulated cluster: --members members of --vpeers virtual peers each, hosted by --processes
OS processes (bench.scale_members), every member a real Incarnation with its own UDP socket
(bench.udp_transport), running the real log feed, gossip, join direct and replica code, and no
job. One thread per process drives its members and they share its ZooKeeper session, a pure
function's results (apply_entry, the peer index) and no membership (bench.scale_members says
what is shared and why the figures stay the members'). The cluster is formed through an origin,
as a gc leaves one. One cluster runs with the new modes (join direct, the epidemic log), then
one with the classic protocol, each in its own tenancy. Figures (bench/README.md says more):

- zk_sessions_per_machine: ZooKeeper connections per member of a --join-members cluster whose
  members open sessions of their own, per simulated machine.
- zk_reads_per_entry_per_member, zk_writes_per_entry: the first member appends --entries marked
  no-op entries, --spacing s apart; ZooKeeper's own counters (bench.zookeeper_counters) over
  that window, less the pings of the same run's idle sessions, divided by entries and members.
- harness_cpu_s_per_entry: the CPU the member processes spent in that window, per entry (what
  a thousand machines would share; it sets how far apart the entries can be on two cores).
- entry_spread_p50_s / _p99_s_<N>_members: from each entry's append to each member applying it,
  over every (member, entry) pair (one monotonic clock: every process is on this machine).
- zk_writes_per_join, join_s_<N>_members: a real PeerGroup (its own session and socket, in this
  process) joins the running cluster; the zxid's difference and the time to have joined with
  every virtual peer active.
- join_s_log_1k, join_s_log_100k: the same join into a small cluster (--join-members) whose log
  holds that many no-op entries after the origin (written by multi-creates of 1,000).
- apply_us_per_entry_10k_peers: apply_entry of membership entries on a replica of 1,000 groups
  of 10, against the same on 10 groups.
- allocation_s_10k_peers: bench/allocation.py's measurement (a real scheduling server).

The new-mode figures carry the plain names, the classic ones the same names with ``_classic``.
Allocations in the background are measured by bench/async_apply.py; the sessions of a member
with workers are one per machine, as tests/integration/test_member_workers.py checks, and here
each simulated member stands for such a machine.

On two cores every member's gossip shares the machine: at 1,000 members an entry's 9,840 copies
cost about a CPU second, so the entries are spaced by the cluster's size (--spacing);
bench/README.md gives a run's figures.

Run: .venv/bin/python bench/scale.py [--members 1000] [--vpeers 10] [--processes 4]
     [--entries 20] [--spacing S] [--classic-entries N] [--new-only | --classic-only] [--quick]
The last line of output is one JSON document holding every figure.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path

from kazoo.client import KazooClient
from pyrsistent import pset

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import allocation  # noqa: E402
from bench.scale_members import SimulationSettings, noop_entry, serve  # noqa: E402
from bench.udp_transport import UdpHub  # noqa: E402
from bench.zookeeper_counters import BenchZooKeeper, Counters, read_counters  # noqa: E402
from peer.cluster.group import PeerGroup  # noqa: E402
from peer.cluster.modes import CoordinationModes  # noqa: E402
from peer.log.apply import apply_entry  # noqa: E402
from peer.log.entries.group_leave import GROUP_LEAVE  # noqa: E402
from peer.log.entries.join_direct import JOIN_DIRECT  # noqa: E402
from peer.log.entries.virtual_peers import announce  # noqa: E402
from peer.log.entry import Entry  # noqa: E402
from peer.log.replica import Replica  # noqa: E402
from peer.log.store import encoded, store_origin_and_trim  # noqa: E402
from peer.log.stores.zookeeper import ENTRY_PREFIX, ZooKeeperStore  # noqa: E402
from peer.membership.agent import MembershipAgent, MembershipSettings  # noqa: E402
from peer.membership.members import lifecycle  # noqa: E402

NEW = CoordinationModes(join_direct=True, epidemic_log=True)
CLASSIC = CoordinationModes()
MULTI = 1000
STARTING = 900.0
"""Seconds the members of a cluster may take to start: a thousand take minutes on two cores."""
"""Entries per multi-create when filling the log."""
Member = tuple[str, list[str], str]
"""(group id, its virtual peers, its site)"""


def ring_of(members: list[Member], rumors: bool = False) -> Replica:
    """Every member joined in one ring, with its peers and site, as join-direct entries would
    leave them (the kind's own apply, one member after another); with ``rumors``, each takes
    the epidemic log's rumors, as its join would have said."""
    first, peers, site = members[0]
    start = Replica().evolve(groups=pset([first]))
    replica = announce(start, first, peers, site, [], rumors=rumors)
    aider = first
    extra = {"rumors": True} if rumors else {}
    for group, peers, site in members[1:]:
        entry = JOIN_DIRECT.entry(joiner=group, aider=aider, peers=peers, site=site, **extra)
        replica = JOIN_DIRECT.apply(replica, entry)
        aider = group
    return replica


def form(admin: ZooKeeperStore, members: list[Member], rumors: bool) -> Replica:
    """Store the ring as the origin, at the position of one no-op entry (ZooKeeper numbers the
    log from 0, so the origin needs a position the log has reached)."""
    position = admin.append(noop_entry(members[0][0], members[0][0]))
    origin = ring_of(members, rumors).evolve(version=position)
    store_origin_and_trim(admin, origin)
    return origin


def fill(admin: ZooKeeperStore, count: int, group: str) -> int:
    """``count`` no-op entries after the origin; the tail's position."""
    data = encoded(noop_entry(group, group))
    path = f"{admin.log_path}/{ENTRY_PREFIX}"
    for start in range(0, count, MULTI):
        transaction = admin.client.transaction()
        for _ in range(min(MULTI, count - start)):
            transaction.create(path, data, sequence=True)
        transaction.commit()
    return admin.tail()


class Cluster:
    """The member processes of one simulated cluster."""

    def __init__(self, settings: SimulationSettings, members: int, processes: int) -> None:
        context = multiprocessing.get_context("spawn")
        counts = [members // processes + (i < members % processes) for i in range(processes)]
        self.pipes: list[Connection] = []
        self.processes = []
        for index, count in enumerate(c for c in counts if c):
            ours, theirs = context.Pipe()
            process = context.Process(target=serve, args=(settings, count, index, theirs))
            process.start()
            self.pipes.append(ours)
            self.processes.append(process)
        self.members: list[Member] = [m for pipe in self.pipes for m in pipe.recv()]

    def ask(self, *command: object) -> list[object]:
        for pipe in self.pipes:
            pipe.send(command)
        return [pipe.recv() for pipe in self.pipes]

    def versions(self) -> list[int | None]:
        return [v for answer in self.ask("versions") for v in answer]

    def marks(self) -> tuple[list[tuple[int, int, float]], list[tuple[int, float]]]:
        applied, appended = [], []
        for index, (a, w) in enumerate(self.ask("marks")):
            applied += [(index, *rest) for rest in a]
            appended += w
        return applied, appended

    def write(self, count: int, spacing: float) -> None:
        self.pipes[0].send(("write", count, spacing, self.members[1][0]))
        self.pipes[0].recv()

    def stop(self) -> None:
        self.ask("stop")
        for process in self.processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()


def wait_until[T](condition: Callable[[], T], timeout: float, what: str, every: float = 0.2) -> T:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)
    return value


@contextmanager
def running(
    zookeeper: BenchZooKeeper, settings: SimulationSettings, members: int, processes: int,
    log_entries: int = 0,
) -> Iterator[tuple[Cluster, ZooKeeperStore]]:  # fmt: skip
    """A simulated cluster, started from its origin, and an admin session on its tenancy;
    with ``log_entries`` no-op entries after the origin, its members start as of the tail."""
    admin = ZooKeeperStore(zookeeper.address, settings.tenancy, create=True)
    cluster = Cluster(settings, members, processes)
    try:
        origin = form(admin, cluster.members, settings.modes.epidemic_log)
        tail = fill(admin, log_entries, cluster.members[0][0]) if log_entries else origin.version
        cluster.ask("start", tail)
        wait_until(lambda: sum(cluster.ask("pulses")) == len(cluster.members), STARTING,
                   "every member to register its pulse")  # fmt: skip
        cluster.ask("go")
        wait_until(lambda: all(v is not None and v >= tail for v in cluster.versions()),
                   STARTING, "every member to start")  # fmt: skip
        yield cluster, admin
    finally:
        cluster.stop()
        admin.close()


def settled(port: int, quiet: float = 1.0, timeout: float = 30.0) -> Counters:
    """The counters once no write has happened for ``quiet`` seconds."""
    last = read_counters(port)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = read_counters(port)
        if now.zxid == last.zxid:
            return now
        last = now
    return last


@dataclass(frozen=True)
class Join:
    seconds: float
    writes: int


def join_one(zookeeper: BenchZooKeeper, settings: SimulationSettings, seed: str) -> Join:
    """A real PeerGroup joins: from opening its session to having joined with every virtual
    peer active; the writes ZooKeeper counted until the log fell quiet."""
    before = settled(zookeeper.port)
    hub = UdpHub()
    started = time.monotonic()
    store = settings.store()
    transport = hub.transport(threading.Event())
    group = PeerGroup(store, settings.group_config(seeds=(seed,)), transport)
    transport.wakeup = group.wakeup  # the socket's datagrams wake the group's loop
    thread = threading.Thread(target=group.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: _joined(group), 300, "the new member to join", every=0.01)
        seconds = time.monotonic() - started
        after = settled(zookeeper.port)
    finally:
        group.stop()
        thread.join(15)
        store.close()
        hub.close()
    return Join(seconds, after.zxid - before.zxid)


def _joined(group: PeerGroup) -> bool:
    current = group.current
    if current is None or current.id not in current.replica.groups:
        return False
    return set(current.peers) <= set(current.replica.group_peers.get(current.id, ()))


def sum_learned(cluster: Cluster) -> dict[str, float]:
    """How every member learned the entries it consumed so far (an epidemic member's count)."""
    total: dict[str, float] = {}
    for answer in cluster.ask("learned"):
        for source, count in answer.items():
            total[source] = total.get(source, 0) + count
    return total


def spread(applied: list[tuple[int, int, float]], appended: list[tuple[int, float]]) -> list[float]:
    """Seconds from each marked entry's append to each member's applying it."""
    at = dict(appended)
    return [when - at[mark] for _, _, mark, when in applied if mark in at]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ping_rate(zookeeper: BenchZooKeeper, timeout: float, sessions: int, window: float) -> float:
    """Requests per second one idle session sends (kazoo's pings), from ``sessions`` sessions
    with the members' session timeout that do nothing else for ``window`` seconds."""
    clients = [KazooClient(hosts=zookeeper.address, timeout=timeout) for _ in range(sessions)]
    for client in clients:
        client.start(timeout=30)
    try:
        before = settled(zookeeper.port)
        time.sleep(window)
        idle = read_counters(zookeeper.port).minus(before)
    finally:
        for client in clients:
            client.stop()
            client.close()
    return idle.requests / idle.at / sessions


def cluster_figures(
    zookeeper: BenchZooKeeper,
    settings: SimulationSettings,
    args: argparse.Namespace,
    pings: float,
) -> dict[str, float | int]:
    """Sessions, reads and writes per entry, spread, and one join, for one simulated cluster."""
    n = args.members
    classic = not settings.modes.epidemic_log
    entries = args.classic_entries if classic else args.entries
    spacing = args.spacing
    idle_connections = read_counters(zookeeper.port).connections
    with running(zookeeper, settings, n, args.processes) as (cluster, _admin):
        # The host processes' shared sessions (bench.scale_members): for the pings only.
        connections = read_counters(zookeeper.port).connections - idle_connections - 1
        time.sleep(args.settle)
        quiet = settled(zookeeper.port)
        time.sleep(args.idle)
        idle = read_counters(zookeeper.port).minus(quiet)
        idle_reads = idle.requests - idle.zxid - pings * idle.at * connections
        learned_before = sum_learned(cluster)
        before, cpu = read_counters(zookeeper.port), sum(cluster.ask("cpu"))
        cluster.write(entries, spacing)
        wanted = entries * n
        wait_until(lambda: sum(cluster.ask("applied")) >= wanted, args.timeout,
                   f"{n} members to apply {entries} entries", every=0.1)  # fmt: skip
        window = read_counters(zookeeper.port).minus(before)
        cpu = sum(cluster.ask("cpu")) - cpu
        learned = {k: v - learned_before.get(k, 0) for k, v in sum_learned(cluster).items()}
        applied, appended = cluster.marks()
        delays = spread(applied, appended)
        reads = window.requests - window.zxid - pings * window.at * connections
        join = join_one(zookeeper, settings, cluster.members[-1][2])
    return {
        "members": n,
        "zk_connections": connections,
        "zk_idle_reads_per_member_s": idle_reads / idle.at / n,
        "zk_idle_writes": idle.zxid,
        "entries": entries,
        "entry_spacing_s": spacing,
        "harness_cpu_s_per_entry": cpu / entries,
        "zk_writes_per_entry": window.zxid / entries,
        "zk_reads_per_entry_per_member": reads / (entries * n),
        "entries_learned_by_gossip_share": learned.get("gossip", 0) / (entries * n),
        "entries_learned_from_zookeeper_share": learned.get("zookeeper", 0) / (entries * n),
        "entry_spread_p50_s": statistics.median(delays),
        "entry_spread_p99_s": percentile(delays, 0.99),
        "entry_spread_max_s": max(delays),
        "zk_writes_per_join": join.writes,
        "join_s": join.seconds,
    }


def join_figures(
    zookeeper: BenchZooKeeper, settings: SimulationSettings, members: int, entries: int
) -> tuple[Join, float]:
    """A join into a cluster of ``members`` whose log holds ``entries``, and the ZooKeeper
    connections per member that cluster opened: its members open sessions of their own, as
    every real member does (the big cluster's share one per process)."""
    settings = replace(settings, shared_session=False)
    idle_connections = read_counters(zookeeper.port).connections
    with running(zookeeper, settings, members, 1, entries) as (cluster, _admin):
        connections = read_counters(zookeeper.port).connections - idle_connections - 1
        return join_one(zookeeper, settings, cluster.members[-1][2]), connections / members


def apply_cost(groups: int, vpeers: int, rounds: int) -> float:
    """Microseconds per entry of apply_entry on a ring of ``groups`` groups of ``vpeers``: a
    no-op, a join-direct of a new group with its peers, its group-leave, over and over."""
    members = [(f"g{g:05d}", [f"p{g:05d}-{v:02d}" for v in range(vpeers)], f"127.0.0.1:{g}")
               for g in range(groups)]  # fmt: skip
    replica = ring_of(members)
    entries: list[Entry] = []
    for r in range(rounds):
        joiner = f"n{r:05d}"
        peers = [f"q{r:05d}-{v:02d}" for v in range(vpeers)]
        entries += [
            noop_entry("g00000", "g00001"),
            JOIN_DIRECT.entry(joiner=joiner, aider="g00000", peers=peers, site="127.0.0.1:1"),
            GROUP_LEAVE.entry(id=joiner),
        ]
    started = time.perf_counter()
    for position, entry in enumerate(entries, start=replica.version + 1):
        replica = apply_entry(replica, entry.at(position)).new
    return (time.perf_counter() - started) / len(entries) * 1e6


def membership_tick_us(groups: int, heartbeat: float = 0.25, ticks: int = 200) -> float:
    """Microseconds one member's membership agent takes per tick (every heartbeat / 12.5 s)
    in a cluster of ``groups`` members, as a member on a machine of its own pays it."""
    members = [(f"g{g:05d}", [f"p{g:05d}"], f"127.0.0.1:{g + 1}") for g in range(groups)]
    replica = ring_of(members)
    settings = MembershipSettings(heartbeat_interval=heartbeat)
    agent = MembershipAgent("g00000", settings, "127.0.0.1:1")
    agent.sync(lifecycle(replica), replica.sites)
    now = time.monotonic()
    started = time.perf_counter()
    for i in range(ticks):
        agent.polled(now + i * settings.tick)
        agent.tick(now + i * settings.tick)
    return (time.perf_counter() - started) / ticks * 1e6


def allocation_figures(quick: bool) -> dict[str, float]:
    request = allocation.build(1000, 10, 5, 4)
    with allocation.scheduling_server() as address:
        return allocation.measure(request, address, 1 if quick else 3)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=None, help="1000 (100 with --quick)")
    parser.add_argument("--vpeers", type=int, default=10)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--entries", type=int, default=None, help="20 (5 with --quick)")
    parser.add_argument("--spacing", type=float, default=None,
                        help="seconds between the marked entries: 0.25, 2 above 200 members (the "
                             "harness's cores carry every member's gossip)")  # fmt: skip
    parser.add_argument("--classic-entries", type=int, default=None,
                        help="entries of the classic cluster: --entries, 10 above 300 members "
                             "(each costs it a listing and a read per member)")  # fmt: skip
    parser.add_argument("--join-members", type=int, default=10)
    parser.add_argument(
        "--new-only", action="store_true", help="leave the classic cluster out (no _classic)"
    )
    parser.add_argument(
        "--classic-only", action="store_true", help="leave the new modes' cluster out"
    )
    parser.add_argument("--heartbeat", type=float, default=60.0,
                        help="the joining group's heartbeat interval, s (the simulated members "
                             "run no membership)")  # fmt: skip
    parser.add_argument("--machine-cores", type=int, default=8,
                        help="cores of a simulated machine: a classic machine runs one peer "
                             "group (one session) per core")  # fmt: skip
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="the longest wait for every member to apply"
    )
    parser.add_argument("--idle", type=float, default=10.0)
    parser.add_argument(
        "--quick", action="store_true", help="100 members, a log of 1k only, 5 entries"
    )
    args = parser.parse_args()
    if args.quick:
        args.settle, args.idle = 2.0, 4.0
    args.members = args.members or (100 if args.quick else 1000)
    args.entries = args.entries or (5 if args.quick else 20)
    args.spacing = args.spacing or (2.0 if args.members > 200 else 0.25)
    big = args.members > 300
    args.classic_entries = args.classic_entries or (min(args.entries, 10) if big else args.entries)
    return args


def main() -> None:
    args = parse()
    began = time.monotonic()
    logs = Path(tempfile.mkdtemp(prefix="onyx-scale-"))
    figures: dict[str, object] = {}
    notes: list[str] = []
    zookeeper = BenchZooKeeper().start()
    try:
        timeout = SimulationSettings("", "", NEW).session_timeout
        pings = ping_rate(zookeeper, timeout, 50, args.idle)
        figures["zk_pings_per_session_s"] = pings
        print(f"an idle session with a {timeout:g} s timeout sends {pings:.3f} requests per s "
              "(pings: left out of every read figure below)")  # fmt: skip
        for suffix, modes in chosen(args):
            tenancy = f"scale{suffix or '_new'}"
            settings = SimulationSettings(
                zookeeper.address, tenancy, modes, args.vpeers, args.heartbeat, log_dir=str(logs)
            )
            found = cluster_figures(zookeeper, settings, args, pings)
            report_cluster(found, suffix, args)
            figures |= {f"{k}{suffix}": v for k, v in found.items()}
            for size, label in ((1_000, "1k"), (100_000, "100k")):
                if args.quick and size > 1_000:
                    continue
                tenancy = f"join{suffix or '_new'}_{label}"
                join, sessions = join_figures(
                    zookeeper, replace(settings, tenancy=tenancy), args.join_members, size
                )
                if size == 1_000:
                    figures[f"zk_sessions_per_member{suffix}"] = sessions
                    print(f"ZooKeeper connections per member{suffix}: {sessions:.2f} "
                          f"({args.join_members} members with sessions of their own)")  # fmt: skip
                figures[f"join_s_log_{label}{suffix}"] = join.seconds
                figures[f"zk_writes_per_join_log_{label}{suffix}"] = join.writes
                print(f"join, log of {size:,} entries{suffix or ''}: {join.seconds:.3f} s, "
                      f"{join.writes} ZooKeeper writes")  # fmt: skip
    finally:
        zookeeper.stop()
    figures |= derived(figures, args, notes)
    big, small = apply_cost(1000, args.vpeers, 100), apply_cost(10, args.vpeers, 100)
    figures["apply_us_per_entry_10k_peers"] = big
    figures["apply_us_per_entry_100_peers"] = small
    print(
        f"apply_entry at {1000 * args.vpeers:,} peers: {big:.0f} us per entry "
        f"(baseline at {10 * args.vpeers} peers: {small:.0f} us, {big / small:.1f}x)"
    )
    ticks = {m: membership_tick_us(m) for m in (10, args.members)}
    figures[f"membership_tick_us_{args.members}_members"] = ticks[args.members]
    figures["membership_tick_us_10_members"] = ticks[10]
    print(
        f"membership agent tick at {args.members} members: {ticks[args.members]:.0f} us, every "
        f"0.02 s at the default heartbeat (baseline at 10 members: {ticks[10]:.0f} us)"
    )
    alloc = allocation_figures(args.quick)
    figures["allocation_s_10k_peers"] = alloc["allocation_s_10k_peers"]
    figures["allocation_s_10k_peers_classic"] = alloc["allocation_s_10k_peers_classic"]
    figures["allocation_s_10k_peers_first_ask"] = alloc["allocation_s_10k_peers_first_ask"]
    print(
        f"allocation at 10,000 peers: {alloc['allocation_s_10k_peers']:.4f} s from a scheduling "
        f"server's cache, {alloc['allocation_s_10k_peers_first_ask']:.4f} s its first ask "
        f"(baseline, computed here: {alloc['allocation_s_10k_peers_classic']:.4f} s)"
    )
    figures["bench_seconds"] = time.monotonic() - began
    figures["notes"] = notes
    for note in notes:
        print(f"note: {note}")
    print(f"logs of the members: {logs}; the bench took {figures['bench_seconds']:.0f} s")
    print(json.dumps(figures, sort_keys=True))


def chosen(args: argparse.Namespace) -> list[tuple[str, CoordinationModes]]:
    """The clusters to run, each with the suffix of its figures."""
    both = [("", NEW), ("_classic", CLASSIC)]
    return [
        b for b in both if not (args.new_only and b[0]) and not (args.classic_only and not b[0])
    ]


def derived(figures: dict[str, object], args: argparse.Namespace, notes: list[str]) -> dict:
    """The issue's names: per-size spread, sessions per machine, joins into the big cluster."""
    n = args.members
    out: dict[str, object] = {}
    for suffix in ("", "_classic"):
        if f"members{suffix}" not in figures:
            continue
        out[f"entry_spread_p99_s_{n}_members{suffix}"] = figures[f"entry_spread_p99_s{suffix}"]
        out[f"join_s_{n}_members{suffix}"] = figures[f"join_s{suffix}"]
        # One member per machine holds one session (without workers: its own count); a
        # classic machine runs a peer group, each with its session, per core.
        cores = args.machine_cores if suffix else 1
        out[f"zk_sessions_per_machine{suffix}"] = figures[f"zk_sessions_per_member{suffix}"] * cores
    notes.append("zk_sessions_per_machine: one member's own sessions, which is what a machine "
                 "holds when its member runs its virtual peers in workers (--workers), which "
                 "hold none")  # fmt: skip
    notes.append(f"zk_sessions_per_machine_classic: one peer group per core of a "
                 f"{args.machine_cores}-core machine, each with its own session")  # fmt: skip
    return out


def report_cluster(found: dict[str, float | int], suffix: str, args: argparse.Namespace) -> None:
    name = "classic protocol" if suffix else "join direct + epidemic log"
    print(f"-- {found['members']} members x {args.vpeers} virtual peers, {name}")
    print(f"   ZooKeeper connections: {found['zk_connections']} "
          f"(the host processes' shared sessions)")  # fmt: skip
    print(
        f"   idle: {found['zk_idle_reads_per_member_s']:.3f} reads per member per s "
        f"(pings left out), {found['zk_idle_writes']} writes"
    )
    print(f"   {found['entries']} entries {found['entry_spacing_s']:g} s apart; the harness "
          f"used {found['harness_cpu_s_per_entry']:.3f} CPU s per entry")  # fmt: skip
    print(f"   per entry: {found['zk_writes_per_entry']:.2f} writes, "
          f"{found['zk_reads_per_entry_per_member']:.3f} reads per member")  # fmt: skip
    print(
        f"   entries learned: {found['entries_learned_by_gossip_share']:.1%} by gossip, "
        f"{found['entries_learned_from_zookeeper_share']:.1%} read from ZooKeeper by position"
    )
    print(
        f"   spread: p50 {found['entry_spread_p50_s']:.3f} s, p99 "
        f"{found['entry_spread_p99_s']:.3f} s, max {found['entry_spread_max_s']:.3f} s"
    )
    print(f"   a new member joins in {found['join_s']:.3f} s with "
          f"{found['zk_writes_per_join']} ZooKeeper writes")  # fmt: skip


if __name__ == "__main__":
    main()
