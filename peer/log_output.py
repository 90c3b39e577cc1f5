"""How a process writes its log lines: a level, and text for people or one JSON object a line
for log shippers. Under journald the text lines carry no timestamp, since the journal stamps
every line itself."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TextIO

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")
TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
JOURNAL_TEXT = "%(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (UTC, ISO 8601), level, logger, message, and the
    exception's text when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str)


def under_journald(stream: TextIO, environ: Mapping[str, str]) -> bool:
    """Whether ``stream`` is the journal's: JOURNAL_STREAM names its device and inode, which a
    child that inherited the variable but writes elsewhere does not match."""
    device, _, inode = environ.get("JOURNAL_STREAM", "").partition(":")
    if not (device.isdigit() and inode.isdigit()):
        return False
    try:
        found = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (found.st_dev, found.st_ino) == (int(device), int(inode))


def formatter(kind: str, journald: bool) -> logging.Formatter:
    if kind == "json":
        return JsonFormatter()
    return logging.Formatter(JOURNAL_TEXT if journald else TEXT)


QUIET_CLIENTS = ("botocore", "aiobotocore", "s3fs")


def configure(
    level: str = "warning",
    kind: str = "text",
    stream: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Send every logger's records at ``level`` or above to ``stream`` (stderr) as ``kind``.
    kazoo's own reconnection chatter is kept to errors, and the object store client's (where it
    found its credentials, each retry) to warnings: the engine reports what matters."""
    stream = stream or sys.stderr
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter(kind, under_journald(stream, environ or os.environ)))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("kazoo").setLevel(max(root.level, logging.ERROR))
    for client in QUIET_CLIENTS:
        logging.getLogger(client).setLevel(max(root.level, logging.WARNING))
