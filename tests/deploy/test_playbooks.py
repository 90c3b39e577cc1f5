"""Every playbook in deploy/ passes Ansible's own syntax check against the example inventory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

PLAYBOOKS = sorted((REPO / "deploy").glob("*.yml"))


def test_deploy_has_site_and_one_playbook_per_service():
    names = {path.stem for path in PLAYBOOKS}
    services = {"zookeeper", "aeron_media_driver", "spark", "seaweedfs", "peers", "prometheus",
                "alertmanager", "grafana", "node_exporter"}  # fmt: skip
    assert {"site", "rolling_restart"} | services <= names


@pytest.mark.parametrize("playbook", PLAYBOOKS, ids=lambda path: path.name)
def test_a_playbook_passes_the_syntax_check(playbook: Path, tmp_path: Path):
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "deploy" / "ansible.cfg"),
           "HOME": str(tmp_path), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp")}  # fmt: skip
    command = [str(Path(sys.executable).parent / "ansible-playbook"), "--syntax-check",
               "-i", str(REPO / "deploy" / "inventories" / "example"), str(playbook)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO,
                            check=False)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
