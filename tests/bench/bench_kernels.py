"""Benchmark: resuming a session whose kernel was kept vs a cold start that rebuilds the state.

    .venv/bin/python tests/bench/bench_kernels.py [--gib 2] [--rounds 3]

On the local cluster (started if needed, shape small) with a real JupyterHub and
GPUSessionSpawner (persist_kernels on). The "model" is a weights file of --gib GiB in
the user's home; building the state means reading it into the kernel's memory and
checksumming it (a stand-in for loading weights; a real load onto a GPU also copies and
often converts them, so it is slower than this).

- cold: no kept GPU or kernel (released before): spawn, start a kernel, load the model;
- warm: the server was stopped, the GPU and its kernel kept: spawn, find the session's
  kernel, check the model is there.

Each round measures both, side by side; medians and the ratio warm/cold are printed
as Markdown and JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "spawner"), str(ROOT / "devcluster"), str(ROOT)]

from tests.integration.hubtools import gpu_hub, spawn, stop  # noqa: E402
from tests.integration.kerneltools import execute  # noqa: E402

from localcluster import cluster as lc  # noqa: E402
from localcluster.kubeapi import KubeAPI  # noqa: E402
from localcluster.paths import ClusterPaths  # noqa: E402

USER = "bench"
PROFILE = {"profile": "mig-1g-10gb"}
LOAD = """
import zlib
with open('weights.bin', 'rb') as f:
    model = bytearray(f.read())
print(len(model), zlib.crc32(model))
"""
CHECK = "print(len(model), zlib.crc32(model[:1 << 20]))"


def call(hub: Any, method: str, path: str, body: Any = None) -> Any:
    req = urllib.request.Request(
        hub.url + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"token {hub.token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        raw = r.read()
        return json.loads(raw) if raw else None


def cold(hub: Any) -> dict[str, float]:
    t0 = time.perf_counter()
    spawn(hub, USER, PROFILE)
    t1 = time.perf_counter()
    s = call(
        hub,
        "POST",
        f"/user/{USER}/api/sessions",
        {"path": "model.ipynb", "name": "model.ipynb", "type": "notebook", "kernel": {"name": "python3"}},
    )
    execute(hub.url, USER, s["kernel"]["id"], hub.token, LOAD, timeout=600)
    t2 = time.perf_counter()
    return {"total": t2 - t0, "spawn": t1 - t0, "state": t2 - t1}


def warm(hub: Any) -> dict[str, float]:
    t0 = time.perf_counter()
    spawn(hub, USER, PROFILE)
    t1 = time.perf_counter()
    [s] = call(hub, "GET", f"/user/{USER}/api/sessions")
    out = execute(hub.url, USER, s["kernel"]["id"], hub.token, CHECK, timeout=600)
    t2 = time.perf_counter()
    assert int(out.split()[0]) > 0, out
    return {"total": t2 - t0, "spawn": t1 - t0, "state": t2 - t1}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=2.0, help="model size in GiB")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    paths = ClusterPaths.default()
    started = not lc.healthy(paths)
    lc.up("small", paths=paths)
    api = KubeAPI.from_kubeconfig(paths.kubeconfig)
    ns = f"bench-kernels-{int(time.time())}"
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    home = paths.homes / ns / USER
    home.mkdir(parents=True, exist_ok=True)
    size = int(args.gib * 2**30)
    chunk = bytes(range(256)) * 4096
    with open(home / "weights.bin", "wb") as f:
        for _ in range(size // len(chunk)):
            f.write(chunk)
    hub = gpu_hub(ns, Path(tempfile.mkdtemp(prefix="bench-kernels-")))
    rows: list[tuple[dict[str, float], dict[str, float]]] = []
    try:
        for i in range(args.rounds):
            c = cold(hub)
            stop(hub, USER)  # the GPU and the kernel are kept
            w = warm(hub)
            stop(hub, USER)
            assert call(hub, "POST", f"/hub/api/gpusessions/users/{USER}/release")["released"]
            rows.append((c, w))
            print(f"round {i + 1}: cold {c['total']:.2f} s, warm {w['total']:.2f} s", file=sys.stderr)
    finally:
        hub.stop()
        (home / "weights.bin").unlink(missing_ok=True)
        api.delete("Namespace", ns)
        if started:
            lc.down(paths)

    def med(which: int, key: str) -> float:
        return statistics.median(r[which][key] for r in rows)

    result = {
        "command": f"tests/bench/bench_kernels.py --gib {args.gib:g} --rounds {args.rounds}",
        "date": time.strftime("%Y-%m-%d"),
        "model_gib": args.gib,
        "rounds": args.rounds,
        "cold": {k: round(med(0, k), 3) for k in ("total", "spawn", "state")},
        "warm": {k: round(med(1, k), 3) for k in ("total", "spawn", "state")},
    }
    result["ratio_warm_over_cold"] = round(result["warm"]["total"] / result["cold"]["total"], 3)
    print("| | cold start (rebuild state) | resume (kept kernel) |")
    print("|---|---|---|")
    for key, label in (("spawn", "server ready"), ("state", "state ready after that"), ("total", "total")):
        print(f"| {label} | {result['cold'][key]:.2f} s | {result['warm'][key]:.2f} s |")
    print(f"\nratio resume / cold start: {result['ratio_warm_over_cold']:.3f}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
