"""Code shipped with a job, and who may ship it: a real ZooKeeper whose tenancy is protected by
a digest ACL, real `onyx peer start` processes that fetch, check and import the code."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from peer import api
from peer.job.code import pack
from tests.support import ZooKeeperServer, assert_one_line_error, free_port, onyx, wait_for

pytestmark = pytest.mark.integration

CREDENTIALS = "operator:s3cret"


def shipped_module(root: Path, suffix: str) -> Path:
    """A package no peer has installed: its fn tags every segment with ``suffix``."""
    package = root / "shipped_tagger"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        f"def tag(segment):\n    return {{**segment, 'tag': {suffix!r}}}\n"
    )
    return root


def tagging_job(out: Path) -> dict:
    return {
        "workflow": [["numbers", "tag"], ["tag", "write"]],
        "catalog": [
            {"name": "numbers", "kind": "input", "plugin": "peer.plugins.memory:input",
             "params": {"count": 50}, "n_peers": 1},
            {"name": "tag", "kind": "function", "fn": "shipped_tagger:tag"},
            {"name": "write", "kind": "output", "plugin": "peer.plugins.jsonl:output",
             "params": {"path": str(out), "overwrite": True}, "n_peers": 1},
        ],
        "barrier_period": None,
    }  # fmt: skip


@pytest.fixture
def protected(zookeeper, tenancy):
    """A tenancy made by a client holding the credentials: its znodes carry their ACL."""
    api.connect(zookeeper.address, tenancy, create=True, auth=CREDENTIALS).close()
    return ["--zookeeper", zookeeper.address, "--tenancy", tenancy]


def test_a_protected_tenancy_refuses_a_client_without_its_credentials(protected, tmp_path):
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(tagging_job(tmp_path / "out.jsonl")))
    code = shipped_module(tmp_path / "src", "v1")
    submit = ["job", "submit", str(tmp_path / "job.yaml"), "--code", str(code), *protected,
              "--checkpoints", str(tmp_path / "checkpoints")]  # fmt: skip
    assert_one_line_error(onyx(*submit), 1, "refused tenancy", "without credentials",
                          "--zookeeper-auth")  # fmt: skip
    wrong = onyx(*submit, "--zookeeper-auth", "operator:guess")
    assert_one_line_error(wrong, 1, "refused tenancy", "with the credentials given")
    assert "guess" not in wrong.stderr
    assert not list((tmp_path / "checkpoints").rglob("*.zip")), "code uploaded by a refused client"
    right = onyx(*submit, "--zookeeper-auth", CREDENTIALS, "--json")
    assert right.returncode == 0, right.stderr
    assert json.loads(right.stdout)["id"]


def test_credentials_must_be_user_and_password(protected):
    result = onyx("replica", *protected, "--zookeeper-auth", "nopassword")
    assert_one_line_error(result, 2, "--zookeeper-auth", "USER:PASSWORD")


def submit_with_code(cluster: list[str], tmp_path: Path, job_id: str, code: Path) -> Path:
    out = tmp_path / f"{job_id}.jsonl"
    (tmp_path / f"{job_id}.yaml").write_text(yaml.safe_dump(tagging_job(out)))
    result = onyx("job", "submit", str(tmp_path / f"{job_id}.yaml"), "--id", job_id,
                  "--code", str(code), *cluster, "--zookeeper-auth", CREDENTIALS,
                  "--checkpoints", str(tmp_path / "checkpoints"))  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out


def wait_job(cluster: list[str], job_id: str) -> str:
    result = onyx("job", "wait", job_id, *cluster, "--zookeeper-auth", CREDENTIALS,
                  "--timeout", "120", timeout=150)  # fmt: skip
    return result.stdout.strip()


def tags(out: Path) -> set[str]:
    return {json.loads(line)["tag"] for line in out.read_text().splitlines()}


def test_shipped_code_runs_and_new_code_needs_no_restart(protected, start_peer, tmp_path, tenancy):
    """Two versions of one module, each shipped with its job, run on the same group one after
    the other; each job's code is removed from storage and from the group once it completes."""
    cache = tmp_path / "cache"
    group = start_peer(
        vpeers=3, extra=["--zookeeper-auth", CREDENTIALS, "--code-cache", str(cache)]
    )
    first = submit_with_code(protected, tmp_path, "first", shipped_module(tmp_path / "v1", "v1"))
    assert wait_job(protected, "first") == "job first: completed"
    second = submit_with_code(protected, tmp_path, "second", shipped_module(tmp_path / "v2", "v2"))
    assert wait_job(protected, "second") == "job second: completed"

    assert (tags(first), tags(second)) == ({"v1"}, {"v2"})
    assert len(first.read_text().splitlines()) == 50
    assert group.process.poll() is None
    stored = tmp_path / "checkpoints" / tenancy
    wait_for(lambda: not list(stored.glob("*/code/*")), 30, "the shipped code gone from storage")
    wait_for(lambda: not [p for p in cache.iterdir() if not p.name.startswith(".")], 30,
             "the unpacked code gone from the group")  # fmt: skip


def test_code_that_does_not_match_its_hash_is_never_run(protected, start_peer, tmp_path, tenancy):
    """The archive in storage is swapped after the job was submitted: the group that fetches it
    refuses it, the job is killed naming the file, and nothing of it ran."""
    out = submit_with_code(protected, tmp_path, "tampered", shipped_module(tmp_path / "v1", "v1"))
    (archive,) = (tmp_path / "checkpoints" / tenancy).glob("tampered/code/*.zip")
    archive.write_bytes(pack(shipped_module(tmp_path / "evil", "evil")).data)
    start_peer(vpeers=3, extra=["--zookeeper-auth", CREDENTIALS])
    status = wait_job(protected, "tampered")
    assert status.startswith("job tampered: killed: ")
    assert "code 'v1'" in status
    assert "refused, never run" in status
    assert not out.exists()


def test_a_protected_tenancy_leaves_the_others_open():
    """On a server where it is the first, a tenancy made with credentials protects its own
    znodes, not /onyx, which every tenancy shares: another client still makes its tenancy."""
    server = ZooKeeperServer()
    server.start()
    try:
        api.connect(server.address, "guarded", create=True, auth=CREDENTIALS).close()
        api.connect(server.address, "open", create=True).close()
        result = onyx("replica", "--zookeeper", server.address, "--tenancy", "guarded")
        assert_one_line_error(result, 1, "refused tenancy 'guarded'", "without credentials")
    finally:
        server.stop()


def test_code_that_cannot_be_packed_is_refused_in_one_line_before_any_connection(tmp_path):
    """Packing comes first: a FIFO in the code's directory, which a packer that opened it would
    wait on for ever, ends the submit with one line naming it, and no server is needed (nothing
    listens at the address given)."""
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(tagging_job(tmp_path / "out.jsonl")))
    code = shipped_module(tmp_path / "src", "v1")
    os.mkfifo(code / "shipped_tagger" / "pipe")
    result = onyx("job", "submit", str(tmp_path / "job.yaml"), "--code", str(code),
                  "--zookeeper", f"127.0.0.1:{free_port()}", "--tenancy", "t",
                  "--connect-timeout", "1",
                  "--checkpoints", str(tmp_path / "checkpoints"))  # fmt: skip
    assert_one_line_error(result, 1, f"code {str(code)!r}", "'shipped_tagger/pipe' is a FIFO")
    assert not (tmp_path / "checkpoints").exists()
