"""Which virtual peer works on which task of which job: pure, deterministic schedulers.

They run inside log entries, so every group must reach the same allocation from the same
inputs: nothing here depends on randomness or on the iteration order of a dict or a set.
"""

from peer.scheduling.allocate import allocate, waiting
from peer.scheduling.answers import AnswerCache
from peer.scheduling.demand import (
    JOB_SCHEDULERS,
    TASK_SCHEDULERS,
    Allocation,
    JobDemand,
    PeerInfo,
    TaskDemand,
    freeze,
)
from peer.scheduling.request import (
    SchedulingRequest,
    allocation_from_json,
    allocation_to_json,
    schedule,
)

__all__ = [
    "JOB_SCHEDULERS",
    "TASK_SCHEDULERS",
    "Allocation",
    "AnswerCache",
    "JobDemand",
    "PeerInfo",
    "SchedulingRequest",
    "TaskDemand",
    "allocate",
    "allocation_from_json",
    "allocation_to_json",
    "freeze",
    "schedule",
    "waiting",
]
