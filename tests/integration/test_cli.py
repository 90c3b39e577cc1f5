"""`onyx` as a user runs it: real processes, a real ZooKeeper, one-line errors."""

from __future__ import annotations

import json

import pytest

from tests.support import assert_one_line_error, free_port, onyx, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def two_groups(start_peer, zookeeper, tenancy, processes):
    processes += [start_peer(vpeers=2), start_peer(vpeers=2)]

    def ready():
        result = onyx("replica", "--zookeeper", zookeeper.address, "--tenancy", tenancy, "--json")
        if result.returncode != 0:
            return None
        doc = json.loads(result.stdout)
        return doc if len(doc["groups"]) == 2 and len(doc["pairs"]) == 2 else None

    return wait_for(ready, 60, "two groups in the ring", interval=0.5)


@pytest.fixture
def processes() -> list:
    """The `onyx peer start` processes of the test, in the order started."""
    return []


def test_replica_json_has_the_documented_keys(two_groups):
    doc = two_groups
    assert {"version", "groups", "peers", "pairs"} <= set(doc)
    assert len(doc["peers"]) == 4
    a, b = doc["groups"]
    assert doc["pairs"] == {a: b, b: a}


def test_replica_without_json_describes_the_ring(two_groups, zookeeper, tenancy):
    result = onyx("replica", "--zookeeper", zookeeper.address, "--tenancy", tenancy)
    assert result.returncode == 0, result.stderr
    assert "2 groups in the ring, 4 virtual peers" in result.stdout
    assert "ring: " in result.stdout


def test_gc_reports_the_origin_and_the_trim(two_groups, zookeeper, tenancy):
    result = onyx("gc", "--zookeeper", zookeeper.address, "--tenancy", tenancy)
    assert result.returncode == 0, result.stderr
    gc_position = two_groups["version"] + 1
    assert result.stdout.startswith("origin stored at log position ")
    assert int(result.stdout.split()[5].rstrip(";")) >= gc_position
    after = onyx("replica", "--zookeeper", zookeeper.address, "--tenancy", tenancy, "--json")
    assert json.loads(after.stdout)["groups"] == two_groups["groups"]


def test_unknown_tenancy(zookeeper):
    result = onyx("replica", "--zookeeper", zookeeper.address, "--tenancy", "no-such-thing")
    assert_one_line_error(result, 1, "no tenancy 'no-such-thing'", zookeeper.address)


def test_gc_of_unknown_tenancy(zookeeper):
    result = onyx("gc", "--zookeeper", zookeeper.address, "--tenancy", "no-such-thing")
    assert_one_line_error(result, 1, "no tenancy 'no-such-thing'")


@pytest.mark.parametrize("command", [["replica"], ["gc"], ["peer", "start"]])
def test_unreachable_zookeeper(command):
    address = f"127.0.0.1:{free_port()}"
    result = onyx(*command, "--zookeeper", address, "--tenancy", "t", "--connect-timeout", "1")
    assert_one_line_error(result, 1, "cannot reach ZooKeeper", address)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["peer", "start", "--zookeeper", "nohost", "--tenancy", "t"], ["--zookeeper", "nohost"]),
        (["peer", "start", "--zookeeper", "h:99999", "--tenancy", "t"], ["--zookeeper"]),
        (["peer", "start", "--zookeeper", "h:1", "--tenancy", "a/b"], ["--tenancy", "a/b"]),
        (["peer", "start", "--zookeeper", "h:1", "--tenancy", "t", "--vpeers", "0"], ["--vpeers"]),
        (["peer", "start", "--zookeeper", "h:1", "--tenancy", "t", "--vpeers", "x"], ["'x'"]),
        (["replica", "--zookeeper", "h:1"], ["--tenancy"]),
        (["peer", "start", "--zookeeper", "h:1", "--tenancy", "t", "--session-timeout", "-1"],
         ["--session-timeout"]),
        (["replica", "--zookeeper", "h:1", "--tenancy", "t", "--connect-timeout", "inf"],
         ["--connect-timeout", "'inf'", "finite"]),
        (["replica", "--zookeeper", "h:1", "--tenancy", "t", "--connect-timeout", "nan"],
         ["--connect-timeout", "'nan'"]),
        (["peer", "start", "--zookeeper", "h:1", "--tenancy", "t", "--port", "70000"],
         ["--port", "'70000'"]),
        (["media-driver", "--dir", "d", "--metrics-port", "65536"], ["--metrics-port"]),
        (["peer", "start", "--zookeeper", "h:1", "--tenancy", "t", "--seed-nodes", "h"],
         ["--seed-nodes", "'h'", "no port"]),
        (["peer", "start", "--zookeeper", "h:1", "--tenancy", "t", "--seed-nodes", "h:1,h:x"],
         ["--seed-nodes", "'h:1,h:x'", "'x' is not a port"]),
        (["peer", "start", "--zookeeper", "h:1", "--tenancy", "t", "--seed-nodes", ":4000"],
         ["--seed-nodes", "':4000'", "no host"]),
        (["peer", "start", "--zookeeper", "h:1", "--tenancy", "t", "--monitors", "0"],
         ["--monitors", "'0' is not a whole number of at least 1"]),
        (["frobnicate"], ["frobnicate"]),
        (["run", "--groups", "0"], ["--groups"]),
    ],
)  # fmt: skip
def test_malformed_arguments(args, words):
    assert_one_line_error(onyx(*args), 2, *words)


