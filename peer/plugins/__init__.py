"""Plugins: how an input task reads segments in and an output task writes them out.

A job names a plugin by dotted path to a factory, ``factory(task, slot, slots)``, called once per
virtual peer each time the task starts on it; ``slot`` is this peer's index among the ``slots``
peers running the task, so an input can split its data between peers without talking to them.
The factory returns an ``Input`` or an ``Output``. An input's factory that also takes ``splits``
as a keyword splits its share (peer.plugins.splits), so that it may run on a number of peers
that changes across its job's checkpoints. One thread drives many virtual peers, so no
method may wait: a plugin with nothing to give returns ``[]`` from ``poll``, and one that cannot
write yet returns False from ``write``, and is asked again.

Recovery follows the job's epochs (Asynchronous Barrier Snapshotting). Within an allocation the
coordinator numbers epochs from 1; at the barrier that ends an epoch every plugin is asked for a
``checkpoint(epoch)``, and once every peer of the job has stored its snapshot the epoch is
committed and each plugin hears ``committed(epoch)``: the moment an input may acknowledge its
source for good and a two-phase-commit output may publish what it staged. A plugin whose epoch
becomes durable in the background (an exactly-once sink sealing its files, peer.plugins.staged)
returns a ``Sealing`` from ``checkpoint``: the peer acknowledges the epoch only once both its
snapshot is stored and the sealing is done, so the coordinator never commits an epoch a crash
could still lose. After a failure each
task starts again from the last committed epoch and its plugin gets a ``Recovery``: an input
rewinds to its position, an output finishes or discards what the failure interrupted.

Checkpoints are positions as plain JSON data, so they can travel in the log and come back to
``recover`` on another machine. Every error is a PluginError made by ``error(task, ...)``: its
message starts with the task's name and plugin path, so the reader knows what failed where.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypeVar

from peer.job.imports import ImportPathError, resolve, takes_splits
from peer.job.spec import DEFAULT_MAX_PARALLELISM, Task
from peer.job.values import is_int
from peer.plugins.splits import Splits
from peer.storage import StorageError
from peer.values.columnar import Batch
from peer.values.epoch import Epoch
from peer.values.json_text import json_text

F = TypeVar("F", bound=Callable[..., Any])


class PluginError(ValueError):
    """A plugin that cannot be loaded, or cannot go on; the message names the task and plugin."""


@dataclass(frozen=True)
class Recovery:
    """Where a plugin starts: what ``recover`` gets each time its task starts on a peer."""

    checkpoint: Any | None
    """This slot's ``checkpoint`` at the committed epoch; None: start from the beginning. For an
    input that splits its share (peer.plugins.splits), the positions of the splits it owns,
    from the old slots that held them when the task ran on another number of peers."""
    committed: Epoch | None
    """The last epoch committed for the job; None when there is none."""
    start: Epoch
    """The epoch this start's first writes belong to: epoch 1 of the current allocation."""
    adopted: tuple[Any, ...] = ()
    """The checkpoints at the committed epoch of the old slots that no slot of this start has,
    when the task runs on fewer slots than before: slot s of n adopts old slots s + n, s + 2n...
    An output finishes what they began there (publishing the epochs they staged); the rest may
    ignore them."""


@dataclass(frozen=True)
class Sealing:
    """What ``checkpoint`` returns when its epoch becomes durable in the background."""

    position: Any
    """The JSON-ready position, as a plain ``checkpoint`` returns it."""
    durable: Future[None]
    """Done once the epoch's output survives a crash; failed if it never will."""


def position(checkpoint: Any) -> tuple[Any, Future[None] | None]:
    """A ``checkpoint``'s position, and the future its epoch is durable by (None: it is now)."""
    if isinstance(checkpoint, Sealing):
        return checkpoint.position, checkpoint.durable
    return checkpoint, None


def joined(first: Future[Any], second: Future[Any] | None) -> Future[Any]:
    """A future done once both are: with ``first``'s result, or the first failure of either."""
    if second is None:
        return first
    both: Future[Any] = Future()
    lock = threading.Lock()

    def done(_: Future[Any]) -> None:
        with lock:
            if both.done():
                return
            failed = next((f for f in (first, second) if f.done() and _failed(f)), None)
            if failed is not None:
                both.set_exception(CancelledError() if failed.cancelled() else failed.exception())
            elif first.done() and second.done():
                both.set_result(first.result())

    first.add_done_callback(done)
    second.add_done_callback(done)
    return both


def _failed(future: Future[Any]) -> bool:
    return future.cancelled() or future.exception() is not None


class Input(Protocol):
    def recover(self, recovery: Recovery) -> None:
        """Start from the beginning (no checkpoint) or resume at a position ``checkpoint``
        returned."""

    def poll(self, limit: int) -> list[Any]:
        """Up to ``limit`` segments ready now; ``[]`` does not mean the input is finished."""

    def checkpoint(self, epoch: Epoch) -> Any:
        """A JSON-ready position at the barrier that ends ``epoch``: every segment polled so far
        is before it."""

    def completed(self) -> bool:
        """True once a bounded input is drained: ``poll`` will only return ``[]``."""

    def synced(self) -> bool:
        """Whether the source has been told all it must be (acknowledgements, offsets) for
        everything polled so far; may start that work and answer False until it is done. A task
        ends, and later a checkpoint commits, only once its input is synced."""

    def committed(self, epoch: Epoch) -> None:
        """``epoch``, and so every earlier one, is committed cluster-wide: its segments will
        never be asked for again (a Kafka-like source commits its offsets here)."""

    def close(self) -> None: ...


