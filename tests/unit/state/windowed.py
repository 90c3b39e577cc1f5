"""Jobs the window tests share: read -> agg -> write, grouped by user, with given windows."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from peer.job.spec import Job, Task, Trigger, Window
from peer.job.validate import validate
from peer.state import TaskState

FNS = "tests.unit.state.state_fns"


def job(windows: tuple[Window, ...], triggers: tuple[Trigger, ...]) -> Job:
    """A valid job: validation (imports too) is part of every test that builds one."""
    return validate(
        Job(
            id="j",
            workflow=(("read", "agg"), ("agg", "write")),
            catalog=(
                Task("read", "input", plugin=f"{FNS}:read", n_peers=1),
                Task("agg", "function", fn=f"{FNS}:identity", group_by_key="user"),
                Task("write", "output", plugin=f"{FNS}:read"),
            ),
            windows=windows,
            triggers=triggers,
        )
    )


def by_user(segment: dict[str, Any]) -> Any:
    return segment["user"]


def state(
    windows: tuple[Window, ...],
    triggers: tuple[Trigger, ...],
    key_of: Callable[[Any], Any] | None = by_user,
) -> TaskState:
    return TaskState(job(windows, triggers), "agg", key_of)


def seg(user: str, t: float, v: int = 1, **more: Any) -> dict[str, Any]:
    return {"user": user, "t": t, "v": v, **more}


def closed(outs: Iterable[list[Any]]) -> list[Any]:
    """Every segment a close (a watermark, the end) emitted, read through, in order."""
    return [segment for out in outs for segment in out]
