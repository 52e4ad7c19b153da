"""Benchmark: scale: a 1,000-node x 8-GPU simulated cluster, users spawning through the hub API.

    .venv/bin/python tests/bench/bench_scale.py [--users 1000] [--concurrency 30] [--step 250]
        [--culler-interval 30] [--json out.json]          # full size: --users 5000

The local cluster with shape `scale` (devcluster/shapes/scale.yaml: 1,000 nodes, each 2 whole
H100, 2 H100 as 7 x 1g.10gb, 2 as 3g.40gb + 2g.20gb + 2 x 1g.10gb, 2 partitionable; the
ResourceSlices as the NVIDIA DRA driver publishes them): real kube-apiserver, scheduler (DRA
plugin) and resourceclaim controller. One real JupyterHub with GPUSessionSpawner
(`persist_kernels` off) and the gpusessions culler service. Notebook and holder pods use the
runtime's benchmark images (`localcluster/fake-singleuser`, `localcluster/fake-holder`): no
process per pod, one shared server answers HTTP on each pod's IP (the hub's readiness check,
the culler's agent round trip), so thousands of sessions fit on 2 cores.

Users spawn with `--concurrency` requests in flight, each a cold start (claim, holder,
allocation, notebook pod), sizes drawn from the mix (60% MIG 1g.10gb, 25% MIG 3g.40gb, 15%
whole GPU). After every `--step` sessions it pauses submitting and measures:

- spawns per minute over that step (wall time from first request to last ready);
- hub CPU seconds over that step per 1,000 sessions, and the hub's RSS (from /proc);
- CPU of the control plane's processes over the step (who is the bottleneck);
- the picker: GET /hub/api/gpusessions/availability and the spawn form page, medians;
- the culler's last cycle over all sessions (its log line `cycle N: S sessions in T s`).
"""

from __future__ import annotations

import argparse
import calendar
import json
import os
import random
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "spawner"), str(ROOT / "devcluster"), str(ROOT)]

from localcluster import cluster as lc  # noqa: E402
from localcluster import procs  # noqa: E402
from localcluster.hubproc import Hub, start_hub  # noqa: E402
from localcluster.kubeapi import KubeAPI  # noqa: E402
from localcluster.paths import ClusterPaths  # noqa: E402

MIX = {"mig-1g-10gb": 0.60, "mig-3g-40gb": 0.25, "gpu": 0.15}
HUB = """
from gpusessions.hub.handlers import configure_hub
from gpusessions.core.profiles import default_profiles
from gpusessions.hub.cullerservice import configure_culler

c.JupyterHub.spawner_class = "gpusessions"
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.JupyterHub.cleanup_servers = False
c.JupyterHub.concurrent_spawn_limit = {limit}
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 300}}  # the POST answers when ready
c.JupyterHub.log_level = "WARN"
c.KubeSpawner.namespace = {namespace!r}
c.KubeSpawner.image = "localcluster/fake-singleuser:1"
c.KubeSpawner.start_timeout = 600
c.KubeSpawner.http_timeout = 120
c.GPUSessionSpawner.holder_image = "localcluster/fake-holder:1"
c.GPUSessionSpawner.persist_kernels = False
c.GPUSessionSpawner.gpu_allocation_timeout = 600
c.KubeSpawner.profile_list = default_profiles()
configure_hub(c)
configure_culler(c, admins=[], port={culler_port}, args={culler_args!r})
"""
CYCLE = re.compile(r"cycle (\d+): (\d+) sessions in ([0-9.]+)s")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Spawner:
    """Spawns through the REST API, `concurrency` at a time; records start and ready times."""

    def __init__(self, hub: Hub, concurrency: int):
        self.hub = hub
        self.pool = ThreadPoolExecutor(concurrency)
        self.lock = threading.Lock()
        self.done: list[dict[str, Any]] = []

    def one(self, user: str, profile: str) -> None:
        t0 = time.time()
        code, body = self.hub.api(
            "POST", f"/users/{user}/server", {"user_options": {"profile": profile}}, 600
        )
        ok = code == 201
        while code == 202 or (code == 201 and not ok):
            time.sleep(1)
            c, m = self.hub.api("GET", f"/users/{user}")
            srv = ((m or {}).get("servers") or {}).get("") if c == 200 else None
            if srv and srv.get("ready"):
                ok = True
                break
            if not srv or not srv.get("pending"):
                break
        with self.lock:
            self.done.append(
                {"user": user, "profile": profile, "t0": t0, "t1": time.time(), "ok": ok, "code": code}
            )
            if not ok:
                print(f"spawn {user} failed: {code} {str(body)[:300]}", file=sys.stderr)

    def run(self, batch: list[tuple[str, str]]) -> list[dict[str, Any]]:
        n = len(self.done)
        list(self.pool.map(lambda a: self.one(*a), batch))
        return self.done[n:]


