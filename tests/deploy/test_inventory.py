"""The Terraform-to-Ansible inventory converter: the committed example converts to the committed
inventory, and every kind of bad terraform output ends in one line naming what is wrong."""

from __future__ import annotations

import copy
import io
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from peer.deploy.inventory import GROUPS, InventoryError, convert, main
from tests.support import REPO, assert_one_line_error, onyx

EXAMPLES = REPO / "terraform" / "examples"
OUTPUT = EXAMPLES / "output.json"
HOSTS_YML = EXAMPLES / "hosts.yml"
DEPLOY = REPO / "deploy"


def example() -> dict[str, Any]:
    return json.loads(OUTPUT.read_text())


def hosts_of(outputs: dict[str, Any]) -> list[dict[str, Any]]:
    return outputs["inventory"]["value"]["hosts"]


def host(outputs: dict[str, Any], name: str) -> dict[str, Any]:
    return next(h for h in hosts_of(outputs) if h["name"] == name)


def test_example_output_converts_to_the_committed_inventory():
    assert convert(OUTPUT.read_text()) == HOSTS_YML.read_text()


def test_inventory_has_the_conventions_groups_and_host_vars():
    inventory = yaml.safe_load(convert(OUTPUT.read_text()))["all"]
    assert list(inventory["children"]) == list(GROUPS)
    members = {g: sorted(inventory["children"][g]["hosts"]) for g in GROUPS}
    assert members == {
        "zookeeper": ["node-1", "node-2", "node-3"],
        "peers": ["node-1", "node-2", "node-3"],
        "spark_master": ["node-1"],
        "spark_workers": ["node-2", "node-3"],
        "seaweedfs": ["node-1", "node-2", "node-3"],
        "prometheus": ["monitor-1"],
        "alertmanager": ["monitor-1"],
        "grafana": ["monitor-1"],
    }
    assert inventory["hosts"] == {
        "monitor-1": {"ansible_host": "192.0.2.21"},
        "node-1": {"ansible_host": "192.0.2.11", "zookeeper_id": 1},
        "node-2": {"ansible_host": "192.0.2.12", "zookeeper_id": 2},
        "node-3": {"ansible_host": "192.0.2.13", "zookeeper_id": 3},
    }


def test_the_groups_are_the_example_inventorys_in_its_order():
    """The hand-written example inventory (deploy/inventories/example/hosts.yml) is the reference
    for the groups the playbooks and group_vars read: one it has that the converter lacks would
    leave an inventory made with Terraform without those hosts."""
    example_inventory = yaml.safe_load((DEPLOY / "inventories/example/hosts.yml").read_text())
    assert list(example_inventory["all"]["children"]) == list(GROUPS)


def test_every_group_a_playbook_targets_is_a_group():
    targeted = {
        play["hosts"]
        for playbook in sorted(DEPLOY.glob("*.yml"))
        for play in yaml.safe_load(playbook.read_text()) or []
        if isinstance(play, dict) and "hosts" in play
    }
    assert "alertmanager" in targeted
    assert targeted - {"all"} <= set(GROUPS)


def test_output_does_not_depend_on_the_order_of_hosts_or_groups():
    outputs = example()
    hosts_of(outputs).reverse()
    for h in hosts_of(outputs):
        h["groups"].reverse()
    assert convert(json.dumps(outputs)) == HOSTS_YML.read_text()


def test_the_inventory_value_alone_is_accepted():
    """What `terraform output -json inventory` prints: the value without its wrapper."""
    value = example()["inventory"]["value"]
    assert convert(json.dumps(value)) == HOSTS_YML.read_text()


def test_an_empty_group_is_listed_without_hosts():
    outputs = example()
    host(outputs, "monitor-1")["groups"] = ["prometheus"]
    inventory = yaml.safe_load(convert(json.dumps(outputs)))["all"]
    assert inventory["children"]["grafana"] == {"hosts": {}}


