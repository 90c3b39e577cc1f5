"""Static checks of the Ansible roles under roles/ and the playbooks under deploy/: every role
follows the deployment conventions (its files, its variables documented in an argument spec
with the same defaults, its task phases, managed templates, hardened units), and yamllint and
ansible-lint's production profile pass. Each test covers every role directory there is."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import REPO

ROLES_DIR = REPO / "roles"
BIN = Path(sys.executable).parent
ROLES = sorted(p.name for p in ROLES_DIR.iterdir() if p.is_dir()) if ROLES_DIR.is_dir() else []
EXPECTED_ROLES = (
    "common", "zookeeper", "aeron_media_driver", "spark", "seaweedfs", "peer", "prometheus",
    "alertmanager", "grafana", "node_exporter",
)  # fmt: skip
SHARED = "common"
"""The role the others include for what they share; it runs no service of its own."""
SERVICE_ROLES = [role for role in ROLES if role != SHARED]
PHASES = ("preflight", "install", "configure", "service")
REQUIRED_FILES = (
    "defaults/main.yml", "meta/main.yml", "meta/argument_specs.yml", "handlers/main.yml",
    "tasks/main.yml", *(f"tasks/{phase}.yml" for phase in PHASES),
)  # fmt: skip
# `{{ ansible_managed | comment }}`, or with the filter's arguments for another comment style.
MANAGED = re.compile(r"\{\{ ansible_managed \| comment(\(.*\))? \}\}")
# The conventions' [Service] hardening (PrivateDevices= is "no" for the units that need /dev/shm;
# ReadWritePaths= only where a service writes).
HARDENING = (
    "User=", "Group=", "NoNewPrivileges=yes", "ProtectSystem=",
    "ProtectHome=yes", "PrivateTmp=yes", "PrivateDevices=", "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes", "ProtectControlGroups=yes", "RestrictSUIDSGID=yes",
    "LockPersonality=yes", "Restart=on-failure", "RestartSec=",
)  # fmt: skip
TEMPLATES = sorted(ROLES_DIR.glob("*/templates/**/*.j2")) if ROLES_DIR.is_dir() else []
# Unit templates, and drop-ins over a package's unit (templates with a [Service] section).
UNITS = [t for t in TEMPLATES if t.name.endswith(".service.j2") or "[Service]" in t.read_text()]
SHARED_HARDENING = ROLES_DIR / SHARED / "files" / "hardening.conf"
SHARED_LOOKUP = (
    "{{ lookup('ansible.builtin.file', role_path ~ '/../common/files/hardening.conf') }}"
)
"""How a unit reads the shared hardening into its [Service] section."""
# Keys whose values Ansible evaluates as Jinja expressions without braces.
CONDITIONALS = {"when", "that", "until", "changed_when", "failed_when"}
JINJA = re.compile(r"\{\{(.*?)\}\}|\{%(.*?)%\}", re.S)
INCLUDES = (
    "ansible.builtin.include_tasks", "ansible.builtin.import_tasks",
    "include_tasks", "import_tasks",
)  # fmt: skip


class _AnsibleLoader(yaml.SafeLoader):
    """YAML as Ansible reads it, closely enough: tags such as !unsafe or !vault keep their value."""


def _tagged(loader: yaml.SafeLoader, _suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]


_AnsibleLoader.add_multi_constructor("!", _tagged)


def load(path: Path) -> Any:
    return yaml.load(path.read_text(), Loader=_AnsibleLoader)


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def run_tool(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """A linter from the virtualenv, from the repository's root, kept off the network and out of
    the user's home and Ansible directories."""
    home = tmp_path / "home"
    (home / "tmp").mkdir(parents=True)
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
        "ANSIBLE_REMOTE_TEMP": str(home / "tmp"),
        "ANSIBLE_GALAXY_CACHE_DIR": str(home / "galaxy-cache"),
        "ANSIBLE_NOCOLOR": "1",
        "NO_COLOR": "1",
        "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")]),
    }
    return subprocess.run(
        [str(BIN / args[0]), *args[1:]],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=600, check=False,
    )  # fmt: skip


def test_every_role_is_there():
    missing = [role for role in EXPECTED_ROLES if role not in ROLES]
    assert not missing, f"roles missing under roles/: {missing}"


