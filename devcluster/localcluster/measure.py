"""Measure the devcluster's warm start time and memory on this machine.

    PYTHONPATH=devcluster .venv/bin/python -m localcluster.measure --runs 5

Starts and stops the cluster `--runs` times per shape (binaries already
built), then runs a small DRA workload (claims and pods that share them) and
reads each component's peak resident memory (VmHWM) before stopping it.
Prints a Markdown table for docs/devcluster.md.
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
        total = 0.0
        for name, pid in state.pids.items():
            if procs.alive(pid):
                mib = _hwm_mib(pid)
                total += mib
                print(f"| {name} | {mib:.0f} MiB |")
        print(f"| **total** | **{total:.0f} MiB** |")
    finally:
        cluster.down(paths)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