def test_run_forms_a_local_ring_and_leaves():
    result = onyx("run", "--groups", "3", "--vpeers", "2")
    assert result.returncode == 0, result.stderr
    assert "3 groups in the ring, 6 virtual peers" in result.stdout
    assert "every group left gracefully" in result.stdout


def test_run_offers_the_tags_a_job_requires(tmp_path):
    """On one machine every peer is where a tag points: a job whose tasks require tags (the
    hosts with Spark, say) runs on the local cluster instead of waiting for tagged peers."""
    (tmp_path / "in.jsonl").write_text("".join(f'{{"n": {i}}}\n' for i in range(10)))
    job = {
        "workflow": [["read", "write"]],
        "catalog": [
            {"name": "read", "kind": "input", "plugin": "peer.plugins.jsonl:input",
             "params": {"path": str(tmp_path / "in.jsonl")}, "n_peers": 1,
             "required_tags": ["spark"]},
            {"name": "write", "kind": "output", "plugin": "peer.plugins.jsonl:output",
             "params": {"path": str(tmp_path / "out.jsonl")}, "required_tags": ["gpu", "spark"]},
        ],
        "barrier_period": None,
    }  # fmt: skip
    (tmp_path / "job.json").write_text(json.dumps(job))
    result = onyx("run", str(tmp_path / "job.json"))
    assert result.returncode == 0, result.stdout + result.stderr
    written = [json.loads(line)["n"] for line in (tmp_path / "out.jsonl").read_text().split()]
    assert sorted(written) == list(range(10))


def test_down_moves_a_member_out_and_it_rejoins_under_a_new_id(two_groups, zookeeper, tenancy):
    cluster = ("--zookeeper", zookeeper.address, "--tenancy", tenancy)
    downed = two_groups["groups"][0]
    result = onyx("down", *cluster, downed[:8])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        f"member {downed} is down: its peers' work moves to the other members"
    )

    def rejoined():
        doc = json.loads(onyx("replica", *cluster, "--json").stdout)
        return doc if len(doc["groups"]) == 2 and downed not in doc["groups"] else None

    after = wait_for(rejoined, 60, "the downed group back under a new id", interval=0.5)
    assert two_groups["groups"][1] in after["groups"]
    described = onyx("replica", *cluster)
    assert "members: 1 down, 2 up" in described.stdout
    again = onyx("down", *cluster, downed)
    assert_one_line_error(again, 1, f"member {downed!r}", "down already")


def test_down_of_an_unknown_member(two_groups, zookeeper, tenancy):
    result = onyx("down", "--zookeeper", zookeeper.address, "--tenancy", tenancy, "nobody")
    assert_one_line_error(result, 1, "member 'nobody'", "no member of this cluster")


def test_leave_removes_a_member_that_then_exits_cleanly(two_groups, processes, zookeeper, tenancy):
    cluster = ("--zookeeper", zookeeper.address, "--tenancy", tenancy)
    leaving = two_groups["groups"][0]
    process = next(p for p in processes if leaving in p.output())
    result = onyx("leave", *cluster, leaving[:8], "--wait", "60", timeout=90)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        f"member {leaving} has left: its work moved to the other members"
    )
    assert process.process.wait(60) == 0
    doc = json.loads(onyx("replica", *cluster, "--json").stdout)
    assert leaving in doc["removed"]
    assert doc["groups"] == [two_groups["groups"][1]]
    assert "members: 1 removed, 1 up" in onyx("replica", *cluster).stdout
    again = onyx("leave", *cluster, leaving)
    assert_one_line_error(again, 1, f"member {leaving!r}", "removed already")
