"""Task state as pure code a task runner calls: windows and the keyed state functions keep.

``TaskState`` (``peer.state.task_state``) holds every window of one task; ``windows`` says which
extents a segment falls in, ``aggregations`` how a state takes segments, ``triggers`` what a
firing emits. ``KeyedState`` (``peer.state.keyed``) is the value, map and list state a keyed
function asks for in ``open``, kept per key group (``peer.state.key_groups``), with ``Ttl``.
"""

from peer.state.keyed import KeyedState, Ttl
from peer.state.task_state import TaskState

__all__ = ["KeyedState", "TaskState", "Ttl"]
