"""A job as a value: the workflow, the catalog, lifecycles, flow conditions, windows, triggers.

Every job, however it was written, becomes these frozen dataclasses, so two jobs are the same job
exactly when they compare equal, and a job can travel in a log entry as ``to_dict()`` and come
back unchanged. Construction only normalises shapes (lists become tuples, ``params`` becomes an
immutable mapping, ``n_peers`` fills ``min_peers`` and ``max_peers``); whether the job makes sense
is ``peer.job.validate``'s business, so an invalid value can exist long enough to be refused with
a message that names what is wrong.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from pyrsistent import PMap, freeze, pmap, thaw

from peer.job.graph import topological_order

ALL = "all"
KINDS = ("input", "function", "output")
ENGINES = ("python", "arrow", "spark")
FLUX_POLICIES = ("kill", "continue", "recover")
HOOKS = ("before_task", "after_task", "before_batch", "after_batch")
WINDOW_TYPES = ("fixed", "sliding", "global", "session")
AGGREGATIONS = ("count", "sum", "min", "max", "average", "collect", "collect_by_key", "top")
AGGREGATION_METHODS = ("init", "create_state_update", "apply_state_update", "merge", "value")
TRIGGER_ONS = ("segment", "timer", "watermark", "punctuation")
REFINEMENTS = ("accumulating", "discarding")
JOIN_TYPES = ("window", "interval", "regular")
SIDES = ("left", "right")
PARTS = ("catalog", "lifecycles", "flow_conditions", "windows", "triggers", "joins")
MIB = 1024 * 1024
DEFAULT_IN_FLIGHT_BUDGET = 64 * MIB
"""Bytes of what a task sent since the last commit that it keeps for replay, by default."""
DEFAULT_MAX_PARALLELISM = 128
"""A keyed task's maximum parallelism (its number of key groups, peer.state.key_groups) when
neither it nor its job names one: room to grow to 128 slots, and few enough groups that each
holds a fair share of the keys."""
STATE_BACKENDS = ("memory", "disk")
"""Where a job's keyed state may be held (peer.state.backends)."""
MAX_PARALLELISM_LIMIT = 32768
"""The largest maximum parallelism: each key group costs bookkeeping in every snapshot of the
task, for slots no cluster of this engine's size runs."""
DEFAULT_DEBLOAT_TARGET = 0.3
"""Seconds of a task's work that what its senders have in flight to it may hold, by default:
what a barrier waits behind at each task (peer.runtime.debloat)."""
CHECKPOINT_TIMEOUT_PERIODS = 5
"""Barrier periods an epoch may take, by default, before it is abandoned: a late checkpoint or
two is normal (a slow snapshot, a burst of queued data), five periods is a barrier that is not
coming."""
MIN_CHECKPOINT_TIMEOUT = 10.0
"""The least default timeout, in seconds: with short barrier periods a snapshot's upload or a
ZooKeeper hiccup alone can take longer than five of them."""


class JobError(ValueError):
    """A job refused: the message names the job, the task or part, and the field at fault."""


def _tuple(value: Any) -> Any:
    """Lists become tuples; anything else is left for validation to judge."""
    return tuple(value) if isinstance(value, list | tuple) else value


def _pairs(value: Any) -> Any:
    """A mapping, or a list of [name, type] pairs, becomes a tuple of pairs in order."""
    if isinstance(value, Mapping):
        return tuple((k, v) for k, v in value.items())
    if isinstance(value, list | tuple) and all(
        isinstance(p, list | tuple) and len(p) == 2 for p in value
    ):
        return tuple(tuple(p) for p in value)
    return value


def _set(obj: object, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)


REPLAYABLE_ENGINES = frozenset({"python", "arrow"})
"""The engines whose functions log their determinants and can be taken over."""


