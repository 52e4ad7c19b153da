"""Benchmark: the picker on a simulated 1,000-node x 8-GPU cluster.

    .venv/bin/python tests/bench/bench_picker.py [--nodes 1000] [--views 200] [--json out.json]

Builds the ResourceSlices of 1,000 nodes (each: 2 whole H100, 2 H100 as
7 x 1g.10gb, 2 H100 as 3g.40gb + 2g.20gb + 2 x 1g.10gb, 2 partitionable H100)
with the devcluster's fake-driver builders, allocates a third of the devices,
then measures in one process, with the same code the hub runs:

- the rebuild after the slices changed (inventory, allocations, counters);
- the first page view after that (match every device for the four default
  sizes, count what is free, render the form);
- a claim change, the common event (recount allocations, counters and free
  devices; matching comes from the per-slices memo);
- later page views (figures from the per-version memo, plus the form),
  over `--views` views, reporting the first and the last quarter separately
  to show the cost does not grow with the number of views.

Prints a Markdown table; docs/benchmarks.md holds the last run.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "spawner"), str(ROOT / "devcluster")]

from gpusessions.core.availability import (  # noqa: E402
    FiguresCache,
    Inventory,
    allocated_devices,
    remaining_counters,
)
from gpusessions.core.profiles import default_profiles  # noqa: E402
from gpusessions.core.sizes import DeviceMatch, device_class  # noqa: E402
from gpusessions.hub.picker import compute_figures, render_form  # noqa: E402
from localcluster.shapes import build_slices, device_classes, parse_shape  # noqa: E402

# Per node: 2 whole H100, 2 as 7 x 1g.10gb, 2 as 3g.40gb + 2g.20gb + 2 x 1g.10gb, 2 partitionable
# (dynamic MIG). Also the packing benchmark's fleet (bench_pack.py).
FLEET_GPUS: list[dict[str, Any]] = [
    {"model": "H100-80GB", "count": 2},
    {"model": "H100-80GB", "mig": "static", "layout": ["1g.10gb"] * 7, "count": 2},
    {
        "model": "H100-80GB",
        "mig": "static",
        "layout": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"],
        "count": 2,
    },
    {"model": "H100-80GB", "mig": "dynamic", "count": 2},
]


def cluster(nodes: int) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    shape = parse_shape(
        "bench",
        {
            "nodes": [
                {
                    "name": "gpu-{i:04d}",
                    "count": nodes,
                    "gpus": FLEET_GPUS,
                }
            ]
        },
    )
    slices = [s for n in shape.nodes for s in build_slices(n)]
    classes = {dc["metadata"]["name"]: dc for dc in device_classes()}
    classes["gs-1g"] = device_class("gs-1g", DeviceMatch.of({"type": "mig", "profile": "1g.10gb"}))
    return slices, classes


def claims_for(slices: list[dict[str, Any]], fraction: float, seed: int = 1) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for s in slices:
        for d in s["spec"].get("devices") or []:
            # Only devices without counters: allocating overlapping partitions is the scheduler's job.
            if not d.get("consumesCounters") and rng.random() < fraction:
                out.append(
                    {
                        "status": {
                            "allocation": {
                                "devices": {
                                    "results": [
                                        {
                                            "request": "gpu",
                                            "driver": s["spec"]["driver"],
                                            "pool": s["spec"]["pool"]["name"],
                                            "device": d["name"],
                                        }
                                    ]
                                }
                            }
                        }
                    }
                )
    return out


def spawner_stub() -> Any:
    return SimpleNamespace(
        gpu_device_class="", gpu_count=1, gpu_selectors=[], gpu_first_available=[], gpu_size=None
    )


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--views", type=int, default=200)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    slices, classes = cluster(args.nodes)
    devices = sum(len(s["spec"].get("devices") or []) for s in slices)
    claims = claims_for(slices, 0.33)
    profiles = [{**p, "slug": p["slug"]} for p in default_profiles()]
    spawner = spawner_stub()

    t0 = time.process_time()
    inv = Inventory.from_slices(slices)
    allocated = allocated_devices(claims)
    left = remaining_counters(inv, allocated)
    recompute = time.process_time() - t0
    derived = (inv, allocated, left, classes)

    cache = FiguresCache()
    t0 = time.process_time()
    figs = compute_figures(spawner, profiles, derived, cache, 1)
    render_form(profiles, {"profiles": figs}, "/hub/")
    first_view = time.process_time() - t0

    # A claim changes (the common event): allocations and counters are recounted, the
    # matching devices per size come from the slice memo.
    claims2 = claims_for(slices, 0.34, seed=2)
    t0 = time.process_time()
    allocated2 = allocated_devices(claims2)
    derived2 = (inv, allocated2, remaining_counters(inv, allocated2), classes)
    compute_figures(spawner, profiles, derived2, cache, 2)
    claim_change = time.process_time() - t0

    per_view = []
    for _ in range(args.views):
        t0 = time.process_time()
        figs = compute_figures(spawner, profiles, derived, cache, 1)
        render_form(profiles, {"profiles": figs}, "/hub/")
        per_view.append(time.process_time() - t0)
    q = max(len(per_view) // 4, 1)
    first_q, last_q = statistics.median(per_view[:q]), statistics.median(per_view[-q:])

    print(
        f"Cluster: {args.nodes} nodes, {args.nodes * 8} GPUs, {devices} devices in {len(slices)} slices, "
        f"{len(claims)} allocated claims."
    )
    print()
    print("| step | hub CPU |")
    print("|---|---|")
    print(f"| slices changed: rebuild inventory, allocations, counters | {ms(recompute)} |")
    print(f"| first page view after that (match every device for 4 sizes, count, form) | {ms(first_view)} |")
    print(f"| a claim changed: recount allocations, counters, free devices of 4 sizes | {ms(claim_change)} |")
    print(f"| later page view, median of the first {q} views | {ms(first_q)} |")
    print(f"| later page view, median of the last {q} views | {ms(last_q)} |")
    print(f"| ratio last/first quarter | {last_q / first_q:.2f} |")
    for f in figs:
        if f["state"] != "cpu":
            print(f"<!-- {f['slug']}: {f['free']} of {f['total']} free -->")
    if args.json:
        figures = {
            "nodes": args.nodes,
            "devices": devices,
            "allocated_claims": len(claims),
            "slices_changed_ms": round(recompute * 1000, 2),
            "first_view_ms": round(first_view * 1000, 2),
            "claim_changed_ms": round(claim_change * 1000, 2),
            "view_first_quarter_ms": round(first_q * 1000, 3),
            "view_last_quarter_ms": round(last_q * 1000, 3),
            "ratio_last_over_first_quarter": round(last_q / first_q, 3),
        }
        doc = {
            "command": f"tests/bench/bench_picker.py --nodes {args.nodes} --views {args.views}",
            "date": time.strftime("%Y-%m-%d"),
            "figures": figures,
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
