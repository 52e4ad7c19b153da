"""Lifecycle fuzzer: seeded random sessions on the local cluster, invariants after every step.

    make fuzz SEED=<n> OPS=<n>          (or: .venv/bin/python -m tests.fuzz.lifecycle --seed 1 --ops 500)

A real JupyterHub with GPUSessionSpawner and the culler (short keep time), on the local
cluster (shape small: few GPUs, so users compete and some wait in vain). Operations, drawn
from the seed: start (a random profile, so also profile changes), stop, restart, release,
delete a named server, delete a user, hub restart, kill a holder's process, kill a
notebook's process (or the holder's kernel host). The culler runs its cycles beside them
(every 2 s, releasing a stopped server's GPU after 20 s). After every step, once things
settle (at most `--settle` seconds), it checks:

1. every claim belongs to a hub user and server that exist, and a stopped server's claim
   is released within the culler's keep time (plus slack);
2. no holder without its claim, no claim without its holder;
3. a running server with a GPU has an allocated claim and its notebook pod sits on the
   claim's node;
4. no device is allocated to two claims;
5. the hub and the cluster agree: a running server has its notebook pod, a stopped one has none.

The sequence of operations is reproducible from the seed (their timing is the machine's).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT / "spawner", ROOT / "devcluster", ROOT):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from tests.integration.hubtools import GPU_HUB_CONFIG, container_pid  # noqa: E402

from localcluster import waits  # noqa: E402
from localcluster.hubproc import Hub, free_port, start_hub  # noqa: E402
from localcluster.kubeapi import KubeAPI  # noqa: E402

PROFILES = ["cpu", "mig-1g-10gb", "mig-1g-10gb", "mig-3g-40gb", "gpu"]
GPU_PROFILES = {"mig-1g-10gb", "mig-3g-40gb", "gpu"}
STOPPED_KEEP = 20.0
CULLER_INTERVAL = 2.0
FUZZ_CONFIG = f"""
c.GPUSessionSpawner.gpu_allocation_timeout = 6
c.KubeSpawner.start_timeout = 60
from gpusessions.culler.hubconfig import configure_culler
configure_culler(c, admins=["admin"], port={{port}}, args=["--interval", "{CULLER_INTERVAL:g}",
    "--stopped-keep", "{STOPPED_KEEP:g}", "--idle-limit", "100000", "--warn-before", "5",
    "--orphan-grace", "10"])
