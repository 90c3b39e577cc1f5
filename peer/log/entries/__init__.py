"""Every kind of log entry, by name.

The registry is the extension point: the jobs issue adds submit-job, kill-job and complete-job
by listing their module's KINDS here, and nothing else in the log machinery changes.
"""

from __future__ import annotations

from peer.log.entries import gc, group_leave, join, virtual_peers
from peer.log.entry import EntryKind

KINDS: dict[str, EntryKind] = {
    kind.name: kind for module in (join, group_leave, virtual_peers, gc) for kind in module.KINDS
}
