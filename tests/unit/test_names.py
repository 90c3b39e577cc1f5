"""Each class name in peer/ has one meaning: no two modules define a class of the same name, so
a reader (and a log line, and a traceback) that names one names it without a module."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PEER = Path(__file__).resolve().parents[2] / "peer"


def test_no_class_name_is_defined_twice() -> None:
    defined: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PEER.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                defined[node.name].append(str(path.relative_to(PEER.parent)))
    twice = {name: paths for name, paths in defined.items() if len(paths) > 1}
    assert not twice, f"class names defined in more than one module: {twice}"