class Output(Protocol):
    def recover(self, recovery: Recovery) -> None:
        """Resume at ``recovery.checkpoint`` and settle what a failure left half done."""

    def prepare(self, segments: Batch) -> None:
        """Stage a batch (rows, or an Arrow record batch) for ``write``."""

    def write(self) -> bool:
        """Try to write what is staged; False means not yet, call again."""

    def synced(self) -> bool:
        """Whether everything written is durable; may flush to make it so."""

    def checkpoint(self, epoch: Epoch) -> Any:
        """A JSON-ready position at the barrier that ends ``epoch``: every segment written so
        far belongs to it or to an earlier epoch. Or a ``Sealing`` of that position, for an
        output that makes the epoch durable in the background; it must not wait."""

    def committed(self, epoch: Epoch) -> None:
        """``epoch``, and so every earlier one, is committed cluster-wide: a two-phase-commit
        output publishes what it staged for them."""

    def close(self) -> None: ...


PROTOCOLS: dict[str, type] = {"input": Input, "output": Output}


class NoPlugin:
    """What a function task has in a plugin's place: nothing to recover, checkpoint, commit or
    close, and nothing it could be behind on, so its runner calls the same methods whatever
    its task's kind."""

    def recover(self, recovery: Recovery) -> None:
        """Nothing to resume."""

    def checkpoint(self, epoch: Epoch) -> None:
        return None

    def synced(self) -> bool:
        return True

    def committed(self, epoch: Epoch) -> None:
        """Nothing to publish."""

    def close(self) -> None:
        """Nothing to release."""


NO_PLUGIN = NoPlugin()


def where(task: Task) -> str:
    """The start of every plugin error message: which task, which plugin."""
    return f"task {task.name!r}, plugin {task.plugin!r}"


def error(task: Task, message: str) -> PluginError:
    """A PluginError for ``task`` that starts with ``where(task)``."""
    return PluginError(f"{where(task)}: {message}")


def param(task: Task, name: str, what: str, ok: Callable[[Any], bool]) -> Any:
    """``task.params[name]``, or PluginError saying it is missing or not ``what``."""
    if name not in task.params:
        raise error(task, f"params.{name} is required ({what})")
    value = task.params[name]
    if not ok(value):
        raise error(task, f"params.{name} must be {what}, got {value!r}")
    return value


def checks_params(check: Callable[[Any], None]) -> Callable[[F], F]:
    """Mark a plugin factory whose params ``check`` checks (raising ValueError, its message
    naming the param): the job is refused at submit when they are wrong, instead of the task
    failing when it starts."""

    def marked(factory: F) -> F:
        factory.check_params = check  # type: ignore[attr-defined]
        return factory

    return marked


def natural(value: object) -> bool:
    """An int >= 0 and not a bool: a count, an index or an offset."""
    return is_int(value) and value >= 0  # type: ignore[operator]


def load(task: Task, slot: int, slots: int, max_parallelism: int | None = None) -> Input | Output:
    """The plugin for slot ``slot`` of ``slots`` peers running ``task``, checked against the
    protocol for the task's kind. A factory that takes ``splits`` (peer.plugins.splits) gets the
    splits this slot owns, of the task's ``max_parallelism`` (None: the task's own, else the
    default)."""
    protocol = PROTOCOLS.get(task.kind)
    if protocol is None:
        raise error(task, f"a {task.kind!r} task has no plugin")
    if not 0 <= slot < slots:
        raise error(task, f"slot {slot} is not in 0..{slots - 1}")
    factory = _factory(task)
    if takes_splits(factory):
        total = max_parallelism or task.max_parallelism or DEFAULT_MAX_PARALLELISM
        factory = partial(factory, splits=Splits.of(slot, slots, total))
    plugin = _call(factory, task, slot, slots)
    missing = [name for name in _methods(protocol) if not callable(getattr(plugin, name, None))]
    if missing:
        raise error(
            task,
            f"the factory returned {type(plugin).__name__}, not an "
            f"{protocol.__name__}: it lacks {', '.join(missing)}",
        )
    return plugin


def splits_share(task: Task) -> bool:
    """Whether ``task`` is an input whose plugin splits its share (peer.plugins.splits)."""
    return task.kind == "input" and takes_splits(_factory(task))


def _factory(task: Task) -> Callable[..., Any]:
    if not isinstance(task.plugin, str):
        raise error(task, "plugin must be a dotted path string")
    try:
        factory = resolve(task.plugin)
    except ImportPathError as e:
        raise error(task, f"does not import: {e}") from e
    if not callable(factory):
        raise error(task, "is not callable")
    return factory


def _call(factory: Callable[..., Any], task: Task, slot: int, slots: int) -> Any:
    """The factory's result; a PluginError that already says where passes through unchanged."""
    try:
        return factory(task, slot, slots)
    except PluginError as e:
        if str(e).startswith(where(task)):
            raise
        raise error(task, str(e)) from e
    except Exception as e:
        raise error(task, f"the factory raised {type(e).__name__}: {e}") from e


def _methods(protocol: type) -> list[str]:
    return [name for name, value in vars(protocol).items() if callable(value) and name[0] != "_"]


def out_of_reach(task: Task, recovery: Recovery, message: str) -> Exception:
    """What a plugin raises when its server is out of reach as it starts: before the job has
    committed an epoch, a PluginError, which kills the job naming the server (most likely the
    job names a wrong one); once it has, a StorageError, which rolls the job back to try again
    (the server is restarting, say), as a checkpoint store out of reach does."""
    if recovery.committed is None:
        return error(task, message)
    return StorageError(f"{where(task)}: {message}")


def segment_json(task: Task, segment: Any) -> bytes:
    """``segment`` as compact JSON (peer.values.json_text), or a PluginError naming it."""
    try:
        return json_text(segment).encode()
    except (TypeError, ValueError, RecursionError) as e:
        raise error(task, f"segment {segment!r:.200} is not JSON-serialisable: {e}") from None
