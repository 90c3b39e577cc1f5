"""How deep and how large a job may be: it travels whole in one log entry, and every replica
must be able to apply that entry.

A job's free-form values (a task's ``params``, the job's ``metadata``) are the parts a user can
make arbitrarily deep or large, so they are measured here, without recursion, before anything
recursive (freezing, encoding) touches them; the whole job is then measured encoded, as the log
will carry it. Each refusal names the job, the field, its size and the limit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from pyrsistent import thaw

from peer.job.spec import Job, JobError
from peer.values.limits import MAX_ENTRY_BYTES

MAX_VALUE_DEPTH = 32
"""How deeply ``params`` or ``metadata`` may nest. A job puts three levels above a task's
params (job, catalog, task) and a submit-job entry two above the job, so a job within this
limit always makes an entry well within ``peer.values.limits.MAX_ENTRY_DEPTH``."""

MAX_JOB_DEPTH = MAX_VALUE_DEPTH + 3
"""How deeply a whole job document may nest: a task's params sit three levels down (the job, its
catalog, the task), and nothing else in a job needs to nest deeper."""

_SCALARS = (str, bytes, bytearray)


def deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` levels of mappings and lists; a flat walk that
    stops as soon as it knows, so neither depth nor a value that contains itself can stop it."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, Mapping):
            children = list(item.values())
        elif isinstance(item, Sequence) and not isinstance(item, _SCALARS):
            children = list(item)
        else:
            continue
        if level > limit:
            return True
        stack.extend((child, level + 1) for child in children)
    return False


def check_depth(where: str, name: str, value: Any) -> None:
    if deeper_than(value, MAX_VALUE_DEPTH):
        _fail(where, f"{name} nests deeper than the limit of {MAX_VALUE_DEPTH} levels")


def check_document(where: str, doc: Mapping[str, Any]) -> None:
    """A raw job document, before anything else reads it: its free-form values within their
    limit, and nothing else in it deeper than they may be, so no later step (building the job,
    quoting a wrong value in a message) meets a depth it cannot handle."""
    catalog = doc.get("catalog")
    for index, task in enumerate(catalog if isinstance(catalog, list | tuple) else ()):
        if isinstance(task, Mapping):
            name = task.get("name")
            label = f"task {name!r}" if isinstance(name, str) else f"catalog entry {index}"
            check_depth(f"{where}: {label}", "params", task.get("params"))
    check_depth(where, "metadata", doc.get("metadata"))
    for key, value in doc.items():
        if deeper_than(value, MAX_JOB_DEPTH - 1):
            _fail(where, f"{key} nests deeper than a job may ({MAX_JOB_DEPTH} levels in all)")


def check_size(job: Job, where: str) -> None:
    """Every free-form value must encode as JSON, and the whole job must fit one log entry; a
    job too large is refused naming its largest value when that is most of it."""
    parts = [(f"{where}: task {t.name!r}", "params", t.params) for t in job.catalog]
    parts.append((where, "metadata", job.metadata))
    sizes = [(_encoded_size(at, name, value), at, name) for at, name, value in parts]
    total = len(job.canonical())
    if total <= MAX_ENTRY_BYTES:
        return
    over = f"{total - MAX_ENTRY_BYTES:,} bytes over the limit of {MAX_ENTRY_BYTES:,} of a log entry"
    size, at, name = max(sizes)
    if 2 * size > total:
        _fail(at, f"{name} is {size:,} bytes encoded, making the job {total:,} bytes, {over}")
    _fail(where, f"is {total:,} bytes encoded, {over}")


def _encoded_size(where: str, name: str, value: Any) -> int:
    try:
        return len(json.dumps(thaw(value), sort_keys=True).encode())
    except (TypeError, ValueError) as e:
        _fail(where, f"{name} must hold JSON values only: {e}")


def _fail(where: str, message: str) -> NoReturn:
    raise JobError(f"{where}: {message}")
