"""The inventory under test: every role's group has hosts that this run checks, so that no role's
tests are skipped everywhere (only grafana's may be empty: test hosts have no Grafana archive)."""

from __future__ import annotations

import pytest

from tests.infra.nodes.conftest import ROLE_GROUPS, Cluster

MAY_BE_EMPTY = {"grafana"}


def checked_hosts(config: pytest.Config, cluster: Cluster) -> set[str]:
    """Inventory hosts among those given with --hosts (what the host tests run on)."""
    from testinfra.utils.ansible_runner import AnsibleRunner  # noqa: PLC0415

    runner = AnsibleRunner.get_runner(cluster.inventory_file)
    selected: set[str] = set()
    for spec in config.getoption("hosts").split(","):
        pattern = spec.removeprefix("ansible://") or "all"
        selected.update(runner.get_hosts(pattern))
    return selected


@pytest.mark.parametrize(
    "group",
    sorted({g for groups in ROLE_GROUPS.values() for g in groups} - MAY_BE_EMPTY),
)
def test_role_group_has_checked_hosts(group: str, cluster: Cluster, request: pytest.FixtureRequest):
    members = {n.name for n in cluster.group(group)}
    assert members, f"the inventory's group {group} has no hosts: its role's tests would not run"
    checked = checked_hosts(request.config, cluster)
    assert members & checked, f"none of {sorted(members)} ({group}) is among the hosts checked"


def test_ensemble_and_master_sizes(cluster: Cluster):
    ids = [int(n.var("zookeeper_id")) for n in cluster.group("zookeeper")]
    assert len(ids) in (1, 3, 5)
    assert len(set(ids)) == len(ids), ids
    assert len(cluster.group("spark_master")) == 1