def timed_get(url: str, token: str, n: int) -> tuple[float | None, int]:
    times, code = [], 0
    for _ in range(n):
        req = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                r.read()
                code = r.status
        except urllib.error.HTTPError as e:
            code = e.code
        times.append(time.perf_counter() - t0)
    return (round(statistics.median(times) * 1000, 1) if code == 200 else None), code


def scheduler_counts(paths: ClusterPaths, port: int) -> dict[str, float]:
    """From kube-scheduler's metrics: pods scheduled, and its DRA plugin's Filter calls (one per
    pod and node looked at)."""
    import ssl

    from localcluster.certs import PKI

    pki = PKI(paths.pki)
    ctx = ssl.create_default_context(cafile=str(pki.ca_crt))
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # the scheduler serves a self-signed certificate
    ctx.load_cert_chain(str(pki.admin_crt), str(pki.admin_key))
    text = (
        urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=ctx, timeout=10).read().decode()
    )
    out = {"scheduled": 0.0, "dra_filter_calls": 0.0}
    for line in text.splitlines():
        if line.startswith(
            'scheduler_schedule_attempts_total{profile="default-scheduler",result="scheduled"}'
        ):
            out["scheduled"] = float(line.rsplit(" ", 1)[1])
        elif line.startswith(
            'scheduler_plugin_evaluation_total{extension_point="Filter",plugin="DynamicResources"'
        ):
            out["dra_filter_calls"] = float(line.rsplit(" ", 1)[1])
    return out


def last_cycle(log: Path, after: float) -> dict[str, float] | None:
    """The culler's last completed cycle logged after `after` (epoch), waiting up to 5 min."""
    deadline = time.time() + 300
    stamp = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d+) ")
    while time.time() < deadline:
        best = None
        for line in log.read_text(errors="replace").splitlines():
            m, s = CYCLE.search(line), stamp.match(line)
            if m and s:
                t = time.mktime(time.strptime(s.group(1), "%Y-%m-%d %H:%M:%S"))
                if t >= after:
                    best = {
                        "cycle": int(m.group(1)),
                        "sessions": int(m.group(2)),
                        "seconds": float(m.group(3)),
                    }
        if best:
            return best
        time.sleep(2)
    return None


def _ts(stamp: str | None) -> float | None:
    return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) if stamp else None


