"""Applying the log with allocations computed later: the multi-versioned replica.

The allocation is the one expensive part of applying an entry (peer.log.allocation). Here it
is split off: an entry that needs one has its kind's own change applied at once, and its
allocation becomes owed at its position, to be computed by the caller wherever it likes (a
worker thread, a scheduling server) and handed back with ``land``. Meanwhile the keys that
allocation may write lag. An entry whose kind neither reads nor writes any of them (its
``reads`` and ``writes``, peer.log.entry) applies at once, and its transition comes out; one
that reads a lagging key waits, and every entry after it waits too, since the log is applied
in order. A second allocation is owed behind the first: it reads what the first writes, so it
can only be computed once the first has landed, and until then all an allocation may write lags.

Transitions come out in log order, one per entry, each once every key its kind reads is
current: its reactions and side effects are those of the sequential apply. Its ``new`` is the
replica at its position in every key but the lagging ones, which hold what the last landed
allocation left. The complete replica at every position comes out too (``settled``), in order,
as soon as nothing it holds lags: equal, key versions included, to what ``apply_entry`` gives.

Should computing an allocation raise, the sequential apply would have refused its entry whole;
the entries since are then applied again from the last complete replica, sequentially, so the
replica stays every member's. Their transitions are not given twice: what they asked for was
appended to the log already, and every entry is judged against the replica at its own position.

The machine is a value with no thread and no clock: ``offer`` and ``land`` return the next
machine and what came out.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from pyrsistent import PVector, pvector

from peer.log.allocation import ALLOCATION_WRITES, allocate, allocation_writes, triggered
from peer.log.apply import apply_entry, kind_of, own_versions, refuse
from peer.log.entry import Entry, Transition
from peer.log.replica import Replica
from peer.log.versions import stamped, taken
from peer.scheduling.request import Planner, plan_here


@dataclass(frozen=True, slots=True)
class PendingAllocation:
    """An allocation owed at ``position``: that of ``replica``, the complete replica after
    the entry's own change there. The same pure function gives it wherever it runs."""

    position: int
    replica: Replica

    def compute(self, planner: Planner = plan_here) -> Replica:
        return allocate(self.replica, self.position, planner)

    def outcome(self, planner: Planner = plan_here) -> Replica | Exception:
        """The allocated replica, or what computing it raised, to hand to ``land`` either way;
        only running out of memory is left to end the process."""
        try:
            return self.compute(planner)
        except MemoryError:
            raise
        except Exception as failed:
            return failed


@dataclass(frozen=True, slots=True)
class Progress:
    """What came out of one step: transitions to act on and complete replicas, in order."""

    transitions: tuple[Transition, ...] = ()
    settled: tuple[Replica, ...] = ()

    def then(self, more: Progress) -> Progress:
        return Progress(self.transitions + more.transitions, self.settled + more.settled)