@dataclass(frozen=True, slots=True)
class Task:
    """One catalog entry. ``n_peers`` is shorthand for equal ``min_peers`` and ``max_peers``; it is
    kept so the job reads back as it was written."""

    name: str
    kind: str
    fn: str | None = None
    plugin: str | None = None
    batch_size: int = 100
    max_batch_delay: float = 0.0
    """An input's: seconds a short poll waits before the plugin is polled once more and both
    leave as one batch (0: every poll leaves at once). Longer batches cost less per row."""
    idle_timeout: float | None = None
    """An input's: seconds without rows after which its watermark moves on with the wall clock
    (peer.runtime.idleness); None keeps it where its rows left it."""
    event_time_per_second: float = 1.0
    """An idle input's: units of event time its watermark moves on a second of the wall clock
    (1000 for event times in milliseconds)."""
    min_peers: int = 1
    max_peers: int | None = None
    n_peers: int | None = None
    flux_policy: str = "recover"
    required_tags: tuple[str, ...] = ()
    group_by_key: str | tuple[str, ...] | None = None
    group_by_fn: str | None = None
    assign_watermark_fn: str | None = None
    percentage: float | None = None
    engine: str = "python"
    schema: str | tuple[tuple[str, str], ...] | None = None
    """Spark and Arrow tasks' batches: a mapping of field to Spark type, kept as pairs in order,
    or a DDL string (see peer.job.schema); None infers it from the first batch."""
    params: Mapping[str, Any] = field(default_factory=pmap)
    standby: bool | None = None
    """Whether the task keeps a standby peer on another member, ready to take over its seat;
    None leaves it to the job's ``standby``."""
    max_parallelism: int | None = None
    """A keyed task's number of key groups, the most peers it can run on; None leaves it to the
    job's ``max_parallelism``."""
    chaining: bool = True
    """Whether the task may run in one chain with its neighbours (peer.job.chains); false keeps
    it a task of its own."""
    chained: tuple[Task, ...] = ()
    """The function tasks that run after this one's fn in the same task, in order, as one chain
    (peer.job.chains makes them at submit): each batch goes through every fn of the chain with
    nothing between them."""

    def __post_init__(self) -> None:
        _set(self, "required_tags", _tuple(self.required_tags))
        _set(self, "chained", _tuple(self.chained))
        _set(self, "schema", _pairs(self.schema))
        _set(self, "group_by_key", _tuple(self.group_by_key))
        if isinstance(self.params, Mapping) and not isinstance(self.params, PMap):
            _set(self, "params", freeze(dict(self.params)))
        if isinstance(self.n_peers, int):
            if self.min_peers == 1:
                _set(self, "min_peers", self.n_peers)
            if self.max_peers is None:
                _set(self, "max_peers", self.n_peers)

    @property
    def replayable(self) -> bool:
        """Whether a replacement can take this task's seat over by replaying its determinants:
        a function run here in Python or Arrow. An input's or an output's failure, or a Spark
        fn's (whose batches run in Spark's order), rolls its job back instead."""
        return self.kind == "function" and self.engine in REPLAYABLE_ENGINES

    @property
    def keyed(self) -> bool:
        """Whether segments reach the task by group key, so its state is kept by key group."""
        return self.group_by_key is not None or self.group_by_fn is not None

    @property
    def unaligned(self) -> bool:
        """Whether, in a job that recovers locally, this task takes its barriers unaligned
        (peer.runtime.unaligned): an output whose batches are applied in line (Python or
        Arrow), so that its snapshot at a barrier's first copy covers all it took before."""
        return self.kind == "output" and self.engine in REPLAYABLE_ENGINES

    def to_dict(self) -> dict[str, Any]:
        doc = _non_defaults(self)
        if self.n_peers is not None:
            doc.pop("min_peers", None)
            doc.pop("max_peers", None)
        if isinstance(self.schema, tuple):
            doc["schema"] = dict(self.schema)
        if self.chained:
            doc["chained"] = [member.to_dict() for member in self.chained]
        return doc

    @property
    def chain(self) -> tuple[Task, ...]:
        """The tasks whose fns this one runs, in order: itself, then its chained ones."""
        return (self, *self.chained)


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """Hooks around one task's life and batches; ``task`` may be ``"all"``."""

    task: str
    before_task: str | None = None
    after_task: str | None = None
    before_batch: str | None = None
    after_batch: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return _non_defaults(self)


@dataclass(frozen=True, slots=True)
class FlowCondition:
    """Segments leaving ``from_task`` reach ``to`` only where ``predicate`` holds."""

    from_task: str
    to: tuple[str, ...] | str
    predicate: str
    short_circuit: bool = False

    def __post_init__(self) -> None:
        _set(self, "to", _tuple(self.to))

    def to_dict(self) -> dict[str, Any]:
        doc = _non_defaults(self)
        return {"from": doc.pop("from_task"), **doc}