def phases(api: KubeAPI, ns: str, done: list[dict[str, Any]]) -> dict[str, float]:
    """Medians of where a spawn's time goes, from the objects' timestamps (1 s resolution):
    claim created -> allocated (scheduler) -> notebook pod created (the hub saw it) -> notebook
    ready (runtime) -> the REST call answered (the hub's readiness check and proxy route)."""
    claims = {c["metadata"]["name"]: c for c in api.list("ResourceClaim", ns)["items"]}
    pods = {p["metadata"]["name"]: p for p in api.list("Pod", ns)["items"]}
    out: dict[str, list[float]] = {"request_to_claim": [], "allocation": [], "hub_sees_allocation": []}
    out |= {"notebook_pod_ready": [], "hub_sees_ready": []}
    for d in done:
        claim, pod = claims.get(f"gpu-{d['user']}"), pods.get(f"jupyter-{d['user']}")
        if not (d["ok"] and claim and pod):
            continue
        created = _ts(claim["metadata"]["creationTimestamp"])
        sched = [
            m["time"]
            for m in claim["metadata"].get("managedFields") or []
            if m["manager"] == "kube-scheduler" and not m.get("subresource")
        ]
        allocated = _ts(min(sched)) if sched else None
        nb = _ts(pod["metadata"]["creationTimestamp"])
        ready = next(
            (
                _ts(c.get("lastTransitionTime"))
                for c in pod["status"].get("conditions") or []
                if c["type"] == "Ready"
            ),
            None,
        )
        if None in (created, allocated, nb, ready):
            continue
        assert created is not None and allocated is not None and nb is not None and ready is not None
        out["request_to_claim"].append(created - d["t0"])
        out["allocation"].append(allocated - created)
        out["hub_sees_allocation"].append(nb - allocated)
        out["notebook_pod_ready"].append(ready - nb)
        out["hub_sees_ready"].append(d["t1"] - ready)
    return {k: round(statistics.median(v), 2) for k, v in out.items() if v}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=30)
    ap.add_argument("--step", type=int, default=250, help="measure after every this many sessions")
    ap.add_argument("--culler-interval", type=float, default=30)
    ap.add_argument("--views", type=int, default=5, help="picker requests per measurement")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="leave the cluster and hub running")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    paths = ClusterPaths.default()
    started = not lc.healthy(paths)
    t0 = time.monotonic()
    state = lc.up("scale", paths=paths, timeout=900)
    cluster_start = time.monotonic() - t0
    api = KubeAPI.from_kubeconfig(paths.kubeconfig)
    ns = f"bench-scale-{int(time.time())}"
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    work = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    from localcluster.hubproc import free_port

    culler_port = free_port()
    culler_args = [
        "--interval",
        f"{args.culler_interval:g}",
        "--idle-limit",
        "1e9",
        "--stopped-keep",
        "1e9",
    ]
    hub = start_hub(
        HUB.format(
            namespace=ns, limit=max(100, args.concurrency), culler_port=culler_port, culler_args=culler_args
        ),
        work / "hub",
        timeout=120,
    )
    rng = random.Random(args.seed)
    users = [f"u{i:05d}" for i in range(args.users)]
    sizes = rng.choices(list(MIX), weights=list(MIX.values()), k=args.users)
    for i in range(0, len(users), 500):
        code, _ = hub.api("POST", "/users", {"usernames": users[i : i + 500]}, 120)
        assert code == 201, code
    # The picker is per user: figures and form as a user without a server sees them.
    hub.api("POST", "/users/picker")
    code, body = hub.api("POST", "/users/picker/tokens", {"note": "bench-scale picker"})
    assert code == 201, (code, body)
    user_token = body["token"]
    pids = {"hub": hub.proc.pid, **state.pids}
    culler = next((p for p in procs.children(hub.proc.pid) if "gpusessions.culler" in cmdline(p)), None)
    if culler:
        pids["culler"] = culler
    spawner = Spawner(hub, args.concurrency)
    steps: list[dict[str, Any]] = []
    result: dict[str, Any] = {
        "command": "tests/bench/bench_scale.py "
        + f"--users {args.users} --concurrency {args.concurrency} --step {args.step}",
        "date": time.strftime("%Y-%m-%d"),
        "nodes": 1000,
        "gpus": 8000,
        "cluster_start_s": round(cluster_start, 1),
        "steps": steps,
    }

    sched_port = state.ports["scheduler"]
    sched0 = scheduler_counts(paths, sched_port)

    def measure(sessions: int, spawned: list[dict[str, Any]], cpu0: dict[str, float]) -> dict[str, Any]:
        nonlocal sched0
        cpu = {k: cpu_seconds(p) for k, p in pids.items() if Path(f"/proc/{p}").exists()}
        row: dict[str, Any] = {"sessions": sessions, "hub_rss_mib": round(rss_mib(hub.proc.pid), 1)}
        sched = scheduler_counts(paths, sched_port)
        pods = sched["scheduled"] - sched0["scheduled"]
        if pods:
            row["dra_filter_calls_per_pod"] = round(
                (sched["dra_filter_calls"] - sched0["dra_filter_calls"]) / pods, 1
            )
            row["scheduler_cpu_ms_per_pod"] = round(
                (cpu["kube-scheduler"] - cpu0.get("kube-scheduler", 0)) / pods * 1000, 1
            )
        sched0 = sched
        if spawned:
            wall = max(s["t1"] for s in spawned) - min(s["t0"] for s in spawned)
            ok = [s for s in spawned if s["ok"]]
            row["spawned"] = len(spawned)
            row["failed"] = len(spawned) - len(ok)
            row["spawns_per_min"] = round(len(ok) / wall * 60, 1)
            row["spawn_s_median"] = round(statistics.median(s["t1"] - s["t0"] for s in ok), 2) if ok else None
            row["wall_s"] = round(wall, 1)
            row["cpu_s"] = {k: round(cpu[k] - cpu0.get(k, 0), 1) for k in cpu}
            row["hub_cpu_s_per_1000"] = round((cpu["hub"] - cpu0["hub"]) / max(len(ok), 1) * 1000, 1)
        avail, code = timed_get(f"{hub.url}/hub/api/gpusessions/availability", user_token, args.views)
        row["availability_ms"] = avail if avail is not None else f"HTTP {code}"
        form, code = timed_get(f"{hub.url}/hub/spawn/picker", user_token, args.views)
        row["spawn_form_ms"] = form if form is not None else f"HTTP {code}"
        cyc = last_cycle(hub.log, time.time()) if sessions else None
        row["culler_cycle"] = cyc
        print(json.dumps(row), file=sys.stderr, flush=True)
        return row

    try:
        cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
        steps.append(measure(0, [], cpu0))
        for start in range(0, args.users, args.step):
            batch = list(zip(users[start : start + args.step], sizes[start : start + args.step], strict=True))
            cpu0 = {k: cpu_seconds(p) for k, p in pids.items() if Path(f"/proc/{p}").exists()}
            spawned = spawner.run(batch)
            steps.append(measure(start + len(batch), spawned, cpu0))
        result["phases_median_s"] = phases(api, ns, spawner.done)
        print(json.dumps(result["phases_median_s"]), file=sys.stderr)
    finally:
        result["hub_log_tail"] = hub.log.read_text(errors="replace").splitlines()[-5:]
        if not args.keep:
            hub.stop()
            for kind in ("Pod", "ResourceClaim"):
                try:
                    api.delete_collection(kind, ns, grace_period=0)
                except Exception as e:
                    print(f"cleanup of {kind}: {e}", file=sys.stderr)
            api.delete("Namespace", ns)
            if started:
                lc.down(paths)
    summarise(result)
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


