"""Whether the groups this one shares jobs with are still there: heartbeats and reports.

The group sends a heartbeat to every group it shares a job with, and any frame from a group
counts as one, so a heartbeat refused under back-pressure is no loss. A group not heard from for
``peer_timeout`` seconds has its peers reported with leave-cluster, once. A group that finds it
has not run for a while itself (stopped, swapped out) restarts those clocks instead: the silence
was its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from peer.log.entries.virtual_peers import LEAVE_CLUSTER
from peer.log.entry import Entry
from peer.log.replica import Replica

log = logging.getLogger(__name__)


class Liveness:
    def __init__(
        self,
        group: str,
        interval: float,
        timeout: float,
        beat: Callable[[str], None],
        write: Callable[[Entry], None],
    ) -> None:
        self.group, self.interval, self.timeout = group, interval, timeout
        self.beat, self.write = beat, write
        self.heard: dict[str, float] = {}
        self.reported: set[str] = set()
        self.next_beat = 0.0
        self.last_round = time.monotonic()
        self.replica = Replica()

    def track(self, replica: Replica, connected: set[str]) -> None:
        """Follow exactly the groups in ``connected``; a newcomer's clock starts now."""
        now = time.monotonic()
        self.replica = replica
        self.heard = {g: self.heard.get(g, now) for g in sorted(connected)}
        self.reported &= set(replica.groups)

    def heard_from(self, group: str | None) -> None:
        if group in self.heard:
            self.heard[group] = time.monotonic()

    def tick(self) -> None:
        now = time.monotonic()
        if now - self.last_round > self.timeout / 2:
            log.warning("group %s did not run for %.1f s", self.group, now - self.last_round)
            self.heard = dict.fromkeys(self.heard, now)
        self.last_round = now
        if now < self.next_beat:
            return
        self.next_beat = now + self.interval
        for group, heard in self.heard.items():
            self.beat(group)
            if now - heard > self.timeout and group not in self.reported:
                self._report(group)

    def _report(self, group: str) -> None:
        log.warning("group %s: no heartbeat from group %s; reporting its peers", self.group, group)
        self.reported.add(group)
        for peer in sorted(self.replica.group_peers.get(group, ())):
            self.write(LEAVE_CLUSTER.entry(id=peer, group=group))
