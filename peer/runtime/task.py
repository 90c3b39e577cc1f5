"""One virtual peer's work on one task, as a state machine that never waits.

A peer group drives all its virtual peers from one thread, so each ``step`` does at most one
batch of work and returns whether it did any: start (load the plugin, rewind the input, call
``before_task``), then process batches (read, apply the task's fn, write or route) until the
input side is finished, then tell every downstream peer so with an end-of-input marker. An
output peer that has received the marker from every upstream peer, and whose plugin reports
its writes synced, reports the job done for its allocation; the log completes the job once
every output peer has.

Until checkpoints exist, every start rewinds inputs to the beginning: after a reallocation the
job runs again from the start, so nothing is lost (and output may repeat).

A task's ``fn`` takes one segment and returns a segment, a list of them, or None. When the path
names a class, each start makes a fresh instance, whose state lives as long as the allocation;
if it has a ``flush()`` method, that is called once the task's input is finished, and what it
returns goes downstream before the end-of-input marker (a word count emits its totals so).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from peer.job.imports import resolve
from peer.job.spec import ALL, HOOKS, Job, Task
from peer.plugins import load
from peer.runtime.routing import Router

log = logging.getLogger(__name__)

Segment = Any


class TaskFailed(RuntimeError):
    """The task's code raised: the job cannot go on. The message names job, task and peer."""


@dataclass
class TaskContext:
    """What a runner needs from its group: where it stands and how to reach the world."""

    job: Job
    task: Task
    peer: str
    version: int
    slot: int
    slots: int
    upstream: frozenset[int]
    """Short ids of every peer that sends to this one, each owing one end-of-input marker."""
    router: Router
    send: Callable[[str, list[Segment]], None]
    send_done: Callable[[str], None]
    congested: Callable[[], bool]
    complete: Callable[[], None]


def _hooks(job: Job, task: str, name: str) -> list[Callable[[dict[str, Any]], Any]]:
    return [
        resolve(getattr(lc, name))
        for lc in job.lifecycles
        if lc.task in (ALL, task) and getattr(lc, name)
    ]


def _function(path: str | None) -> Callable[[Segment], Any] | None:
    if path is None:
        return None
    target = resolve(path)
    return target() if isinstance(target, type) else target


def _collect(results: Iterable[Any]) -> list[Segment]:
    """What fns returned, flattened: a segment, a list of segments, or None for none."""
    out: list[Segment] = []
    append, extend = out.append, out.extend
    for result in results:
        if isinstance(result, list):
            extend(result)
        elif result is not None:
            append(result)
    return out


@dataclass
class TaskRunner:
    ctx: TaskContext
    state: str = "start"
    inbox: deque[list[Segment]] = field(default_factory=deque)
    done_from: set[int] = field(default_factory=set)
    plugin: Any = None
    fn: Callable[[Segment], Any] | None = None
    staged: bool = False
    hooks: dict[str, list[Callable[[dict[str, Any]], Any]]] = field(default_factory=dict)

    # -- what the group hands in ----------------------------------------------------------------

    def deliver(self, segments: list[Segment]) -> None:
        self.inbox.append(segments)

    def deliver_done(self, source: int) -> None:
        self.done_from.add(source)

    # -- the state machine ----------------------------------------------------------------------

    def step(self) -> bool:
        try:
            return getattr(self, f"_{self.state}")()
        except Exception as e:
            c = self.ctx
            raise TaskFailed(
                f"job {c.job.id!r}: task {c.task.name!r} on peer {c.peer}: {type(e).__name__}: {e}"
            ) from e

    def _start(self) -> bool:
        c = self.ctx
        self.fn = _function(c.task.fn)
        self.hooks = {name: _hooks(c.job, c.task.name, name) for name in HOOKS}
        if c.task.kind != "function":
            self.plugin = load(c.task, c.slot, c.slots)
            self.plugin.recover(None)
        self._call_hooks("before_task")
        self.state = "run"
        return True

    def _run(self) -> bool:
        if self.staged:
            return self._write()
        if self.ctx.congested():
            return False
        batch = self._read()
        if batch:
            self._process(batch)
            return True
        if self._input_finished():
            self.state = "finish"
            return True
        return False

    def _finish(self) -> bool:
        c = self.ctx
        if c.task.kind == "output":
            if not self.plugin.synced():
                return False
            c.complete()
        else:
            flush = getattr(self.fn, "flush", None)
            if flush is not None:
                self._route(_collect([flush()]))
            for peer in c.router.peers():
                c.send_done(peer)
        self._call_hooks("after_task")
        self.state = "finished"
        return True

    def _finished(self) -> bool:
        return False

    # -- batches --------------------------------------------------------------------------------

    def _read(self) -> list[Segment]:
        if self.ctx.task.kind == "input":
            return self.plugin.poll(self.ctx.task.batch_size)
        batch: list[Segment] = []
        while self.inbox and len(batch) < self.ctx.task.batch_size:
            batch.extend(self.inbox.popleft())
        return batch

    def _input_finished(self) -> bool:
        if self.ctx.task.kind == "input":
            return self.plugin.completed() and self.plugin.synced()
        return not self.inbox and self.done_from >= self.ctx.upstream

    def _process(self, batch: list[Segment]) -> None:
        self._call_hooks("before_batch", batch)
        out = self._apply(batch)
        if self.ctx.task.kind == "output":
            self.plugin.prepare(out)
            self.staged = True
            self._write()
        else:
            self._route(out)
        self._call_hooks("after_batch", out)

    def _route(self, segments: list[Segment]) -> None:
        if segments:
            for peer, batch in self.ctx.router.split(segments).items():
                self.ctx.send(peer, batch)

    def _apply(self, batch: list[Segment]) -> list[Segment]:
        return batch if self.fn is None else _collect(map(self.fn, batch))

    def _write(self) -> bool:
        if self.plugin.write():
            self.staged = False
            return True
        return False

    def _call_hooks(self, name: str, batch: list[Segment] | None = None) -> None:
        hooks = self.hooks.get(name)
        if hooks:
            event = {"job": self.ctx.job.id, "task": self.ctx.task.name, "peer": self.ctx.peer}
            if batch is not None:
                event["batch"] = batch
            for hook in hooks:
                hook(event)

    def close(self) -> None:
        if self.plugin is not None:
            try:
                self.plugin.close()
            except Exception as e:
                log.warning("task %r: closing its plugin raised %s", self.ctx.task.name, e)
            self.plugin = None
