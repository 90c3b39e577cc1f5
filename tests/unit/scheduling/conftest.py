"""Builders shared by the scheduling tests."""

from __future__ import annotations

from peer.scheduling import JobDemand, PeerInfo, TaskDemand


def peers(count: int, per_group: int = 100, tags: frozenset[str] = frozenset(), prefix: str = "p"):
    """``count`` peers p0, p1, ... in groups of ``per_group``, all with ``tags``."""
    return [PeerInfo(f"{prefix}{i}", f"g{i // per_group}", tags) for i in range(count)]


def job(id_: str, *tasks: TaskDemand | str, **options) -> JobDemand:
    """A job; a bare string is a task with the default demand."""
    return JobDemand(
        id_, tuple(TaskDemand(t) if isinstance(t, str) else t for t in tasks), **options
    )


def plain(allocation) -> dict[str, dict[str, list[str]]]:
    """An allocation as plain dicts of lists, for readable comparisons."""
    return {j: {t: list(ps) for t, ps in tasks.items()} for j, tasks in allocation.items()}


def held(allocation, job_id: str) -> int:
    return sum(len(ps) for ps in allocation[job_id].values())
