"""What a peer group tells systemd: the service notification protocol of sd_notify(3), which a
unit of ``Type=notify`` waits on.

A notification is one datagram of ``KEY=VALUE`` lines to the unix socket named by
``$NOTIFY_SOCKET``: a path, or with a leading ``@`` a name in the abstract namespace. Without the
variable the process is not supervised that way and nothing is sent. A notification that cannot
be sent is logged, never raised: the group goes on serving whatever its supervisor thinks.

Written with the standard library: the maintained binding on PyPI (cysystemd) wraps libsystemd
in wheels only for newer platforms (manylinux 2.34) than the project's hosts install from, and
the pure ones lack STOPPING or are unmaintained.
"""

from __future__ import annotations

import logging
import os
import socket

from peer.cluster.readiness import Readiness

log = logging.getLogger(__name__)


def notify(**fields: str) -> bool:
    """Send ``fields`` (READY="1", STATUS="...") to systemd; True when sent."""
    address = os.environ.get("NOTIFY_SOCKET", "")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    message = "\n".join(f"{key}={value}" for key, value in fields.items()).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(message, address)
    except OSError as e:
        log.warning("cannot notify systemd at %s: %s", os.environ["NOTIFY_SOCKET"], e)
        return False
    return True


def announce(readiness: Readiness) -> None:
    """A change of the group's readiness, as systemd reads it: READY=1 once it has joined,
    STOPPING=1 once it leaves, and the reason as its STATUS line every time."""
    fields = {"STATUS": readiness.reason}
    if readiness.ready:
        fields = {"READY": "1", **fields}
    elif readiness.state == "leaving":
        fields = {"STOPPING": "1", **fields}
    notify(**fields)