@pytest.mark.parametrize("role", SERVICE_ROLES)
def test_role_has_the_required_files(role):
    missing = [name for name in REQUIRED_FILES if not (ROLES_DIR / role / name).is_file()]
    assert not missing, f"roles/{role} lacks {missing}"


@pytest.mark.parametrize("role", ROLES)
def test_defaults_are_prefixed_and_match_the_argument_spec(role):
    defaults = load(ROLES_DIR / role / "defaults/main.yml") or {}
    specs = load(ROLES_DIR / role / "meta/argument_specs.yml")
    options = specs["argument_specs"]["main"].get("options") or {}
    unprefixed = [name for name in defaults if not name.startswith(f"{role}_")]
    assert not unprefixed, f"roles/{role}: defaults not prefixed with {role}_: {unprefixed}"
    assert set(defaults) == set(options), (
        f"roles/{role}: only in defaults/main.yml: {sorted(set(defaults) - set(options))}; "
        f"only in meta/argument_specs.yml: {sorted(set(options) - set(defaults))}"
    )
    problems = []
    for name, option in options.items():
        for key in ("type", "description"):
            if key not in option:
                problems.append(f"{name} has no {key}")
        if "default" not in option:
            problems.append(f"{name} has no default (defaults/main.yml: {defaults[name]!r})")
        elif option["default"] != defaults[name]:
            problems.append(
                f"{name}: argument spec default {option['default']!r} != {defaults[name]!r}"
            )
    assert not problems, f"roles/{role}: " + "; ".join(problems)


@pytest.mark.parametrize("role", ROLES)
def test_meta_follows_the_conventions(role):
    meta = load(ROLES_DIR / role / "meta/main.yml")
    info = meta["galaxy_info"]
    assert info.get("author") == "onyx", f"roles/{role}: author"
    assert info.get("license") == "Apache-2.0", f"roles/{role}: license"
    assert str(info.get("min_ansible_version")) == "2.17", f"roles/{role}: min_ansible_version"
    platforms = {p["name"]: p.get("versions", []) for p in info.get("platforms", [])}
    assert "trixie" in platforms.get("Debian", []), f"roles/{role}: platforms {platforms}"
    assert "noble" in platforms.get("Ubuntu", []), f"roles/{role}: platforms {platforms}"
    assert meta.get("dependencies") == [], f"roles/{role}: dependencies must be []"


@pytest.mark.parametrize("role", SERVICE_ROLES)
def test_tasks_main_includes_the_phases_in_order_with_tags(role):
    tasks = load(ROLES_DIR / role / "tasks/main.yml") or []
    found = []
    for task in tasks:
        module = next((key for key in INCLUDES if key in task), None)
        assert module is not None, f"roles/{role}/tasks/main.yml may only include tasks: {task}"
        spec = task[module]
        found.append(spec["file"] if isinstance(spec, dict) else spec)
        phase = Path(found[-1]).stem
        tags = set(task.get("tags") or [])
        if isinstance(spec, dict):
            tags |= set((spec.get("apply") or {}).get("tags") or [])
        assert {role, f"{role}_{phase}"} <= tags, (
            f"roles/{role}/tasks/main.yml: the include of {found[-1]} needs tags "
            f"[{role}, {role}_{phase}], has {sorted(tags)}"
        )
    assert found == [f"{phase}.yml" for phase in PHASES], f"roles/{role}/tasks/main.yml: {found}"


@pytest.mark.parametrize("template", TEMPLATES, ids=rel)
def test_template_starts_with_ansible_managed(template):
    lines = template.read_text().splitlines()
    assert lines, f"{rel(template)} is empty"
    assert MANAGED.fullmatch(lines[0].strip()), f"{rel(template)} starts with {lines[0]!r}"


def _directives(lines: list[str]) -> list[str]:
    return [line.split("=", 1)[0] for line in lines if "=" in line and not line.startswith("#")]


def _service_section(unit: Path) -> list[str]:
    """The lines of a unit template's [Service] section, the shared hardening read in."""
    section, lines = "", []
    for line in (raw.strip() for raw in unit.read_text().splitlines()):
        if line.startswith("["):
            section = line
        elif section == "[Service]":
            lines += SHARED_HARDENING.read_text().splitlines() if line == SHARED_LOOKUP else [line]
    return lines