def test_a_cluster_without_an_object_store_lists_the_seaweedfs_group_empty():
    """Without a seaweedfs group the members keep their checkpoints on a shared mount
    (group_vars/all.yml), so the object store stays optional."""
    outputs = example()
    for name in ("node-1", "node-2", "node-3"):
        _remove_group(name, "seaweedfs")(outputs)
    inventory = yaml.safe_load(convert(json.dumps(outputs)))["all"]
    assert inventory["children"]["seaweedfs"] == {"hosts": {}}


def test_the_object_store_may_run_on_a_host_of_its_own():
    outputs = example()
    for name in ("node-1", "node-2", "node-3"):
        _remove_group(name, "seaweedfs")(outputs)
    hosts_of(outputs).append(
        {"name": "store-1", "address": "192.0.2.31", "groups": ["seaweedfs"], "vars": {}}
    )
    inventory = yaml.safe_load(convert(json.dumps(outputs)))["all"]
    assert inventory["children"]["seaweedfs"] == {"hosts": {"store-1": {}}}
    assert inventory["hosts"]["store-1"] == {"ansible_host": "192.0.2.31"}


def test_a_cluster_without_alertmanager_lists_the_alertmanager_group_empty():
    """Without Alertmanagers Prometheus runs without an alerting section (group_vars/all.yml),
    so the group stays optional."""
    outputs = example()
    _remove_group("monitor-1", "alertmanager")(outputs)
    inventory = yaml.safe_load(convert(json.dumps(outputs)))["all"]
    assert inventory["children"]["alertmanager"] == {"hosts": {}}
    assert inventory["children"]["prometheus"] == {"hosts": {"monitor-1": {}}}


@pytest.mark.parametrize("count", [1, 2, 3, 4])
def test_alertmanager_may_run_on_any_number_of_hosts_of_their_own(count):
    """The alertmanager role gossips with every other Alertmanager of the inventory and they
    notify once, so any count is accepted (unlike seaweedfs and zookeeper, no quorum)."""
    outputs = example()
    _remove_group("monitor-1", "alertmanager")(outputs)
    names = [f"alert-{i}" for i in range(1, count + 1)]
    hosts_of(outputs).extend(
        {"name": n, "address": f"192.0.2.{40 + i}", "groups": ["alertmanager"], "vars": {}}
        for i, n in enumerate(names, 1)
    )
    inventory = yaml.safe_load(convert(json.dumps(outputs)))["all"]
    assert inventory["children"]["alertmanager"] == {"hosts": {n: {} for n in names}}
    assert inventory["hosts"]["alert-1"] == {"ansible_host": "192.0.2.41"}


def _drop_inventory(o: dict[str, Any]) -> None:
    o["zookeeper_connect"] = o.pop("inventory")


def _set(name: str, key: str, value: object) -> Callable[[dict[str, Any]], None]:
    return lambda o: host(o, name).__setitem__(key, value)


def _delete(name: str, key: str) -> Callable[[dict[str, Any]], None]:
    return lambda o: host(o, name).pop(key)


def _add_group(name: str, group: str) -> Callable[[dict[str, Any]], None]:
    return lambda o: host(o, name)["groups"].append(group)


def _remove_group(name: str, group: str) -> Callable[[dict[str, Any]], None]:
    return lambda o: host(o, name)["groups"].remove(group)


