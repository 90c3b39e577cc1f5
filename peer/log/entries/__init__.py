"""Every kind of log entry, by name.

The registry is the extension point: a family of kinds joins the log by listing its module's
KINDS here, and nothing else in the log machinery changes.
"""

from __future__ import annotations

from peer.log.entries import (
    gc,
    group_leave,
    grow,
    jobs,
    join,
    join_direct,
    leave,
    recovery,
    rollback,
    virtual_peers,
)
from peer.log.entry import EntryKind

KINDS: dict[str, EntryKind] = {
    kind.name: kind
    for module in (
        join,
        join_direct,
        group_leave,
        leave,
        virtual_peers,
        jobs,
        recovery,
        rollback,
        grow,
        gc,
    )
    for kind in module.KINDS
}
