"""The package's layers stay visible: imports at the top of each module, none inside a function
except the few that keep a heavy dependency out of a part that lacks it.

The layers themselves and the absence of import cycles are import-linter's contracts
(`[tool.importlinter]` in pyproject.toml, `make lint`); this keeps the imports where a reader
(and import-linter's graph, which sees every import) finds them."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "spawner" / "gpusessions"

# module -> what it may import inside a function, and why
ALLOWED = {
    # The holder's agent runs `gpusessions.agent` without JupyterHub in its image.
    "__init__.py": {"gpusessions.hub.spawner"},
    # The simulated cluster's holders and the tests run the agent without the NVIDIA bindings.
    "agent/nvml.py": {"pynvml"},
    # `make gpu-check` on a machine without them says so in a line.
    "agent/gpucheck.py": {"pynvml"},
    # A kernel that never imported pandas does not import pyarrow to park or restore.
    "park/frames.py": {"pyarrow"},
}


def function_level_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for fn in ast.walk(ast.parse(path.read_text())):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                found.add(node.module or ".")
    return found


def test_imports_are_at_the_top_of_each_module() -> None:
    wrong = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        extra = function_level_imports(path) - ALLOWED.get(rel, set())
        if extra:
            wrong[rel] = sorted(extra)
    assert not wrong, f"imports inside functions (move them to the top; a cycle is a layer to fix): {wrong}"


def test_the_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("import os\n\n\ndef f():\n    from gpusessions.hub import spawner\n    import json\n")
    assert function_level_imports(f) == {"gpusessions.hub", "json"}
