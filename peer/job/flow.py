"""A job written as Python code: the same ``Job`` value a YAML file loads into, built step by
step, for those who write pipelines as code.

    from peer.job.flow import Flow

    flow = Flow("word count", barrier_period=1.0)
    lines = flow.input("read", "peer.plugins.jsonl:input", path="lines.jsonl", max_peers=1)
    words = lines.map("split", split)                 # a function, or "module:name"
    counts = words.map("count", group_by_key="word")  # segments reach it by key
    counts.window("words", "global", aggregation="count").trigger("watermark", emit=total)
    counts.output("write", "peer.plugins.jsonl:output", path="out/counts.jsonl")
    job = flow.job()

Each step names its task and returns what the next steps read from. A function given as a
callable is named by its module and qualified name, so it must be importable where the job
runs: a module-level function or class, not a lambda or one defined in a script run as
``__main__``. A task's own settings (``n_peers``, ``batch_size``, ``group_by_key``, ...: the
keys a catalog entry takes, ``peer.job.spec.Task``) are keyword arguments of each step; the
other keyword arguments of ``input`` and ``output`` are their plugin's params, and a
function's params go in ``params={...}``. ``flow.job()`` checks the whole job as a file is
checked (``peer.job.validate``), and ``flow.to_yaml()`` writes the YAML the cluster stores.

A file of Python that defines ``job`` (a ``Flow`` or a ``Job``) at module level is a job file
like a YAML one: ``onyx run q1.py``, ``onyx job submit q1.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

import yaml

from peer.job.spec import FlowCondition, Job, JobError, Join, Task, Trigger, Window
from peer.job.validate import validate

TASK_SETTINGS = frozenset(f.name for f in fields(Task)) - {"name", "kind", "fn", "plugin",
                                                          "params"}  # fmt: skip
"""A task's own settings: every other keyword of ``input`` and ``output`` is a plugin param."""

Code = str | Callable[..., Any] | type

CODE_SETTINGS = ("group_by_fn", "assign_watermark_fn")
"""A task's settings that name code, which may be given as callables too."""


def dotted(code: Code, what: str) -> str:
    """``code`` as the dotted path a job names it by: a string as given, else the module and
    qualified name of a function or class that can be imported by them."""
    if isinstance(code, str):
        return code
    module, name = getattr(code, "__module__", None), getattr(code, "__qualname__", None)
    if not module or not name or "<" in name or module == "__main__":
        raise JobError(f"{what}: {code!r} cannot be named by an import path (a module-level "
                       "function or class of an importable module can; or give its path as "
                       "'module:name')")  # fmt: skip
    return f"{module}:{name}"


class Flow:
    """A job under construction: its tasks, the edges between them, windows and triggers;
    ``job_options`` are the job's own settings (``barrier_period``, ``local_recovery``, ...)."""

    def __init__(self, name: str | None = None, **job_options: Any) -> None:
        self.options = {"name": name, **job_options}
        self.tasks: dict[str, Task] = {}
        self.edges: list[tuple[str, str]] = []
        self.windows: list[Window] = []
        self.triggers: list[Trigger] = []
        self.joins: list[Join] = []
        self.conditions: list[FlowCondition] = []

    def input(self, name: str, plugin: Code, **settings: Any) -> Stream:
        """An input task reading through ``plugin``."""
        self._add(name, "input", plugin=dotted(plugin, f"task {name!r} plugin"), **settings)
        return Stream(self, name)

    def _add(self, name: str, kind: str, **settings: Any) -> None:
        if name in self.tasks:
            raise JobError(f"task {name!r} is defined twice in the flow")
        for setting in CODE_SETTINGS:
            if settings.get(setting) is not None:
                settings[setting] = dotted(settings[setting], f"task {name!r} {setting}")
        own = {k: v for k, v in settings.items() if k in TASK_SETTINGS or k in ("fn", "plugin")}
        params = {k: v for k, v in settings.items() if k not in own}
        if params and kind == "function":
            raise JobError(f"task {name!r} has no setting {sorted(params)[0]!r} (a function's "
                           "params go in params={...})")  # fmt: skip
        self.tasks[name] = Task(name, kind, params=own.pop("params", None) or params, **own)

    def job(self) -> Job:
        """The job, checked as a loaded file is."""
        return validate(Job(tuple(self.edges), tuple(self.tasks.values()),
                            windows=tuple(self.windows), triggers=tuple(self.triggers),
                            joins=tuple(self.joins), flow_conditions=tuple(self.conditions),
                            **self.options))  # fmt: skip

    def to_yaml(self) -> str:
        """The job as the YAML a file holds and the cluster stores."""
        return yaml.safe_dump(self.job().to_dict(), sort_keys=False)


