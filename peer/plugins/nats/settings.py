"""What a NATS task's params say, as typed values checked when the job is submitted
(peer.plugins.params): where the servers are, how to log in (secrets by name, never by value),
which stream and subjects, and how a message's data becomes a segment and back.

The subject rules are NATS's own, checked here so that a wrong subject is refused at submit in a
line naming the param, not by the server when the task starts on some peer: tokens separated by
``.``, none empty, no whitespace; in a filter, ``*`` stands for one whole token and ``>`` for
the rest, as the last token; a subject published to has no wildcards.
"""

from __future__ import annotations

import datetime
from typing import Literal
from urllib.parse import urlsplit

import msgspec

from peer.job.spec import Task
from peer.plugins.params import check_secret_names, secret_values

SCHEMES = ("nats", "tls", "ws", "wss")
DEFAULT_PORT = 4222
_STREAM_FORBIDDEN = frozenset(" \t\r\n.*>/\\")
"""What a JetStream stream's name may not hold (it is a token of the API's subjects)."""

SECRETS = ("password", "token")


class NatsClient(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """Where the NATS servers are and how to reach them."""

    url: str
    """The servers to start from, ``nats://host:port[,nats://host:port...]`` (a bare
    ``host:port`` is ``nats://``); the client learns the rest of a cluster from them."""
    user: str | None = None
    """The user a password (``secrets.password``) logs in as."""
    secrets: dict[str, str] = {}
    """``password`` or ``token``, each naming the member's environment variable
    ``ONYX_SECRET_<name>`` that holds it."""
    timeout: float = 10.0
    """Seconds a start waits to connect and for each answer of the server before it says it
    cannot reach it (and, for the exactly-once output, for an acknowledgement to move on)."""

    def __post_init__(self) -> None:
        servers(self.url)
        for key in sorted(self.secrets):
            if key not in SECRETS:
                raise ValueError(f"secrets.{key}: a secret is {' or '.join(SECRETS)}")
        check_secret_names(self.secrets)
        if "password" in self.secrets and not self.user:
            raise ValueError("secrets.password needs user: the user it logs in as")
        if "token" in self.secrets and ("password" in self.secrets or self.user):
            raise ValueError("secrets.token logs in alone: not with user or a password")
        if not 0 < self.timeout <= 3600:
            raise ValueError(f"timeout must be in (0, 3600] seconds, got {self.timeout!r}")


class NatsInputParams(NatsClient, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """A NATS input's params."""

    stream: str
    """The JetStream stream read."""
    subject: str | None = None
    """Only the stream's messages on this subject (wildcards allowed); all of them without."""
    format: Literal["json", "bytes"] = "json"
    """How a message becomes a segment: its data a JSON object (the segment), or its data as
    it is, in a segment ``{"subject", "data", "headers", "seq"}``."""
    start: Literal["first", "new"] | int = "first"
    """Where a task with no checkpoint starts: the stream's first message, the messages
    published after it started, or the first message stored at or after a time (milliseconds
    since the epoch)."""
    stop_at_end: bool = False
    """Read up to the stream's last message as the task starts, then complete."""
    metadata: bool = False
    """Add ``nats_subject``, ``nats_seq``, ``nats_timestamp`` (milliseconds) and
    ``nats_headers`` to each JSON segment."""
    dead_letter_subject: str | None = None
    """Where an undecodable message goes, as it was read, with headers saying where from and
    why (a stream must capture the subject); without, it kills the job naming it."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_stream(self.stream, "stream")
        if self.subject is not None:
            check_subject(self.subject, "subject", wildcards=True)
        if isinstance(self.start, int) and self.start < 0:
            raise ValueError(f"start must be 'first', 'new' or milliseconds since the epoch "
                             f">= 0, got {self.start!r}")  # fmt: skip
        if self.dead_letter_subject is not None:
            check_subject(self.dead_letter_subject, "dead_letter_subject", wildcards=False)

    def start_time(self) -> datetime.datetime | None:
        """``start`` as a time, if it is one."""
        if isinstance(self.start, str):
            return None
        return datetime.datetime.fromtimestamp(self.start / 1000, datetime.UTC)


class NatsOutputParams(NatsClient, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """The exactly-once NATS output's params."""

    msg_id_prefix: str
    """The start of each message's ``Nats-Msg-Id``, ``<msg_id_prefix>-<stem>-<seq>``: the
    job's own, stable for its life, so that JetStream drops a message published again."""
    staging: str
    """The directory or object store URL where each epoch's records wait between its barrier
    and its commit (the job's checkpoint storage, in a cluster)."""
    subject: str | None = None
    """The subject every message is published to."""
    subject_field: str | None = None
    """Or the field of each segment that holds its subject."""
    stream: str | None = None
    """The stream the messages must land in (each publish says so); found from ``subject``
    when not given. Its duplicate window must be longer than a recovery takes."""
    format: Literal["json", "bytes"] = "json"
    """A segment written as its JSON, or a segment's ``data`` field (bytes or text) as it is,
    with its ``headers`` (text to text) if it has them."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.msg_id_prefix or any(c.isspace() for c in self.msg_id_prefix):
            raise ValueError(f"msg_id_prefix must be a name without whitespace, stable for the "
                             f"job's life, got {self.msg_id_prefix!r}")  # fmt: skip
        if not self.staging:
            raise ValueError("staging must be a directory or object store URL")
        if (self.subject is None) == (self.subject_field is None):
            raise ValueError("give subject or subject_field: the subject of every message, or "
                             "the field of each segment that holds it")  # fmt: skip
        if self.subject is not None:
            check_subject(self.subject, "subject", wildcards=False)
        if self.subject_field is not None and self.stream is None:
            raise ValueError("subject_field needs stream: the stream the subjects must be of, "
                             "whose duplicate window makes a publish count once")  # fmt: skip
        if self.stream is not None:
            check_stream(self.stream, "stream")


def servers(url: str) -> list[str]:
    """The servers ``url`` names, each ``scheme://host:port``; a ValueError says which is
    wrong."""
    found = []
    for item in (part.strip() for part in url.split(",")):
        text = item if "://" in item else f"nats://{item}"
        try:
            parts = urlsplit(text)
            port = parts.port
        except ValueError as e:
            raise ValueError(f"url: {item!r} is not a server's address: {e}") from None
        if parts.username or parts.password:
            raise ValueError(f"url: {parts.hostname!r} is given with a login, which the job must "
                             "not carry (the log keeps it): give user, and name the password or "
                             "token in secrets, read from each member's environment")  # fmt: skip
        if parts.scheme not in SCHEMES or not parts.hostname:
            raise ValueError(f"url: {item!r} is not a server's address, "
                             f"{'|'.join(SCHEMES)}://host[:port]")  # fmt: skip
        found.append(f"{parts.scheme}://{parts.netloc}" if port else
                     f"{parts.scheme}://{parts.netloc}:{DEFAULT_PORT}")  # fmt: skip
    return found


def check_stream(name: str, param: str) -> None:
    if not name or any(c in _STREAM_FORBIDDEN for c in name):
        raise ValueError(f"{param} must be a stream's name (no whitespace, '.', '*', '>', '/' "
                         f"or '\\'), got {name!r}")  # fmt: skip


def subject_problem(subject: str, *, wildcards: bool) -> str | None:
    """Why ``subject`` is not a NATS subject (a filter's, with ``wildcards``); None if it is."""
    if not subject:
        return "it is empty"
    if any(c.isspace() for c in subject):
        return "it holds whitespace"
    tokens = subject.split(".")
    for i, token in enumerate(tokens):
        if not token:
            return "it has an empty token"
        if token in ("*", ">") and not wildcards:
            return f"wildcard {token!r} is for filters, not for publishing"
        if token == ">" and i != len(tokens) - 1:
            return "'>' may only be its last token"
        if token not in ("*", ">") and ("*" in token or ">" in token):
            return f"a wildcard must be a whole token, not part of {token!r}"
    return None


def check_subject(subject: str, param: str, *, wildcards: bool) -> None:
    problem = subject_problem(subject, wildcards=wildcards)
    if problem is not None:
        raise ValueError(f"{param} {subject!r} is not a NATS subject: {problem}")


def covers(pattern: str, subject: str) -> bool:
    """Whether a stream's subject ``pattern`` (wildcards allowed) captures ``subject``."""
    wanted, tokens = pattern.split("."), subject.split(".")
    for i, token in enumerate(wanted):
        if token == ">":
            return len(tokens) > i
        if i >= len(tokens) or token not in ("*", tokens[i]):
            return False
    return len(wanted) == len(tokens)


def login(task: Task, client: NatsClient) -> dict[str, str]:
    """The client's login: its user, and its secrets read from this member's environment."""
    found = dict(secret_values(task, client.secrets))
    if client.user:
        found["user"] = client.user
    return found


def msg_id(prefix: str, stem: str, seq: int) -> str:
    """The ``Nats-Msg-Id`` of record ``seq`` of staged epoch ``stem``: the same however often
    the epoch is delivered, and no other record's (the stem names the allocation version, the
    epoch and the slot)."""
    return f"{prefix}-{stem}-{seq}"