"""
Obj = dict[str, Any]
OPS = [
    ("start", 30),
    ("stop", 14),
    ("restart", 8),
    ("release", 8),
    ("start_named", 8),
    ("delete_named", 6),
    ("delete_user", 4),
    ("hub_restart", 3),
    ("kill_holder", 5),
    ("kill_notebook", 5),
    ("wait", 4),
]


class Violation(AssertionError):
    pass


@dataclass
class Fuzz:
    api: KubeAPI
    namespace: str
    workdir: Path
    rng: random.Random
    users: list[str]
    settle: float = 45.0
    log: list[str] = field(default_factory=list)
    hub: Hub | None = None
    ports: tuple[int, int, int] | None = None
    stopped_at: dict[tuple[str, str], float] = field(default_factory=dict)

    # -- hub -------------------------------------------------------------------------
    def config(self) -> str:
        return GPU_HUB_CONFIG.format(namespace=self.namespace) + FUZZ_CONFIG.format(port=self.culler_port)

    def start_hub(self) -> None:
        self.hub = start_hub(self.config(), self.workdir, ports=self.ports, timeout=90)
        self.ports = self.hub.ports

    def h(self) -> Hub:
        assert self.hub is not None
        return self.hub

    def servers(self) -> dict[str, dict[str, Any]]:
        """user -> {server name -> model} including stopped servers."""
        code, body = self.h().api("GET", "/users?include_stopped_servers=1&limit=1000")
        assert code == 200, (code, body)
        items = body["items"] if isinstance(body, dict) and "items" in body else body
        return {u["name"]: u.get("servers") or {} for u in items}

    def server_model(self, user: str, server: str) -> dict[str, Any] | None:
        code, body = self.h().api("GET", f"/users/{user}?include_stopped_servers=1")
        if code != 200:
            return None
        return (body.get("servers") or {}).get(server)

    def path(self, user: str, server: str) -> str:
        return f"/users/{user}/servers/{server}" if server else f"/users/{user}/server"

    def settle_server(self, user: str, server: str) -> str:
        """Wait until the server is neither starting nor stopping; its state in a word."""
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            m = self.server_model(user, server)
            if m is None:
                return "absent"
            if not m.get("pending"):
                return "ready" if m.get("ready") else "stopped"
            time.sleep(0.5)
        raise Violation(f"{user}/{server} is still pending after 90 s")

    # -- operations ------------------------------------------------------------------
    def op_start(self, user: str, server: str = "") -> str:
        profile = self.rng.choice(PROFILES)
        self.h().api("POST", f"/users/{user}")
        m = self.server_model(user, server)
        if m and (m.get("ready") or m.get("pending")):
            return "already running"
        code, _ = self.h().api("POST", self.path(user, server), {"user_options": {"profile": profile}})
        state = self.settle_server(user, server)
        if state != "ready":
            self.stopped_at[(user, server)] = time.time()
        else:
            self.stopped_at.pop((user, server), None)
        return f"{profile}: {code} -> {state}"

    def op_start_named(self, user: str) -> str:
        return self.op_start(user, "exp")

    def op_stop(self, user: str, server: str = "") -> str:
        m = self.server_model(user, server)
        if not m or not (m.get("ready") or m.get("pending")):
            return "not running"
        code, _ = self.h().api("DELETE", self.path(user, server))
        state = self.settle_server(user, server)
        self.stopped_at[(user, server)] = time.time()
        return f"{code} -> {state}"

    def op_restart(self, user: str) -> str:
        m = self.server_model(user, "")
        profile = ((m or {}).get("user_options") or {}).get("profile") or self.rng.choice(PROFILES)
        if not m or not m.get("ready"):
            return "not running"
        self.op_stop(user)
        code, _ = self.h().api("POST", self.path(user, ""), {"user_options": {"profile": profile}})
        state = self.settle_server(user, "")
        if state == "ready":
            self.stopped_at.pop((user, ""), None)
        return f"{profile}: {code} -> {state}"

    def op_release(self, user: str) -> str:
        code, _ = self.h().api("POST", f"/gpusessions/users/{user}/release")
        self.settle_server(user, "")
        self.stopped_at[(user, "")] = time.time()
        return str(code)

    def op_delete_named(self, user: str) -> str:
        code, _ = self.h().api("DELETE", f"/users/{user}/servers/exp", {"remove": True})
        deadline = time.monotonic() + 90
        while code == 202 and self.server_model(user, "exp") is not None and time.monotonic() < deadline:
            time.sleep(0.5)
        self.stopped_at.pop((user, "exp"), None)
        return str(code)

    def op_delete_user(self, user: str) -> str:
        for server in ("", "exp"):
            m = self.server_model(user, server)
            if m and (m.get("ready") or m.get("pending")):
                self.op_stop(user, server)
        code, _ = self.h().api("DELETE", f"/users/{user}")
        self.stopped_at.pop((user, ""), None)
        self.stopped_at.pop((user, "exp"), None)
        return str(code)

    def op_hub_restart(self, user: str) -> str:
        self.h().stop()
        self.start_hub()
        return "restarted"

    def _kill(self, pod: str, container: str | None) -> str:
        if self.api.get_or_none("Pod", pod, self.namespace) is None:
            return "no such pod"
        try:
            pid = container_pid(self.api, self.namespace, pod, container)
            os.kill(pid, signal.SIGKILL)
        except (AssertionError, ProcessLookupError) as e:
            return f"not killed: {str(e)[:60]}"
        return f"killed pid {pid}"

    def op_kill_holder(self, user: str) -> str:
        """The holder's agent, or its kernel host (kernels are lost; the session must go on)."""
        return self._kill(f"gpu-holder-{user}", self.rng.choice(["holder", "kernels"]))

    def op_kill_notebook(self, user: str) -> str:
        return self._kill(f"jupyter-{user}", "notebook")

    def op_wait(self, user: str) -> str:
        time.sleep(self.rng.uniform(1, STOPPED_KEEP + 5))
        return "waited"

    # -- invariants ------------------------------------------------------------------
    def violations(self) -> list[str]:
        ns = self.namespace
        sel = "app.kubernetes.io/managed-by=gpusessions"
        claims = [
            c
            for c in self.api.list("ResourceClaim", ns, label_selector=sel)["items"]
            if not c["metadata"].get("deletionTimestamp")
        ]
        pods = [p for p in self.api.list("Pod", ns)["items"] if not p["metadata"].get("deletionTimestamp")]
        holders = [p for p in pods if _labels(p).get("app.kubernetes.io/component") == "holder"]
        notebooks = {
            p["metadata"]["name"]: p for p in pods if _labels(p).get("gpusessions.io/component") == "notebook"
        }
        hub = self.servers()
        by_owner = {_owner(c): c for c in claims}
        out: list[str] = []
        now = time.time()
        # 1. owners, and the keep time of stopped servers
        for c in claims:
            user, server = _owner(c)
            name = c["metadata"]["name"]
            if user not in hub or (server and server not in hub[user]):
                out.append(f"claim {name}: its owner {user}/{server} is not in the hub")
                continue
            model = hub[user].get(server) or {}
            since = self.stopped_at.get((user, server))
            stopped = not model.get("ready") and not model.get("pending")
            if stopped and since is not None and now - since > STOPPED_KEEP + 4 * CULLER_INTERVAL + 15:
                out.append(f"claim {name}: kept {now - since:.0f}s after its server stopped")
        # 2. holders <-> claims
        names = {c["metadata"]["name"] for c in claims}
        held = {_annotations(h).get("gpusessions.io/claim") for h in holders}
        out += [
            f"holder {h['metadata']['name']} has no claim"
            for h in holders
            if _annotations(h).get("gpusessions.io/claim") not in names
        ]
        out += [f"claim {n} has no holder" for n in sorted(names - held)]
        # 3 and 5. running and stopped servers
        for user, servers in hub.items():
            for server, m in servers.items():
                pod_name = f"jupyter-{user}" + (f"--{server}" if server else "")
                pod = notebooks.get(pod_name)
                if m.get("ready"):
                    out += self._running(user, server, m, pod, by_owner.get((user, server)))
                elif not m.get("pending") and pod is not None:
                    out.append(f"{user}/{server} is stopped but its notebook pod {pod_name} is there")
        # 4. devices
        devs = Counter(d for c in self.api.list("ResourceClaim")["items"] for d in _devices(c))
        out += [f"device {d} allocated {n} times" for d, n in devs.items() if n > 1]
        return out

    def _running(
        self,
        user: str,
        server: str,
        m: dict[str, Any],
        pod: dict[str, Any] | None,
        claim: dict[str, Any] | None,
    ) -> list[str]:
        if pod is None:
            return [f"{user}/{server} is running but has no notebook pod"]
        profile = (m.get("user_options") or {}).get("profile")
        if profile not in GPU_PROFILES:
            return []
        if claim is None or not (claim.get("status") or {}).get("allocation"):
            return [f"{user}/{server} runs {profile} without an allocated claim"]
        node = _node(claim)
        if pod["spec"].get("nodeName") != node:
            return [f"{user}/{server}: notebook on {pod['spec'].get('nodeName')}, GPU on {node}"]
        return []

    def check(self) -> None:
        last: list[str] = []

        def ok() -> bool:
            nonlocal last
            last = self.violations()
            return not last

        try:
            waits.wait_for(ok, self.settle, "the invariants to hold", interval=1.0)
        except waits.WaitTimeout:
            raise Violation("; ".join(last)) from None

    # -- the run ---------------------------------------------------------------------
    def step(self, i: int) -> None:
        names = [n for n, _ in OPS]
        name = self.rng.choices(names, weights=[w for _, w in OPS])[0]
        user = self.rng.choice(self.users)
        t0 = time.monotonic()
        result = getattr(self, f"op_{name}")(user)
        self.log.append(f"{i:4d} {name:13s} {user:8s} {result} ({time.monotonic() - t0:.1f}s)")
        print(self.log[-1], flush=True)
        self.check()

    def run(self, ops: int) -> None:
        self.culler_port = free_port()
        self.start_hub()
        try:
            for i in range(ops):
                try:
                    self.step(i)
                except Violation as v:
                    raise Violation(
                        f"step {i} ({self.log[-1] if self.log else '-'}): {v}\n"
                        f"hub log: {self.h().log}\nlast steps:\n" + "\n".join(self.log[-15:])
                    ) from None
        finally:
            if self.hub is not None:
                self.hub.stop()


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("labels") or {}


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("annotations") or {}