BAD = {
    "missing inventory output": (
        _drop_inventory,
        "terraform output has no `inventory` output (outputs: zookeeper_connect)",
    ),
    "inventory without value": (
        lambda o: o["inventory"].pop("value"),
        "the `inventory` output has no object value",
    ),
    "hosts not a list": (
        lambda o: o["inventory"]["value"].__setitem__("hosts", {}),
        "the `inventory` output has no `hosts` list",
    ),
    "host without address": (_set("node-2", "address", None), "host node-2 has no address"),
    "host with address key missing": (_delete("node-2", "address"), "host node-2 has no address"),
    "address not IPv4": (
        _set("node-2", "address", "192.0.2.300"),
        "host node-2: address '192.0.2.300' is not an IPv4 address",
    ),
    "host without name": (_delete("node-1", "name"), "host #1 has no valid name"),
    "even zookeeper count": (
        _remove_group("node-3", "zookeeper"),
        "group zookeeper needs an odd number of hosts, got 2 (node-1, node-2)",
    ),
    "unknown group": (_add_group("node-1", "kafka"), "host node-1: unknown group 'kafka'"),
    "misspelt seaweedfs": (
        _add_group("monitor-1", "seaweedf"),
        "host monitor-1: unknown group 'seaweedf' (known: zookeeper, peers, spark_master,"
        " spark_workers, seaweedfs, prometheus, alertmanager, grafana)",
    ),
    "misspelt alertmanager": (
        _add_group("monitor-1", "alertmanagers"),
        "host monitor-1: unknown group 'alertmanagers' (known: zookeeper, peers, spark_master,"
        " spark_workers, seaweedfs, prometheus, alertmanager, grafana)",
    ),
    "even seaweedfs count": (
        _remove_group("node-3", "seaweedfs"),
        "group seaweedfs needs none, 1, 3 or 5 hosts, got 2 (node-1, node-2)",
    ),
    "host without groups": (_set("monitor-1", "groups", []), "host monitor-1 has no groups"),
    "two spark masters": (
        _add_group("node-2", "spark_master"),
        "group spark_master needs exactly one host, got node-1, node-2",
    ),
    "no spark workers": (
        lambda o: [_remove_group(n, "spark_workers")(o) for n in ("node-2", "node-3")],
        "group spark_workers needs at least one host, got none",
    ),
    "shared address": (
        _set("monitor-1", "address", "192.0.2.11"),
        "address 192.0.2.11 is used by both monitor-1 and node-1",
    ),
    "duplicate name": (_set("monitor-1", "name", "node-1"), "host node-1 is listed twice"),
    "zookeeper member without id": (
        _set("node-2", "vars", {}),
        "host node-2: zookeeper_id must be 1..255, got None",
    ),
    "duplicate zookeeper id": (
        _set("node-3", "vars", {"zookeeper_id": 2}),
        "zookeeper_id 2 is used by both node-2 and node-3",
    ),
    "vars overriding ansible_host": (
        _set("monitor-1", "vars", {"ansible_host": "192.0.2.99"}),
        "host monitor-1: vars must not set ansible_host",
    ),
}


@pytest.mark.parametrize(("mutate", "message"), BAD.values(), ids=BAD.keys())
def test_bad_output_is_refused_with_a_message_naming_the_problem(mutate, message):
    outputs = copy.deepcopy(example())
    mutate(outputs)
    with pytest.raises(InventoryError) as raised:
        convert(json.dumps(outputs))
    assert message in str(raised.value)
    assert isinstance(raised.value, ValueError)


def test_text_that_is_not_json_is_refused():
    with pytest.raises(InventoryError, match="terraform output is not JSON"):
        convert("Terraform v1.9.0\n")


def test_main_prints_the_inventory(capsys):
    assert main([str(OUTPUT)]) == 0
    assert capsys.readouterr().out == HOSTS_YML.read_text()


def test_main_reads_stdin(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(OUTPUT.read_text()))
    assert main([]) == 0
    assert capsys.readouterr().out == HOSTS_YML.read_text()


def test_main_reports_bad_input_in_one_line(capsys, tmp_path):
    outputs = example()
    _remove_group("node-3", "zookeeper")(outputs)
    path = tmp_path / "terraform-output.json"
    path.write_text(json.dumps(outputs))
    assert main([str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "inventory: error: group zookeeper needs an odd number of hosts, got 2 (node-1, node-2)\n"
    )


def test_main_reports_a_missing_file(capsys, tmp_path):
    assert main([str(tmp_path / "absent.json")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("inventory: error: cannot read ")
    assert err.count("\n") == 1


def test_runs_as_a_module():
    result = subprocess.run(
        [sys.executable, "-m", "peer.deploy.inventory", str(OUTPUT)],
        capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == HOSTS_YML.read_text()


def test_onyx_inventory_prints_the_inventory_and_names_bad_input(tmp_path):
    result = onyx("inventory", "terraform/examples/output.json")
    assert result.returncode == 0, result.stderr
    assert result.stdout == HOSTS_YML.read_text()
    (tmp_path / "empty.json").write_text("{}")
    assert_one_line_error(onyx("inventory", str(tmp_path / "empty.json")), 1, "`inventory`")
