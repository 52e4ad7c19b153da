"""devcluster/kai/build.sh without KAI's source: one line that says what to do, exit 1."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "devcluster" / "kai" / "build.sh"


def _run(script: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(script)], env={**os.environ, **env}, capture_output=True, text=True, timeout=60
    )


def test_a_kai_src_without_go_mod_is_one_line(tmp_path: Path) -> None:
    r = _run(SCRIPT, KAI_SRC=str(tmp_path / "nothing"))
    assert r.returncode == 1
    [line] = r.stderr.splitlines()
    assert line.startswith(f"kai: KAI_SRC={tmp_path / 'nothing'} has no go.mod: point it at a checkout of ")


def test_no_source_and_no_clone_is_one_line_saying_how_to_get_it(tmp_path: Path) -> None:
    # A project copy with no ../shared beside it; git may not use https (as without a network).
    here = tmp_path / "repo" / "devcluster" / "kai"
    shutil.copytree(SCRIPT.parent, here)
    r = _run(here / "build.sh", KAI_SRC="", GIT_ALLOW_PROTOCOL="file")
    assert r.returncode == 1
    line = r.stderr.splitlines()[-1]
    assert line.startswith(
        "kai: KAI Scheduler's source was not found and could not be cloned: run 'git clone "
    )
    assert "KAI_SRC=" in line
    assert not (tmp_path / "repo" / ".cache" / "kai" / "clone").exists()