@dataclass(frozen=True, slots=True)
class Pipeline:
    """The log applied so far. ``current`` is the replica at the last applied entry (its
    lagging keys as the last landed allocation left them), ``complete`` the last replica with
    nothing lagging. ``owed`` holds the replicas, after their entries' own change, whose
    allocations are owed, oldest first; ``unapplied`` the entries offered that wait; and
    ``since`` the entries applied after ``complete``, with ``views`` their replicas."""

    current: Replica
    complete: Replica
    owed: tuple[Replica, ...] = ()
    unapplied: tuple[Entry, ...] = ()
    since: PVector = field(default_factory=pvector)
    views: PVector = field(default_factory=pvector)

    @classmethod
    def start(cls, replica: Replica) -> Pipeline:
        return cls(current=replica, complete=replica)

    @property
    def idle(self) -> bool:
        """Nothing owed: ``current`` is complete."""
        return not self.owed

    def lagging(self) -> frozenset[str]:
        """The keys an owed allocation may still write."""
        if not self.owed:
            return frozenset()
        if len(self.owed) > 1:
            return ALLOCATION_WRITES
        return allocation_writes(self.owed[0])

    def ready(self) -> PendingAllocation | None:
        """The allocation to compute next: the oldest owed, whose replica is complete."""
        return PendingAllocation(self.owed[0].version, self.owed[0]) if self.owed else None

    def offer(self, entry: Entry) -> tuple[Pipeline, Progress]:
        """The next entry of the log, at its position."""
        if self.unapplied:
            return replace(self, unapplied=(*self.unapplied, entry)), Progress()
        return self._apply(entry)

    def land(self, position: int, result: Replica | Exception) -> tuple[Pipeline, Progress]:
        """The allocation owed at ``position``, computed (or what computing it raised)."""
        if not self.owed or self.owed[0].version != position:
            expected = self.owed[0].version if self.owed else None
            raise ValueError(f"allocation landed for position {position}, owed: {expected}")
        if isinstance(result, Exception):
            machine, progress = self._replayed()
        else:
            machine, progress = self._landed(result)
        return machine._retry(progress)

    # -- applying -------------------------------------------------------------------------------

    def _apply(self, entry: Entry) -> tuple[Pipeline, Progress]:
        old = self.current
        try:
            kind = kind_of(entry)
            if (kind.reads | kind.writes) & self.lagging():
                return replace(self, unapplied=(entry,)), Progress()
            changed = kind.apply(old, entry)
            diff = kind.diff(entry, old, changed)
        except MemoryError:
            raise
        except Exception as refused:
            return self._applied(refuse(old, entry, refused), owes=False)
        versions = own_versions(old, changed, entry.position, kind.writes)
        new = changed.evolve(version=entry.position, key_versions=versions)
        owes = triggered(old, changed) and ("jobs" in self.lagging() or bool(changed.jobs))
        return self._applied(Transition(entry, old, new, diff, kind), owes)

    def _applied(self, t: Transition, owes: bool) -> tuple[Pipeline, Progress]:
        owed = (*self.owed, t.new) if owes else self.owed
        if not owed:
            return replace(self, current=t.new, complete=t.new), Progress((t,), (t.new,))
        machine = replace(
            self,
            current=t.new,
            owed=owed,
            since=self.since.append(t.entry),
            views=self.views.append(t.new),
        )
        return machine, Progress((t,))

    def _retry(self, progress: Progress) -> tuple[Pipeline, Progress]:
        """Apply the waiting entries, in order, until one waits again."""
        machine = replace(self, unapplied=())
        for i, entry in enumerate(self.unapplied):
            machine, more = machine._apply(entry)
            progress = progress.then(more)
            if machine.unapplied:
                rest = (*machine.unapplied, *self.unapplied[i + 1 :])
                return replace(machine, unapplied=rest), progress
        return machine, progress

    # -- landing --------------------------------------------------------------------------------

    def _landed(self, allocated: Replica) -> tuple[Pipeline, Progress]:
        base = self.owed[0]
        keys = allocation_writes(base)
        versions = stamped(base.key_versions, base, allocated, base.version, keys)
        done = allocated.evolve(version=base.version, key_versions=versions)
        views = [_merged(view, done, keys) for view in self.views]
        owed = tuple(_merged(r, done, keys) for r in self.owed[1:])
        current = _merged(self.current, done, keys)
        settle = len(views) if not owed else next(
            i for i, v in enumerate(views) if v.version == owed[0].version
        )  # fmt: skip
        settled = tuple(views[:settle])
        machine = replace(
            self,
            current=current,
            complete=settled[-1] if settled else self.complete,
            owed=owed,
            since=self.since[settle:],
            views=pvector(views[settle:]),
        )
        return machine, Progress((), settled)

    def _replayed(self) -> tuple[Pipeline, Progress]:
        """The entries since the last complete replica applied again one after another, as the
        sequential apply does, after an allocation raised; unapplied ones stay."""
        replicas, replica = [], self.complete
        for entry in self.since:
            replica = apply_entry(replica, entry).new
            replicas.append(replica)
        machine = replace(
            self, current=replica, complete=replica, owed=(), since=pvector(), views=pvector()
        )
        return machine, Progress((), tuple(replicas))


def _merged(view: Replica, landed: Replica, keys: frozenset[str]) -> Replica:
    """``view`` with the keys an allocation wrote taken from the replica it landed in. The
    entries applied after it neither read nor wrote them, so nothing else changes."""
    versions = taken(view.key_versions, {k: landed.key_version(k) for k in keys})
    return view.evolve(**{k: getattr(landed, k) for k in keys}, key_versions=versions)