@dataclass(frozen=True, slots=True)
class Window:
    """Aggregates what ``task`` receives, per group key (the task's ``group_by_key`` or
    ``group_by_fn``) and extent of event time. ``key`` names the segment field holding event
    time; ``range`` and ``slide`` shape fixed and sliding extents, ``gap`` closes a session;
    ``field`` is what sum, min, max and average aggregate and what collect_by_key groups by.
    ``aggregation`` is a built-in name or a dotted path to an object with the methods of
    ``AGGREGATION_METHODS`` (see ``peer.state.aggregations``); ``top`` is how many of the
    highest values of ``field`` the ``top`` aggregation keeps the segments of (1: the arg-max),
    ties included. With ``ttl`` (a task that groups only), a key whose extents took no segment
    for that many seconds of processing time is forgotten, unfired."""

    id: str
    task: str
    type: str
    aggregation: str
    key: str | None = None
    range: float | None = None
    slide: float | None = None
    gap: float | None = None
    field: str | None = None
    ttl: float | None = None
    top: int | None = None
    late: str | None = None
    """A task downstream of ``task`` that the segments behind the watermark go to, as they
    came, and nothing else of ``task``'s; None drops them (both ways they are counted)."""

    def to_dict(self) -> dict[str, Any]:
        return _non_defaults(self)


@dataclass(frozen=True, slots=True)
class Trigger:
    """When ``window``'s extents are emitted: every ``threshold`` segments of an extent, every
    ``period`` seconds, when the watermark passes an extent's end, or when ``predicate`` holds
    for a segment. ``discarding`` forgets an extent once fired; ``emit`` turns the fired event
    into segments (a default segment otherwise) and ``sync`` is called with it."""

    window: str
    on: str
    threshold: int | None = None
    period: float | None = None
    predicate: str | None = None
    refinement: str = "accumulating"
    emit: str | None = None
    sync: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return _non_defaults(self)


@dataclass(frozen=True, slots=True)
class Join:
    """Joins what ``task`` receives from two upstream tasks, ``left`` and ``right``: a row of
    one side with every row of the other whose key is equal (``left_key`` of a left row,
    ``right_key`` of a right one: a field, or several) and that meets the join's ``type``:

    - ``window``: both rows fall in the same extent of a fixed window of ``range`` (sliding by
      ``slide`` when given) over their event times (``left_time``, ``right_time``); an
      extent's pairs go out once the watermark has passed its end.
    - ``interval``: the right row's time is within ``[t + lower, t + upper]`` of the left row's
      time ``t``, or within ``[t + lower, until]`` where ``until`` names a field of the left
      row (an auction's end); each pair goes out as soon as its second row comes.
    - ``regular``: no time bound; each pair goes out as soon as its second row comes, and a
      key's rows of one side are forgotten once ``ttl`` of event time (in the job's units of
      event time, by the watermark) has passed without another row of that side for it; any
      join may have a ``ttl``.

    ``emit`` names a function that turns a pair's event, ``{"join", "key", "left", "right"}``
    (with the extent's ``"start"`` and ``"end"`` in a window join, where a pair that shares
    several extents of a sliding window goes out once for each), into what the pair sends: a
    segment, a list of them, or None. Without it the pair sends the event. The
    task keeps both sides in its keyed state, so it groups by the join's keys and needs no
    ``group_by_key`` of its own."""

    id: str
    task: str
    type: str
    left: str
    right: str
    left_key: str | tuple[str, ...]
    right_key: str | tuple[str, ...]
    left_time: str | None = None
    right_time: str | None = None
    range: float | None = None
    slide: float | None = None
    lower: float | None = None
    upper: float | None = None
    until: str | None = None
    ttl: float | None = None
    emit: str | None = None
    late: str | None = None
    """A task downstream of ``task`` that the rows behind the watermark go to, as they came,
    and nothing else of ``task``'s; None drops them (both ways they are counted)."""

    def __post_init__(self) -> None:
        _set(self, "left_key", _tuple(self.left_key))
        _set(self, "right_key", _tuple(self.right_key))

    def side(self, task: str) -> int:
        """0 for rows from the left task, 1 for the right's."""
        return 0 if task == self.left else 1

    def key(self, side: int) -> str | tuple[str, ...]:
        return self.left_key if side == 0 else self.right_key

    def to_dict(self) -> dict[str, Any]:
        doc = _non_defaults(self)
        for name in ("left_key", "right_key"):
            if isinstance(doc[name], tuple):
                doc[name] = list(doc[name])
        return doc


