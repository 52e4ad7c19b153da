"""No god class: every class in the package stays under 500 lines (the spawner is glue; its
settings, a start's GPU phase and the poll's work live in modules of their own)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "spawner" / "gpusessions"
LIMIT = 500


def test_no_class_reaches_500_lines() -> None:
    sizes = {
        f"{path.relative_to(PACKAGE)}:{node.name}": node.end_lineno - node.lineno + 1
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None
    }
    assert len(sizes) > 50  # the package was read
    big = {name: n for name, n in sizes.items() if n >= LIMIT}
    assert not big, f"classes of {LIMIT} lines or more: {big}"