def _owner(claim: dict[str, Any]) -> tuple[str, str]:
    ann = _annotations(claim)
    return ann.get("gpusessions.io/user", ""), ann.get("gpusessions.io/server", "")


def _node(claim: dict[str, Any]) -> str | None:
    terms = claim["status"]["allocation"].get("nodeSelector", {}).get("nodeSelectorTerms") or []
    for t in terms:
        for f in t.get("matchFields") or []:
            if f.get("key") == "metadata.name":
                return str(f["values"][0])
    return None


def _devices(claim: dict[str, Any]) -> list[tuple[str, str, str]]:
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return [(r["driver"], r["pool"], r["device"]) for r in (alloc.get("devices") or {}).get("results") or []]


def run(api: KubeAPI, namespace: str, workdir: Path, seed: int, ops: int, users: int) -> list[str]:
    fz = Fuzz(api, namespace, workdir, random.Random(seed), [f"u{i}" for i in range(users)])
    fz.run(ops)
    return fz.log


def main(argv: list[str] | None = None) -> int:
    from localcluster import cluster as lc
    from localcluster.paths import ClusterPaths

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ops", type=int, default=500)
    ap.add_argument("--users", type=int, default=20)
    args = ap.parse_args(argv)
    paths = ClusterPaths.default()
    started = not lc.healthy(paths)
    lc.up("small", paths=paths)
    api = KubeAPI.from_kubeconfig(paths.kubeconfig)
    ns = f"fuzz-{args.seed}-{int(time.time())}"
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    t0 = time.monotonic()
    try:
        log = run(api, ns, Path(tempfile.mkdtemp(prefix="fuzz-")), args.seed, args.ops, args.users)
    except Violation as v:
        print(f"\nFAILED (seed {args.seed}): {v}", file=sys.stderr)
        return 1
    finally:
        api.delete_collection("Pod", ns, grace_period=0)
        api.delete("Namespace", ns)
        if started:
            lc.down(paths)
    kinds = Counter(line.split()[1] for line in log)
    print(
        json.dumps(
            {"seed": args.seed, "ops": len(log), "seconds": round(time.monotonic() - t0), "by_op": kinds}
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
