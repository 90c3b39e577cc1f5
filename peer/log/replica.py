"""The replica: the immutable value every peer group computes by playing the log.

Every field is a persistent (structurally shared) collection, so applying an entry costs time in
proportion to what it changes, not to the size of the cluster, and an old replica stays valid
after a new one is derived from it: reactions compare the two.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from pyrsistent import PMap, PSet, PVector, pmap, pset, pvector

from peer.job.load import from_dict

EMPTY_VERSION = -1

UNVERSIONED = frozenset({"version", "key_versions"})
"""The fields that are not keys of the state: the position itself and the keys' versions."""


@dataclass(frozen=True, slots=True)
class Replica:
    """Cluster state as of log position ``version``.

    ``groups`` are the fully joined peer groups and ``pairs`` the ring of ZooKeeper watches
    between them (watcher to watched). ``prepared`` and ``accepted`` hold joins in flight, keyed
    by the group that will watch the joiner. ``group_peers`` maps every group that announced
    virtual peers, joined or not, to them: a peer is active once its group has joined and
    orphaned before. ``left`` remembers groups that are gone so that a late announcement from
    one of them cannot resurrect it. ``sites`` and ``group_tags`` say where a group listens for
    segments and what its peers offer the schedulers; ``peer_sites`` names the peers that listen
    elsewhere than their group's site (those of a member's worker processes, each at its own).
    ``rumor_takers`` are the groups that said, announcing their peers, that they take the log's
    rumors (the epidemic log mode, peer.log.epidemic): the others are never sent one.

    A graceful leave is three steps: a ``leaving`` group keeps its work until its current epochs
    commit, an ``exiting`` one has handed its work over (the schedulers no longer give it peers)
    and waits for the membership leader to remove it, and a ``removed`` one is among ``left``
    like any departed group, but left by its own wish rather than as down.

    Jobs: ``jobs`` holds the submitted jobs that have not finished, ``job_order`` their
    submission order (the schedulers' priority), ``finished`` how every other job ended, so a
    resubmitted id stays a no-op, and ``reasons`` why, where it was said (a kill's reason).
    ``hashes`` holds the sha256 of every known job's content, running or finished, so that a
    submitter can tell a resubmission of the same job from another job under a known id;
    ``names`` the name of every known job that has one and ``submitted`` when it was submitted
    (seconds since the epoch, by the submitter's clock). A gc drops the reasons, names and
    submission times of finished jobs: only their outcome and hash stay, which is what a later
    submit-job under the same id needs to remain a no-op. ``allocations`` gives every job's tasks
    their peers and ``allocation_versions`` the log position where that allocation last changed,
    which is the version the data plane stamps on its messages. ``started`` jobs have held
    peers once (flux policies apply to them); ``done`` holds the output peers that finished
    under the current allocation. ``short_ids`` are the small integers peers and jobs are known
    by on the wire.

    Local recovery (peer.log.takeover): ``standbys`` gives, per job, each running peer of a
    task that keeps a standby the free peer of another group that stands by for it;
    ``takeovers`` each peer that took over a seat of the current allocation without a new
    version, to the peer first allocated to that seat; ``recovering`` those of them that have
    not yet said (task-recovered) that their replay is done. The last two hold for one
    allocation version: a new version starts them afresh. ``rollbacks`` gives a job that rolled
    back as a whole (rollback-job) the reason of its latest rollback, for its status.

    Growth at a pause: ``held_back`` are the running jobs with checkpoints that the last
    allocation kept at their size though the schedulers would have given them more peers (a
    member came back, another job ended); growing them at once would restore them from their
    last commit and redo what followed it. Each one's coordinator pauses it, and once it stands
    still at a commit asks (grow-job) for it to grow: ``growing`` names the jobs so let grow,
    and the allocation that follows empties it.
    """

    version: int = EMPTY_VERSION
    groups: PSet = field(default_factory=pset)
    pairs: PMap = field(default_factory=pmap)
    prepared: PMap = field(default_factory=pmap)
    accepted: PMap = field(default_factory=pmap)
    aborted: PSet = field(default_factory=pset)
    left: PSet = field(default_factory=pset)
    leaving: PSet = field(default_factory=pset)
    exiting: PSet = field(default_factory=pset)
    removed: PSet = field(default_factory=pset)
    group_peers: PMap = field(default_factory=pmap)
    sites: PMap = field(default_factory=pmap)
    peer_sites: PMap = field(default_factory=pmap)
    group_tags: PMap = field(default_factory=pmap)
    rumor_takers: PSet = field(default_factory=pset)
    job_scheduler: str = "balanced"
    jobs: PMap = field(default_factory=pmap)
    job_order: PVector = field(default_factory=pvector)
    finished: PMap = field(default_factory=pmap)
    reasons: PMap = field(default_factory=pmap)
    hashes: PMap = field(default_factory=pmap)
    names: PMap = field(default_factory=pmap)
    submitted: PMap = field(default_factory=pmap)
    allocations: PMap = field(default_factory=pmap)
    allocation_versions: PMap = field(default_factory=pmap)
    started: PSet = field(default_factory=pset)
    done: PMap = field(default_factory=pmap)
    standbys: PMap = field(default_factory=pmap)
    takeovers: PMap = field(default_factory=pmap)
    recovering: PMap = field(default_factory=pmap)
    rollbacks: PMap = field(default_factory=pmap)
    held_back: PSet = field(default_factory=pset)
    growing: PSet = field(default_factory=pset)
    short_ids: PMap = field(default_factory=pmap)
    next_short_id: int = 0
    key_versions: tuple[int, ...] = field(default=(), compare=False)
    """The log position of the entry that last changed each key (field) of the replica, in the
    order of KEY_ORDER, EMPTY_VERSION for a key never changed; empty while none has been (see
    ``key_version``). A tuple, since an entry stamps a few keys and copying a few dozen
    integers costs less than updating a persistent map. It is the history's, not the state's:
    replicas equal in every key compare equal whatever their versions (peer.log.versions keeps
    them)."""

    def evolve(self, **changes: Any) -> Replica:
        return replace(self, **changes)

    def key_version(self, key: str) -> int:
        """The position of the entry that last changed ``key``, EMPTY_VERSION if none has."""
        index = KEY_INDEX[key]
        return self.key_versions[index] if self.key_versions else EMPTY_VERSION

    @property
    def peers(self) -> list[str]:
        """Active virtual peers: those whose group has fully joined, sorted."""
        return sorted(p for g in self.groups for p in self.group_peers.get(g, ()))

    @property
    def orphaned(self) -> dict[str, list[str]]:
        """Virtual peers announced by groups that have not joined yet."""
        return {g: sorted(ps) for g, ps in sorted(self.group_peers.items()) if g not in self.groups}

    def group_of(self, peer: str) -> str | None:
        """The group a virtual peer lives in; linear, used off the hot path."""
        return next((g for g, ps in self.group_peers.items() if peer in ps), None)

    def site_of(self, peer: str, group: str) -> str | None:
        """Where ``peer`` of ``group`` listens for segments: its own site, else its group's."""
        return self.peer_sites.get(peer) or self.sites.get(group)

    def task_of(self, peer: str) -> tuple[str, str] | None:
        """(job, task) the peer is allocated to, if any."""
        for job, tasks in self.allocations.items():
            for task, peers in tasks.items():
                if peer in peers:
                    return job, task
        return None

    def joining(self) -> dict[str, str]:
        """Joins in flight, joiner to the group that will watch it."""
        return {j: w for w, j in [*self.prepared.items(), *self.accepted.items()]}

    def watcher_of(self, group: str) -> str | None:
        """The group whose ring watch points at ``group``; linear, used off the hot path."""
        return next((w for w, t in self.pairs.items() if t == group), None)

    def to_json(self) -> dict[str, Any]:
        """A plain, sorted, JSON-ready form: equal replicas give equal documents."""
        return {
            "version": self.version,
            "groups": sorted(self.groups),
            "peers": self.peers,
            "pairs": dict(sorted(self.pairs.items())),
            "prepared": dict(sorted(self.prepared.items())),
            "accepted": dict(sorted(self.accepted.items())),
            "aborted": sorted(self.aborted),
            "left": sorted(self.left),
            "leaving": sorted(self.leaving),
            "exiting": sorted(self.exiting),
            "removed": sorted(self.removed),
            "orphaned": self.orphaned,
            "group_peers": {g: sorted(ps) for g, ps in sorted(self.group_peers.items())},
            "sites": dict(sorted(self.sites.items())),
            "peer_sites": dict(sorted(self.peer_sites.items())),
            "group_tags": {g: list(ts) for g, ts in sorted(self.group_tags.items())},
            "rumor_takers": sorted(self.rumor_takers),
            "job_scheduler": self.job_scheduler,
            "jobs": {j: job.to_dict() for j, job in sorted(self.jobs.items())},
            "job_order": list(self.job_order),
            "finished": dict(sorted(self.finished.items())),
            "reasons": dict(sorted(self.reasons.items())),
            "hashes": dict(sorted(self.hashes.items())),
            "names": dict(sorted(self.names.items())),
            "submitted": dict(sorted(self.submitted.items())),
            "allocations": {
                j: {t: list(ps) for t, ps in tasks.items()}
                for j, tasks in sorted(self.allocations.items())
            },
            "allocation_versions": dict(sorted(self.allocation_versions.items())),
            "started": sorted(self.started),
            "done": {j: sorted(ps) for j, ps in sorted(self.done.items())},
            "standbys": _nested_json(self.standbys),
            "takeovers": _nested_json(self.takeovers),
            "recovering": {j: sorted(ps) for j, ps in sorted(self.recovering.items())},
            "rollbacks": dict(sorted(self.rollbacks.items())),
            "held_back": sorted(self.held_back),
            "growing": sorted(self.growing),
            "short_ids": dict(sorted(self.short_ids.items())),
            "next_short_id": self.next_short_id,
            "key_versions": {
                k: v for k, v in zip(KEY_ORDER, self.key_versions, strict=False) if v >= 0
            },
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Replica:
        """Inverse of ``to_json``; derived keys (``peers``, ``orphaned``) are ignored."""
        names = {f.name for f in fields(cls)}
        unknown = set(doc) - names - {"peers", "orphaned"}
        if unknown:
            raise ValueError(f"replica document has unknown keys: {sorted(unknown)}")
        return cls(
            version=int(doc.get("version", EMPTY_VERSION)),
            groups=_strings(doc.get("groups", ())),
            pairs=_string_map(doc.get("pairs", {})),
            prepared=_string_map(doc.get("prepared", {})),
            accepted=_string_map(doc.get("accepted", {})),
            aborted=_strings(doc.get("aborted", ())),
            left=_strings(doc.get("left", ())),
            leaving=_strings(doc.get("leaving", ())),
            exiting=_strings(doc.get("exiting", ())),
            removed=_strings(doc.get("removed", ())),
            group_peers=pmap(
                {str(g): _strings(ps) for g, ps in doc.get("group_peers", {}).items()}
            ),
            sites=_string_map(doc.get("sites", {})),
            peer_sites=_string_map(doc.get("peer_sites", {})),
            group_tags=pmap(
                {str(g): tuple(map(str, ts)) for g, ts in doc.get("group_tags", {}).items()}
            ),
            rumor_takers=_strings(doc.get("rumor_takers", ())),
            job_scheduler=str(doc.get("job_scheduler", "balanced")),
            jobs=pmap(
                {str(j): from_dict(d, imports=False) for j, d in doc.get("jobs", {}).items()}
            ),
            job_order=pvector(map(str, doc.get("job_order", ()))),
            finished=_string_map(doc.get("finished", {})),
            reasons=_string_map(doc.get("reasons", {})),
            hashes=_string_map(doc.get("hashes", {})),
            names=_string_map(doc.get("names", {})),
            submitted=pmap({str(j): float(t) for j, t in doc.get("submitted", {}).items()}),
            allocations=pmap(
                {
                    str(j): pmap({str(t): tuple(map(str, ps)) for t, ps in tasks.items()})
                    for j, tasks in doc.get("allocations", {}).items()
                }
            ),
            allocation_versions=pmap(
                {str(j): int(v) for j, v in doc.get("allocation_versions", {}).items()}
            ),
            started=_strings(doc.get("started", ())),
            done=pmap({str(j): _strings(ps) for j, ps in doc.get("done", {}).items()}),
            standbys=_nested(doc.get("standbys", {})),
            takeovers=_nested(doc.get("takeovers", {})),
            recovering=pmap({str(j): _strings(ps) for j, ps in doc.get("recovering", {}).items()}),
            rollbacks=_string_map(doc.get("rollbacks", {})),
            held_back=_strings(doc.get("held_back", ())),
            growing=_strings(doc.get("growing", ())),
            short_ids=pmap({str(k): int(v) for k, v in doc.get("short_ids", {}).items()}),
            next_short_id=int(doc.get("next_short_id", 0)),
            key_versions=_key_versions(doc.get("key_versions", {})),
        )


KEYS: frozenset[str] = frozenset(f.name for f in fields(Replica)) - UNVERSIONED
"""Every key of the replica: what entries read and write, and what carries a version."""

KEY_ORDER: tuple[str, ...] = tuple(sorted(KEYS))
"""The order of ``Replica.key_versions``."""

KEY_INDEX: dict[str, int] = {key: i for i, key in enumerate(KEY_ORDER)}


def _key_versions(doc: Mapping[str, Any]) -> tuple[int, ...]:
    """Key versions from their JSON form (absent in documents written before they were kept)."""
    unknown = set(doc) - KEYS
    if unknown:
        raise ValueError(f"replica document: key_versions names unknown keys: {sorted(unknown)}")
    if not doc:
        return ()
    return tuple(int(doc.get(key, EMPTY_VERSION)) for key in KEY_ORDER)


def _strings(items: Iterable[Any]) -> PSet:
    return pset(str(i) for i in items)


def _string_map(items: Mapping[Any, Any]) -> PMap:
    return pmap({str(k): str(v) for k, v in items.items()})


def _nested(doc: Mapping[Any, Any]) -> PMap:
    """Job to a map of peer to peer, from JSON."""
    return pmap({str(j): _string_map(peers) for j, peers in doc.items()})


def _nested_json(jobs: PMap) -> dict[str, dict[str, str]]:
    return {j: dict(sorted(peers.items())) for j, peers in sorted(jobs.items())}


def ring_cycle(replica: Replica) -> list[str] | None:
    """The ring as one cycle starting at the smallest group id, or None when the pairs do not
    form exactly one cycle over every joined group (a lone group has no pairs and is a ring)."""
    groups = sorted(replica.groups)
    if len(groups) <= 1:
        return groups if not replica.pairs else None
    if set(replica.pairs) != set(groups):
        return None
    cycle, current = [], groups[0]
    for _ in groups:
        cycle.append(current)
        current = replica.pairs.get(current)
    return cycle if current == groups[0] and len(set(cycle)) == len(groups) else None


def ring_settled(replica: Replica, groups: int, vpeers: int) -> bool:
    """Exactly ``groups`` groups in one ring, no join in flight, and every group's ``vpeers``
    virtual peers active: what a cluster that has finished forming looks like."""
    return (
        len(replica.groups) == groups
        and not replica.prepared
        and not replica.accepted
        and ring_cycle(replica) is not None
        and len(replica.peers) == groups * vpeers
    )


def _departure_violations(replica: Replica) -> list[str]:
    """A graceful leave's steps name joined groups, one step at a time, and end among the left."""
    problems = []
    departing = replica.leaving | replica.exiting
    if not departing <= replica.groups:
        stray = sorted(departing - replica.groups)
        problems.append(f"groups leaving or exiting but not joined: {stray}")
    if replica.leaving & replica.exiting:
        both = sorted(replica.leaving & replica.exiting)
        problems.append(f"groups both leaving and exiting: {both}")
    if not replica.removed <= replica.left:
        problems.append(f"groups removed but not left: {sorted(replica.removed - replica.left)}")
    return problems


def invariant_violations(replica: Replica) -> list[str]:
    """Structural facts every replica must satisfy, whatever log produced it."""
    problems = []
    members = set(replica.groups)
    for watcher, watched in replica.pairs.items():
        if watcher not in members or watched not in members:
            problems.append(f"pair {watcher}->{watched} names a group that has not joined")
        if watcher == watched:
            problems.append(f"group {watcher} watches itself")
    for name, joins in (("prepared", replica.prepared), ("accepted", replica.accepted)):
        for watcher, joiner in joins.items():
            if joiner in members:
                problems.append(f"{name} joiner {joiner} has already joined")
            if watcher == joiner:
                problems.append(f"{name} joiner {joiner} watches itself")
    joiners = [*replica.prepared.values(), *replica.accepted.values()]
    if len(joiners) != len(set(joiners)):
        problems.append(f"a group joins twice at once: {sorted(joiners)}")
    if members & set(replica.left):
        problems.append(f"groups both joined and left: {sorted(members & set(replica.left))}")
    problems += _departure_violations(replica)
    announced = {p for peers in replica.group_peers.values() for p in peers}
    if not set(replica.peer_sites) <= announced:
        stray = sorted(set(replica.peer_sites) - announced)
        problems.append(f"sites of peers no group has: {stray}")
    if not replica.prepared and not replica.accepted and ring_cycle(replica) is None:
        problems.append("no join is in flight but the pairs are not one ring over the groups")
    return problems