@pytest.mark.parametrize("unit", UNITS, ids=rel)
def test_unit_template_is_hardened(unit):
    lines = _service_section(unit)
    missing = [d for d in HARDENING if not any(line.startswith(d) for line in lines)]
    assert not missing, f"{rel(unit)} lacks {missing}"


def test_the_shared_hardening_is_at_least_the_conventions():
    lines = SHARED_HARDENING.read_text().splitlines()
    own = ("User=", "Group=", "PrivateDevices=", "Restart=on-failure", "RestartSec=")
    missing = [d for d in HARDENING if d not in own and not any(x.startswith(d) for x in lines)]
    assert not missing, f"{rel(SHARED_HARDENING)} lacks {missing}"
    assert len(_directives(lines)) == len(set(_directives(lines)))


@pytest.mark.parametrize("unit", UNITS, ids=rel)
def test_every_unit_carries_the_shared_hardening_unweakened(unit):
    """Every unit (and every drop-in over a package's unit) reads the one shared hardening into
    its [Service] section and sets none of its directives itself, so none is weaker than another."""
    text = [line.strip() for line in unit.read_text().splitlines()]
    assert text.count(SHARED_LOOKUP) == 1, f"{rel(unit)} does not read {rel(SHARED_HARDENING)}"
    section = ""
    for line in text:
        section = line if line.startswith("[") else section
        if line == SHARED_LOOKUP:
            assert section == "[Service]", f"{rel(unit)} reads the hardening into {section}"
    shared = set(_directives(SHARED_HARDENING.read_text().splitlines()))
    own = set(_directives([line for line in text if line != SHARED_LOOKUP]))
    assert not own & shared, f"{rel(unit)} sets {sorted(own & shared)} itself"


@pytest.mark.parametrize("role", SERVICE_ROLES)
def test_platform_checks_and_system_users_are_the_shared_roles(role):
    """The platform check and the creation of system accounts are written once, in the shared
    role: every role includes its platform check first, and creates no account of its own."""
    preflight = load(ROLES_DIR / role / "tasks/preflight.yml")
    first = preflight[0].get("ansible.builtin.include_role", {})
    assert first == {"name": SHARED, "tasks_from": "platform.yml"}, f"roles/{role}: {preflight[0]}"
    tasks = [t for path in (ROLES_DIR / role / "tasks").glob("*.yml") for t in load(path) or []]
    own = [t["name"] for t in tasks if {"ansible.builtin.user", "ansible.builtin.group"} & set(t)]
    assert own == [], f"roles/{role} creates accounts itself: {own}"


def _conditionals(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in CONDITIONALS and isinstance(value, (str, list)):
                yield from [value] if isinstance(value, str) else map(str, value)
            else:
                yield from _conditionals(value)
    elif isinstance(node, list):
        for item in node:
            yield from _conditionals(item)


def _expressions(path: Path) -> list[str]:
    """The Jinja a role file evaluates: what is inside {{ }} and {% %}, and conditionals."""
    text = path.read_text()
    found = [a or b for a, b in JINJA.findall(text)]
    if path.suffix == ".yml":
        found += _conditionals(load(path))
    return found


@pytest.mark.parametrize("role", ROLES)
def test_boolean_variables_are_read_through_the_bool_filter(role):
    """`-e flag=false` on the command line sets the string "false", which is true: every
    expression that reads a bool variable of the role reads it as `flag | bool`."""
    options = load(ROLES_DIR / role / "meta/argument_specs.yml")["argument_specs"]["main"]
    flags = [k for k, v in (options.get("options") or {}).items() if v.get("type") == "bool"]
    files = [
        path for path in sorted((ROLES_DIR / role).rglob("*"))
        if path.suffix in (".yml", ".j2") and path.parent.name not in ("defaults", "meta")
    ]  # fmt: skip
    bare = [
        f"{rel(path)}: {expression.strip()}"
        for path in files
        for expression in _expressions(path)
        for flag in flags
        if re.search(rf"\b{flag}\b(?!\s*\|\s*bool)", expression)
    ]
    assert bare == []


def test_yamllint(tmp_path):
    result = run_tool(
        ["yamllint", "-f", "parsable", "-c", "deploy/.yamllint", "roles", "deploy"], tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ansible_lint(tmp_path):
    result = run_tool(
        ["ansible-lint", "--offline", "--nocolor", "--profile", "production",
         "--yamllint-file", "deploy/.yamllint", "roles", "deploy"],
        tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
