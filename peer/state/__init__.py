"""Window state: extents, aggregations and triggers, as pure code a task runner calls.

``TaskState`` (``peer.state.task_state``) holds every window of one task; ``windows`` says which
extents a segment falls in, ``aggregations`` how a state takes segments, ``triggers`` what a
firing emits.
"""

from peer.state.task_state import TaskState

__all__ = ["TaskState"]
