"""When a member stops waiting for gossip and reads the log itself, and where.

Gossip is the fast path; ZooKeeper stays the record. A member that has consumed nothing for
``silence`` seconds reads the one znode it needs next, by its position: it never lists or
watches the log directory, so the reads ZooKeeper serves scale with the entries gossip failed to
deliver, not with members times entries. A read that finds the entry says the member is behind,
so the following position is read at once (catching up a backlog costs one read per entry); a
read that finds nothing backs off a whole silence before looking again, so an idle log costs each
member one read per silence and never a busy poll.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class Fallback:
    """The configured ``silence`` (seconds) and ``due_at``, the time a read becomes due."""

    silence: float
    due_at: float

    def __post_init__(self) -> None:
        if not self.silence > 0:
            raise ValueError(
                f"the gossip silence before reading the log must be above 0 s, not {self.silence}"
            )

    @classmethod
    def start(cls, now: float, silence: float) -> Fallback:
        """A member that starts listening at ``now`` gives gossip one silence first."""
        return cls(silence, now + silence)

    def position_to_read(self, now: float, next_position: int) -> int | None:
        """The position to read from the log at ``now``, the next the member needs, once the
        read is due; None before."""
        return next_position if now >= self.due_at else None

    def after_consumed(self, now: float) -> Fallback:
        """An entry was consumed at ``now``: the log is read only after a silence from then."""
        return replace(self, due_at=now + self.silence)

    def after_read(self, now: float, found: bool) -> Fallback:
        """A read at ``now`` found the entry (read the following one at once: the member is
        behind) or found nothing (look again after a silence)."""
        return replace(self, due_at=now) if found else self.after_consumed(now)