@dataclass(frozen=True, slots=True)
class Job:
    """A whole job. ``id`` stays None until the submitter assigns one.

    ``barrier_period`` is how often, in seconds, the job's coordinator starts a checkpoint
    (None: no checkpoints, and a failure restarts the job from its inputs' beginning);
    ``resume_from`` names an earlier job whose last committed checkpoint this one starts from,
    or, as ``{job: ID, savepoint: NAME}``, one of that job's savepoints. ``code`` names the
    code archive shipped with the job (``{name, sha256}``, see peer.job.code): its dotted paths
    import from it.
    ``name`` is for people (listings, dashboards) and ``metadata`` free JSON values for the
    operator's own tools: the cluster keeps both and reads neither.

    Local recovery: with ``local_recovery`` (implied by a standby on any task) tasks log their
    nondeterminism and what they sent since the last commit, so a failed function task can be
    taken over alone, without rolling the job back. ``standby`` gives every task that does not
    say otherwise a standby peer on another member. ``causal_depth`` is how many concurrent
    failures the logs cover (beyond it the job rolls back as a whole), ``in_flight_budget`` how
    many bytes of what it sent since the last commit a task keeps.

    Back-pressure: ``debloat_target`` is how many seconds of a task's work what its senders
    have in flight to it may hold (their credit follows its measured throughput, and batches to
    it are no longer than that: peer.runtime.debloat), so a barrier waits behind about that much
    at each task; None keeps fixed credit windows of batches.

    Checkpoints that do not come: an epoch not committed within ``checkpoint_timeout`` seconds
    of its barrier (None: five barrier periods, at least ``MIN_CHECKPOINT_TIMEOUT``) is
    abandoned and the next one starts, so no job waits for ever on a barrier that will not
    come; after more than ``tolerable_abandoned_epochs`` abandoned in a row the job rolls back
    to its last commit as a whole.

    Keyed state: ``max_parallelism`` is every keyed task's number of key groups unless the task
    names its own (peer.state.key_groups): the most peers the task runs on, fixed for the job
    and every job resumed from it, since a key's group is its hash modulo that number.
    ``state_backend`` is where the keyed state the engine keeps is held (peer.state.backends):
    "memory", or "disk" for state larger than memory.
    """

    workflow: tuple[tuple[str, str], ...]
    catalog: tuple[Task, ...]
    lifecycles: tuple[Lifecycle, ...] = ()
    flow_conditions: tuple[FlowCondition, ...] = ()
    windows: tuple[Window, ...] = ()
    triggers: tuple[Trigger, ...] = ()
    joins: tuple[Join, ...] = ()
    task_scheduler: str = "balanced"
    percentage: float | None = None
    barrier_period: float | None = 1.0
    resume_from: str | Mapping[str, str] | None = None
    code: Mapping[str, str] | None = None
    name: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=pmap)
    local_recovery: bool = False
    standby: bool = False
    causal_depth: int = 1
    in_flight_budget: int = DEFAULT_IN_FLIGHT_BUDGET
    debloat_target: float | None = DEFAULT_DEBLOAT_TARGET
    checkpoint_timeout: float | None = None
    tolerable_abandoned_epochs: int = 1
    max_parallelism: int = DEFAULT_MAX_PARALLELISM
    state_backend: str = "memory"
    id: str | None = None

    def __post_init__(self) -> None:
        for name in ("resume_from", "code"):
            value = getattr(self, name)
            if isinstance(value, Mapping) and not isinstance(value, PMap):
                _set(self, name, pmap(value))
        if isinstance(self.metadata, Mapping) and not isinstance(self.metadata, PMap):
            _set(self, "metadata", freeze(dict(self.metadata)))
        workflow = _tuple(self.workflow)
        if isinstance(workflow, tuple):
            workflow = tuple(_tuple(edge) for edge in workflow)
        _set(self, "workflow", workflow)
        for name in PARTS:
            _set(self, name, _tuple(getattr(self, name)))

    @property
    def epoch_timeout(self) -> float:
        """Seconds an epoch may take from its barrier to its commit before it is abandoned."""
        if self.checkpoint_timeout is not None:
            return float(self.checkpoint_timeout)
        period = self.barrier_period or 0.0
        return max(CHECKPOINT_TIMEOUT_PERIODS * period, MIN_CHECKPOINT_TIMEOUT)

    def resume_source(self) -> tuple[str, str | None] | None:
        """(the job to restore from, the savepoint to restore, None for its last commit)."""
        if isinstance(self.resume_from, str):
            return self.resume_from, None
        if isinstance(self.resume_from, Mapping):
            return self.resume_from["job"], self.resume_from["savepoint"]
        return None

    def task(self, name: str) -> Task:
        for task in self.catalog:
            if task.name == name:
                return task
        raise KeyError(name)

    def key_groups(self, task_name: str) -> int:
        """The maximum parallelism of ``task_name``, its number of key groups: its own, else
        the job's."""
        own = self.task(task_name).max_parallelism
        return self.max_parallelism if own is None else own

    def join_of(self, task_name: str) -> Join | None:
        """The join ``task_name`` makes, if it makes one."""
        for join in self.joins:
            if join.task == task_name:
                return join
        return None

    def late_outputs(self, task_name: str) -> frozenset[str]:
        """The tasks ``task_name``'s windows and join send their late rows to, alone."""
        parts: list[Window | Join] = [*self.windows, *self.joins]
        return frozenset(p.late for p in parts if p.task == task_name and p.late is not None)

    def keyed(self, task_name: str) -> bool:
        """Whether segments reach ``task_name`` by key, so its state is kept by key group: it
        groups, or it joins (by each side's key)."""
        return self.task(task_name).keyed or self.join_of(task_name) is not None

    def grouped(self, task_name: str) -> bool:
        """Whether ``task_name``'s work is split into its max_parallelism parts that move
        between its peers as their number changes, so that it runs on at most that many: a
        keyed task's key groups, or the splits of a checkpointed job's input whose peers may
        vary (an input whose plugin splits its share, checked at submit)."""
        task = self.task(task_name)
        varies = task.min_peers != task.max_peers and self.barrier_period is not None
        return self.keyed(task_name) or (task.kind == "input" and varies)

    def has_standby(self, task_name: str) -> bool:
        """Whether ``task_name`` keeps a standby peer: its own flag, else the job's, for a task
        that can be taken over (``Task.replayable``)."""
        task = self.task(task_name)
        return task.replayable and (self.standby if task.standby is None else task.standby)

    @property
    def local_recovery_on(self) -> bool:
        """Whether the job logs for local recovery: asked for, or needed by a standby."""
        return self.local_recovery or any(self.has_standby(t.name) for t in self.catalog)

    def sorted_tasks(self) -> tuple[str, ...]:
        """Task names, every task after all its upstream tasks, ties broken by name."""
        order, _cycle = topological_order(self.workflow)
        return order

    def input_tasks(self) -> tuple[str, ...]:
        return tuple(sorted(t.name for t in self.catalog if t.kind == "input"))

    def output_tasks(self) -> tuple[str, ...]:
        return tuple(sorted(t.name for t in self.catalog if t.kind == "output"))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data that ``peer.job.load.load`` turns back into an equal job."""
        doc = _non_defaults(self)
        doc["workflow"] = [list(edge) for edge in self.workflow]
        for name in PARTS:
            if name in doc:
                doc[name] = [part.to_dict() for part in doc[name]]
        return doc

    def canonical(self) -> bytes:
        """The job's content as the log carries it (sorted keys), without its id: the id names
        a job, it is not part of what the job does."""
        doc = self.to_dict()
        doc.pop("id", None)
        return json.dumps(doc, sort_keys=True).encode()

    def digest(self) -> str:
        """sha256 of the canonical document: equal exactly when two jobs' contents are."""
        return hashlib.sha256(self.canonical()).hexdigest()


def _non_defaults(value: Any) -> dict[str, Any]:
    """Fields that differ from their default, as plain data: defaults come back on load."""
    doc: dict[str, Any] = {}
    for f in fields(value):
        item = getattr(value, f.name)
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        if item != default:
            doc[f.name] = _plain(item)
    return doc


def _plain(item: Any) -> Any:
    if isinstance(item, PMap):
        return thaw(item)
    if isinstance(item, tuple) and all(isinstance(x, str) for x in item):
        return list(item)
    return item
