"""Benchmark: the admin page's data (fleet map, totals, chart, sessions) at 1,000 nodes x 8 GPUs
and 5,000 sessions.

    .venv/bin/python tests/bench/bench_fleet.py [--sessions 5000] [--json out.json]

The slices are the scale shape's (devcluster/shapes/scale.yaml: 1,000 nodes x 8 H100, whole
GPUs and static MIG, 28 devices a node), built by the fake driver's own code; the sessions
hold the first free devices of each node, a quarter each busy, idle, kept and starting; the
culler's record holds 8 days of 5-minute buckets for 4 queues x 3 profiles. Measured: the
service's CPU (time.process_time) to read the slices into the layout (once per slice change),
to build the page document (`PageData.build`: colour the fleet, describe the sessions, the two
chart ranges) and to serialize and gzip it as the service does once per document
(`PageData.serialize`, gzip level `GZIP_LEVEL`), and the bytes sent. Budget: <= 200 ms CPU
for document + serialization + gzip, <= 1 MB on the wire (best of 7 builds, the median
beside it; the verdict is printed and recorded, not an exit code).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "spawner"), str(ROOT / "devcluster")]

from gpusessions.culler.cycle import Culler  # noqa: E402
from gpusessions.culler.history import History  # noqa: E402
from gpusessions.culler.model import Session  # noqa: E402
from gpusessions.culler.pagedata import GZIP_LEVEL, PageData, no_gc  # noqa: E402
from gpusessions.culler.policy import Policy, Rules  # noqa: E402
from localcluster.paths import SHAPES_DIR  # noqa: E402
from localcluster.shapes import build_slices, load_shape  # noqa: E402

BUDGET_CPU_MS = 200.0
BUDGET_BYTES = 1_000_000
QUEUES = ["team-a", "team-b", "team-c", "team-d"]
PROFILES = ["mig-1g-10gb", "mig-3g-40gb", "gpu-80gb"]


class Cache:
    def __init__(self, objects: dict[str, Any]):
        self.objects, self.version, self.error = objects, 1, None
        self.ready = asyncio.Event()
        self.ready.set()


class FakeCluster:
    def __init__(self, slices: list[Any]):
        self.slices = Cache({s["metadata"]["name"]: s for s in slices})
        self.nodes = Cache({})


def sessions_on(slices: list[Any], n: int, now: float) -> list[Session]:
    devices = [
        (s["spec"]["nodeName"], s["spec"]["pool"]["name"], d)
        for s in sorted(slices, key=lambda s: s["metadata"]["name"])
        if s["spec"]["driver"] == "gpu.nvidia.com"
        for d in s["spec"].get("devices") or []
    ]
    step = max(1, len(devices) // n)
    out = []
    for i in range(n):
        node, pool, d = devices[(i * step) % len(devices)]
        kind = i % 4
        mig = (d["attributes"].get("profile") or {}).get("string")
        s = Session(
            "jhub",
            f"gpu-user{i:05d}",
            f"user{i:05d}",
            "",
            profile=f"mig-{mig.replace('.', '-')}" if mig else "gpu-80gb",
            size=f"MIG {mig}" if mig else "1 GPU",
            queue=QUEUES[i % len(QUEUES)],
            created=now - 7200,
            allocated=True,
            node=node,
            devices=[f"{pool}/{d['name']}"],
            holder=f"gpu-holder-user{i:05d}",
            running=kind in (0, 1),
            pending="spawn" if kind == 3 else None,
            notebook_last_activity=now - 600,
        )
        s.gpu = [
            {
                "uuid": f"MIG-{i}",
                "busy": kind == 0,
                "memory_used": 2**30,
                "memory_total": 10 * 2**30,
                "activity": 40 if kind == 0 else 0,
                "last_busy": now - (0 if kind == 0 else 3000),
            }
        ]
        s.kernels = [
            {"id": f"{i:08d}-kernel", "name": "python3", "execution_state": "idle", "gpu_memory": 2**29}
        ]
        out.append(s)
    return out


def history(now: float, days: float = 8.0) -> History:
    h = History(None)
    t = now - days * 86400
    while t < now:
        for q in QUEUES:
            for p in PROFILES:
                h.add(t, p, q, held=300 * 40.0, busy=300 * 15.0, idle=300 * 25.0, kept=300 * 5.0)
        t += 300
    return h


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=5000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    now = time.time()
    shape = load_shape("scale", SHAPES_DIR)
    slices = [s for node in shape.nodes for s in build_slices(node)]
    culler = Culler(FakeCluster(slices), None, Policy(Rules()), history=history(now))  # type: ignore[arg-type]
    culler.sessions = sessions_on(slices, args.sessions, now)
    culler.cycles = 1
    pd = PageData(culler)

    t0 = time.process_time()
    lay = pd.layout()
    layout_ms = (time.process_time() - t0) * 1000
    runs = []
    for _ in range(
        7
    ):  # the best of 7 builds, as timeit reports (noise only adds; the layout is made once per slice change)
        with no_gc():  # as PageData.body() builds it
            t0 = time.process_time()
            doc = pd.build(now)
            t1 = time.process_time()
            body = pd.serialize(doc)
            t2 = time.process_time()
            wire = gzip.compress(body, compresslevel=GZIP_LEVEL)
            t3 = time.process_time()
        runs.append(((t1 - t0) * 1000, (t2 - t1) * 1000, (t3 - t2) * 1000))
    # What the service does: PageData.body() + gzipped(), cold (a new document), timed as one.
    fresh = PageData(culler)
    fresh.layout()
    t0 = time.process_time()
    served = fresh.gzipped(now)
    served_ms = (time.process_time() - t0) * 1000
    runs.sort(key=lambda r: sum(r))
    build_ms, dumps_ms, gzip_ms = runs[0]
    median_ms = sum(runs[len(runs) // 2])
    total_ms = build_ms + dumps_ms + gzip_ms
    cells = sum(len(g[3]) for n in doc["fleet"]["nodes"] for g in n[2])
    figures = {
        "nodes": len(lay.nodes),
        "gpus": lay.gpus,
        "cells": cells,
        "sessions": len(culler.sessions),
        "layout_cpu_ms": round(layout_ms, 1),
        "build_cpu_ms": round(build_ms, 1),
        "serialize_cpu_ms": round(dumps_ms, 1),
        "gzip_cpu_ms": round(gzip_ms, 1),
        "page_data_cpu_ms": round(total_ms, 1),
        "page_data_cpu_ms_median": round(median_ms, 1),
        "served_cold_cpu_ms": round(served_ms, 1),
        "json_bytes": len(body),
        "wire_bytes_gzip": len(wire),
        "budget_cpu_ms": BUDGET_CPU_MS,
        "budget_wire_bytes": BUDGET_BYTES,
        "within_budget": total_ms <= BUDGET_CPU_MS and len(served) <= BUDGET_BYTES,
    }
    print(
        "| nodes | GPUs | cells | sessions | layout (per slice change) | document | serialize | gzip "
        "| total | JSON | on the wire (gzip) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {len(lay.nodes)} | {lay.gpus} | {cells} | {len(culler.sessions)} | {layout_ms:.0f} ms "
        f"| {build_ms:.0f} ms | {dumps_ms:.0f} ms | {gzip_ms:.0f} ms | **{total_ms:.0f} ms** "
        f"| {len(body) / 1e6:.2f} MB | **{len(wire) / 1e3:.0f} kB** |"
    )
    if args.json:
        out = {
            "command": f"tests/bench/bench_fleet.py --sessions {args.sessions}",
            "date": time.strftime("%Y-%m-%d"),
            "figures": figures,
        }
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    verdict = "within" if figures["within_budget"] else "OVER"
    print(
        f"{verdict} budget: {total_ms:.0f} ms (median {median_ms:.0f} ms) of <= {BUDGET_CPU_MS:.0f} ms CPU, "
        f"{len(wire)} B of <= {BUDGET_BYTES} B on the wire"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