def summarise(result: dict[str, Any]) -> None:
    rows = [r for r in result["steps"] if r.get("spawned")]
    if not rows:
        return
    ok = sum(r["spawned"] - r["failed"] for r in rows)
    wall = sum(r["wall_s"] for r in rows)
    result["sessions"] = ok
    result["spawns_per_min"] = round(ok / wall * 60, 1)
    result["hub_cpu_s_per_1000"] = round(sum(r["cpu_s"]["hub"] for r in rows) / max(ok, 1) * 1000, 1)
    first, last = result["steps"][0], result["steps"][-1]
    result["hub_rss_mib_per_1000"] = round(
        (last["hub_rss_mib"] - first["hub_rss_mib"]) / max(last["sessions"], 1) * 1000, 1
    )
    print(
        "| sessions | spawns/min | spawn median | hub CPU s per 1,000 | hub RSS | scheduler per pod "
        "| DRA Filter calls per pod | availability | form | culler cycle |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in result["steps"]:
        cyc = r.get("culler_cycle") or {}
        print(
            f"| {r['sessions']} | {r.get('spawns_per_min', '-')} | {r.get('spawn_s_median', '-')} s "
            f"| {r.get('hub_cpu_s_per_1000', '-')} | {r['hub_rss_mib']} MiB "
            f"| {r.get('scheduler_cpu_ms_per_pod', '-')} ms | {r.get('dra_filter_calls_per_pod', '-')} "
            f"| {r['availability_ms']} ms | {r['spawn_form_ms']} ms | {cyc.get('seconds', '-')} s |"
        )


if __name__ == "__main__":
    raise SystemExit(main())
