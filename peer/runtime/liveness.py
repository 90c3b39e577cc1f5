"""Whether the groups this one shares jobs with are still there: heartbeats and reports.

A thread of its own (``Heartbeats``) sends a heartbeat every ``interval`` to every group this
one shares a job with, so heartbeats go on while the data plane is busy with a long batch. Any
frame from a group counts as a heartbeat, so one refused under back-pressure is no loss. A
group not heard from for ``peer_timeout`` seconds has its peers reported with leave-cluster,
once. A group that finds it has not read frames for a while itself (stopped, swapped out, busy
with a long batch) restarts those clocks instead: the silence was its own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from peer.log.entries.virtual_peers import LEAVE_CLUSTER
from peer.log.entry import Entry
from peer.log.replica import Replica

log = logging.getLogger(__name__)


class Heartbeats(threading.Thread):
    """Beats to ``targets`` (sites), which the data plane replaces whole as jobs change."""

    def __init__(self, interval: float, beat: Callable[[str], object]) -> None:
        super().__init__(name="onyx-heartbeats", daemon=True)
        self.interval, self.beat = interval, beat
        self.targets: tuple[str, ...] = ()
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            for site in self.targets:
                try:
                    self.beat(site)
                except Exception as e:  # the next beat tries again; a dead beat thread would not
                    log.warning("heartbeat to %s failed: %s", site, e)

    def stop(self) -> None:
        self.stopping.set()


class Liveness:
    def __init__(self, group: str, timeout: float, write: Callable[[Entry], None]) -> None:
        self.group, self.timeout, self.write = group, timeout, write
        self.heard: dict[str, float] = {}
        self.reported: set[str] = set()
        self.last_round = time.monotonic()
        self.replica = Replica()

    def track(self, replica: Replica, connected: set[str]) -> None:
        """Follow exactly the groups in ``connected``. A newcomer gets one timeout more: it may
        read the log that connected us a little later than this group did."""
        now = time.monotonic()
        self.replica = replica
        self.heard = {g: self.heard.get(g, now + self.timeout) for g in sorted(connected)}
        self.reported &= set(replica.groups)

    def heard_from(self, group: str | None) -> None:
        if group in self.heard:
            self.heard[group] = time.monotonic()

    def sites(self, sites: Mapping[str, str]) -> tuple[str, ...]:
        """Where the followed groups listen: what the heartbeat thread beats to."""
        return tuple(sites[g] for g in self.heard if g in sites)

    def tick(self) -> None:
        now = time.monotonic()
        if now - self.last_round > self.timeout / 2:
            log.info("group %s did not read frames for %.1f s", self.group, now - self.last_round)
            self.heard = dict.fromkeys(self.heard, now)
        self.last_round = now
        for group, heard in self.heard.items():
            if now - heard > self.timeout and group not in self.reported:
                self._report(group)

    def _report(self, group: str) -> None:
        log.warning("group %s: no heartbeat from group %s; reporting its peers", self.group, group)
        self.reported.add(group)
        for peer in sorted(self.replica.group_peers.get(group, ())):
            self.write(LEAVE_CLUSTER.entry(id=peer, group=group))
