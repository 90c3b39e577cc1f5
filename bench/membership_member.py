"""One member of bench/failure_detection.py's cluster: a process running the real
MembershipService over the real Aeron beacon of a transport with an embedded media driver,
driven by a loop like a peer group's (poll, hand membership frames in, say it has polled, take
the downs), and reporting what the benchmark measures as JSON lines on stdout.

It stands in for ``onyx peer start`` without ZooKeeper: the members and where they listen, which
a group reads from the log, come as JSON lines on stdin (``{"members": {id: site}, "left":
[id, ...]}``) and become the replica the service syncs with; a down, which a group writes to
the log as GROUP_LEAVE, is reported instead (the benchmark then says the member left).

Lines it writes, times on the machine's monotonic clock (shared by every process):
``ready`` (id, site); ``hb`` (a heartbeat reply from a member whose id starts with --record, the
time the loop took it in); ``stall`` (a gap of the loop longer than STALL, from and to: the
detectors forgive the silence of a stalled observer, so the benchmark's judges must know);
``unreachable`` and ``reachable`` (a member entering or leaving this member's gossiped
unreachable set); ``down`` (a member this one, as the leader, has just downed).

Run: python -m bench.membership_member ID [--heartbeat-interval S] [--threshold PHI]
     [--auto-down S|none] [--record PREFIX]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pyrsistent import pmap, pset  # noqa: E402

from peer.log.replica import Replica  # noqa: E402
from peer.membership.agent import HeartbeatReply, MembershipSettings  # noqa: E402
from peer.membership.service import MembershipService  # noqa: E402
from peer.membership.wire import from_wire  # noqa: E402
from peer.messaging import messages  # noqa: E402
from peer.messaging.aeron import AeronTransport  # noqa: E402
from peer.messaging.messages import Membership  # noqa: E402

STALL = 0.1
"""Seconds between two rounds of the loop past which the gap is reported."""
IDLE_WAIT = 0.001
"""The loop's sleep when nothing arrived: a peer group's idle wait."""

_out = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    """One JSON line on stdout, whole even when two threads write."""
    line = json.dumps({"e": event, **fields})
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Member:
    def __init__(self, me: str, settings: MembershipSettings, record: str) -> None:
        self.me, self.record = me, record
        self.transport = AeronTransport()
        beacon = self.transport.beacon()
        self.service = MembershipService(me, settings, beacon.offer, beacon.max_frame)
        self.unreachable: frozenset[str] = frozenset()
        self.done = threading.Event()

    def sync(self, line: str) -> None:
        """The members the benchmark says the log holds now."""
        view = json.loads(line)
        members = dict(view["members"])
        left = set(view.get("left", ()))
        replica = Replica(
            groups=pset(m for m in members if m not in left),
            sites=pmap({m: s for m, s in members.items() if m not in left}),
            left=pset(left),
        )
        self.service.sync(replica)

    def take(self, frame: bytes) -> None:
        _, message = messages.decode(frame)
        if not isinstance(message, Membership):
            return
        now = time.monotonic()
        try:
            parsed = from_wire(message.body)
        except ValueError:
            parsed = None  # the service drops it with its warning
        if isinstance(parsed, HeartbeatReply) and parsed.sender.startswith(self.record):
            emit("hb", member=parsed.sender, t=now)
        self.service.receive(message.body)

    def run(self) -> None:
        self.service.start()
        threading.Thread(target=self._read_stdin, daemon=True).start()
        emit("ready", id=self.me, site=self.transport.address)
        last = time.monotonic()
        while not self.done.is_set():
            busy = self.transport.poll(self.take) > 0
            self.service.polled()
            now = time.monotonic()
            if now - last > STALL:
                emit("stall", start=last, end=now)
            last = now
            self._report(now)
            if not busy:
                time.sleep(IDLE_WAIT)
        self.service.stop()
        self.service.thread.join(1.0)
        self.transport.close()

    def _report(self, now: float) -> None:
        for member in self.service.take_decisions().downs:
            emit("down", member=member, t=now)
        unreachable = self.service.agent.gossip.unreachable_members()
        if unreachable is self.unreachable:
            return
        for member in sorted(unreachable - self.unreachable):
            emit("unreachable", member=member, t=now)
        for member in sorted(self.unreachable - unreachable):
            emit("reachable", member=member, t=now)
        self.unreachable = unreachable

    def _read_stdin(self) -> None:
        """Views of the log until stdin closes, which ends the member."""
        for line in sys.stdin:
            if line.strip():
                self.sync(line)
        self.done.set()


def settings_of(args: argparse.Namespace) -> MembershipSettings:
    after = None if args.auto_down == "none" else float(args.auto_down)
    base = MembershipSettings()
    return MembershipSettings(
        heartbeat_interval=args.heartbeat_interval or base.heartbeat_interval,
        threshold=args.threshold or base.threshold,
        auto_down_unreachable_after=after,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("id")
    parser.add_argument("--heartbeat-interval", type=float, help="seconds; shipped if absent")
    parser.add_argument("--threshold", type=float, help="phi; shipped if absent")
    parser.add_argument("--auto-down", default="shipped", help="seconds, none or shipped")
    parser.add_argument("--record", default="subject", help="record replies from these ids")
    args = parser.parse_args(argv)
    if args.auto_down == "shipped":
        shipped = MembershipSettings().auto_down_unreachable_after
        args.auto_down = "none" if shipped is None else str(shipped)
    Member(args.id, settings_of(args), args.record).run()


if __name__ == "__main__":
    main()
