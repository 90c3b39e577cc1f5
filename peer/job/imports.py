"""Dotted paths to code: ``package.module:attribute`` or ``package.module.attribute``.

A job names its functions, plugins, lifecycle hooks and predicates by path rather than holding
them, so it stays plain data that can be written down, logged and compared. The colon form can
reach a nested attribute (``module:Class.method``); the all-dots form takes the last part as the
attribute and everything before it as the module.
"""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType
from typing import Any


class ImportPathError(ValueError):
    """A path that names nothing importable; the message says why, for use after the path."""


def split(path: str) -> tuple[str, tuple[str, ...]]:
    """``(module, attribute parts)``, or ImportPathError when the path has no such shape."""
    module, colon, attribute = path.partition(":")
    if not colon:
        module, _dot, attribute = path.rpartition(".")
    parts = tuple(attribute.split("."))
    names = (*module.split("."), *parts)
    if not all(name.isidentifier() for name in names):
        raise ImportPathError("is not 'package.module:attribute' or 'package.module.attribute'")
    return module, parts


def resolve(path: str) -> Any:
    """The object a path names, importing its module if need be."""
    module_name, parts = split(path)
    try:
        target: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise ImportPathError(f"no module named {e.name!r}") from e
    except Exception as e:
        raise ImportPathError(f"importing {module_name!r} raised {type(e).__name__}: {e}") from e
    owner = module_name
    for part in parts:
        if not hasattr(target, part):
            raise ImportPathError(f"{_describe(target)} {owner!r} has no attribute {part!r}")
        target, owner = getattr(target, part), f"{owner}.{part}"
    return target


def _describe(target: Any) -> str:
    return "module" if isinstance(target, ModuleType) else "object"


def takes_splits(factory: object) -> bool:
    """Whether a plugin factory takes ``splits`` as a keyword: its input splits its share, so
    that it can run on another number of peers (peer.plugins.splits)."""
    try:
        parameter = inspect.signature(factory).parameters.get("splits")  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.kind is inspect.Parameter.KEYWORD_ONLY
