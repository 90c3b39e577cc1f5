"""A job from what people write: a mapping, YAML or JSON text, or a file holding either.

Loading only reshapes the document into ``peer.job.spec`` values and refuses what cannot be
reshaped (a key nobody reads, a part missing its name) or is too deep to build (free-form
values nesting past ``peer.job.limits``, measured before anything recursive touches them);
everything else is ``validate``'s, so a job loaded from a file and the same job built in Python
are held to the same checks and end up equal.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import runpy
from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import yaml

from peer.job.limits import MAX_VALUE_DEPTH, check_document
from peer.job.spec import FlowCondition, Job, JobError, Join, Lifecycle, Task, Trigger, Window
from peer.job.validate import (
    check_n_peers,
    fail,
    job_label,
    join_label,
    lifecycle_label,
    trigger_label,
    validate,
    window_label,
)
from peer.job.values import is_int

JOB_KEYS = frozenset(f.name for f in fields(Job))
TASK_KEYS = frozenset(f.name for f in fields(Task))
LIFECYCLE_KEYS = frozenset(f.name for f in fields(Lifecycle))
FLOW_KEYS = frozenset({"from", "to", "predicate", "short_circuit"})
WINDOW_KEYS = frozenset(f.name for f in fields(Window))
TRIGGER_KEYS = frozenset(f.name for f in fields(Trigger))
JOIN_KEYS = frozenset(f.name for f in fields(Join))
BOOL = "tag:yaml.org,2002:bool"


class YamlLoader(yaml.SafeLoader):
    """YAML 1.2 booleans: ``true`` and ``false`` only. YAML 1.1, PyYAML's default, also reads
    ``on``, ``off``, ``yes`` and ``no`` as booleans, which would turn a trigger's ``on`` key
    into True."""

    yaml_implicit_resolvers = {
        first: [(tag, pattern) for tag, pattern in resolvers if tag != BOOL]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }


YamlLoader.add_implicit_resolver(
    BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), "tTfF"
)


def load(source: Mapping[str, Any] | os.PathLike[str]) -> Job:
    """A validated job from a mapping or a file path. Text goes to ``from_yaml`` or
    ``from_json``: a bare string could be either text or a path, so it is refused."""
    if isinstance(source, Mapping):
        return from_dict(source)
    if isinstance(source, os.PathLike):
        return from_file(source)
    raise JobError(f"job: load takes a mapping or a path, got {type(source).__name__}")


def from_yaml(text: str) -> Job:
    try:
        doc = yaml.load(text, Loader=YamlLoader)
    except yaml.YAMLError as e:
        fail("job", f"YAML does not parse: {e}")
    except RecursionError:
        _too_deep("YAML")
    return from_dict(doc)


def from_json(text: str) -> Job:
    try:
        doc = json.loads(text)
    except ValueError as e:
        fail("job", f"JSON does not parse: {e}")
    except RecursionError:
        _too_deep("JSON")
    return from_dict(doc)


def _too_deep(what: str) -> NoReturn:
    fail(
        "job",
        f"{what} nests too deeply to read (params and metadata may nest {MAX_VALUE_DEPTH} levels)",
    )


def from_file(path: str | os.PathLike[str]) -> Job:
    """By suffix: ``.yaml`` and ``.yml`` are YAML, ``.json`` is JSON, ``.py`` Python that
    defines ``job`` (peer.job.flow)."""
    path = Path(path)
    if path.suffix.lower() == ".py":
        return from_python(path)
    parse = {".yaml": from_yaml, ".yml": from_yaml, ".json": from_json}.get(path.suffix.lower())
    if parse is None:
        fail("job", f"file {str(path)!r} is neither .yaml, .yml, .json nor .py")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        fail("job", f"cannot read {str(path)!r}: {e}")
    return parse(text)


def from_python(path: Path) -> Job:
    """The ``job`` a Python file defines at module level (a ``Flow`` or a ``Job``), checked as
    any job is. A file under the directory the command runs in is imported as the module its
    path names there (``examples/nexmark/q1.py``: ``examples.nexmark.q1``), so that the
    functions it defines are named by a path the job's peers import too; another is run."""
    if not path.is_file():
        fail("job", f"cannot read {str(path)!r}: no such file")
    try:
        defined: Any = vars(_module_of(path)).get("job")
    except JobError:
        raise
    except Exception as e:  # the file's own code failed: say so, not where
        fail("job", f"{str(path)!r} failed: {type(e).__name__}: {e}")
    build = getattr(defined, "job", None)
    if callable(build):
        defined = build()
    if not isinstance(defined, Job):
        fail("job", f"{str(path)!r} defines no job (a Flow or a Job named 'job' at module "
                    f"level), got {type(defined).__name__}")  # fmt: skip
    return validate(defined)


