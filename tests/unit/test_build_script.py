"""devcluster/scripts/build.sh: what decides a rebuild, and its one-line error without Go."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from localcluster.paths import REPO_ROOT

DEVCLUSTER = REPO_ROOT / "devcluster"
BUILD = DEVCLUSTER / "scripts" / "build.sh"


def source_hash(devcluster: Path) -> str:
    return subprocess.run(
        ["bash", str(devcluster / "scripts" / "build.sh"), "--source-hash"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()


def test_a_change_to_the_script_itself_rebuilds(tmp_path: Path) -> None:
    copy = tmp_path / "devcluster"
    shutil.copytree(DEVCLUSTER, copy, ignore=shutil.ignore_patterns("__pycache__", "localcluster", "shapes"))
    assert source_hash(copy) == source_hash(DEVCLUSTER), "the hash depends on the contents, not the folder"
    script = copy / "scripts" / "build.sh"
    script.write_text(script.read_text().replace("-X $pkg.gitTreeState=clean", "-X $pkg.gitTreeState=dirty"))
    assert source_hash(copy) != source_hash(DEVCLUSTER), "new ldflags must rebuild"


def test_build_without_go_is_one_line_and_fails(tmp_path: Path) -> None:
    # A PATH with only what the script needs before it looks for Go.
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "dirname").symlink_to(shutil.which("dirname") or "/usr/bin/dirname")
    env = {"PATH": str(tools), "HOME": str(tmp_path), "BIN_DIR": str(tmp_path / "bin")}
    r = subprocess.run(["/bin/bash", str(BUILD)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1, r.stderr
    assert "the Go toolchain is missing" in r.stderr and "install Go" in r.stderr
    assert not (tmp_path / "bin").exists()
