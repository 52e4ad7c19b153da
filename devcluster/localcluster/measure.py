"""Measure the devcluster's warm start time and memory on this machine.

    PYTHONPATH=devcluster .venv/bin/python -m localcluster.measure --runs 5

Starts and stops the cluster `--runs` times per shape (binaries already
built), then runs a small DRA workload (claims and pods that share them) and
reads each component's peak resident memory (VmHWM) before stopping it.
The control-plane components run under `localcluster.supervise`, whose pids
`state.json` holds: the component is the supervisor's child, and the
supervisors' own memory is reported in a row of its own. Prints Markdown
tables for docs/devcluster.md.
"""

from __future__ import annotations

import argparse
import statistics
import time

from . import cluster, procs, waits
from .kubeapi import KubeAPI
from .paths import ClusterPaths
from .testing import claim, exec_pod


def _hwm_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def memory_rows(pids: dict[str, int]) -> list[tuple[str, float]]:
    """(row, MiB) per component, then one row for all supervisors together.

    A supervised component's pid in `pids` is its supervisor's: the component is
    the supervisor's only child. The runtime is not supervised (its pid is its own;
    its children are pod processes, not counted).
    """
    rows: list[tuple[str, float]] = []
    supervisors: list[float] = []
    for name, pid in pids.items():
        if not procs.alive(pid):
            continue
        if name not in cluster.SUPERVISED:
            rows.append((name, _hwm_mib(pid)))
            continue
        supervisors.append(_hwm_mib(pid))
        kids = procs.children(pid)
        rows.append((name, _hwm_mib(kids[0]) if kids else 0.0))
    if supervisors:
        rows.append((f"supervisors ({len(supervisors)} x `localcluster.supervise`)", sum(supervisors)))
    return rows


def _workload(api: KubeAPI, pods: int) -> None:
    ns = "measure"
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    sel = ["device.attributes['gpu.nvidia.com'].type == 'mig'"]
    for i in range(pods):
        api.create(claim(f"c{i}", "mig.nvidia.com", sel), ns)
        api.create(exec_pod(f"holder{i}", claim_name=f"c{i}", command=["sleep", "3600"]), ns)
        api.create(exec_pod(f"nb{i}", claim_name=f"c{i}", command=["sleep", "3600"]), ns)
    for i in range(pods):
        waits.pod_ready(api, ns, f"nb{i}", timeout=120)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--shapes", default="small,demo")
    ap.add_argument("--pods", type=int, default=8, help="claims in the workload (each with 2 pods)")
    args = ap.parse_args()
    paths = ClusterPaths.default()
    if cluster.healthy(paths):
        print("stop the running cluster first (make cluster-down)")
        return 1
    print(f"| shape | warm start, median (min-max) of {args.runs} |")
    print("|---|---|")
    for shape in args.shapes.split(","):
        times = []
        for _ in range(args.runs):
            t0 = time.monotonic()
            cluster.up(shape, paths=paths)
            times.append(time.monotonic() - t0)
            cluster.down(paths)
        print(f"| {shape} | {statistics.median(times):.1f} s ({min(times):.1f}-{max(times):.1f}) |")
    state = cluster.up("demo", paths=paths)
    try:
        _workload(KubeAPI.from_kubeconfig(paths.kubeconfig), args.pods)
        print()
        print(f"| component | peak RSS after {args.pods} claims / {2 * args.pods} pods on `demo` |")
        print("|---|---|")
        rows = memory_rows(state.pids)
        for name, mib in rows:
            print(f"| {name} | {mib:.0f} MiB |")
        print(f"| **total** | **{sum(mib for _, mib in rows):.0f} MiB** |")
    finally:
        cluster.down(paths)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
