"""Whether a process of this machine still runs: what a process finds left behind by one that
was killed (an embedded media driver's directory, a slot's keyed state on disk) is deleted only
once the process that made it is gone. And how a process that serves until a signal stops it
waits for that signal (``until_stopped``)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

SIGNAL_CHECK = 0.5
"""Seconds at most between two looks at a stop a signal handler asked for."""


def running(pid: int) -> bool:
    """Whether process ``pid`` runs: it exists and is not a zombie (killed, and not yet
    reaped by its parent, as a member's process killed -9 is until then)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] != "Z"


def until_stopped(stop: threading.Event) -> None:
    """Wait until ``stop`` is set, as a signal's handler sets it. A signal sent to the process
    may land on any of its threads (a media driver's own, a server's), and Python runs its
    handler in the main thread only once that thread runs again: a main thread blocked in an
    untimed wait would never run it, and the process would go on after its SIGTERM. So the
    wait wakes every SIGNAL_CHECK seconds."""
    while not stop.wait(SIGNAL_CHECK):
        pass
