"""Static checks of terraform/: it parses, its inputs are typed, described and validated, its
versions are pinned, and it emits the output the inventory converter reads. No terraform binary
is needed (the providers cannot be downloaded here); `terraform fmt` runs only where installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import hcl2
import pytest

from peer.deploy.inventory import GROUPS

REPO = Path(__file__).resolve().parents[2]
TERRAFORM = REPO / "terraform"
MODULE = TERRAFORM / "modules" / "bare_metal"
ROOT = TERRAFORM / "examples" / "cluster"
TF_FILES = sorted(p for p in TERRAFORM.rglob("*.tf") if ".terraform" not in p.parts)
CONFIG_DIRS = sorted({p.parent for p in TF_FILES})
PIN = re.compile(r"^(~>\s*\d+\.\d+(\.\d+)?|=?\s*\d+\.\d+\.\d+)$")


@cache
def parse(path: Path) -> dict[str, Any]:
    with path.open() as f:
        return hcl2.load(f)


def blocks(directory: Path, kind: str) -> dict[str, Any]:
    """Every labelled block of one kind (variable, output, ...) in a configuration directory."""
    found: dict[str, Any] = {}
    for path in sorted(directory.glob("*.tf")):
        for entry in parse(path).get(kind, []):
            found.update(entry)
    return found


def terraform_settings(directory: Path) -> list[dict[str, Any]]:
    return [t for p in sorted(directory.glob("*.tf")) for t in parse(p).get("terraform", [])]


def conditions(variable: dict[str, Any]) -> list[str]:
    """The validation conditions, unquoted: python-hcl2 keeps the quotes of some strings (function
    arguments) and drops those of others (list items)."""
    return [v["condition"].replace('"', "") for v in variable.get("validation", [])]


def prose(text: str) -> str:
    """Text without its parenthetical remarks, on one line."""
    return " ".join(re.sub(r"\s*\([^)]*\)", "", text).split())


def test_the_module_and_the_example_exist():
    assert {MODULE, ROOT} <= set(CONFIG_DIRS)


@pytest.mark.parametrize("path", TF_FILES, ids=lambda p: str(p.relative_to(TERRAFORM)))
def test_every_file_parses(path):
    assert isinstance(parse(path), dict)


@pytest.mark.parametrize("directory", CONFIG_DIRS, ids=lambda p: str(p.relative_to(TERRAFORM)))
def test_every_variable_has_a_type_and_a_description(directory):
    variables = blocks(directory, "variable")
    assert variables
    for name, variable in variables.items():
        assert variable.get("type"), f"variable {name} has no type"
        assert str(variable.get("description", "")).strip(), f"variable {name} has no description"


@pytest.mark.parametrize("directory", CONFIG_DIRS, ids=lambda p: str(p.relative_to(TERRAFORM)))
def test_provisioner_is_maas_or_static(directory):
    (condition,) = conditions(blocks(directory, "variable")["provisioner"])
    assert re.search(r"\[maas, static\]", condition), condition


def test_hosts_are_validated():
    checks = conditions(blocks(MODULE, "variable")["hosts"])

    def check(*parts: str) -> None:
        assert any(all(p in c for p in parts) for c in checks), f"no validation with {parts}"

    check("contains(h.roles, zookeeper)", "[1, 3, 5]")
    check("contains(h.roles, spark_master)", "== 1")
    check("contains(h.roles, spark_workers)", ">= 1")
    check("contains(h.roles, peers)", ">= 1")
    check("contains(h.roles, seaweedfs)", "[0, 1, 3, 5]")
    # Alertmanager takes any number of hosts (several gossip and notify once): no count check.
    assert not any("contains(h.roles, alertmanager)" in c for c in checks), checks
    check("h.address", "25[0-5]")
    check("var.provisioner != static", "h.address != null")
    check("var.provisioner != maas", "h.address == null")
    check("setsubtract(h.roles")


def test_the_known_roles_are_the_groups_the_converter_accepts():
    """A role the module allows but the converter refuses (or the reverse) breaks the inventory
    only at `python -m peer.deploy.inventory`, after a MAAS apply: keep the two lists one."""
    (condition,) = [
        c for c in conditions(blocks(MODULE, "variable")["hosts"]) if "setsubtract" in c
    ]
    known = re.search(r"setsubtract\(h\.roles, \[([^\]]*)\]\)", condition)
    assert known, condition
    assert [r.strip() for r in known.group(1).split(",") if r.strip()] == list(GROUPS)


def test_the_known_roles_are_listed_in_the_inventorys_order():
    """The module's message for an unknown role and both descriptions of `hosts` name every
    group, in the order the inventory lists them."""
    listed = ", ".join(GROUPS)
    hosts = blocks(MODULE, "variable")["hosts"]
    messages = [v["error_message"] for v in hosts["validation"]]
    assert f"Roles must be among {listed}." in messages
    assert listed in blocks(ROOT, "variable")["hosts"]["description"]
    assert f"from {listed}." in prose(hosts["description"])
    readme = prose((TERRAFORM / "README.md").read_text())
    assert ", ".join(f"`{g}`" for g in GROUPS) in readme


def test_operating_system_is_debian_13_or_ubuntu_24_04():
    for directory in (MODULE, ROOT):
        (condition,) = conditions(blocks(directory, "variable")["operating_system"])
        assert "[ubuntu-24.04, debian-13]" in condition, condition


@pytest.mark.parametrize("directory", CONFIG_DIRS, ids=lambda p: str(p.relative_to(TERRAFORM)))
def test_versions_are_pinned(directory):
    settings = terraform_settings(directory)
    assert any(s.get("required_version") for s in settings), "required_version is not set"
    providers: dict[str, Any] = {}
    for s in settings:
        for entry in s.get("required_providers", []):
            providers.update(entry)
    assert providers, "no required_providers"
    for name, spec in providers.items():
        assert spec.get("source"), f"provider {name} has no source"
        assert PIN.match(spec.get("version", "")), f"provider {name} is not pinned: {spec}"


@pytest.mark.parametrize("directory", CONFIG_DIRS, ids=lambda p: str(p.relative_to(TERRAFORM)))
def test_every_resource_uses_a_required_provider(directory):
    required = {
        name
        for s in terraform_settings(directory)
        for entry in s.get("required_providers", [])
        for name in entry
    }
    for path in directory.glob("*.tf"):
        for entry in parse(path).get("resource", []):
            for kind in entry:
                assert kind.split("_")[0] in required, f"{kind} needs its provider pinned"


def test_maas_instances_allocate_by_pool_zone_and_tags():
    (instance,) = [e["maas_instance"] for e in parse(MODULE / "maas.tf")["resource"]]
    (node,) = instance.values()
    (allocate,) = node["allocate_params"]
    assert {"pool", "zone", "tags"} <= set(allocate)
    (deploy,) = node["deploy_params"]
    assert "distro_series" in deploy


def test_the_module_and_the_example_output_the_inventory():
    module_output = blocks(MODULE, "output")["inventory"]
    assert "hosts" in module_output["value"]
    root_output = blocks(ROOT, "output")["inventory"]
    assert root_output["value"] == "${module.cluster.inventory}"
    (cluster,) = [m["cluster"] for p in ROOT.glob("*.tf") for m in parse(p).get("module", [])]
    assert (ROOT / cluster["source"]).resolve() == MODULE


def test_example_output_matches_the_example_hosts():
    """output.json is what `terraform output -json` prints for terraform.tfvars: hosts sorted by
    name, groups sorted, zookeeper_id 1..n in name order."""
    with (ROOT / "terraform.tfvars").open() as f:
        tfvars = hcl2.load(f)
    assert tfvars["provisioner"] == "static"
    hosts = sorted(tfvars["hosts"], key=lambda h: h["name"])
    ensemble = [h["name"] for h in hosts if "zookeeper" in h["roles"]]
    ids = {name: i + 1 for i, name in enumerate(ensemble)}
    expected = [
        {
            "address": h["address"],
            "groups": sorted(h["roles"]),
            "name": h["name"],
            "vars": {"zookeeper_id": ids[h["name"]]} if h["name"] in ids else {},
        }
        for h in hosts
    ]
    output = json.loads((TERRAFORM / "examples" / "output.json").read_text())
    assert set(output) == set(blocks(ROOT, "output"))
    assert output["inventory"]["sensitive"] is False
    assert output["inventory"]["value"] == {"hosts": expected}


def test_the_example_runs_alertmanager_beside_prometheus():
    """As deploy/inventories/example/hosts.yml does: the monitoring host runs Prometheus and the
    Alertmanager it sends its alerts to."""
    output = json.loads((TERRAFORM / "examples" / "output.json").read_text())
    hosts = output["inventory"]["value"]["hosts"]
    prometheus = [h["name"] for h in hosts if "prometheus" in h["groups"]]
    alertmanager = [h["name"] for h in hosts if "alertmanager" in h["groups"]]
    assert prometheus == alertmanager == ["monitor-1"]


def test_example_addresses_are_for_documentation():
    """RFC 5737 ranges only, so the example never points at a real machine."""
    output = json.loads((TERRAFORM / "examples" / "output.json").read_text())
    for h in output["inventory"]["value"]["hosts"]:
        assert h["address"].startswith(("192.0.2.", "198.51.100.", "203.0.113."))


@pytest.mark.skipif(shutil.which("terraform") is None, reason="terraform is not installed")
def test_terraform_fmt():
    result = subprocess.run(
        ["terraform", "fmt", "-check", "-recursive", "-diff", str(TERRAFORM)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