def _module_of(path: Path) -> ModuleType:
    """The module of ``path``: imported by its dotted path under the current directory, else
    run from the file."""
    try:
        relative = path.resolve().relative_to(Path.cwd())
    except ValueError:
        relative = None
    if relative is None or not all(part.isidentifier() for part in relative.with_suffix("").parts):
        module = ModuleType(path.stem)
        vars(module).update(runpy.run_path(str(path), run_name=path.stem))
        return module
    return importlib.import_module(".".join(relative.with_suffix("").parts))


def from_dict(doc: Any, *, imports: bool = True) -> Job:
    """A validated job from plain data with the keys ``Job.to_dict`` writes; ``imports`` as
    for ``validate``."""
    if not isinstance(doc, Mapping):
        fail("job", f"must be a mapping of keys to values, got {type(doc).__name__}")
    where = job_label(doc.get("id"))
    check_document(where, doc)
    _check_keys(where, doc, JOB_KEYS, required=("workflow", "catalog"))
    parts = {
        "catalog": _parts(where, doc, "catalog", _task),
        "lifecycles": _parts(where, doc, "lifecycles", _lifecycle),
        "flow_conditions": _parts(where, doc, "flow_conditions", _flow_condition),
        "windows": _parts(where, doc, "windows", _window),
        "triggers": _parts(where, doc, "triggers", _trigger),
        "joins": _parts(where, doc, "joins", _join),
    }
    return validate(Job(**{**doc, **parts}), imports=imports)


def _check_keys(
    where: str, doc: Mapping[str, Any], allowed: frozenset[str], required: tuple[str, ...]
) -> None:
    for key in doc:
        if key not in allowed:
            fail(where, f"unknown key {key!r} (allowed: {', '.join(sorted(allowed))})")
    for key in required:
        if key not in doc:
            fail(where, f"missing key {key!r}")


def _parts(
    where: str, doc: Mapping[str, Any], key: str, build: Callable[[str, int, Any], Any]
) -> tuple[Any, ...]:
    raw = doc.get(key, [])
    if not isinstance(raw, list | tuple):
        fail(where, f"{key} must be a list, got {raw!r}")
    return tuple(build(where, index, item) for index, item in enumerate(raw))


def _mapping(where: str, what: str, raw: Any) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        fail(where, f"{what} must be a mapping, got {raw!r}")
    return raw


def _task(outer: str, index: int, raw: Any) -> Task:
    raw = _mapping(outer, f"catalog entry {index}", raw)
    name = raw.get("name")
    where = (
        f"{outer}: task {name!r}" if isinstance(name, str) else f"{outer}: catalog entry {index}"
    )
    _check_keys(where, raw, TASK_KEYS, required=("name", "kind"))
    n_peers = raw.get("n_peers")
    if is_int(n_peers):
        check_n_peers(where, n_peers, raw.get("min_peers"), raw.get("max_peers"))
    chained = raw.get("chained")
    if isinstance(chained, list | tuple):
        raw = {**raw, "chained": tuple(_task(where, i, member) for i, member in enumerate(chained))}
    return Task(**raw)


def _lifecycle(outer: str, index: int, raw: Any) -> Lifecycle:
    raw = _mapping(outer, f"lifecycle {index}", raw)
    label = lifecycle_label(raw["task"]) if "task" in raw else f"lifecycle {index}"
    where = f"{outer}: {label}"
    _check_keys(where, raw, LIFECYCLE_KEYS, required=("task",))
    return Lifecycle(**raw)


def _flow_condition(outer: str, index: int, raw: Any) -> FlowCondition:
    raw = _mapping(outer, f"flow condition {index}", raw)
    where = (
        f"{outer}: flow condition from {raw['from']!r}"
        if "from" in raw
        else f"{outer}: flow condition {index}"
    )
    _check_keys(where, raw, FLOW_KEYS, required=("from", "to", "predicate"))
    fields_ = {("from_task" if key == "from" else key): value for key, value in raw.items()}
    return FlowCondition(**fields_)


def _window(outer: str, index: int, raw: Any) -> Window:
    raw = _mapping(outer, f"window {index}", raw)
    where = f"{outer}: {window_label(raw.get('id'), index)}"
    _check_keys(where, raw, WINDOW_KEYS, required=("id", "task", "type", "aggregation"))
    return Window(**raw)


def _join(outer: str, index: int, raw: Any) -> Join:
    raw = _mapping(outer, f"join {index}", raw)
    where = f"{outer}: {join_label(raw.get('id'), index)}"
    required = ("id", "task", "type", "left", "right", "left_key", "right_key")
    _check_keys(where, raw, JOIN_KEYS, required=required)
    return Join(**raw)


def _trigger(outer: str, index: int, raw: Any) -> Trigger:
    raw = _mapping(outer, f"trigger {index}", raw)
    where = f"{outer}: {trigger_label(index, raw.get('window'))}"
    _check_keys(where, raw, TRIGGER_KEYS, required=("window", "on"))
    return Trigger(**raw)


__all__ = ["JobError", "YamlLoader", "from_dict", "from_file", "from_json", "from_yaml", "load"]