class Stream:
    """What task ``name`` of ``flow`` gives, for the tasks that read it."""

    def __init__(self, flow: Flow, name: str) -> None:
        self.flow, self.name = flow, name

    def map(self, name: str, fn: Code | None = None, *, when: Code | None = None,
            **settings: Any) -> Stream:  # fmt: skip
        """A function task applying ``fn`` to each segment (or batch, with ``engine``) it
        reads from here; with no ``fn`` it passes segments on (for windows). With ``when``, a
        predicate, only the segments it holds for reach the task (a flow condition: the rest
        are never sent to it)."""
        if fn is not None:
            settings["fn"] = dotted(fn, f"task {name!r} fn")
        self.flow._add(name, "function", **settings)
        if when is not None:
            self.flow.conditions.append(
                FlowCondition(self.name, (name,), dotted(when, f"task {name!r} when"))
            )
        return self._to(name)

    def output(self, name: str, plugin: Code, **settings: Any) -> None:
        """An output task writing what it reads from here through ``plugin``."""
        self.flow._add(name, "output", plugin=dotted(plugin, f"task {name!r} plugin"),
                       **settings)  # fmt: skip
        self._to(name)

    def window(self, id: str, type: str, **settings: Any) -> WindowStep:
        """A window over what this task receives (``peer.job.spec.Window``: ``key``,
        ``range``, ``slide``, ``gap``, ``aggregation`` (a built-in name or a dotted path),
        ``field``, ``top``, ``ttl``)."""
        aggregation = settings.pop("aggregation", "collect")
        self.flow.windows.append(_made(f"window {id!r}", Window, id, self.name, type,
                                       aggregation, **settings))  # fmt: skip
        return WindowStep(self.flow, id)

    def join(self, name: str, other: Stream, type: str, *, key: str | tuple[str, ...],
             other_key: str | tuple[str, ...] | None = None, time: str | None = None,
             other_time: str | None = None, emit: Code | None = None,
             **settings: Any) -> Stream:  # fmt: skip
        """A task ``name`` joining this stream's rows (the left side) with ``other``'s (the
        right) by ``key`` (``other_key`` on the right, if it differs), as
        ``peer.job.spec.Join`` describes: ``type`` "window" (``range``, ``slide``), "interval"
        (``lower``, ``upper`` or ``until``) or "regular" (``ttl``); ``time`` (and
        ``other_time``) name the event time fields; ``emit(pair)`` makes what a pair sends
        from its event (``{"join", "key", "left", "right"}``, and ``"start"`` and ``"end"`` in
        a window join). The join's id is its task's name; the task's own settings (``n_peers``, ...)
        are keyword arguments too."""
        own = {k: v for k, v in settings.items() if k in TASK_SETTINGS}
        bounds = {k: v for k, v in settings.items() if k not in own}
        self.flow._add(name, "function", **own)
        if emit is not None:
            bounds["emit"] = dotted(emit, f"join {name!r} emit")
        self.flow.joins.append(_made(
            f"join {name!r}", Join, name, name, type, self.name, other.name, key,
            key if other_key is None else other_key, left_time=time,
            right_time=time if other_time is None else other_time, **bounds))  # fmt: skip
        other._to(name)
        return self._to(name)

    def _to(self, name: str) -> Stream:
        self.flow.edges.append((self.name, name))
        return Stream(self.flow, name)


class WindowStep:
    """A window of a flow, for its triggers."""

    def __init__(self, flow: Flow, id: str) -> None:
        self.flow, self.id = flow, id

    def trigger(self, on: str, *, emit: Code | None = None, predicate: Code | None = None,
                sync: Code | None = None, **settings: Any) -> WindowStep:  # fmt: skip
        """When the window emits (``peer.job.spec.Trigger``); code as callables or paths."""
        named: dict[str, Any] = {key: dotted(code, f"window {self.id!r} trigger {key}")
                 for key, code in (("emit", emit), ("predicate", predicate), ("sync", sync))
                 if code is not None}  # fmt: skip
        self.flow.triggers.append(_made(f"window {self.id!r} trigger", Trigger, self.id, on,
                                        **named, **settings))  # fmt: skip
        return self


def _made(what: str, part: Callable[..., Any], *args: Any, **settings: Any) -> Any:
    """``part(*args, **settings)``; a JobError naming ``what`` for a setting it has not."""
    try:
        return part(*args, **settings)
    except TypeError as e:
        raise JobError(f"{what}: {e}") from None
