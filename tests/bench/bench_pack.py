"""Benchmark: packing GPU sessions with MIG vs one whole GPU per user vs the optimum.

    .venv/bin/python tests/bench/bench_pack.py [--nodes 50] [--optimum-nodes 1000] [--seed 1]
        [--mix mig-1g-10gb=60,mig-3g-40gb=25,gpu=15] [--json out.json]

A seeded random sequence of users, each asking for a size drawn from the mix,
is placed by the real kube-scheduler (DRA plugin, partitionable devices on)
and the resourceclaim controller of the local cluster, one session after the
other, until the first one that cannot be allocated. Each session is what the
spawner creates: a ResourceClaim built by `gpusessions.core.claims.build_claim`
from the default profile's request, and a pod that uses it (a minimal pod
with no process: the runtime ignores these nodes). Three figures per shape:

- MIG (gpusessions): sessions served before the first refusal, with the
  shape's static MIG layouts and partitionable GPUs as the NVIDIA DRA driver
  publishes them;
- one whole GPU per user (device-plugin style): the same GPUs without MIG,
  every user asking for one whole GPU; also through the real scheduler;
- the bin-packing optimum: the longest prefix of the same sequence that could
  be placed at once with perfect placement (tests/bench/packing.py), from the
  same slices.

Plus the share of the cluster's GPU memory allocated (the allocated devices'
`memory` capacity over the GPUs' memory) and the share the users asked for.

Shapes: `demo` (devcluster/shapes/demo.yaml, 8 GPUs) and the picker
benchmark's node layout (per node 2 whole H100, 2 H100 as 7 x 1g.10gb,
2 H100 as 3g.40gb + 2g.20gb + 2 x 1g.10gb, 2 partitionable H100) with
`--nodes` nodes through the scheduler and `--optimum-nodes` nodes for the
optimum and the whole-GPU figure (computed, not scheduled: with partitionable
GPUs kube-scheduler 1.35 needs one to two minutes per session at 1,000 nodes
on this machine; `--probe-sessions N` times the first N there).

The bench publishes its own simulated nodes and slices (labelled
`bench.gpusessions.io/pack`, pods select them) into the running local
cluster, or starts one (shape small) and stops it afterwards; it removes
everything it created.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "spawner"), str(ROOT / "devcluster"), str(Path(__file__).resolve().parent)]

import packing  # noqa: E402
from bench_picker import FLEET_GPUS  # noqa: E402

from gpusessions.core.claims import GPURequest, build_claim  # noqa: E402
from gpusessions.core.profiles import default_profiles  # noqa: E402
from gpusessions.core.sizes import DeviceMatch, parse_cel, quantity  # noqa: E402
from gpusessions.hub.picker import profile_request  # noqa: E402
from localcluster import cluster as lc  # noqa: E402
from localcluster import gpumodels  # noqa: E402
from localcluster.kubeapi import KubeAPI  # noqa: E402
from localcluster.paths import SHAPES_DIR, ClusterPaths  # noqa: E402
from localcluster.shapes import (  # noqa: E402
    NODE_LABEL,
    Shape,
    build_node,
    build_node_status,
    build_slices,
    device_classes,
    parse_shape,
)

Obj = dict[str, Any]
BENCH_LABEL = "bench.gpusessions.io/pack"
MIB = 1024 * 1024
FLEET_NODE: Obj = {  # the picker benchmark's node (tests/bench/bench_picker.py)
    "cpu": "96",
    "memory": "1Ti",
    "gpus": FLEET_GPUS,
}


# -- shapes ---------------------------------------------------------------------------
def demo_data() -> Obj:
    import yaml

    data: Obj = yaml.safe_load((SHAPES_DIR / "demo.yaml").read_text())
    return data


def fleet_data(nodes: int) -> Obj:
    return {"nodes": [{"name": "gpu-{i:04d}", "count": nodes, **FLEET_NODE}]}


def rename(data: Obj, prefix: str) -> Obj:
    """The same shape with node names prefixed (they must not clash with the cluster's own nodes)."""
    return {"nodes": [{**n, "name": f"{prefix}-{n['name']}"} for n in data["nodes"]]}


def whole_gpus_only(data: Obj) -> Obj:
    """The same GPUs with MIG off: what the device plugin hands out, one GPU per user."""
    return {
        "nodes": [
            {**n, "gpus": [{"model": g["model"], "count": g.get("count", 1)} for g in n.get("gpus") or []]}
            for n in data["nodes"]
        ]
    }


def gpu_memory(shape: Shape) -> int:
    return sum(g.model.memory_mib * MIB for n in shape.nodes for g in n.gpus)


# -- sizes, as the spawner asks for them ------------------------------------------------
def size_requests() -> dict[str, GPURequest]:
    stub = SimpleNamespace(
        gpu_device_class="", gpu_count=1, gpu_selectors=[], gpu_first_available=[], gpu_size=None
    )
    out = {}
    for p in default_profiles():
        req = profile_request(stub, p)
        if req.wants_gpu:
            out[p["slug"]] = req
    return out


def size_matches(requests: dict[str, GPURequest]) -> dict[str, DeviceMatch]:
    """The structured match of each size: its DeviceClass selector and its own selectors."""
    classes = {dc["metadata"]["name"]: dc for dc in device_classes()}
    out = {}
    for slug, req in requests.items():
        exprs = [s["cel"]["expression"] for s in classes[req.device_class]["spec"]["selectors"]]
        matches = [parse_cel(e) for e in [*exprs, *req.selectors]]
        merged: DeviceMatch | None = matches[0]
        for m in matches[1:]:
            merged = merged.merge(m) if merged and m else None
        if merged is None:
            raise SystemExit(f"size {slug}: its selectors are not of the structured form")
        out[slug] = merged
    return out


def parse_mix(text: str) -> dict[str, float]:
    mix = {}
    for part in text.split(","):
        k, _, v = part.partition("=")
        mix[k.strip()] = float(v)
    return mix


# -- the cluster side ---------------------------------------------------------------------
class Published:
    """Nodes and slices of one shape in the running cluster, under the bench's label."""

    def __init__(self, api: KubeAPI, shape: Shape, run: str, workers: int = 8):
        self.api, self.shape, self.run = api, shape, run
        self.slices: list[Obj] = []
        for node in shape.nodes:
            for s in build_slices(node):
                s["metadata"]["labels"] = {BENCH_LABEL: run}  # not the runtime's: it would remove them
                self.slices.append(s)
        self.workers = workers

    def publish(self) -> float:
        t0 = time.monotonic()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

        def node(n: Any) -> None:
            obj = build_node(n)
            labels = {k: v for k, v in obj["metadata"]["labels"].items() if k != NODE_LABEL}
            obj["metadata"]["labels"] = {**labels, BENCH_LABEL: self.run}
            self.api.create(obj)
            self.api.patch("Node", n.name, build_node_status(n, stamp), subresource="status")

        with ThreadPoolExecutor(self.workers) as ex:
            list(ex.map(node, self.shape.nodes))
            list(ex.map(self.api.create, self.slices))
        return time.monotonic() - t0

    def remove(self) -> None:
        sel = f"{BENCH_LABEL}={self.run}"
        self.api.delete_collection("ResourceSlice", label_selector=sel)
        self.api.delete_collection("Node", label_selector=sel)

    def device_memory(self) -> dict[tuple[str, str], int]:
        return {
            (s["spec"]["pool"]["name"], d["name"]): int(quantity(d["capacity"]["memory"]["value"]))
            for s in self.slices
            for d in s["spec"].get("devices") or []
        }

    def device_kind(self) -> dict[tuple[str, str], str]:
        """'partitionable' (consumes counters), 'static MIG' or 'whole GPU', per (pool, device)."""
        out = {}
        for s in self.slices:
            for d in s["spec"].get("devices") or []:
                kind = "whole GPU" if d["attributes"]["type"]["string"] == "gpu" else "static MIG"
                out[(s["spec"]["pool"]["name"], d["name"])] = (
                    "partitionable" if d.get("consumesCounters") else kind
                )
        return out


class PodStates:
    """A watch on the namespace's pods: bound, refused (Unschedulable: cannot allocate) or pending."""

    def __init__(self, api: KubeAPI, namespace: str):
        self.api, self.ns = api, namespace
        self.state: dict[str, str] = {}
        self.message: dict[str, str] = {}
        self.cv = threading.Condition()
        self.stop = threading.Event()
        lst = api.list("Pod", namespace)
        self.rv = lst["metadata"]["resourceVersion"]
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                for etype, pod in self.api.watch(
                    "Pod", self.ns, resource_version=self.rv, timeout_seconds=60
                ):
                    if etype == "ERROR":
                        raise RuntimeError(f"pod watch: {pod}")
                    self.rv = pod["metadata"]["resourceVersion"]
                    if etype in ("ADDED", "MODIFIED"):
                        self._see(pod)
            except Exception as e:
                if not self.stop.is_set():
                    print(f"pod watch restarts: {e}", file=sys.stderr)
                    time.sleep(0.5)

    def _see(self, pod: Obj) -> None:
        name = pod["metadata"]["name"]
        state = "pending"
        if pod["spec"].get("nodeName"):
            state = "bound"
        else:
            for c in (pod.get("status") or {}).get("conditions") or []:
                if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable":
                    self.message[name] = c.get("message", "")
                    if "cannot allocate all claims" in self.message[name]:
                        state = "refused"
        with self.cv:
            self.state[name] = state
            self.cv.notify_all()

    def wait(self, names: list[str], timeout: float) -> int | None:
        """Index of the first refused pod once every earlier one is bound; None when all are bound."""
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                for i, n in enumerate(names):
                    s = self.state.get(n, "pending")
                    if s == "refused":
                        return i
                    if s != "bound":
                        break
                else:
                    return None
                left = deadline - time.monotonic()
                if left <= 0:
                    waiting = [(n, self.state.get(n), self.message.get(n, "")) for n in names[:3]]
                    raise TimeoutError(f"pods not scheduled within {timeout:.0f}s: {waiting}")
                self.cv.wait(min(left, 1.0))


def session_pod(name: str, namespace: str, claim: str, run: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {BENCH_LABEL: run}},
        "spec": {
            "nodeSelector": {BENCH_LABEL: run},
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            "containers": [
                {"name": "main", "image": "bench/pause", "resources": {"claims": [{"name": "gpu"}]}}
            ],
        },
    }


