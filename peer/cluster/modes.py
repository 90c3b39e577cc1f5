"""Which coordination mechanisms a member runs: the classic protocol, or the modes built for
clusters of a thousand machines (docs/architecture/coordination-modes.md).

Each mode can be turned on and off on its own, and every member of a cluster may run a
different mix: a classic member and one in a new mode read the same log and reach the same
replica. All are off by default, so a cluster that names none runs the classic protocol. What each
mode changes is decided in one place, peer.cluster.coordination.

The combinations the tests run: the classic protocol; each mode alone; join-direct, and async
allocation, each with workers; join-direct, epidemic log and async allocation together with
workers, with and without scheduling servers; and clusters mixing classic members with
async-allocation or epidemic-log ones. A member is refused at start (``refusal``) only when its
settings cannot mean what they say: a setting of a mode that is off.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


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
    gossip_fanout: int = 3
    """How many members each copy of an entry goes to; 0 gossips nothing (every entry is read
    from ZooKeeper by position)."""
    gossip_rounds: int | None = None
    """How many rounds an entry is passed on; None picks the fewest that reach every member
    of the cluster as it is (peer.log.epidemic.rumor.rounds_for)."""
    log_read_after: float = 1.0
    """Seconds without a new entry before this member reads the next one from ZooKeeper."""
    reorder_cache: int = 4096
    """The most entries held ahead of the next one this member needs."""
    scheduler_servers: tuple[str, ...] = ()
    """``HOST:PORT`` of scheduling servers to ask for allocations (peer.scheduling); none
    computes every allocation here."""
    scheduler_timeout: float = 0.5
    """Seconds a member gives the scheduling servers, all of them together, to answer one
    allocation before it computes the allocation itself."""
    async_allocation: bool = False
    """Compute allocations off the log's thread, applying the entries that do not read them
    meanwhile (the multi-versioned replica)."""

    def refusal(self) -> str | None:
        """One line naming a setting given to a mode that is off (it would change nothing), or
        None. A setting is given when it differs from its default."""
        default = CoordinationModes()
        for field in fields(self):
            mode = _SETTINGS.get(field.name)
            if mode is None or getattr(self, mode):
                continue
            if getattr(self, field.name) != getattr(default, field.name):
                return (f"{_option(field.name)} is a setting of {_option(mode)}, which is off: "
                        f"turn {_option(mode)} on, or leave {_option(field.name)} out")  # fmt: skip
        return None


_SETTINGS = {
    "join_direct_timeout": "join_direct",
    "gossip_fanout": "epidemic_log",
    "gossip_rounds": "epidemic_log",
    "log_read_after": "epidemic_log",
    "reorder_cache": "epidemic_log",
    "scheduler_timeout": "scheduler_servers",
}
"""Each mode's own settings, by the mode they belong to."""


def _option(name: str) -> str:
    """The command-line option of a field (a config file's key is the field's name)."""
    return f"--{name.replace('_', '-')}"
