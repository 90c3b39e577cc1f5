"""Whether a job makes sense, as one function that returns the job or raises one JobError.

The first mistake found is the one reported, and its message names the job, the part of it (a
task, a workflow edge, a lifecycle, a flow condition, a window, a trigger) and the field, so the
person who wrote the job can go straight to the line at fault. The checks read nothing but the
job and the code its dotted paths name: the same job is refused the same way on every peer.
"""

from __future__ import annotations

import importlib.util
import math
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NoReturn

from pyrsistent import thaw

from peer.job.code import check_reference
from peer.job.graph import topological_order
from peer.job.imports import ImportPathError, resolve, split, takes_splits
from peer.job.limits import check_depth, check_size
from peer.job.schema import SchemaError, parse
from peer.job.spec import (
    AGGREGATION_METHODS,
    AGGREGATIONS,
    ALL,
    ENGINES,
    FLUX_POLICIES,
    HOOKS,
    JOIN_TYPES,
    KINDS,
    MAX_PARALLELISM_LIMIT,
    MIB,
    REFINEMENTS,
    REPLAYABLE_ENGINES,
    SIDES,
    STATE_BACKENDS,
    TRIGGER_ONS,
    WINDOW_TYPES,
    FlowCondition,
    Job,
    JobError,
    Join,
    Lifecycle,
    Task,
    Trigger,
    Window,
)
from peer.job.values import is_int
from peer.scheduling.demand import TASK_SCHEDULERS

EXTENT_FIELDS = {
    "fixed": ("key", "range"),
    "sliding": ("key", "range", "slide"),
    "global": (),
    "session": ("key", "gap"),
}
"""What each window type needs; each of these fields means nothing to the other types."""
FIELD_AGGREGATIONS = ("sum", "min", "max", "average", "collect_by_key", "top")
"""The built-in aggregations that read ``field``; count and collect take whole segments."""
TRIGGER_FIELDS = {"threshold": "segment", "period": "timer", "predicate": "punctuation"}
"""The trigger field each ``on`` needs, and means nothing to the others."""


TASK_PATHS = ("fn", "plugin", "group_by_fn", "assign_watermark_fn")
SPARK_PACKAGE = "peer.spark"
"""The Spark source plugins live here: a task naming one needs Spark."""
SPARK_EXTRA = "pip install 'onyx-peer[spark]'"
"""What installs Spark (pyspark) next to the project: it is an optional extra."""


def validate(job: Job, *, imports: bool = True) -> Job:
    """``job`` itself when every check passes; JobError naming the first mistake otherwise.

    ``imports=False`` checks the shape of every dotted path without importing it: the log
    applies submitted jobs that way, since whether code imports depends on the machine, and
    every replica must accept or refuse a job alike. Submitters check the imports.
    """
    where = job_label(job.id)
    _check_job_fields(job, where)
    for index, task in enumerate(job.catalog):
        _check_task(task, index, where)
    _check_chains(job, where)
    _check_unique_names(job, where)
    _check_workflow(job, where)
    _check_percentages(job, where)
    for lifecycle in job.lifecycles:
        _check_lifecycle(job, lifecycle, where)
    for condition in job.flow_conditions:
        _check_flow_condition(job, condition, where)
    _check_windows(job, where)
    _check_joins(job, where)
    _check_fns(job, where)
    for index, trigger in enumerate(job.triggers):
        _check_trigger(job, trigger, index, where)
    _check_checkpoints(job, where)
    _check_local_recovery(job, where)
    _check_debloat(job, where)
    _check_key_groups(job, where)
    _check_state_backend(job, where)
    check_size(job, where)
    if imports:
        _check_imports(job, where)
    return job


def job_label(job_id: object) -> str:
    return f"job {job_id!r}" if isinstance(job_id, str) and job_id else "job"


def lifecycle_label(task: object) -> str:
    return "lifecycle for all tasks" if task == ALL else f"lifecycle for task {task!r}"


def window_label(window_id: object, index: int) -> str:
    """A window by its id, or by its place in the list while it has no usable id."""
    named = isinstance(window_id, str) and window_id
    return f"window {window_id!r}" if named else f"window {index}"


def join_label(join_id: object, index: int) -> str:
    """A join by its id, or by its place in the list while it has no usable id."""
    named = isinstance(join_id, str) and join_id
    return f"join {join_id!r}" if named else f"join {index}"


def trigger_label(index: int, window: object) -> str:
    """Triggers have no names: one is known by its place in the list and its window."""
    of = f" of window {window!r}" if isinstance(window, str) else ""
    return f"trigger {index}{of}"


def fail(where: str, message: str) -> NoReturn:
    raise JobError(f"{where}: {message}")


def check_n_peers(where: str, n_peers: int, min_peers: object, max_peers: object) -> None:
    """``n_peers`` fixes both bounds, so any other bound written next to it is a contradiction."""
    for name, value in (("min_peers", min_peers), ("max_peers", max_peers)):
        if value is not None and value != n_peers:
            fail(where, f"n_peers {n_peers!r} conflicts with {name} {value!r}")