def run_until_refusal(
    api: KubeAPI,
    pub: Published,
    sequence: list[str],
    requests: dict[str, GPURequest],
    chunk: int,
    label: str,
    limit: int | None = None,
    timeout: float = 600,
) -> Obj:
    """Place sessions in sequence order until the first refusal; what was served and allocated.

    With `limit`, stop after that many sessions instead (to time the scheduler on a large shape)."""
    ns = f"bench-pack-{pub.run}"
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    states = PodStates(api, ns)
    t_publish = pub.publish()
    time.sleep(2)  # let the scheduler's informers catch up with the new nodes and slices
    end = min(len(sequence), limit or len(sequence))
    refused_at: int | None = None
    t0 = time.monotonic()
    try:
        with ThreadPoolExecutor(8) as ex:
            for start in range(0, end, chunk):
                part = list(range(start, min(start + chunk, end)))
                claims = [
                    build_claim(f"s{i:05d}", ns, requests[sequence[i]], f"user{i:05d}", "", sequence[i])
                    for i in part
                ]
                list(ex.map(api.create, claims))
                names = []
                for i in part:  # in order: the scheduler's queue is first in, first out
                    api.create(session_pod(f"s{i:05d}", ns, f"s{i:05d}", pub.run))
                    names.append(f"s{i:05d}")
                first = states.wait(names, timeout=timeout)
                if first is not None:
                    refused_at = start + first
                    break
                done = start + len(part)
                if done % (chunk * 10) == 0:
                    rate = done / (time.monotonic() - t0)
                    print(f"  {label}: {done} sessions placed, {rate:.1f}/s", file=sys.stderr)
        elapsed = time.monotonic() - t0
        if refused_at is None and limit:
            return {
                "placed": end,
                "publish_s": round(t_publish, 2),
                "schedule_s": round(elapsed, 2),
                "sessions_per_s": round(end / elapsed, 2),
            }
        if refused_at is None:
            raise SystemExit(f"{label}: the sequence of {len(sequence)} never ran out of room")
        served = sequence[:refused_at]
        memory = pub.device_memory()
        allocated = 0
        gpus_touched = set()
        kinds = pub.device_kind()
        placed: dict[str, int] = {}
        held = 0
        for c in api.list("ResourceClaim", ns)["items"]:
            i = int(c["metadata"]["name"][1:])
            alloc = (c.get("status") or {}).get("allocation")
            if i >= refused_at or not alloc:
                continue
            held += 1
            for r in alloc["devices"]["results"]:
                allocated += memory[(r["pool"], r["device"])]
                gpus_touched.add((r["pool"], r["device"].split("-mig-")[0]))
                where = f"{sequence[i]} on {kinds[(r['pool'], r['device'])]}"
                placed[where] = placed.get(where, 0) + 1
        message = states.message.get(f"s{refused_at:05d}", "")
        return {
            "served": refused_at,
            "claims_allocated": held,
            "served_by_size": {s: served.count(s) for s in requests},
            "refused_size": sequence[refused_at],
            "refusal": message,
            "memory_allocated_bytes": allocated,
            "gpus_used": len(gpus_touched),
            "placed_on": dict(sorted(placed.items())),
            "publish_s": round(t_publish, 2),
            "schedule_s": round(elapsed, 2),
            "sessions_per_s": round((refused_at + 1) / elapsed, 2),
        }
    finally:
        states.stop.set()
        api.delete_collection("Pod", ns, grace_period=0)
        api.delete_collection("ResourceClaim", ns)
        api.delete("Namespace", ns)
        pub.remove()


