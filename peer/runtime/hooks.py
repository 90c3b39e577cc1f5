"""A task's lifecycle hooks (the job's ``lifecycles``), resolved once when the task loads.

Each hook is called with an event naming the job, the task and the peer, and for the batch
hooks the batch; a hook that raises fails the task like its fn would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from peer.job.imports import resolve
from peer.job.spec import ALL, Job
from peer.values.columnar import rows

Hook = Callable[[dict[str, Any]], Any]


@dataclass(frozen=True, slots=True)
class Hooks:
    before_task: tuple[Hook, ...] = ()
    after_task: tuple[Hook, ...] = ()
    before_batch: tuple[Hook, ...] = ()
    after_batch: tuple[Hook, ...] = ()


def hooks_for(job: Job, task: str) -> Hooks:
    """The hooks of every lifecycle naming ``task`` or all tasks, in the job's order."""
    lifecycles = [lc for lc in job.lifecycles if lc.task in (ALL, task)]
    return Hooks(
        before_task=tuple(resolve(lc.before_task) for lc in lifecycles if lc.before_task),
        after_task=tuple(resolve(lc.after_task) for lc in lifecycles if lc.after_task),
        before_batch=tuple(resolve(lc.before_batch) for lc in lifecycles if lc.before_batch),
        after_batch=tuple(resolve(lc.after_batch) for lc in lifecycles if lc.after_batch),
    )


def call(hooks: tuple[Hook, ...], event: dict[str, Any], batch: Any = None) -> None:
    """The hooks in order, with one fresh copy of ``event`` (and the batch, when there is one)
    between them."""
    fresh = dict(event)
    if batch is not None:
        fresh["batch"] = rows(batch)
    for hook in hooks:
        hook(fresh)
