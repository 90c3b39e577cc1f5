"""Testing a job: run it in this process on segments the test gives, and get back what each of
its output tasks wrote.

``run_job`` swaps the input tasks named in ``inputs`` for in-memory inputs holding those
segments (other inputs keep their plugins), and every output task for a collecting memory output
(peer.plugins.memory), then runs the job on a local cluster sized for it, on the embedded log,
exactly as ``onyx run`` would: the same scheduling, routing, windows and checkpoints. A job that
is killed, or does not finish in time, raises JobFailed naming the job and why::

    from peer.testing import run_job

    def test_words_are_counted():
        outputs = run_job("examples/wordcount/job.yaml", inputs={"read": [{"line": "a b a"}]})
        assert outputs["write"] == [{"word": "a", "count": 2}, {"word": "b", "count": 1}]
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from peer import api
from peer.cluster.local import LocalCluster, peers_for
from peer.job.load import load
from peer.job.spec import Job, JobError, Task
from peer.job.validate import validate
from peer.plugins import memory

MEMORY_INPUT = "peer.plugins.memory:input"
MEMORY_OUTPUT = "peer.plugins.memory:output"

Outputs = dict[str, list[Any]]


class JobFailed(RuntimeError):
    """The job was killed or did not finish in time; the message names the job and the reason."""


def run_job(
    job: Job | Mapping[str, Any] | os.PathLike[str] | str,
    inputs: Mapping[str, Sequence[Any]] | None = None,
    *,
    timeout: float = 60.0,
) -> Outputs:
    """What each output task of ``job`` wrote, in order within each of its peers, given the
    segments ``inputs`` names for its input tasks. ``job`` is a Job, its mapping, or a file."""
    loaded = _load(job)
    job_id = loaded.id or f"test-{uuid.uuid4().hex[:8]}"
    label = f"job {job_id!r}" + (
        f" ({os.fspath(job)})" if isinstance(job, str | os.PathLike) else ""
    )
    collection = f"{job_id}-{uuid.uuid4().hex}"
    swapped = with_test_plugins(replace(loaded, id=job_id), inputs or {}, collection)
    try:
        with _kill_reasons(job_id) as reasons:
            final = _run(swapped, job_id, label, timeout)
        if final.state != "completed":
            reason = reasons[0] if reasons else "no reason was logged"
            raise JobFailed(f"{label} was killed: {reason}")
        found = memory.collected(collection)
    finally:
        memory.discard(collection)
    return {name: found.get(name, []) for name in swapped.output_tasks()}


def with_test_plugins(job: Job, inputs: Mapping[str, Sequence[Any]], collection: str) -> Job:
    """``job`` with the input tasks ``inputs`` names reading its segments, and every output task
    collecting into ``collection``."""
    unknown = sorted(set(inputs) - set(job.input_tasks()))
    if unknown:
        raise JobError(
            f"job {job.id!r}: inputs names {', '.join(map(repr, unknown))}, which the job has "
            f"no input task of (its input tasks: {', '.join(job.input_tasks()) or 'none'})"
        )
    for name in sorted(inputs):
        _check_json(job, name, inputs[name])
    return validate(replace(job, catalog=tuple(_swap(t, inputs, collection) for t in job.catalog)))


def _check_json(job: Job, task: str, segments: Sequence[Any]) -> None:
    """Given segments travel inside the job, which the log holds as JSON."""
    for index, segment in enumerate(segments):
        try:
            json.dumps(segment)
        except (TypeError, ValueError) as e:
            raise JobError(
                f"job {job.id!r}: inputs[{task!r}][{index}] is not JSON data ({e}); "
                "segments travel inside the job"
            ) from None


def _swap(task: Task, inputs: Mapping[str, Sequence[Any]], collection: str) -> Task:
    if task.name in inputs:
        return replace(task, plugin=MEMORY_INPUT, params={"segments": list(inputs[task.name])})
    if task.kind == "output":
        return replace(task, plugin=MEMORY_OUTPUT, params={"collection": collection})
    return task


def _load(job: Job | Mapping[str, Any] | os.PathLike[str] | str) -> Job:
    """A string is a file's path here: a test names its job file."""
    if isinstance(job, Job):
        return validate(job)
    return load(Path(job) if isinstance(job, str) else job)


def _run(job: Job, job_id: str, label: str, timeout: float) -> api.JobStatus:
    """The job's final status on a local cluster of one group with peers enough for it."""
    deadline = time.monotonic() + timeout
    cluster = LocalCluster(1, peers_for(job, 1))
    cluster.start()
    try:
        cluster.await_ring(timeout)
        api.submit(cluster.reader, job)
        return api.wait(cluster.reader, job_id, max(deadline - time.monotonic(), 0.0))
    except TimeoutError as e:
        raise JobFailed(f"{label} did not finish within {timeout:g} s: {e}") from None
    finally:
        cluster.stop()


@contextmanager
def _kill_reasons(job_id: str) -> Iterator[list[str]]:
    """The errors the groups log about the job while it runs: why it was killed (a task that
    raised names the task, the peer and the error)."""
    prefix = f"job {job_id!r}: "
    reasons: list[str] = []

    class Reasons(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if message.startswith(prefix):
                reasons.append(message.removeprefix(prefix).removesuffix("; killing the job"))

    handler = Reasons(logging.ERROR)
    logger = logging.getLogger("peer")
    logger.addHandler(handler)
    try:
        yield reasons
    finally:
        logger.removeHandler(handler)
