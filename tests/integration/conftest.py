"""Fixtures the integration tests share: a plugin started as a peer starts it, and a path of
the object store's bucket of a test's own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from peer.job.spec import Task
from peer.plugins import Recovery, load
from peer.values.epoch import Epoch
from tests.support import ObjectStore


@pytest.fixture
def start(spark) -> Iterator[Any]:
    """Start a plugin as a task's start on a peer does: load, then recover; all closed at the
    end."""
    started: list[Any] = []

    def start_plugin(task: Task, slot: int = 0, slots: int = 1, checkpoint: Any = None) -> Any:
        plugin = load(task, slot, slots)
        started.append(plugin)
        committed = None if checkpoint is None else Epoch(1, 3)
        plugin.recover(Recovery(checkpoint, committed, Epoch(2 if committed else 1, 1)))
        return plugin

    yield start_plugin
    for plugin in started:
        plugin.close()


@pytest.fixture
def prefix(object_store: ObjectStore) -> str:
    """A path of the bucket of this test's own."""
    return f"{ObjectStore.BUCKET}/{uuid.uuid4().hex}"
