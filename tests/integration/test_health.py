"""Health and readiness of real `onyx peer start` processes on a real ZooKeeper: the endpoints
on the metrics port, checked against the cluster's own replica and jobs, and the notifications a
process sends to the socket systemd would listen on."""

from __future__ import annotations

import json
import re
import signal
import socket
import time
import urllib.error
import urllib.request
import uuid

import pytest

from peer import api
from peer.runtime.checkpoints import Commits
from tests.support import free_port, wait_for

pytestmark = pytest.mark.integration


def get(port: int, path: str, method: str = "GET") -> tuple[int, object]:
    """The status and JSON of a request; (0, reason) while nothing listens yet."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except urllib.error.URLError as e:
        return 0, str(e.reason)


def job(count: int, paced: bool = False) -> dict:
    """Three tasks on the group's three peers: ``step`` stays out of a chain with ``read``."""
    fn = "tests.chaos.pacing:pace_view" if paced else "examples.wordcount.words:split"
    return {
        "workflow": [["read", "step"], ["step", "write"]],
        "catalog": [
            {"name": "read", "kind": "input", "plugin": "peer.plugins.memory:input",
             "params": {"segments": [{"line": f"word {i}"} for i in range(count)]}
             if not paced else {"count": count}, "n_peers": 1},
            {"name": "step", "kind": "function", "fn": fn, "n_peers": 1, "chaining": False},
            {"name": "write", "kind": "output", "plugin": "peer.plugins.null:output",
             "n_peers": 1},
        ],
        "barrier_period": 0.2,
    }  # fmt: skip


@pytest.fixture
def group(start_peer, zookeeper, tenancy, monkeypatch):
    """One group of three peers serving its endpoints, and a client on its log."""
    monkeypatch.setenv("ONYX_TEST_PACE", "0.01")
    port = free_port()
    peer = start_peer(vpeers=3, extra=["--metrics-port", str(port),
                                       "--metrics-address", "127.0.0.1"])  # fmt: skip
    store = api.connect(zookeeper.address, tenancy, create=True)
    yield peer, port, store
    store.close()


def test_the_endpoints_answer_from_the_group_s_own_state(group):
    peer, port, store = group
    assert wait_for(lambda: get(port, "/healthz")[0] == 200, 60, "/healthz")
    ready = wait_for(lambda: (r := get(port, "/readyz"))[0] == 200 and r[1], 60, "/readyz")
    assert ready["ready"] is True
    group_id = re.fullmatch(r"group (\w+) has joined the ring", ready["reason"]).group(1)
    assert group_id in api.replica(store).groups

    wait_for(lambda: get(port, "/replica")[1] == api.replica(store).to_json(), 30,
             "/replica to equal the replica")  # fmt: skip

    finished = api.submit(store, job(5))
    assert api.wait(store, finished, 60).state == "completed"
    running = api.submit(store, job(1_000_000, paced=True))
    commits = Commits(store, running)
    wait_for(lambda: (r := commits.read()[0]) and r.committed, 60, "a committed epoch")

    def shown(path: str) -> object:
        """The endpoint's answer once the group has applied the whole log."""
        current = api.replica(store)
        answer = get(port, path)
        replica = get(port, "/replica")[1]
        return answer if replica["version"] == current.version else None

    status, doc = wait_for(lambda: shown(f"/jobs/{running}"), 30, "the running job")
    record = commits.read()[0]
    current = api.status(api.replica(store), running)
    assert status == 200
    assert doc["id"] == running
    assert doc["state"] == "running"
    assert doc["allocation"] == current.allocation
    assert sorted(p for ps in doc["allocation"].values() for p in ps) == sorted(
        api.replica(store).group_peers[group_id]
    )
    assert doc["peers"] == len(api.replica(store).group_peers[group_id])
    assert doc["allocation_version"] == current.allocation_version
    assert doc["committed_epoch"]["allocation_version"] == current.allocation_version
    assert 1 <= doc["committed_epoch"]["epoch"] <= record.committed.number

    status, doc = get(port, f"/jobs/{finished}")
    assert status == 200
    assert doc["state"] == "completed"
    assert (doc["allocation"], doc["peers"]) == ({}, 0)
    status, listing = get(port, "/jobs")
    assert status == 200
    assert [j["id"] for j in listing["jobs"]] == sorted([finished, running])
    assert {j["id"]: j["state"] for j in listing["jobs"]} == {
        finished: "completed", running: "running"
    }  # fmt: skip

    status, doc = get(port, "/jobs/no-such-job")
    assert (status, doc) == (404, {"error": "job 'no-such-job': no such job in this tenancy"})
    assert get(port, "/nowhere")[0] == 404
    assert get(port, "/jobs", "POST")[0] == 405
    assert get(port, "/readyz", "DELETE")[0] == 405
    api.kill(store, running)
    assert api.wait(store, running, 60).state == "killed"

    peer.signal(signal.SIGTERM)
    assert peer.process.wait(60) == 0


@pytest.fixture
def notify_socket(monkeypatch):
    """A unix datagram socket in the abstract namespace, named to the peer as systemd names its
    own in NOTIFY_SOCKET."""
    name = f"onyx-notify-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        yield sock


def notifications(sock: socket.socket, until: str, timeout: float) -> list[dict[str, str]]:
    """Every notification received until one holds ``until`` (e.g. READY=1)."""
    received: list[dict[str, str]] = []
    deadline = time.monotonic() + timeout
    key, _, value = until.partition("=")
    while not received or received[-1].get(key) != value:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            data = sock.recv(4096).decode()
        except TimeoutError:
            raise AssertionError(f"no {until} within {timeout:g} s: got {received}") from None
        received.append(dict(line.split("=", 1) for line in data.splitlines()))
    return received


def test_the_group_tells_systemd_it_is_ready_once_joined_and_stopping_as_it_leaves(
    notify_socket, start_peer, zookeeper, tenancy
):
    peer = start_peer(vpeers=1)
    before = notifications(notify_socket, "READY=1", 60)
    ready = before[-1]
    group_id = re.fullmatch(r"group (\w+) has joined the ring", ready["STATUS"]).group(1)
    store = api.connect(zookeeper.address, tenancy)
    try:
        assert group_id in api.replica(store).groups
    finally:
        store.close()
    assert all("READY" not in n for n in before[:-1])

    peer.signal(signal.SIGTERM)
    stopping = notifications(notify_socket, "STOPPING=1", 60)[-1]
    assert stopping["STATUS"] == f"group {group_id} is leaving the ring"
    assert peer.process.wait(60) == 0
