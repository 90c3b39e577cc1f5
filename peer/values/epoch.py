"""An epoch of a job: what checkpoints, plugins and messages name."""

from __future__ import annotations

from typing import NamedTuple


class Epoch(NamedTuple):
    """An epoch of a job, ordered as a tuple: every epoch of a later allocation comes after all
    of an earlier one's."""

    version: int
    number: int

    def describe(self) -> str:
        """How messages name an epoch."""
        return f"epoch {self.number} of allocation {self.version}"
