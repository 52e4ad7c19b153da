"""localcluster.measure reads the memory of the components, not of their supervisors."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from localcluster import measure

from .supervisetools import run_supervised, terminate

HOG = "import time; b = bytearray(150 * 2**20); open('ready', 'w').close(); time.sleep(60)"


def test_memory_rows_measure_the_supervised_component_and_the_supervisors_apart(tmp_path: Path) -> None:
    sup = run_supervised(tmp_path, f'exec {sys.executable} -c "{HOG}"', grace=0.1)
    runtime = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        rows = dict(measure.memory_rows({"kube-scheduler": sup.pid, "runtime": runtime.pid}))
    finally:
        terminate(sup)
        runtime.kill()
        sup.wait(10)
        runtime.wait(10)
    assert rows["kube-scheduler"] >= 150, rows  # the child holding 150 MiB, not the supervisor
    supervisors = rows["supervisors (1 x `localcluster.supervise`)"]
    assert 0 < supervisors < 100, rows
    assert 0 < rows["runtime"] < 100, rows
