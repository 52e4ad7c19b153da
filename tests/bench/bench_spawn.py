"""Benchmark: spawn latency of plain KubeSpawner vs GPUSessionSpawner cold and warm.

    .venv/bin/python tests/bench/bench_spawn.py [--spawns 20] [--json out.json]

On the local cluster (shape small) with real JupyterHubs and configurable-http-proxy:

- plain: `kubespawner.KubeSpawner`, no GPU (its own hub);
- cold: GPUSessionSpawner, MIG 1g.10gb, nothing kept: claim, holder (with the kernel
  host), allocation, then the notebook pod; released after each stop;
- warm: the same server started again with its GPU (and kernel host) kept.

The three kinds alternate in each round, so the machine's load hits them alike. A spawn
is timed from the REST call to the server reporting ready. The hub logs every Kubernetes
API request (a wrapper around kubernetes_asyncio's ApiClient.call_api, in the bench's hub
config) so requests are counted per spawn; the phases come from the hub log's timestamps.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "spawner"), str(ROOT / "devcluster"), str(ROOT)]

from tests.integration.hubtools import GPU_HUB_CONFIG, server_model  # noqa: E402

from localcluster import cluster as lc  # noqa: E402
from localcluster.hubproc import Hub, start_hub  # noqa: E402
from localcluster.kubeapi import KubeAPI  # noqa: E402
from localcluster.paths import ClusterPaths  # noqa: E402

COUNT_API = """
import logging as _logging
import kubernetes_asyncio.client.api_client as _ac
_call_api = _ac.ApiClient.call_api
async def _counted(self, resource_path, method, *args, **kwargs):
    _logging.getLogger("JupyterHub").info("KUBEAPI %s %s", method, resource_path)
    return await _call_api(self, resource_path, method, *args, **kwargs)
_ac.ApiClient.call_api = _counted
c.KubeSpawner.poll_interval = 3600  # no polls inside the measurements
"""
PLAIN = """
c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.KubeSpawner.namespace = {namespace!r}
c.KubeSpawner.image = "quay.io/jupyterhub/singleuser:5"
c.KubeSpawner.start_timeout = 60
"""
STAMP = re.compile(r"^\[\w (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) ")


def lines_since(hub: Hub, offset: int) -> tuple[list[str], int]:
    data = hub.log.read_bytes()
    return data[offset:].decode(errors="replace").splitlines(), len(data)


def when(line: str) -> float | None:
    m = STAMP.match(line)
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp() if m else None


def first(lines: list[str], needle: str) -> float | None:
    return next((t for ln in lines if needle in ln and (t := when(ln)) is not None), None)


def spawn(hub: Hub, user: str, options: dict[str, Any] | None) -> dict[str, float]:
    _, offset = lines_since(hub, 0)
    t0 = time.time()
    code, body = hub.api("POST", f"/users/{user}/server", {"user_options": options} if options else None)
    assert code in (201, 202), (code, body)
    while not (server_model(hub, user) or {}).get("ready"):
        time.sleep(0.05)
    total = time.time() - t0
    time.sleep(0.3)  # let the last log lines land
    lines, _ = lines_since(hub, offset)
    out = {"total": total, "api_calls": float(sum("KUBEAPI" in ln for ln in lines))}
    gpu = first(lines, "GPU allocated") or first(lines, "GPU kept from your last start")
    pod = first(lines, f"Attempting to create pod jupyter-{user}")
    if gpu is not None:
        out["gpu"] = gpu - t0
    if pod is not None:
        out["pod"] = t0 + total - pod
        if gpu is not None:
            out["kernel_host"] = pod - gpu
    return out


def stop(hub: Hub, user: str, release: bool = False) -> None:
    code, _ = hub.api("DELETE", f"/users/{user}/server")
    assert code in (202, 204)
    while (m := server_model(hub, user)) and (m.get("ready") or m.get("pending")):
        time.sleep(0.1)
    if release:
        code, _ = hub.api("POST", f"/gpusessions/users/{user}/release")
        assert code == 200


def summary(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return {
        "median": round(statistics.median(xs), 3),
        "p25": round(q[0], 3),
        "p75": round(q[2], 3),
        "min": round(xs[0], 3),
        "max": round(xs[-1], 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spawns", type=int, default=20)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    paths = ClusterPaths.default()
    started = not lc.healthy(paths)
    lc.up("small", paths=paths)
    api = KubeAPI.from_kubeconfig(paths.kubeconfig)
    ns = f"bench-spawn-{int(time.time())}"
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    work = Path(tempfile.mkdtemp(prefix="bench-spawn-"))
    plain = start_hub(PLAIN.format(namespace=ns) + COUNT_API, work / "plain")
    gpu = start_hub(GPU_HUB_CONFIG.format(namespace=ns) + COUNT_API, work / "gpu")
    runs: dict[str, list[dict[str, float]]] = {"plain": [], "cold": [], "warm": []}
    try:
        for user in ("p", "g"):
            (plain if user == "p" else gpu).api("POST", f"/users/{user}")
        for i in range(args.spawns):
            runs["plain"].append(spawn(plain, "p", None))
            stop(plain, "p")
            runs["cold"].append(spawn(gpu, "g", {"profile": "mig-1g-10gb"}))
            stop(gpu, "g")  # GPU and kernel host kept
            runs["warm"].append(spawn(gpu, "g", {"profile": "mig-1g-10gb"}))
            stop(gpu, "g", release=True)
            last = {k: f"{v[-1]['total']:.2f} s" for k, v in runs.items()}
            print(f"round {i + 1}: {last}", file=sys.stderr)
    finally:
        plain.stop()
        gpu.stop()
        api.delete_collection("Pod", ns, grace_period=0)
        api.delete("Namespace", ns)
        if started:
            lc.down(paths)

    result: dict[str, Any] = {
        "command": f"tests/bench/bench_spawn.py --spawns {args.spawns}",
        "date": time.strftime("%Y-%m-%d"),
        "spawns_each": args.spawns,
    }
    for kind, rs in runs.items():
        result[kind] = {k: summary([r[k] for r in rs if k in r]) for k in rs[0]}
    p = result["plain"]["total"]["median"]
    result["ratio_cold_over_plain"] = round(result["cold"]["total"]["median"] / p, 3)
    result["ratio_warm_over_plain"] = round(result["warm"]["total"]["median"] / p, 3)
    print("| | plain KubeSpawner | GPUSessionSpawner cold | GPUSessionSpawner warm |")
    print("|---|---|---|---|")
    for key, label in (
        ("total", "spawn to ready, median (p25-p75)"),
        ("gpu", "claim, holder, allocation"),
        ("kernel_host", "kernel host ready"),
        ("pod", "notebook pod to ready"),
        ("api_calls", "Kubernetes API requests"),
    ):
        cells = []
        for kind in ("plain", "cold", "warm"):
            s = result[kind].get(key)
            unit = "" if key == "api_calls" else " s"
            cells.append("-" if s is None else f"{s['median']:.2f}{unit} ({s['p25']:.2f}-{s['p75']:.2f})")
        print(f"| {label} | " + " | ".join(cells) + " |")
    cold, warm = result["ratio_cold_over_plain"], result["ratio_warm_over_plain"]
    print(f"\nratios of medians: cold/plain {cold}, warm/plain {warm}")
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