# -- the bench ------------------------------------------------------------------------------
def asked_memory(matches: dict[str, DeviceMatch]) -> dict[str, int]:
    """Memory a user of each size asks for: that MIG device's memory on an H100, or the whole H100's."""
    h100 = gpumodels.model("H100-80GB")
    out = {}
    for size, m in matches.items():
        profile = dict(m.attributes).get("profile")
        out[size] = (h100.profile(str(profile)).memory_mib if profile else h100.memory_mib) * MIB
    return out


def scenario(
    name: str,
    data: Obj,
    sequence: list[str],
    requests: dict[str, GPURequest],
    matches: dict[str, DeviceMatch],
    api: KubeAPI | None,
    chunk: int,
) -> Obj:
    shape = parse_shape(name, data)
    plain = parse_shape(name, whole_gpus_only(data))
    slices = [s for n in shape.nodes for s in build_slices(n)]
    t0 = time.process_time()
    sup = packing.supply(slices, matches)
    optimum = packing.optimum_prefix(sequence, sup)
    solve_cpu = time.process_time() - t0
    total = gpu_memory(shape)
    ask = asked_memory(matches)
    gpus = shape.gpu_count
    out: Obj = {
        "nodes": len(shape.nodes),
        "gpus": gpus,
        "gpu_memory_bytes": total,
        "optimum": {
            "served": optimum,
            "served_by_size": {s: sequence[:optimum].count(s) for s in requests},
            "memory_asked_share": round(sum(ask[s] for s in sequence[:optimum]) / total, 4),
            "solver_cpu_s": round(solve_cpu, 3),
            "partitionable_gpu_options": sorted(sorted(o) for o, _ in sup.groups),
        },
        # One GPU per user: refused at user number gpus + 1, whatever the order.
        "whole_gpu_computed": {
            "served": gpus,
            "memory_allocated_share": 1.0,
            "memory_asked_share": round(sum(ask[s] for s in sequence[:gpus]) / total, 4),
        },
    }
    if api is None:
        return out
    run = f"{name}-{int(time.time()) % 100000}"
    mig = run_until_refusal(
        api,
        Published(api, parse_shape(name, rename(data, f"pk{run[-5:]}m")), run + "m"),
        sequence,
        requests,
        chunk,
        f"{name} MIG",
    )
    mig["memory_allocated_share"] = round(mig["memory_allocated_bytes"] / total, 4)
    mig["memory_asked_share"] = round(sum(ask[s] for s in sequence[: mig["served"]]) / total, 4)
    out["mig"] = mig
    whole = {s: requests["gpu"] for s in requests}
    pw = Published(api, parse_shape(name, rename(whole_gpus_only(data), f"pk{run[-5:]}w")), run + "w")
    plug = run_until_refusal(api, pw, sequence, whole, chunk, f"{name} whole GPU")
    plug["memory_allocated_share"] = round(plug["memory_allocated_bytes"] / gpu_memory(plain), 4)
    plug["memory_asked_share"] = round(sum(ask[s] for s in sequence[: plug["served"]]) / total, 4)
    out["whole_gpu"] = plug
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--nodes", type=int, default=50, help="fleet nodes placed by the real scheduler (0: none)"
    )
    ap.add_argument("--optimum-nodes", type=int, default=1000, help="fleet nodes for the computed figures")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--demo-seeds", type=int, default=10, help="demo shape: also seeds seed+1 .. seed+n-1")
    ap.add_argument("--mix", default="mig-1g-10gb=60,mig-3g-40gb=25,gpu=15")
    ap.add_argument(
        "--probe-sessions",
        type=int,
        default=0,
        help="time the real scheduler on the --optimum-nodes shape for this many sessions (0: skip; "
        "at 1,000 nodes each session takes one to two minutes of scheduling here)",
    )
    ap.add_argument("--chunk", type=int, default=50, help="sessions created before waiting for the scheduler")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    # Stopped with SIGTERM: still remove the nodes, slices, pods and claims (the finally blocks).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    requests = size_requests()
    matches = size_matches(requests)
    mix = parse_mix(args.mix)
    unknown = set(mix) - set(requests)
    if unknown:
        raise SystemExit(f"unknown sizes in --mix: {sorted(unknown)} (known: {sorted(requests)})")

    def draw(seed: int, nodes: int) -> list[str]:
        rng = random.Random(seed)
        return rng.choices(list(mix), weights=list(mix.values()), k=40 * 8 * max(nodes, 1) + 200)

    sequence = draw(args.seed, max(args.nodes, args.optimum_nodes))

    paths = ClusterPaths.default()
    started = not lc.healthy(paths)
    lc.up("small", paths=paths)
    api = KubeAPI.from_kubeconfig(paths.kubeconfig, timeout=120)
    results: Obj = {}
    try:
        results["demo"] = scenario("demo", demo_data(), sequence, requests, matches, api, chunk=1)
        if args.demo_seeds > 1:
            seeds = {args.seed: results["demo"]}
            for seed in range(args.seed + 1, args.seed + args.demo_seeds):
                seeds[seed] = scenario("demo", demo_data(), draw(seed, 1), requests, matches, api, chunk=1)
            results[f"demo-{args.demo_seeds}-seeds"] = summary(seeds)
        if args.nodes:
            results[f"fleet-{args.nodes}"] = scenario(
                "fleet", fleet_data(args.nodes), sequence, requests, matches, api, args.chunk
            )
        if args.optimum_nodes:
            big = f"fleet-{args.optimum_nodes}-computed"
            results[big] = scenario(
                "fleet", fleet_data(args.optimum_nodes), sequence, requests, matches, None, args.chunk
            )
            if args.probe_sessions:
                run = f"probe-{int(time.time()) % 100000}"
                pub = Published(
                    api, parse_shape("fleet", rename(fleet_data(args.optimum_nodes), "pkprobe")), run
                )
                results[big]["scheduler_probe"] = run_until_refusal(
                    api,
                    pub,
                    sequence,
                    requests,
                    args.chunk,
                    "probe",
                    limit=args.probe_sessions,
                    timeout=300.0 * args.probe_sessions,
                )
    finally:
        if started:
            lc.down(paths)
    command = (
        f"tests/bench/bench_pack.py --nodes {args.nodes} --optimum-nodes {args.optimum_nodes} "
        f"--probe-sessions {args.probe_sessions} --seed {args.seed} --demo-seeds {args.demo_seeds} "
        f"--mix {args.mix}"
    )
    report(results)
    print(f"\nrerun: .venv/bin/python {command}")
    if args.json:
        doc = {"command": command, "date": time.strftime("%Y-%m-%d"), "figures": results}
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


