"""Which virtual peer works on which task of which job: pure, deterministic schedulers.

They run inside log entries, so every group must reach the same allocation from the same
inputs: nothing here depends on randomness or on the iteration order of a dict or a set.
"""

from peer.scheduling.allocate import allocate, waiting
from peer.scheduling.demand import (
    JOB_SCHEDULERS,
    TASK_SCHEDULERS,
    Allocation,
    JobDemand,
    PeerInfo,
    TaskDemand,
    freeze,
)

__all__ = [
    "JOB_SCHEDULERS",
    "TASK_SCHEDULERS",
    "Allocation",
    "JobDemand",
    "PeerInfo",
    "TaskDemand",
    "allocate",
    "freeze",
    "waiting",
]