def _one_of(where: str, name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        fail(where, f"{name} {value!r} is not one of {', '.join(map(repr, allowed))}")


def _is_number(value: object) -> bool:
    return is_int(value) or (isinstance(value, float) and math.isfinite(value))


def _count(where: str, name: str, value: object, optional: bool = False) -> None:
    if (value is None and optional) or (is_int(value) and value >= 1):  # type: ignore[operator]
        return
    fail(where, f"{name} must be an int >= 1, got {value!r}")


def _percentage(where: str, value: object) -> None:
    if value is None or (_is_number(value) and 0 < value <= 100):  # type: ignore[operator]
        return
    fail(where, f"percentage must be a number > 0 and <= 100, got {value!r}")


def _strings(value: object) -> bool:
    return isinstance(value, tuple) and all(isinstance(s, str) and s for s in value)


def _check_path(where: str, name: str, path: object) -> None:
    if path is None:
        return
    if not isinstance(path, str):
        fail(where, f"{name} must be a dotted path string, got {path!r}")
    try:
        split(path)
    except ImportPathError as e:
        fail(where, f"{name} {path!r} does not import: {e}")


def _check_spark(job: Job, outer: str) -> None:
    """Spark is an optional extra: a job with a Spark task, source or sink is refused where
    pyspark is not installed, rather than killed when a peer first starts Spark for it."""
    if _spark_installed():
        return
    for task in job.catalog:
        if task.engine == "spark":
            uses = "engine spark"
        elif isinstance(task.plugin, str) and task.plugin.startswith(f"{SPARK_PACKAGE}."):
            uses = f"plugin {task.plugin!r}"
        else:
            continue
        fail(f"{outer}: task {task.name!r}",
             f"{uses} needs Spark, which is not installed here: {SPARK_EXTRA}")  # fmt: skip


def _spark_installed() -> bool:
    """Whether pyspark would import here, without importing it (that takes a while)."""
    try:
        return importlib.util.find_spec("pyspark") is not None
    except (ImportError, ValueError):
        return False


def _check_imports(job: Job, outer: str) -> None:
    """Every dotted path must import and name something callable, or the job fails at run
    time on some peer instead of now."""
    _check_spark(job, outer)
    named = [
        (f"{outer}: task {task.name!r}", name, getattr(task, name))
        for head in job.catalog
        for task in head.chain
        for name in TASK_PATHS
    ]
    named += [
        (f"{outer}: {lifecycle_label(lc.task)}", hook, getattr(lc, hook))
        for lc in job.lifecycles
        for hook in HOOKS
    ]
    named += [
        (f"{outer}: flow condition from {c.from_task!r}", "predicate", c.predicate)
        for c in job.flow_conditions
    ]
    named += [
        (f"{outer}: {trigger_label(index, t.window)}", name, getattr(t, name))
        for index, t in enumerate(job.triggers)
        for name in ("predicate", "emit", "sync")
    ]
    named += [(f"{outer}: {join_label(j.id, i)}", "emit", j.emit) for i, j in enumerate(job.joins)]
    for where, name, path in named:
        if path is None:
            continue
        try:
            target = resolve(path)
        except ImportPathError as e:
            fail(where, f"{name} {path!r} does not import: {e}")
        if not callable(target):
            fail(where, f"{name} {path!r} is not callable")
    _check_keyed_state(job, outer)
    _check_aggregation_imports(job, outer)
    _check_input_peers(job, outer)
    _check_plugin_params(job, outer)


def _check_plugin_params(job: Job, outer: str) -> None:
    """A plugin factory that carries ``check_params`` (peer.plugins.checks_params) has its
    task's params checked now, so that a setting out of range is refused at submit rather than
    when the task starts on some peer."""
    for task in job.catalog:
        check = None if task.plugin is None else getattr(resolve(task.plugin), "check_params", None)
        if check is None:
            continue
        try:
            check(task.params)
        except (ValueError, TypeError) as e:
            fail(f"{outer}: task {task.name!r}", f"params: {e}")


def _check_input_peers(job: Job, outer: str) -> None:
    """An input's checkpoint is a position in its share of the data, and the share depends on
    how many peers read: in a checkpointed job, an input may run on a number of peers that
    varies only if its plugin splits its share (peer.plugins.splits), so that the positions
    can be handed on to another number of slots. The log cannot import plugins; a job that
    got past this check fails at its restore, saying so."""
    for task in job.catalog:
        if task.kind != "input" or task.plugin is None or not job.grouped(task.name):
            continue
        if not takes_splits(resolve(task.plugin)):
            fail(
                f"{outer}: task {task.name!r}",
                f"plugin {task.plugin!r} does not split its share (its factory takes no "
                "splits), so as an input of a checkpointed job it needs a fixed number of "
                "peers (set n_peers, or barrier_period: null to run without checkpoints)",
            )


def _check_keyed_state(job: Job, outer: str) -> None:
    """A fn class with ``open`` keeps keyed state (peer.state.keyed): per group key, so its
    task must have one."""
    for task in job.catalog:
        if task.fn is None or task.keyed or task.engine != "python":
            continue
        target = resolve(task.fn)
        if isinstance(target, type) and hasattr(target, "open"):
            fail(f"{outer}: task {task.name!r}", f"fn {task.fn!r} keeps keyed state (its class "
                 "has open), so the task needs group_by_key or group_by_fn")  # fmt: skip


def _check_aggregation_imports(job: Job, outer: str) -> None:
    """A user aggregation is an object (a module, an instance) with every method the window
    state calls."""
    for index, window in enumerate(job.windows):
        path = window.aggregation
        if path in AGGREGATIONS:
            continue
        where = f"{outer}: {window_label(window.id, index)}"
        try:
            target = resolve(path)
        except ImportPathError as e:
            fail(where, f"aggregation {path!r} does not import: {e}")
        missing = [m for m in AGGREGATION_METHODS if not callable(getattr(target, m, None))]
        if missing:
            fail(where, f"aggregation {path!r} has no method {', '.join(missing)}")


def _check_job_fields(job: Job, where: str) -> None:
    if job.id is not None and not (isinstance(job.id, str) and job.id):
        fail(where, f"id must be a non-empty string or absent, got {job.id!r}")
    if job.code is not None:
        check_reference(where, thaw(job.code))
    _one_of(where, "task_scheduler", job.task_scheduler, TASK_SCHEDULERS)
    _percentage(where, job.percentage)
    for name, kind in (
        ("catalog", Task),
        ("lifecycles", Lifecycle),
        ("windows", Window),
        ("triggers", Trigger),
        ("joins", Join),
    ):
        parts = getattr(job, name)
        if not isinstance(parts, tuple) or not all(isinstance(p, kind) for p in parts):
            fail(where, f"{name} must be a list of {kind.__name__}, got {parts!r}")
    conditions = job.flow_conditions
    if not isinstance(conditions, tuple) or not all(
        isinstance(c, FlowCondition) for c in conditions
    ):
        fail(where, f"flow_conditions must be a list of FlowCondition, got {conditions!r}")
    if not job.catalog:
        fail(where, "catalog has no tasks")
    if job.name is not None and not (isinstance(job.name, str) and job.name):
        fail(where, f"name must be a non-empty string or absent, got {job.name!r}")
    _check_free_values(where, "metadata", job.metadata)


def _check_free_values(where: str, name: str, values: object) -> None:
    """``params`` and ``metadata``: string keys, and no deeper than a log entry allows."""
    if not isinstance(values, Mapping) or not all(isinstance(k, str) for k in values):
        fail(where, f"{name} must be a mapping with string keys, got {values!r}")
    check_depth(where, name, values)


def _check_batch_delay(task: Task, where: str) -> None:
    """Batches are made where they are read: only an input holds a short one back."""
    delay = task.max_batch_delay
    if not (_is_number(delay) and 0 <= delay < math.inf):
        fail(where, f"max_batch_delay must be a number of seconds >= 0, got {delay!r}")
    if delay and task.kind != "input":
        fail(where, f"max_batch_delay is an input's (its batches are made where they are read, "
                    f"and every later task sends what it made at once), got {delay!r} on a "
                    f"{task.kind}")  # fmt: skip


def _check_idleness(task: Task, where: str) -> None:
    """Only an input reads rows a source may stop giving."""
    timeout, scale = task.idle_timeout, task.event_time_per_second
    if timeout is not None and not (_is_number(timeout) and 0 < timeout < math.inf):
        fail(where, f"idle_timeout must be a number of seconds > 0, or null, got {timeout!r}")
    if not (_is_number(scale) and 0 < scale < math.inf):
        fail(where, f"event_time_per_second must be a number > 0, got {scale!r}")
    if timeout is not None and task.kind != "input":
        fail(where, f"idle_timeout is an input's (its watermark moves on when its source is "
                    f"silent), got {timeout!r} on a {task.kind}")  # fmt: skip


def _check_task(task: Task, index: int, outer: str) -> None:
    if not (isinstance(task.name, str) and task.name):
        got = task.name
        fail(f"{outer}: catalog entry {index}", f"name must be a non-empty string, got {got!r}")
    where = f"{outer}: task {task.name!r}"
    _check_kind(task, where)
    _count(where, "batch_size", task.batch_size)
    _check_batch_delay(task, where)
    _check_idleness(task, where)
    _check_peers(task, where)
    _one_of(where, "flux_policy", task.flux_policy, FLUX_POLICIES)
    if not _strings(task.required_tags):
        fail(where, f"required_tags must be a list of strings, got {task.required_tags!r}")
    _check_grouping(task, where)
    _percentage(where, task.percentage)
    _check_free_values(where, "params", task.params)
    for name in TASK_PATHS:
        _check_path(where, name, getattr(task, name))
    if task.standby is not None and not isinstance(task.standby, bool):
        fail(where, f"standby must be true, false or null, got {task.standby!r}")
    if task.standby and not task.replayable:
        fail(where, "standby is for function tasks in python or arrow: the failure of any "
                    "other task rolls its job back, with no seat to take over")  # fmt: skip
    if task.assign_watermark_fn is not None and task.kind != "input":
        fail(where, "assign_watermark_fn is only for input tasks")
    if not isinstance(task.chaining, bool):
        fail(where, f"chaining must be true or false, got {task.chaining!r}")
    _check_engine(task, where)


def _check_engine(task: Task, where: str) -> None:
    _one_of(where, "engine", task.engine, ENGINES)
    if task.engine == "spark" and task.kind != "function":
        fail(
            where,
            "engine spark is for function tasks; Spark inputs and outputs are plugins "
            "(peer.spark.source:input; the Parquet table sink, peer.plugins.parquet:output)",
        )
    if task.engine == "arrow" and task.kind != "function":
        fail(
            where,
            "engine arrow is for function tasks; an input's or output's plugin takes and "
            "gives Arrow batches itself",
        )
    if task.schema is not None:
        try:
            fields = {name for name, _ in parse(task.schema)}
        except SchemaError as e:
            fail(where, f"schema {e}")
        key = task.group_by_key
        for name in [key] if isinstance(key, str) else key or ():
            if name not in fields:
                fail(where, f"group_by_key {name!r} is not a field of its schema")


def _check_kind(task: Task, where: str) -> None:
    _one_of(where, "kind", task.kind, KINDS)
    if task.kind == "function":
        if task.plugin is not None:
            fail(where, "plugin is only for input and output tasks, not a function task")
    elif task.plugin is None:
        fail(where, f"plugin is required for an {task.kind} task")


def _check_peers(task: Task, where: str) -> None:
    _count(where, "min_peers", task.min_peers)
    _count(where, "max_peers", task.max_peers, optional=True)
    _count(where, "n_peers", task.n_peers, optional=True)
    if task.n_peers is not None:
        check_n_peers(where, task.n_peers, task.min_peers, task.max_peers)
    if task.max_peers is not None and task.min_peers > task.max_peers:
        fail(where, f"min_peers {task.min_peers} is more than max_peers {task.max_peers}")


def _check_grouping(task: Task, where: str) -> None:
    key = task.group_by_key
    if key is not None and not ((isinstance(key, str) and key) or (_strings(key) and key)):
        fail(where, f"group_by_key must be a string or a list of strings, got {key!r}")
    if key is not None and task.group_by_fn is not None:
        fail(where, "group_by_key and group_by_fn are exclusive: set at most one")


def _resume_source(value: object) -> bool:
    if isinstance(value, str):
        return bool(value)
    return (
        isinstance(value, Mapping)
        and set(value) == {"job", "savepoint"}
        and all(isinstance(v, str) and v for v in value.values())
    )


def _check_checkpoints(job: Job, where: str) -> None:
    period = job.barrier_period
    if period is not None and not (_is_number(period) and period > 0):
        fail(where, f"barrier_period must be a number of seconds > 0 or null, got {period!r}")
    if job.resume_from is not None and not _resume_source(job.resume_from):
        fail(
            where,
            "resume_from must be a job id or {job: ID, savepoint: NAME}, "
            f"got {thaw(job.resume_from)!r}",
        )
    timeout = job.checkpoint_timeout
    if timeout is not None and not (_is_number(timeout) and timeout > 0):
        fail(where, f"checkpoint_timeout must be a number of seconds > 0 or null, got {timeout!r}")
    tolerable = job.tolerable_abandoned_epochs
    if not (is_int(tolerable) and tolerable >= 0):
        fail(where, f"tolerable_abandoned_epochs must be an int >= 0, got {tolerable!r}")


def _check_local_recovery(job: Job, where: str) -> None:
    """Local recovery restores a failed task from the last committed checkpoint and replays
    from there: without checkpoints there is nothing to restore, so it is refused."""
    for name in ("local_recovery", "standby"):
        value = getattr(job, name)
        if not isinstance(value, bool):
            fail(where, f"{name} must be true or false, got {value!r}")
    _count(where, "causal_depth", job.causal_depth)
    budget = job.in_flight_budget
    if not (is_int(budget) and budget >= MIB):
        fail(where, f"in_flight_budget must be an int of bytes >= {MIB} (1 MiB), got {budget!r}")
    if job.barrier_period is not None or not job.local_recovery_on:
        return
    if job.local_recovery:
        fail(where, "local_recovery needs checkpoints: set barrier_period (it is null)")
    if job.standby:
        fail(where, "standby needs checkpoints: set barrier_period (it is null)")
    task = next(t for t in job.catalog if t.standby)
    fail(f"{where}: task {task.name!r}", "standby needs checkpoints: set the job's barrier_period")


def _check_debloat(job: Job, where: str) -> None:
    target = job.debloat_target
    if target is not None and not (_is_number(target) and target > 0):
        fail(where, f"debloat_target must be a number of seconds > 0 or null, got {target!r}")


def _check_key_groups(job: Job, where: str) -> None:
    """A keyed task runs on at most one peer per key group; a key's group is fixed by the
    number of groups, so an unkeyed task has no use for one."""
    _max_parallelism(where, job.max_parallelism)
    for task in job.catalog:
        at = f"{where}: task {task.name!r}"
        if task.max_parallelism is not None:
            _max_parallelism(at, task.max_parallelism)
            if not (job.keyed(task.name) or task.kind == "input"):
                fail(at, "max_parallelism is for keyed tasks (group_by_key, group_by_fn or a "
                         "join) and inputs (the splits of their share)")  # fmt: skip
        if not job.grouped(task.name):
            continue
        groups = job.key_groups(task.name)
        most = max(task.min_peers, task.max_peers or 0)
        if most > groups:
            parts, runs = (
                ("key groups", "a keyed task runs on at most one peer per key group")
                if job.keyed(task.name)
                else ("splits", "an input runs on at most one peer per split")
            )
            fail(at, f"it asks for {most} peers and has {groups} {parts} (max_parallelism): "
                     f"{runs}")  # fmt: skip


def _check_state_backend(job: Job, where: str) -> None:
    if job.state_backend not in STATE_BACKENDS:
        fail(where, f"state_backend must be one of {', '.join(STATE_BACKENDS)}, "
                    f"got {job.state_backend!r}")  # fmt: skip


def _max_parallelism(where: str, value: object) -> None:
    if not (is_int(value) and 1 <= value <= MAX_PARALLELISM_LIMIT):  # type: ignore[operator]
        fail(where, f"max_parallelism must be an int from 1 to {MAX_PARALLELISM_LIMIT}, "
                    f"got {value!r}")  # fmt: skip


def _check_unique_names(job: Job, where: str) -> None:
    """Names are unique among the catalog's tasks and the tasks chained in them."""
    every = [member for task in job.catalog for member in task.chain]
    counts = Counter(task.name for task in every)
    for task in every:
        if counts[task.name] > 1:
            fail(f"{where}: task {task.name!r}", "name is listed twice in the catalog")


def _check_chains(job: Job, outer: str) -> None:
    """A task's chained tasks (peer.job.chains) are checked as tasks, and must be what a chain
    runs: function tasks applied in line that take whatever the fn before them gives."""
    for task in job.catalog:
        where = f"{outer}: task {task.name!r}"
        if not isinstance(task.chained, tuple):
            fail(where, f"chained must be a list of tasks, got {task.chained!r}")
        if task.chained and (
            task.kind == "output" or task.engine not in REPLAYABLE_ENGINES or not task.chaining
        ):
            fail(where, "chained is for an input or a python or arrow function task that "
                        "allows chaining")  # fmt: skip
        for index, member in enumerate(task.chained):
            if not isinstance(member, Task):
                fail(where, f"chained entry {index} must be a task, got {member!r}")
            _check_task(member, index, where)
            if not _chain_member(member):
                fail(f"{where}: chained task {member.name!r}", "a chained task must be a python "
                     "or arrow function task with an fn that does not group, allows chaining "
                     "and chains nothing itself")  # fmt: skip


def _chain_member(task: Task) -> bool:
    return (
        task.kind == "function"
        and task.engine in REPLAYABLE_ENGINES
        and task.fn is not None
        and not task.keyed
        and task.chaining is True
        and not task.chained
    )


def _edge(edge: tuple[str, str]) -> str:
    return f"{edge[0]!r} -> {edge[1]!r}"


def _check_edges(job: Job, where: str) -> None:
    if not isinstance(job.workflow, tuple) or not job.workflow:
        fail(where, f"workflow must be a non-empty list of [from, to] edges, got {job.workflow!r}")
    names = {task.name for task in job.catalog}
    seen: set[tuple[str, str]] = set()
    for index, edge in enumerate(job.workflow):
        if not (isinstance(edge, tuple) and len(edge) == 2 and _strings(edge)):
            fail(where, f"workflow edge {index} must be a [from, to] pair of names, got {edge!r}")
        for name in edge:
            if name not in names:
                fail(where, f"workflow edge {_edge(edge)}: task {name!r} is not in the catalog")
        if edge in seen:
            fail(where, f"workflow edge {_edge(edge)} is listed twice")
        seen.add(edge)


def _check_workflow(job: Job, where: str) -> None:
    _check_edges(job, where)
    for task in job.catalog:
        _check_role(job, task, f"{where}: task {task.name!r}: workflow")
    _order, cycle = topological_order(job.workflow)
    if cycle:
        fail(where, f"workflow has a cycle: {' -> '.join(map(repr, (*cycle, cycle[0])))}")


def _check_role(job: Job, task: Task, where: str) -> None:
    incoming = [e for e in job.workflow if e[1] == task.name]
    outgoing = [e for e in job.workflow if e[0] == task.name]
    if not incoming and not outgoing:
        fail(where, "task is in no edge")
    if task.kind == "input" and incoming:
        fail(where, f"an input task cannot have incoming edges, got {_edge(incoming[0])}")
    if task.kind == "output" and outgoing:
        fail(where, f"an output task cannot have outgoing edges, got {_edge(outgoing[0])}")
    if task.kind == "function" and not incoming:
        fail(where, "a function task needs an incoming edge, has none")
    if task.kind == "function" and not outgoing:
        fail(where, "a function task needs an outgoing edge, has none")


def _check_percentages(job: Job, where: str) -> None:
    """Task percentages only mean something to the percentage task scheduler, which needs one on
    every task and all of them to share out the whole job."""
    by_percentage = job.task_scheduler == "percentage"
    for task in job.catalog:
        if by_percentage and task.percentage is None:
            fail(f"{where}: task {task.name!r}", "percentage is required by the scheduler")
        if not by_percentage and task.percentage is not None:
            fail(
                f"{where}: task {task.name!r}",
                f"percentage is only for task_scheduler 'percentage', not {job.task_scheduler!r}",
            )
    total = sum(task.percentage or 0 for task in job.catalog)
    if by_percentage and not math.isclose(total, 100):
        fail(where, f"catalog: task percentages add up to {total:g}, not 100")


def _check_lifecycle(job: Job, lifecycle: Lifecycle, outer: str) -> None:
    task = lifecycle.task
    where = f"{outer}: {lifecycle_label(task)}"
    if task != ALL and task not in {t.name for t in job.catalog}:
        fail(where, f"task {task!r} is not in the catalog")
    hooks = [getattr(lifecycle, hook) for hook in HOOKS]
    if all(hook is None for hook in hooks):
        fail(where, f"names no hook: set one of {', '.join(HOOKS)}")
    for name, hook in zip(HOOKS, hooks, strict=True):
        _check_path(where, name, hook)


def _check_flow_condition(job: Job, condition: FlowCondition, outer: str) -> None:
    source = condition.from_task
    where = f"{outer}: flow condition from {source!r}"
    if source not in {t.name for t in job.catalog}:
        fail(where, f"from {source!r} is not in the catalog")
    _check_targets(job, source, condition.to, where)
    if condition.predicate is None:
        fail(where, "predicate is required")
    _check_path(where, "predicate", condition.predicate)
    if not isinstance(condition.short_circuit, bool):
        fail(where, f"short_circuit must be true or false, got {condition.short_circuit!r}")


def _check_targets(job: Job, source: str, to: Any, where: str) -> None:
    """A condition can only route to the tasks its source actually feeds."""
    if to == ALL:
        return
    if not (_strings(to) and to):
        fail(where, f"to must be 'all' or a non-empty list of task names, got {to!r}")
    children = {down for up, down in job.workflow if up == source}
    for name in to:
        if name not in children:
            fail(where, f"to names {name!r}, which is not downstream of {source!r}")


def _listing(items: tuple[str, ...]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join(filter(None, (", ".join(items[:-1]), items[-1])))


def _identified[P: (Window, Join)](
    parts: tuple[P, ...], label: Callable[[object, int], str], outer: str, plural: str
) -> Iterator[tuple[str, P]]:
    """Each part with where it is (its label), once its id is a non-empty string that no part
    before it has."""
    seen: list[str] = []
    for index, part in enumerate(parts):
        where = f"{outer}: {label(part.id, index)}"
        if not (isinstance(part.id, str) and part.id):
            fail(where, f"id must be a non-empty string, got {part.id!r}")
        if part.id in seen:
            fail(where, f"id is listed twice in the {plural}")
        seen.append(part.id)
        yield where, part


def _check_windows(job: Job, outer: str) -> None:
    for where, window in _identified(job.windows, window_label, outer, "windows"):
        _check_window_task(job, window.task, where)
        _check_extents(window, where)
        _check_aggregation(window, where)
        _check_window_fields(job.task(window.task), window, where)
        _check_window_ttl(job.task(window.task), window, where)
        _check_late(job, window.task, window.late, where)


def _check_fns(job: Job, outer: str) -> None:
    """A function task runs its fn, except one whose windows make what it sends: without an fn
    its windows take the segments it receives as they come (a count per key needs no code)."""
    windowed = {window.task for window in job.windows} | {join.task for join in job.joins}
    for task in job.catalog:
        if task.kind != "function" or task.fn is not None:
            continue
        where = f"{outer}: task {task.name!r}"
        if task.name not in windowed:
            fail(where, "fn is required for a function task without windows or a join")
        if task.engine != "python":
            fail(where, f"fn is required for a function task on engine {task.engine!r}")


JOIN_FIELDS = {
    "window": ("left_time", "right_time", "range"),
    "interval": ("left_time", "right_time"),
    "regular": ("ttl",),
}
"""What each type of join needs."""
JOIN_OPTIONS = {"window": ("slide", "ttl"), "interval": ("lower", "upper", "until", "ttl"),
                "regular": ("left_time", "right_time")}  # fmt: skip
"""What each type of join may have besides; the other optional fields mean nothing to it."""


def _check_joins(job: Job, outer: str) -> None:
    for where, join in _identified(job.joins, join_label, outer, "joins"):
        _check_join_task(job, join, where)
        _check_join_sides(job, join, where)
        _check_join_bounds(join, where)
        _check_path(where, "emit", join.emit)
        _check_late(job, join.task, join.late, where)


def _check_join_task(job: Job, join: Join, where: str) -> None:
    """The task a join makes: a Python function task whose rows are the pairs, keyed by the
    join, so it has no fn, group key or windows of its own."""
    if join.task not in tuple(t.name for t in job.catalog):
        fail(where, f"task {join.task!r} is not in the catalog")
    task = job.task(join.task)
    if task.kind != "function" or task.engine != "python":
        fail(where, f"task {task.name!r} must be a function task on engine 'python' to join")
    for name in ("fn", "group_by_key", "group_by_fn"):
        if getattr(task, name) is not None:
            fail(where, f"task {task.name!r} joins, so it has no {name}: the join keys it and "
                        "makes its rows (emit)")  # fmt: skip
    if sum(j.task == join.task for j in job.joins) > 1:
        fail(where, f"task {task.name!r} makes two joins")
    if any(w.task == join.task for w in job.windows):
        fail(where, f"task {task.name!r} joins, so it has no windows: window what it sends in "
                    "the next task")  # fmt: skip


def _check_join_sides(job: Job, join: Join, where: str) -> None:
    """Each side is an upstream task of the join's, and they are all of them; keys of as many
    fields on both sides, of the same types where both sides declare schemas."""
    upstream = sorted(a for a, b in job.workflow if b == join.task)
    if join.left == join.right or sorted([join.left, join.right]) != upstream:
        fail(where, f"left and right must be the two tasks upstream of task {join.task!r} "
                    f"({_listing(tuple(upstream)) if upstream else 'none'}), got "
                    f"{join.left!r} and {join.right!r}")  # fmt: skip
    keys = []
    for side in ("left", "right"):
        key = getattr(join, f"{side}_key")
        names = (key,) if isinstance(key, str) else key
        if not isinstance(names, tuple) or not names:
            fail(where, f"{side}_key must be a field name or a list of them, got {key!r}")
        for name in names:
            _field_name(where, f"{side}_key", name)
        _field_name(where, f"{side}_time", getattr(join, f"{side}_time"), optional=True)
        keys.append(names)
    if len(keys[0]) != len(keys[1]):
        fail(where, f"left_key has {len(keys[0])} fields and right_key {len(keys[1])}: a key "
                    "is equal only to a key of as many fields")  # fmt: skip
    _check_key_types(job, join, keys, where)


def _check_key_types(job: Job, join: Join, keys: list[tuple[str, ...]], where: str) -> None:
    """Where both sides declare a schema, each key field is in it, and of one type on both."""
    schemas = [job.task(join.left).schema, job.task(join.right).schema]
    if any(schema is None for schema in schemas):
        return
    types = [dict(parse(schema)) for schema in schemas]
    for side, names, declared in zip(SIDES, keys, types, strict=True):
        for name in names:
            if name not in declared:
                fail(where, f"{side}_key {name!r} is not a field of task "
                            f"{getattr(join, side)!r}'s schema")  # fmt: skip
    for left, right in zip(*keys, strict=True):
        if types[0][left] != types[1][right]:
            fail(where, f"left_key {left!r} is {types[0][left]} and right_key {right!r} is "
                        f"{types[1][right]}: keys of unequal types never match")  # fmt: skip


def _check_join_bounds(join: Join, where: str) -> None:
    """The type's own fields present, the others absent; lengths > 0, an interval that is not
    empty, and a ttl no shorter than what a row must wait for its pairs."""
    _one_of(where, "type", join.type, JOIN_TYPES)
    needed, allowed = JOIN_FIELDS[join.type], JOIN_OPTIONS[join.type]
    for name in ("left_time", "right_time", "range", "slide", "lower", "upper", "until", "ttl"):
        value = getattr(join, name)
        if name in needed and value is None:
            fail(where, f"{name} is required for a {join.type} join")
        if value is not None and name not in needed + allowed:
            fail(where, f"{name} means nothing to a {join.type} join")
        if (
            name in ("range", "slide", "ttl")
            and value is not None
            and not (_is_number(value) and value > 0)
        ):
            fail(where, f"{name} must be a number > 0, got {value!r}")
        if name in ("lower", "upper") and value is not None and not _is_number(value):
            fail(where, f"{name} must be a number, got {value!r}")
    if join.type == "window":
        if join.slide is not None and join.slide > join.range:  # type: ignore[operator]
            fail(where, f"slide {join.slide!r} is more than range {join.range!r}")
        _ttl_covers(join, join.range, "the window's range", where)  # type: ignore[arg-type]
    if join.type == "interval":
        _check_interval(join, where)


def _check_interval(join: Join, where: str) -> None:
    if (join.upper is None) == (join.until is None):
        fail(where, "an interval join needs upper (a bound after the left row's time) or until "
                    "(a field of the left row), one of them")  # fmt: skip
    _field_name(where, "until", join.until, optional=True)
    lower = join.lower or 0
    if join.upper is not None:
        if join.upper < lower:
            fail(where, f"upper {join.upper!r} is below lower {lower!r}: the interval is empty")
        _ttl_covers(join, join.upper - lower, "the interval", where)


def _ttl_covers(join: Join, length: float, what: str, where: str) -> None:
    if join.ttl is not None and join.ttl < length:
        fail(where, f"ttl {join.ttl!r} is shorter than {what} ({length!r}): rows would be "
                    "forgotten before their pairs could come")  # fmt: skip


def _check_late(job: Job, task: str, late: object, where: str) -> None:
    """A side output for late rows is a task downstream of the one that has them."""
    if late is None:
        return
    downstream = sorted(b for a, b in job.workflow if a == task)
    if late not in downstream:
        fail(where, f"late {late!r} must be a task downstream of task {task!r} (its side "
                    f"output), one of: {', '.join(downstream) or 'none'}")  # fmt: skip
    if downstream == [late]:
        fail(where, f"late {late!r} is task {task!r}'s only downstream task: its other rows "
                    "would go nowhere")  # fmt: skip


def _check_window_task(job: Job, task: object, where: str) -> None:
    """Windows hold what a task receives; an input task receives nothing."""
    if task not in tuple(t.name for t in job.catalog):
        fail(where, f"task {task!r} is not in the catalog")
    kind = job.task(task).kind
    if kind == "input":
        fail(where, f"task {task!r} is an input task: windows are for function and output tasks")


def _check_window_fields(task: Task, window: Window, where: str) -> None:
    """An output task's window holds the segments it receives, whose fields its schema, where
    it declares one, names: a key or field outside it could only fail at run time."""
    if task.kind != "output" or task.schema is None:
        return
    fields = {name for name, _ in parse(task.schema)}
    for name in ("key", "field"):
        value = getattr(window, name)
        if value is not None and value not in fields:
            fail(where, f"{name} {value!r} is not a field of task {task.name!r}'s schema")


def _check_extents(window: Window, where: str) -> None:
    _one_of(where, "type", window.type, WINDOW_TYPES)
    needed = EXTENT_FIELDS[window.type]
    for name in ("key", "range", "slide", "gap"):
        value = getattr(window, name)
        if name in needed and value is None:
            fail(where, f"{name} is required for a {window.type} window")
        if name not in needed and value is not None:
            users = tuple(t for t, names in EXTENT_FIELDS.items() if name in names)
            fail(where, f"{name} is only for {_listing(users)} windows, not {window.type}")
        if name == "key":
            _field_name(where, "key", value, optional=True)
        elif value is not None and not (_is_number(value) and value > 0):
            fail(where, f"{name} must be a number > 0, got {value!r}")
    if window.type == "sliding" and window.slide > window.range:  # type: ignore[operator]
        fail(where, f"slide {window.slide!r} is more than range {window.range!r}")


def _check_window_ttl(task: Task, window: Window, where: str) -> None:
    """A time to live is kept per key, in the keyed state of a task that groups. It counts
    processing time: at the end of the input event time jumps to infinity, and every key
    would expire before the windows that close there fire."""
    if window.ttl is not None:
        if not (_is_number(window.ttl) and window.ttl > 0):
            fail(where, f"ttl must be a number of seconds > 0, got {window.ttl!r}")
        if not task.keyed:
            fail(where, f"ttl is for the windows of a task that groups (group_by_key or "
                        f"group_by_fn), and task {task.name!r} does not")  # fmt: skip


def _field_name(where: str, name: str, value: object, optional: bool = False) -> None:
    if (value is None and optional) or (isinstance(value, str) and value):
        return
    fail(where, f"{name} must be a field name (a non-empty string), got {value!r}")


def _check_aggregation(window: Window, where: str) -> None:
    """A built-in name, or the shape of a dotted path (whether it imports is for imports=True)."""
    name = window.aggregation
    if not isinstance(name, str) or not (name in AGGREGATIONS or _is_path(name)):
        fail(
            where,
            f"aggregation {name!r} is neither one of {', '.join(map(repr, AGGREGATIONS))} "
            "nor a dotted path to a user aggregation",
        )
    if name in FIELD_AGGREGATIONS and window.field is None:
        fail(where, f"field is required for a {name} aggregation")
    if name in AGGREGATIONS and name not in FIELD_AGGREGATIONS and window.field is not None:
        users = _listing((*FIELD_AGGREGATIONS, "user"))
        fail(where, f"field is only for {users} aggregations, not {name}")
    _field_name(where, "field", window.field, optional=True)
    if name == "top":
        _count(where, "top", window.top)
    elif window.top is not None:
        fail(where, f"top is only for the top aggregation, not {name}")


def _is_path(path: str) -> bool:
    try:
        split(path)
    except ImportPathError:
        return False
    return True


def _check_trigger(job: Job, trigger: Trigger, index: int, outer: str) -> None:
    where = f"{outer}: {trigger_label(index, trigger.window)}"
    if trigger.window not in tuple(w.id for w in job.windows):
        fail(where, f"window {trigger.window!r} is not in the windows")
    _one_of(where, "on", trigger.on, TRIGGER_ONS)
    for name, on in TRIGGER_FIELDS.items():
        value = getattr(trigger, name)
        if on == trigger.on and value is None:
            fail(where, f"{name} is required for a trigger on {on!r}")
        if on != trigger.on and value is not None:
            fail(where, f"{name} is only for triggers on {on!r}, not {trigger.on!r}")
    _count(where, "threshold", trigger.threshold, optional=True)
    if trigger.period is not None and not (_is_number(trigger.period) and trigger.period > 0):
        fail(where, f"period must be a number of seconds > 0, got {trigger.period!r}")
    _one_of(where, "refinement", trigger.refinement, REFINEMENTS)
    for name in ("predicate", "emit", "sync"):
        _check_path(where, name, getattr(trigger, name))
