"""How large and how deep one log entry may be, and the scan that tells without parsing it.

Every replica must refuse exactly the same entries, so the limits are fixed numbers checked on
an entry's bytes before they are parsed: never whatever the parser's or the job loader's stack
happens to allow on one machine, which is how a deeply nested entry once took down every group.
The same limits hold for the embedded store, so a job that runs embedded also fits a cluster.
"""

from __future__ import annotations

import re

ZOOKEEPER_MAX_BUFFER = 0xFFFFF
"""ZooKeeper's default ``jute.maxbuffer``: the largest request a server accepts, in bytes. A
larger one makes it drop the connection, which a client sees as a connection loss and retries
until it gives up."""

MAX_ENTRY_BYTES = ZOOKEEPER_MAX_BUFFER - 4096
"""The largest entry, encoded, that any log store takes and any reader applies: what fits a
znode under ZooKeeper's default ``jute.maxbuffer``, leaving 4 KiB of the request for its path
and headers."""

MAX_ENTRY_DEPTH = 64
"""How deeply an entry's JSON may nest (the entry object itself is level 1). A submitted job
sits three levels down and its free-form parts (``params``, ``metadata``) nest at most
``peer.job.limits.MAX_VALUE_DEPTH`` levels, well inside this; every deeper entry is refused
before it is parsed, so nothing recursive ever meets it."""

MAX_LOGGED_CHARS = 300
"""How much of a refusal's reason a log line shows: enough to say what is wrong, never the
whole of a large entry."""

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def deeper_than(data: bytes, limit: int) -> bool:
    """Whether the JSON in ``data`` nests more than ``limit`` levels, found by a flat scan (no
    recursion): strings are skipped, then brackets counted. For text that is not JSON the answer
    errs towards yes, which only refuses what the parser would refuse anyway."""
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    if brackets.count(b"[") + brackets.count(b"{") <= limit:
        return False
    depth = 0
    for byte in brackets:
        depth += _STEP[byte]
        if depth > limit:
            return True
    return False


def cut(text: str, limit: int = MAX_LOGGED_CHARS) -> str:
    """``text`` no longer than ``limit`` characters, marked where it was cut."""
    return text if len(text) <= limit else f"{text[: limit - 1]}…"
