"""Fns of the colocation test: each notes the process it ran in."""

from __future__ import annotations

import os
from typing import Any


def first(segment: dict[str, Any]) -> dict[str, Any]:
    return {**segment, "first": os.getpid()}


def second(segment: dict[str, Any]) -> dict[str, Any]:
    return {**segment, "second": os.getpid()}