def summary(seeds: dict[int, Obj]) -> Obj:
    """The demo over several seeds: sessions per seed and the totals (ratios of totals)."""
    per = {
        str(seed): {
            "mig": r["mig"]["served"],
            "whole_gpu": r["whole_gpu"]["served"],
            "optimum": r["optimum"]["served"],
            "memory_allocated_share_mig": r["mig"]["memory_allocated_share"],
            "refused_size_mig": r["mig"]["refused_size"],
        }
        for seed, r in seeds.items()
    }
    total = {k: sum(v[k] for v in per.values()) for k in ("mig", "whole_gpu", "optimum")}
    shares = sorted(v["memory_allocated_share_mig"] for v in per.values())
    return {
        "gpus": next(iter(seeds.values()))["gpus"],
        "seeds": per,
        "total": total,
        "mig_over_whole_gpu": round(total["mig"] / total["whole_gpu"], 3),
        "mig_over_optimum": round(total["mig"] / total["optimum"], 3),
        "memory_allocated_share_mig_median": shares[len(shares) // 2],
        "memory_allocated_share_mig_range": [shares[0], shares[-1]],
    }


def report(results: Obj) -> None:
    print(
        "| shape | GPUs | MIG, real scheduler | whole GPU per user, real scheduler | optimum "
        "| MIG / whole GPU | MIG / optimum | memory allocated, MIG | memory asked, MIG "
        "| memory asked, whole GPU |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        if "seeds" in r:
            t = r["total"]
            lo, hi = r["memory_allocated_share_mig_range"]
            print(
                f"| {name} (totals) | {r['gpus']} x {len(r['seeds'])} | {t['mig']} | {t['whole_gpu']} "
                f"| {t['optimum']} | {r['mig_over_whole_gpu']:.2f} | {r['mig_over_optimum']:.2f} "
                f"| {r['memory_allocated_share_mig_median']:.0%} (median; {lo:.0%}-{hi:.0%}) | - | - |"
            )
            continue
        opt = r["optimum"]["served"]
        if "mig" in r and r["mig"]["served"] > opt:
            print(f"WARNING: {name}: the scheduler served more than the computed optimum", file=sys.stderr)
        mig = r.get("mig")
        whole = r.get("whole_gpu") or r["whole_gpu_computed"]
        cells = [name, str(r["gpus"])]
        if mig:
            cells.append(f"{mig['served']} (refused: {mig['refused_size']})")
        else:
            cells.append("-")
        cells.append(str(whole["served"]) + ("" if "whole_gpu" in r else " (computed)"))
        cells.append(str(opt))
        if mig:
            cells += [
                f"{mig['served'] / whole['served']:.2f}",
                f"{mig['served'] / opt:.2f}",
                f"{mig['memory_allocated_share']:.0%}",
                f"{mig['memory_asked_share']:.0%}",
            ]
        else:
            cells += [
                f"{opt / whole['served']:.2f} (optimum)",
                "-",
                "-",
                f"{r['optimum']['memory_asked_share']:.0%} (optimum)",
            ]
        cells.append(f"{whole['memory_asked_share']:.0%}")
        print("| " + " | ".join(cells) + " |")
    for name, r in results.items():
        if (p := r.get("scheduler_probe")) and "placed" in p:
            print(
                f"\n{name}: the real scheduler placed the first {p['placed']} sessions on {r['nodes']} nodes "
                f"in {p['schedule_s']:.1f} s ({p['sessions_per_s']:.2f}/s; publishing the nodes and "
                f"slices took {p['publish_s']:.1f} s)"
            )
        if m := r.get("mig"):
            print(
                f"\n{name}: MIG run {m['schedule_s']:.0f} s ({m['sessions_per_s']:.2f}/s); "
                f"placed on {m['placed_on']}"
            )


if __name__ == "__main__":
    raise SystemExit(main())
