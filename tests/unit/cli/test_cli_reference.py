"""The committed configuration reference is what the parser says today: an option added,
removed or changed in peer/cli.py without regenerating the page fails here."""

from __future__ import annotations

import argparse

from peer import cli_reference
from tests.support import REPO

PAGE = REPO / "docs/reference/configuration.md"


def test_the_committed_reference_is_what_the_parser_prints():
    committed = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    assert committed == cli_reference.render(), (
        f"{PAGE.relative_to(REPO)} is out of date with the `onyx` parser; regenerate it from "
        f"the repository's root with: .venv/bin/{cli_reference.COMMAND}"
    )


def test_an_option_added_to_the_parser_changes_the_reference():
    parser = cli_reference.cli.build_parser()
    start = dict(cli_reference.config.commands(parser))[("peer", "start")]
    before = cli_reference.render(parser)
    start.add_argument("--brand-new", type=int, default=7, metavar="N", help="a new knob")
    after = cli_reference.render(parser)
    assert "--brand-new" not in before
    assert "| `--brand-new` `N` | `brand_new`, `ONYX_BRAND_NEW` | `7` | a new knob |" in after


def test_defaults_under_the_home_directory_read_the_same_for_everyone(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    parser = argparse.ArgumentParser()
    parser.add_argument("--cache", default=str(tmp_path / ".onyx" / "code"), help="a cache")
    assert "`~/.onyx/code`" in cli_reference._command(("x",), parser, "")
