"""Benchmark: spawn latency under KAI Scheduler beside kube-scheduler, cold and warm.

    .venv/bin/python tests/bench/bench_kai.py [--spawns 10] [--json out.json]

On the local cluster (shape small), two real JupyterHubs with GPUSessionSpawner in one
namespace, MIG 1g.10gb sessions:

- kube: no `kai_queue`: claim, holder and notebook scheduled by kube-scheduler;
- kai: `kai_queue` set: the same pods scheduled by KAI (podgrouper, scheduler, binder),
  the claim labelled with the queue (a KAI Queue made here).

Cold: nothing kept (claim, holder with the kernel host, allocation, notebook pod); warm: the
same server started again with its GPU kept. The four kinds alternate in each round, so the
machine's load hits them alike. Phases from the hub log (see bench_spawn.py): `gpu` is the
request to the allocation (the holder's scheduling: KAI's schedule period and binder), `pod`
the notebook pod to ready (its own scheduling, then the process start).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "spawner"), str(ROOT / "devcluster"), str(ROOT), str(ROOT / "tests" / "bench")]

from bench_spawn import COUNT_API, spawn, stop, summary  # noqa: E402
from tests.integration.hubtools import GPU_HUB_CONFIG  # noqa: E402
from tests.integration.kaitools import queue  # noqa: E402

from localcluster import cluster as lc  # noqa: E402
from localcluster import kai  # noqa: E402
from localcluster.hubproc import start_hub  # noqa: E402
from localcluster.kubeapi import KubeAPI  # noqa: E402
from localcluster.paths import ClusterPaths  # noqa: E402

KINDS = ("kube_cold", "kai_cold", "kube_warm", "kai_warm")
PROFILE = {"profile": "mig-1g-10gb"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spawns", type=int, default=10)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    paths = ClusterPaths.default()
    started = not lc.healthy(paths)
    lc.up("small", paths=paths)
    api = KubeAPI.from_kubeconfig(paths.kubeconfig)
    stamp = int(time.time())
    ns, dept, team = f"bench-kai-{stamp}", f"bench-dept-{stamp}", f"bench-team-{stamp}"
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    api.create(queue(dept, 4, -1))
    api.create(queue(team, 4, 4, parent=dept))
    work = Path(tempfile.mkdtemp(prefix="bench-kai-"))
    base = GPU_HUB_CONFIG.format(namespace=ns) + COUNT_API
    hubs = {
        "kube": start_hub(base, work / "kube"),
        "kai": start_hub(base + f"\nc.GPUSessionSpawner.kai_queue = {team!r}\n", work / "kai"),
    }
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in KINDS}
    try:
        for name, hub in hubs.items():
            hub.api("POST", f"/users/{name}")
        for i in range(args.spawns):
            for sched in ("kube", "kai"):
                runs[f"{sched}_cold"].append(spawn(hubs[sched], sched, PROFILE))
                stop(hubs[sched], sched)  # GPU kept
            for sched in ("kube", "kai"):
                runs[f"{sched}_warm"].append(spawn(hubs[sched], sched, PROFILE))
                stop(hubs[sched], sched, release=True)
            last = {k: f"{v[-1]['total']:.2f} s" for k, v in runs.items()}
            print(f"round {i + 1}: {last}", file=sys.stderr)
    finally:
        for hub in hubs.values():
            hub.stop()
        api.delete_collection("Pod", ns, grace_period=0)
        api.delete("Namespace", ns)
        api.delete("Queue", team)
        api.delete("Queue", dept)
        if started:
            lc.down(paths)

    result: dict[str, Any] = {
        "command": f"tests/bench/bench_kai.py --spawns {args.spawns}",
        "date": time.strftime("%Y-%m-%d"),
        "spawns_each": args.spawns,
        "kai_schedule_period": kai.SCHEDULE_PERIOD,
    }
    for kind, rs in runs.items():
        result[kind] = {k: summary([r[k] for r in rs if k in r]) for k in rs[0]}
    med = {k: result[k]["total"]["median"] for k in KINDS}
    result["ratio_kai_cold_over_kube_cold"] = round(med["kai_cold"] / med["kube_cold"], 3)
    result["ratio_kai_warm_over_kube_warm"] = round(med["kai_warm"] / med["kube_warm"], 3)
    print("| | kube-scheduler cold | KAI cold | kube-scheduler warm | KAI warm |")
    print("|---|---|---|---|---|")
    for key, label in (
        ("total", "spawn to ready, median (p25-p75)"),
        ("gpu", "claim, holder, allocation"),
        ("kernel_host", "kernel host ready"),
        ("pod", "notebook pod to ready"),
        ("api_calls", "Kubernetes API requests"),
    ):
        cells = []
        for kind in KINDS:
            s = result[kind].get(key)
            unit = "" if key == "api_calls" else " s"
            cells.append("-" if s is None else f"{s['median']:.2f}{unit} ({s['p25']:.2f}-{s['p75']:.2f})")
        print(f"| {label} | " + " | ".join(cells) + " |")
    print(
        f"\nratios of medians: KAI cold / kube cold {result['ratio_kai_cold_over_kube_cold']}, "
        f"KAI warm / kube warm {result['ratio_kai_warm_over_kube_warm']}"
    )
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
