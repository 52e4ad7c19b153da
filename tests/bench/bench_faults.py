"""Benchmark: 50 concurrent spawns and the culler's culls across an apiserver restart.

    .venv/bin/python tests/bench/bench_faults.py [--spawns 50] [--json out.json]

Runs the fault test `test_apiserver_restart_during_concurrent_spawns_and_culls_leaks_nothing`
(tests/integration/test_faults.py; `make test` runs it with 12 spawns) with `--spawns` users
spawning at once, on the local cluster (shape small: 9 MIG 1g.10gb slices, so most spawns wait
for a slice a cull frees). The test asserts that every spawn ends ready or refused in words,
that the culler releases everything, that no claim, holder or notebook pod is left and that no
server ever had two claims; this reports its wall time and what the test printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST = (
    "tests/integration/test_faults.py"
    "::test_apiserver_restart_during_concurrent_spawns_and_culls_leaks_nothing"
)
LINE = re.compile(
    r"(\d+) concurrent spawns: (\d+) ready, (\d+) refused in words; apiserver restarted at (\d+) s; "
    r"all released at (\d+) s"
)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spawns", type=int, default=50)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    env = {**os.environ, "GPUSESSIONS_FAULT_SPAWNS": str(args.spawns), "PYTHONPATH": str(ROOT / "devcluster")}
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", TEST, "-p", "no:xdist", "-q", "-s"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    wall = time.monotonic() - t0
    sys.stdout.write(proc.stdout[-4000:])
    m = LINE.search(proc.stdout)
    if proc.returncode != 0 or m is None:
        print(f"the fault test failed (exit {proc.returncode})", file=sys.stderr)
        return 1
    spawns, ready, refused, restarted, released = (int(x) for x in m.groups())
    figures = {
        "spawns": spawns,
        "ready": ready,
        "refused_in_words": refused,
        "apiserver_restarted_at_s": restarted,
        "all_released_at_s": released,
        "pytest_wall_s": round(wall, 1),
    }
    print(json.dumps(figures))
    if args.json:
        doc = {
            "command": f"tests/bench/bench_faults.py --spawns {args.spawns}",
            "date": time.strftime("%Y-%m-%d"),
            "figures": figures,
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
