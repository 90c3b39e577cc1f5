"""A whole cluster inside this process on the embedded log: the default a new user runs."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from peer.cluster.group import GroupConfig, PeerGroup
from peer.job.spec import Job
from peer.log import subscriber
from peer.log.replica import Replica, ring_settled
from peer.log.stores.memory import MemoryLog
from peer.messaging.transport import Transport
from peer.runtime.checkpoints import CheckpointStorage
from peer.runtime.dataplane import DataPlaneConfig


def peers_for(job: Job, groups: int) -> int:
    """Virtual peers per group so that the job gets every task's minimum (at least 4 in all)."""
    needed = max(4, sum(task.min_peers for task in job.catalog))
    return -(-needed // groups)


def tags_for(job: Job) -> tuple[str, ...]:
    """Every tag the job's tasks require: on one machine, every peer is on the machine a tag
    names (a host with Spark, say), so the local cluster's peers offer them all."""
    return tuple(sorted({tag for task in job.catalog for tag in task.required_tags}))


class LocalCluster:
    """Peer groups as threads sharing one in-memory log, each with its own session. With
    ``transports`` (one per group) segments between groups travel through them; without, the
    groups run no data plane between them, which suits a single group. Checkpoints go to
    memory, or to the fsspec URL ``checkpoints`` (a directory, for a run as durable as a
    member's). A job with ``state_backend: disk`` holds its keyed state under ``state_dir``
    (none: the default, as for a member)."""

    def __init__(
        self, groups: int, vpeers: int, transports: Sequence[Transport] | None = None,
        tags: tuple[str, ...] = (), checkpoints: str = "memory://onyx-checkpoints",
        *, state_dir: Path | None = None,
    ) -> None:  # fmt: skip
        self.vpeers = vpeers
        self.log = MemoryLog()
        self.storage = CheckpointStorage(checkpoints, f"local-{uuid.uuid4().hex}")
        dataplane = DataPlaneConfig() if state_dir is None else DataPlaneConfig(state_dir=state_dir)
        config = GroupConfig(vpeers=vpeers, join_back_off=0.05, poll_interval=0.1, tags=tags,
                             dataplane=dataplane)  # fmt: skip
        links = list(transports) if transports is not None else [None] * groups
        self.groups = [PeerGroup(self.log.session(), config, link, self.storage) for link in links]
        self.threads = [threading.Thread(target=g.run, daemon=True) for g in self.groups]
        self.reader = self.log.session()
        self.changed = threading.Event()
        self.reader.on_append(self.changed.set)

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def replica(self) -> Replica:
        return subscriber.catch_up(self.reader)

    def await_ring(self, timeout: float) -> Replica:
        """The replica once every group has joined one ring with all its virtual peers."""
        deadline = time.monotonic() + timeout
        while True:
            self.changed.clear()
            current = self.replica()
            if ring_settled(current, len(self.groups), self.vpeers):
                return current
            if time.monotonic() > deadline:
                raise TimeoutError(f"the ring did not form within {timeout:g} s")
            self.changed.wait(0.2)

    def stop(self, timeout: float = 10.0) -> Replica:
        for group in self.groups:
            group.stop()
        for thread in self.threads:
            thread.join(timeout)
        self.storage.close()
        return self.replica()
