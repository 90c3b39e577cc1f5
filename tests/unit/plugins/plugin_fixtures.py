"""Shared by the plugin tests: a task and a recovery builder, a strategy for JSON values, factories
that misbehave in each way load() must catch, and a child process that appends to a shared
JSON-lines file."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from peer.job.spec import Task
from peer.plugins import PluginError, Recovery, jsonl
from peer.values.epoch import Epoch

EPOCH = Epoch(1, 1)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)


def task(plugin: str, kind: str = "input", name: str = "t", **params: Any) -> Task:
    return Task(name, kind, plugin=plugin, params=params)


def recovery(
    checkpoint: Any | None = None, committed: Epoch | None = None, version: int = 1
) -> Recovery:
    """A start of allocation ``version`` from ``checkpoint``, ``committed`` being the last
    committed epoch."""
    return Recovery(checkpoint, committed, Epoch(version, 1))


def drain(plugin: Any, limit: int = 100) -> list[Any]:
    """Everything a bounded input gives until it is completed."""
    segments: list[Any] = []
    while not plugin.completed():
        segments += plugin.poll(limit)
    return segments


def raising(task: Task, slot: int, slots: int) -> None:
    raise RuntimeError("disk on fire")


def bare_plugin_error(task: Task, slot: int, slots: int) -> None:
    raise PluginError("params.x is wrong")


class PollOnly:
    def poll(self, limit: int) -> list[Any]:
        return []

    recover = 42


def poll_only(task: Task, slot: int, slots: int) -> PollOnly:
    return PollOnly()


not_callable = 42


def append_lines(path: str, writer: int, batches: int, size: int) -> None:
    """``batches`` batches of ``size`` lines, each line long enough that a torn batch shows."""
    output = jsonl.output(task("peer.plugins.jsonl:output", "output", path=path), writer, 8)
    output.recover(recovery())
    for batch in range(batches):
        output.prepare([{"w": writer, "b": batch, "i": i, "pad": "x" * 200} for i in range(size)])
        while not output.write():
            pass
    output.close()
