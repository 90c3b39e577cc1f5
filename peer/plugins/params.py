"""A plugin's params as a typed value: a msgspec Struct per plugin, converted from the task's
params and checked when the job is submitted, so a wrong param is refused in one line naming it.

Secrets are params too, but never their values: a plugin's ``secrets`` maps a setting (a SASL
password, a database password) to a name, and each member reads the value from its own
environment, ``ONYX_SECRET_<name>`` (the peer role's environment file puts it there, as it puts
the object store's credentials). So no secret is ever in the log, a checkpoint or a message; and
only variables of that prefix can be named, so a job cannot send a member's other credentials to
a server of its choosing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import msgspec
from pyrsistent import thaw

from peer.job.spec import Task
from peer.plugins import error

SECRET_PREFIX = "ONYX_SECRET_"
_SECRET_NAME = re.compile(r"[A-Za-z0-9_]{1,100}")


def parsed[T](kind: type[T], params: Mapping[str, Any]) -> T:
    """``params`` as ``kind``; a ValueError names the param that is wrong."""
    try:
        return msgspec.convert(thaw(params), kind, strict=False)
    except msgspec.ValidationError as e:
        raise ValueError(_located(str(e))) from None


def _located(message: str) -> str:
    """msgspec's ``... - at `$.field``` as ``field: ...``."""
    text, _, at = message.partition(" - at `$.")
    return f"{at.rstrip('`')}: {text}" if at else message


def settings[T](task: Task, kind: type[T]) -> T:
    """The task's params as ``kind``, or a PluginError naming the task and the param."""
    try:
        return parsed(kind, task.params)
    except ValueError as e:
        raise error(task, f"params: {e}") from None


def check_secret_names(secrets: Mapping[str, str]) -> None:
    """Each secret names a variable by letters, digits and '_'; a ValueError names the one
    that does not."""
    for key, name in sorted(secrets.items()):
        if not _SECRET_NAME.fullmatch(name):
            raise ValueError(f"secrets.{key} must name a variable by letters, digits and '_' "
                             f"(read as {SECRET_PREFIX}<name>), got {name!r}")  # fmt: skip


def secret_values(task: Task, secrets: Mapping[str, str]) -> dict[str, str]:
    """Each secret's value from this member's environment; a PluginError names the variable a
    member lacks, never a value."""
    values = {}
    for key, name in sorted(secrets.items()):
        variable = SECRET_PREFIX + name
        value = os.environ.get(variable)
        if value is None:
            raise error(task, f"secrets.{key} names {variable}, which this member's environment "
                              "does not set")  # fmt: skip
        values[key] = value
    return values
