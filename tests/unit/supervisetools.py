"""Run a command under the control-plane supervisor (localcluster.supervise), for its tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from localcluster.paths import REPO_ROOT

ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "devcluster")}


def run_supervised(tmp_path: Path, script: str, grace: float) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "localcluster.supervise", "--name", "comp", "--grace", str(grace)]
    cmd += ["--", "bash", "-c", script]
    return subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def terminate(p: subprocess.Popen[str]) -> None:
    """As localcluster.procs.terminate does it: SIGTERM to the group and to the process."""
    os.killpg(p.pid, signal.SIGTERM)
    os.kill(p.pid, signal.SIGTERM)
