"""Which coordination mechanisms a member runs: the classic protocol, or the modes built for
clusters of a thousand machines (shared/DESIGN.md, "Coordination at scale").

Each mode can be turned on and off on its own, and every member of a cluster may run a
different mix: a classic member and one in a new mode read the same log and reach the same
replica. All are off by default, so a cluster that names none runs the classic protocol.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CoordinationModes:
    join_direct: bool = False
    """Join by asking a live member to stitch this one into the ring and send its replica
    (peer.cluster.aider), instead of the classic three-phase join and a replay of the log."""
    join_direct_timeout: float = 3.0
    """Seconds a direct joiner waits for an aider's answer before it asks another: longer than
    an aider takes to write one entry and read it back."""
    epidemic_log: bool = False
    """Learn new entries from their writers' gossip and read ZooKeeper by position only when
    it falls silent (peer.log.epidemic), instead of watching the log directory."""
    scheduler_servers: tuple[str, ...] = ()
    """``HOST:PORT`` of scheduling servers to ask for allocations (peer.scheduling); none
    computes every allocation here."""
    scheduler_timeout: float = 0.5
    """Seconds a member gives the scheduling servers, all of them together, to answer one
    allocation before it computes the allocation itself."""
    async_allocation: bool = False
    """Compute allocations off the log's thread, applying the entries that do not read them
    meanwhile (the multi-versioned replica)."""
