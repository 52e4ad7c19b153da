"""Errors a person meets outside a running cluster are one line, never a traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from localcluster import __main__ as cli
from localcluster.paths import REPO_ROOT

BUILD = REPO_ROOT / "devcluster" / "scripts" / "build.sh"


def test_build_without_go_is_one_line_and_fails(tmp_path: Path) -> None:
    # A PATH with only what the script needs before it looks for Go.
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("dirname",):
        (tools / tool).symlink_to(
            subprocess.check_output(["bash", "-c", f"command -v {tool}"], text=True).strip()
        )
    env = {"PATH": str(tools), "HOME": str(tmp_path), "BIN_DIR": str(tmp_path / "bin")}
    r = subprocess.run(["/bin/bash", str(BUILD)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1, r.stderr
    assert "the Go toolchain is missing" in r.stderr and "install Go" in r.stderr
    assert not (tmp_path / "bin").exists()


def test_an_unexpected_error_is_one_line_with_the_traceback_in_a_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "dc"
    (root / "lock").mkdir(parents=True)  # an unusual setup: the lock file is a folder
    monkeypatch.setenv("DEVCLUSTER_DIR", str(root))
    assert cli.main(["down"]) == 1
    out, err = capsys.readouterr()
    log = root / "logs" / "localcluster-error.log"
    assert out == ""
    lock = root / "lock"
    problem = f"IsADirectoryError: [Errno 21] Is a directory: '{lock}'"
    assert err == f"devcluster: error: unexpected {problem} (traceback in {log})\n"
    assert "Traceback (most recent call last)" in log.read_text()
    assert "localcluster down" in log.read_text()
