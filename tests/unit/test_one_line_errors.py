"""`python -m localcluster`: an unexpected error is one line, the traceback goes to a log."""

from __future__ import annotations

from pathlib import Path

import pytest

from localcluster import __main__ as cli


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
