"""pyproject.toml installs what each part imports, and nothing it does not.

Each part (the hub side, the culler, the holder's agent, the notebook side) is installed
with the base dependencies and its extra; the images install exactly that
(images/*/Dockerfile). Every third-party module a part imports, also through the
gpusessions modules it imports, must come from a distribution declared there."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "spawner" / "gpusessions"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
NAME = PROJECT["name"]
# The part, and the gpusessions modules it starts from.
PARTS = {
    "hub": ["gpusessions", "gpusessions.hub"],
    "culler": ["gpusessions.culler"],
    "agent": ["gpusessions.agent"],
    "notebook": ["gpusessions.notebook"],
    "park": ["gpusessions.park"],
}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(req: str) -> tuple[str, list[str]]:
    m = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?", req)
    assert m, req
    extras = [e.strip() for e in (m.group(2) or "").split(",") if e.strip()]
    return _norm(m.group(1)), extras


def declared(extra: str | None) -> set[str]:
    """Distributions the base install plus `extra` brings (self-references resolved)."""
    out: set[str] = set()
    todo = list(PROJECT["dependencies"]) + (PROJECT["optional-dependencies"][extra] if extra else [])
    seen_extras = {extra}
    while todo:
        name, extras = _requirement_name(todo.pop())
        if name == _norm(NAME):
            for e in extras:
                if e not in seen_extras:
                    seen_extras.add(e)
                    todo += PROJECT["optional-dependencies"][e]
        else:
            out.add(name)
    return out


def _module_file(module: str) -> Path | None:
    rel = Path(*module.split("."))
    for candidate in (ROOT / "spawner" / rel / "__init__.py", ROOT / "spawner" / rel.with_suffix(".py")):
        if candidate.exists():
            return candidate
    return None


@cache
def _imports(path: Path) -> frozenset[str]:
    """Every module named in an import statement of the file (also inside functions)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return frozenset(found)


def third_party_imports(part: str) -> dict[str, str]:
    """Top-level third-party modules the part imports -> a gpusessions module importing it."""
    todo: list[str] = []
    for start in PARTS[part]:
        path = _module_file(start)
        assert path, start
        todo.append(start)
        if path.name == "__init__.py" and start != "gpusessions":
            todo += [f"{start}.{p.stem}" for p in path.parent.glob("*.py") if p.stem != "__init__"]
    seen: set[str] = set()
    found: dict[str, str] = {}
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = _module_file(module)
        if path is None:
            continue  # `from gpusessions.x import name`: a name, not a module
        for imported in _imports(path):
            top = imported.split(".")[0]
            if top == "gpusessions":
                parts = imported.split(".")
                todo += [".".join(parts[:i]) for i in range(2, len(parts) + 1)]
            elif top not in sys.stdlib_module_names and top != "__future__":
                found.setdefault(top, module)
    return found


@pytest.mark.parametrize("part", sorted(PARTS))
def test_each_part_declares_what_it_imports(part: str) -> None:
    dists = packages_distributions()
    have = declared(part)
    missing = {
        top: f"{where} imports it; it comes from {dists.get(top)}"
        for top, where in third_party_imports(part).items()
        if not {_norm(d) for d in dists.get(top, [top])} & have
    }
    assert not missing, f"the [{part}] install lacks: {missing}"


def test_the_agent_installs_no_jupyterhub() -> None:
    """The holder image stays small: tornado, NVML bindings and the Prometheus client."""
    assert declared("agent") == {"tornado", "nvidia-ml-py", "prometheus-client"}


# Declared for a program the part runs rather than a module it imports.
# The holder runs `jupyter kernelgateway` (kernel_gateway_command); a notebook job's pod runs
# `papermill` (core/jobs.py).
RUN_NOT_IMPORTED = {"jupyter-kernel-gateway", "papermill"}


def test_nothing_unused_is_declared() -> None:
    # `kubernetes` (the synchronous client) is imported nowhere; the `pynvml` distribution is a
    # deprecated wrapper: `import pynvml` comes from nvidia-ml-py.
    everything = declared("dev")
    assert "kubernetes" not in everything and "pynvml" not in everything
    imported = set().union(*(third_party_imports(p) for p in PARTS))
    dists = packages_distributions()
    for extra in ("hub", "culler", "agent", "notebook", "park"):
        for dist in declared(extra) - RUN_NOT_IMPORTED:
            provides = {m for m, ds in dists.items() if dist in {_norm(d) for d in ds}}
            assert provides & imported, f"[{extra}] declares {dist}, which no part imports"


def test_kubespawner_is_bounded_below_its_next_major() -> None:
    (req,) = [r for r in PROJECT["optional-dependencies"]["hub"] if r.startswith("jupyterhub-kubespawner")]
    assert re.search(r"<\s*8\b", req), req


@pytest.mark.parametrize(
    ("image", "extras"),
    [("holder", "[agent]"), ("hub", "[hub,culler]"), ("singleuser-gpu", "[notebook]")],
)
def test_images_install_their_extras(image: str, extras: str) -> None:
    text = (ROOT / "images" / image / "Dockerfile").read_text()
    assert f'"$(ls /tmp/wheels/*.whl){extras}"' in text
    assert "--no-deps" not in text
