"""Code shipped with a job, and who may ship it: a real ZooKeeper whose tenancy is protected by
a digest ACL, real `onyx peer start` processes that fetch, check and import the code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from peer import api
from tests.support import assert_one_line_error, onyx

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
    right = onyx(*submit, "--zookeeper-auth", CREDENTIALS, "--json")
    assert right.returncode == 0, right.stderr
    assert json.loads(right.stdout)["id"]


def test_credentials_must_be_user_and_password(protected):
    result = onyx("replica", *protected, "--zookeeper-auth", "nopassword")
    assert_one_line_error(result, 2, "--zookeeper-auth", "USER:PASSWORD")
