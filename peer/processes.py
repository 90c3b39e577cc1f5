"""Whether a process of this machine still runs: what a process finds left behind by one that
was killed (an embedded media driver's directory, a slot's keyed state on disk) is deleted only
once the process that made it is gone."""

from __future__ import annotations

import os
from pathlib import Path


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
