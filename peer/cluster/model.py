"""A whole cluster played through the pure functions alone, with no ZooKeeper and no threads.

Groups share one log, read it each at its own pace, append their reactions to its tail and
detect deaths the way a real group does (watch_targets against the set of live pulses). The
generative tests drive it with random interleavings of joins, leaves and deaths; the log
benchmark uses it to produce realistic logs. Ids are counters, so a run is reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NoReturn

from peer.cluster.ring import watch_targets
from peer.log.apply import apply_entry
from peer.log.entries.group_leave import GROUP_LEAVE
from peer.log.entries.join import PREPARE_JOIN
from peer.log.entries.virtual_peers import ADD_VIRTUAL_PEER
from peer.log.entry import Entry, Transition
from peer.log.replica import Replica


@dataclass
class ModelGroup:
    id: str
    vpeers: int
    replica: Replica = field(default_factory=Replica)
    alive: bool = True
    leave_position: int | None = None
    reported: set[str] = field(default_factory=set)


def announcement(peer: str, group: str) -> Entry:
    """A group listens at a site named for it; every other of its peers listens at a site of its
    own, as the peers of a member's worker processes do."""
    own = {"peer_site": f"site-{peer}"} if hash_of(peer) % 2 else {}
    return ADD_VIRTUAL_PEER.entry(id=peer, group=group, site=f"site-{group}", **own)


def hash_of(name: str) -> int:
    """A stable hash (Python's own changes from run to run)."""
    return sum(name.encode())


class ModelEffects:
    """Side effects carried out on the model instead of the world."""

    def __init__(self, model: ClusterModel, group: ModelGroup) -> None:
        self.model, self.group = model, group

    def append(self, entry: Entry) -> None:
        self.model.append(entry)

    def back_off(self) -> None:
        return None

    def report_if_dead(self, group: str) -> None:
        if not self.model.pulse_alive(group):
            self.model.append(GROUP_LEAVE.entry(id=group))

    def restart_group(self) -> None:
        self.model.end_incarnation(self.group)

    def restart_virtual_peer(self, peer: str) -> None:
        self.model.append(announcement(f"{peer}'", self.group.id))

    def hand_over(self) -> None:
        _no_graceful_leave()

    def end_group(self) -> None:
        _no_graceful_leave()

    def store_origin(self, replica: Replica) -> None:
        return None


def _no_graceful_leave() -> NoReturn:
    """A group leaves the model by group-leave-cluster alone (``ClusterModel.leave``): it writes
    no member-leave or member-exit, whose side effects are the only ones to hand work over or
    end a group that exited."""
    raise NotImplementedError("the cluster model plays no member-leave or member-exit")


class ClusterModel:
    """The shared log and every incarnation of every group that ever started."""

    def __init__(self) -> None:
        self.log: list[Entry] = []
        self.groups: dict[str, ModelGroup] = {}
        self.by_position: dict[int, Replica] = {}
        self._next_id = 0

    def append(self, entry: Entry) -> int:
        self.log.append(entry.at(len(self.log)))
        return len(self.log) - 1

    def pulse_alive(self, group: str) -> bool:
        g = self.groups.get(group)
        return g is not None and g.alive

    def alive(self) -> list[ModelGroup]:
        return [g for g in self.groups.values() if g.alive]

    def start(self, vpeers: int = 1) -> str:
        """A new group: its pulse exists, it asks to join and announces its virtual peers."""
        gid = f"g{self._next_id:04d}"
        self._next_id += 1
        self.groups[gid] = ModelGroup(gid, vpeers)
        self.append(PREPARE_JOIN.entry(joiner=gid))
        for i in range(vpeers):
            self.append(announcement(f"{gid}-p{i}", gid))
        return gid

    def end_incarnation(self, group: ModelGroup) -> None:
        """Presumed dead while alive: drop the old pulse and come back under a new id."""
        if group.leave_position is None:
            self.start(group.vpeers)
        self.stop(group)

    def stop(self, group: ModelGroup) -> None:
        group.alive = False
        self.detect_deaths()

    def kill(self, gid: str) -> None:
        self.stop(self.groups[gid])

    def leave(self, gid: str) -> None:
        group = self.groups[gid]
        if group.leave_position is None:
            group.leave_position = self.append(GROUP_LEAVE.entry(id=gid))

    def advance(self, gid: str) -> bool:
        """Apply the group's next entry, if any; True when it did."""
        group = self.groups[gid]
        position = group.replica.version + 1
        if not group.alive or position >= len(self.log):
            return False
        t = self.transition(group.replica, self.log[position])
        group.replica = t.new
        self._check_agreement(t.new)
        actors = (gid, *(f"{gid}-p{i}" for i in range(group.vpeers)))
        for reaction in t.act(actors, ModelEffects(self, group)):
            self.append(reaction)
        if group.alive and group.leave_position is not None and position >= group.leave_position:
            self.stop(group)
        self.detect_deaths()
        return True

    def transition(self, replica: Replica, entry: Entry) -> Transition:
        """How a group applies an entry; every group computes it for itself."""
        return apply_entry(replica, entry)

    def detect_deaths(self) -> None:
        """Every live group reports, once, each group it should watch whose pulse is gone."""
        for group in self.alive():
            for target in sorted(watch_targets(group.replica, group.id) - group.reported):
                if not self.pulse_alive(target):
                    group.reported.add(target)
                    self.append(GROUP_LEAVE.entry(id=target))

    def settle(self, max_steps: int = 200_000) -> bool:
        """Let every live group play to the tail until nobody writes anything new."""
        for _ in range(max_steps):
            progressed = [self.advance(g.id) for g in self.alive()]
            if not any(progressed):
                return True
        return False

    def _check_agreement(self, replica: Replica) -> None:
        seen = self.by_position.setdefault(replica.version, replica)
        if seen != replica:
            raise AssertionError(f"replicas disagree at position {replica.version}")
